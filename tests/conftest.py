"""Which tests are slow (issue 19: the README's `python -m pytest -q` must take at most 3 minutes on 2 cores).

A test is marked `slow` (pyproject.toml: deselected by default; `.ci/run` runs `pytest -q -m slow` after the
README command, so CI still checks every test) when it takes about a second or more on the 2-core machine:
exhaustive searches checked against their oracles, full CLI searches of large models, the 400-case fuzz sample,
8k-device plan files. Marked here by node id (the test, every parameter of it), from `pytest --durations=0`
on the 2-core machine (listed in SLOW_TESTS.md beside this file with the measured seconds), rather than by
decorators spread over files other people are editing; a test file may also use `@pytest.mark.slow` itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_LIST = Path(__file__).with_name("SLOW_TESTS.md")


def _slow_ids() -> tuple[str, ...]:
    """Node ids (without parameters) from SLOW_TESTS.md: the first backquoted word of each `- ` line."""
    out = []
    for line in _LIST.read_text(encoding="utf-8").splitlines():
        if line.startswith("- `"):
            out.append(line[3:line.index("`", 3)])
    return tuple(out)


def pytest_collection_modifyitems(config, items):
    slow = set(_slow_ids())
    mark = pytest.mark.slow
    for item in items:
        base = item.nodeid.split("[", 1)[0]
        if base in slow or base.split("::", 1)[0] in slow:      # a test, or a whole file
            item.add_marker(mark)
