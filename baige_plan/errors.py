"""Error types shared by every layer.

`SpecError` is raised by the frozen spec dataclasses (no file is known there); the io layer
turns it into an `InputError` that names the file. The CLI prints `InputError` as one line
and exits 2.
"""

from __future__ import annotations


class SpecError(ValueError):
    """A value breaks a rule. `field` is a dotted path inside the spec."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason

    def prefixed(self, prefix: str) -> SpecError:
        return SpecError(f"{prefix}.{self.field}" if prefix else self.field, self.reason)


class InputError(Exception):
    """Bad user input: names the file (or argument), the field and the reason."""

    def __init__(self, source: str, field: str, reason: str):
        super().__init__(f"{source}: {field}: {reason}" if field else f"{source}: {reason}")
        self.source = source
        self.field = field
        self.reason = reason


def require(cond: bool, field: str, reason: str) -> None:
    if not cond:
        raise SpecError(field, reason)
