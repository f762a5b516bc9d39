"""Run independent pure computations of one search on the machine's other cores (forked children).

`in_parallel(thunks)` returns [t() for t in thunks], in order, the same values as running them one after
another: the thunks are pure (no output, no shared state they write), so where they run changes nothing but the
wall time. Thunk k runs in worker k mod W (W = usable cores, at most len(thunks)); worker 0 is this process, the
others are children forked from it (they inherit every imported module and cache), which send their results back
pickled through a pipe. Anything unusual -- no fork on this platform, one core, a child that fails, raises or
returns what does not unpickle -- runs the affected thunks here instead, so errors surface exactly as they would
serially. Deterministic: the assignment of thunks to workers depends on their count and the core count only.
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def in_parallel(thunks: list[Callable[[], T]]) -> list[T]:
    """[t() for t in thunks], computed over the usable cores (module docstring)."""
    workers = min(len(thunks), usable_cores()) if hasattr(os, "fork") else 1
    if workers <= 1:
        return [t() for t in thunks]
    # flush before forking: a child must not write out (again) what this process had buffered
    sys.stdout.flush()
    sys.stderr.flush()
    children = [_spawn([k for k in range(len(thunks)) if k % workers == w], thunks) for w in range(1, workers)]
    try:
        out: dict[int, T] = {k: thunks[k]() for k in range(0, len(thunks), workers)}
    except BaseException:
        for pid, fd, _ in children:     # reap the children before the error goes on
            _collect(pid, fd)
        raise
    for pid, fd, mine in children:
        got = _collect(pid, fd)
        # a child that failed (or whose answer did not come back): its thunks run here, raising as they would
        out.update(got if got is not None else {k: thunks[k]() for k in mine})
    return [out[k] for k in range(len(thunks))]


def _spawn(mine: list[int], thunks: list[Callable[[], T]]) -> tuple[int, int, list[int]]:
    """Fork a child that computes thunks `mine` and writes {index: value} pickled to a pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:        # the child: compute, send, leave without running this process's exit handlers
        code = 1
        try:
            os.close(r)
            data = pickle.dumps({k: thunks[k]() for k in mine}, protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(w, "wb") as f:
                f.write(data)
            code = 0
        except BaseException:      # noqa: BLE001 -- any failure: the parent recomputes these thunks itself
            pass
        finally:
            os._exit(code)
    os.close(w)
    return pid, r, mine


def _collect(pid: int, fd: int) -> dict | None:
    """The child's {index: value}, or None when it failed."""
    try:
        with os.fdopen(fd, "rb") as f:
            data = f.read()
    finally:
        _, status = os.waitpid(pid, 0)
    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        return None
    try:
        return pickle.loads(data)
    except Exception:               # noqa: BLE001 -- e.g. a value that does not unpickle: recompute it here
        return None
