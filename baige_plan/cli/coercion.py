"""typer's value coercion without pydantic for the values where it is plain (start-up of every command).

typer (>= 0.2x) coerces each parameter's value through a pydantic TypeAdapter it builds on the parameter's first
use (typer/_coercion.py build_runtime_param): importing pydantic and building ~40 adapters cost `plan` ~0.13 s of
its start-up, more than parsing itself. `install(command)` gives each parameter a `QuickCoercion` instead: values
whose result is plain -- an int or float written in digits, a str, a choice of an Enum, a path -- are coerced
here by the same rules (typer's own choice and path helpers, which its adapters call); anything else (a value
out of an option's min/max, a malformed number, an unknown choice, a file type, a custom parser) goes to typer's
own coercion, built on first use, so every other result and every error message is typer's.
tests/test_cli_coercion.py checks both give the same on every parameter of every command.
"""

from __future__ import annotations

import math
import re
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

try:        # typer >= 0.2x: coercion through typer._coercion; older typer coerces with click types (nothing to do)
    from typer._coercion import build_runtime_param
    from typer._param_types import coerce_cli_choice, coerce_cli_path
    from typer.core import _TyperParameter
except ImportError:  # pragma: no cover - older typer
    _TyperParameter = None

NOT_PLAIN = object()        # `plain` found no plain result: typer's coercion decides
_DIGITS = re.compile(r"[0-9]{1,18}")
_DECIMAL = re.compile(r"[0-9]{1,30}(\.[0-9]{1,30})?([eE][-+]?[0-9]{1,3})?")


def install(command, ctx) -> None:
    """Give every parameter of `command` (its --help too) typer would coerce with an adapter a QuickCoercion
    (once)."""
    if _TyperParameter is None:
        return      # pragma: no cover - older typer
    for p in command.get_params(ctx):
        if isinstance(p, _TyperParameter) and p._runtime_param is None:
            p._runtime_param = QuickCoercion(p.type_descriptor)


class QuickCoercion:
    """typer's RuntimeParam.coerce for one parameter: None and plain values here, the rest by typer's own."""

    __slots__ = ("desc", "full")

    def __init__(self, desc) -> None:
        self.desc = desc
        self.full = None

    def coerce(self, value: Any, param, ctx) -> Any:
        multi = param.multiple or param.nargs == -1
        if value is None:       # as typer's RuntimeParam.coerce, before any adapter
            return () if multi else None
        out = self._plain(value, multi, param, ctx)
        if out is NOT_PLAIN:
            if self.full is None:
                self.full = build_runtime_param(self.desc)
            return self.full.coerce(value, param=param, ctx=ctx)
        return out

    def _plain(self, value: Any, multi: bool, param, ctx) -> Any:
        desc = self.desc
        info = desc.parameter_info
        if desc.file_annotation is not None or info.parser is not None:
            return NOT_PLAIN
        ann = desc.annotation
        if not multi:
            return plain(value, ann, info, param, ctx)
        # typer's list adapter: each item by the item's adapter, into a list
        if get_origin(ann) is not list or not isinstance(value, (list, tuple)):
            return NOT_PLAIN
        (item_ann,) = get_args(ann)
        out = [plain(v, item_ann, info, param, ctx) for v in value]
        return NOT_PLAIN if any(v is NOT_PLAIN for v in out) else out


def plain(value: Any, ann: Any, info, param, ctx) -> Any:
    """What typer's adapter for annotation `ann` gives `value` when that is plain, else NOT_PLAIN."""
    if ann is int or ann is float:
        return _number(value, ann, info)
    if ann is str:
        return value if type(value) is str else NOT_PLAIN
    if isinstance(ann, type) and issubclass(ann, Enum):
        try:    # typer's choice adapter is this call, its result as it is
            return coerce_cli_choice(value, choices=list(ann), case_sensitive=info.case_sensitive, ctx=ctx)
        except ValueError:
            return NOT_PLAIN
    if isinstance(ann, type) and issubclass(ann, Path) and info.path_type is None:
        if type(value) is not str or not value or "\x00" in value:
            return NOT_PLAIN
        try:    # typer's path adapter: pydantic makes the Path, then these checks (exists, file/dir, access)
            return coerce_cli_path(ann(value), info, path_type=ann, param=param, ctx=ctx)
        except Exception:  # noqa: BLE001 - typer's own coercion gives the error
            return NOT_PLAIN
    return NOT_PLAIN


def _number(value: Any, ann: type, info) -> Any:
    """An int or float typed, or written in plain digits (pydantic reads those as Python does), within the
    option's min/max; NOT_PLAIN for anything else (bools, signs, spaces, underscores, clamping, out of range)."""
    if info.clamp:
        return NOT_PLAIN
    if type(value) is ann:
        v = value
    elif type(value) is str and (_DIGITS if ann is int else _DECIMAL).fullmatch(value):
        v = ann(value)
    else:
        return NOT_PLAIN
    if ann is float and not math.isfinite(v):
        return NOT_PLAIN
    if (info.min is not None and v < info.min) or (info.max is not None and v > info.max):
        return NOT_PLAIN
    return v
