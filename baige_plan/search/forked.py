"""Run independent pure computations of one search on the machine's other cores (forked children).

`in_parallel(thunks)` returns [t() for t in thunks], in order, the same values as running them one after
another: the thunks are pure (no output, no shared state they write), so where they run changes nothing but the
wall time. W workers (W = usable cores, at most len(thunks)): worker 0 is this process, the others are children
forked from it (they inherit every imported module and cache), which send their results back pickled through a
pipe. The workers take the thunks in order from a shared queue (a pipe holding their indices) as each becomes
free, so one long thunk does not hold back the others. Anything unusual -- no fork on this platform, one core, a
child that fails, raises or returns what does not unpickle -- runs the affected thunks here instead, so errors
surface as they would serially. Deterministic: which worker ran a thunk changes the time only, never a value.
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
    if workers <= 1 or len(thunks) * _INDEX_BYTES > _QUEUE_BYTES:
        return [t() for t in thunks]
    # flush before forking: a child must not write out (again) what this process had buffered
    sys.stdout.flush()
    sys.stderr.flush()
    queue = _queue(len(thunks))
    children = [_spawn(queue, thunks) for _ in range(1, workers)]
    out: dict[int, T] = {}
    try:
        for k in _claimed(queue):
            out[k] = thunks[k]()
    except BaseException:
        for pid, fd in children:        # reap the children before the error goes on
            _collect(pid, fd)
        raise
    finally:
        os.close(queue)
    for pid, fd in children:
        got = _collect(pid, fd)
        if got is not None:
            out.update(got)
    # a child that failed (or whose answer did not come back): the thunks it took run here, raising as they would
    return [out[k] if k in out else thunks[k]() for k in range(len(thunks))]


_INDEX_BYTES = 4
_QUEUE_BYTES = 65536        # Linux's default pipe capacity: every index is written before any worker starts


def _queue(n: int) -> int:
    """The read end of a pipe holding the indices 0..n-1 (write end closed, so it reads empty when all are taken)."""
    r, w = os.pipe()
    try:
        os.write(w, b"".join(k.to_bytes(_INDEX_BYTES, "little") for k in range(n)))
    finally:
        os.close(w)
    return r


def _claimed(queue: int):
    """The indices this worker takes from the queue, one at a time (a pipe read of a few bytes is atomic)."""
    while True:
        b = os.read(queue, _INDEX_BYTES)
        if len(b) < _INDEX_BYTES:
            return
        yield int.from_bytes(b, "little")


def _spawn(queue: int, thunks: list[Callable[[], T]]) -> tuple[int, int]:
    """Fork a child that computes the thunks it takes from the queue and writes {index: value} pickled to a pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:        # the child: compute, send, leave without running this process's exit handlers
        code = 1
        try:
            os.close(r)
            done = {}
            for k in _claimed(queue):
                done[k] = thunks[k]()
            data = pickle.dumps(done, protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(w, "wb") as f:
                f.write(data)
            code = 0
        except BaseException:      # noqa: BLE001 -- any failure: the parent recomputes these thunks itself
            pass
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


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
