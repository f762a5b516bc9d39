"""search/forked.py: in_parallel gives the values (and the errors) of running the thunks one by one."""

from __future__ import annotations

import os

import pytest

from baige_plan.search import forked


def _square(x: int) -> int:
    return x * x


def _pid_and(x: int) -> tuple[int, int]:
    return os.getpid(), x


def test_values_in_order() -> None:
    thunks = [lambda x=x: _square(x) for x in range(7)]
    assert forked.in_parallel(thunks) == [x * x for x in range(7)]
    assert forked.in_parallel([]) == []


def _slow_pid_and(x: int) -> tuple[int, int]:
    import time
    time.sleep(0.2)     # long enough that every worker takes a thunk from the queue
    return os.getpid(), x


def test_children_compute_where_cores_allow() -> None:
    got = forked.in_parallel([lambda x=x: _slow_pid_and(x) for x in range(4)])
    assert [x for _, x in got] == [0, 1, 2, 3]
    pids = {pid for pid, _ in got}
    if forked.usable_cores() > 1 and hasattr(os, "fork"):
        assert len(pids) == min(4, forked.usable_cores())     # this process and its children took thunks
    else:
        assert pids == {os.getpid()}


def test_a_long_thunk_does_not_hold_back_the_others() -> None:
    """The workers take thunks as they become free: with one long thunk first, another worker runs the rest
    (a static k mod W split would have given this process thunks 0 and 2)."""
    if not (forked.usable_cores() > 1 and hasattr(os, "fork")):
        pytest.skip("one core: serial")
    import time

    def long() -> int:
        time.sleep(0.6)
        return os.getpid()
    got = forked.in_parallel([long] + [lambda: (time.sleep(0.05), os.getpid())[1] for _ in range(4)])
    assert got[0] not in got[1:]       # the others (0.2 s in all) ran elsewhere while it slept


def test_a_failing_thunk_raises_as_serially() -> None:
    def boom() -> int:
        raise ValueError("boom")
    with pytest.raises(ValueError, match="boom"):
        forked.in_parallel([lambda: 1, boom, lambda: 3])
    with pytest.raises(ValueError, match="boom"):
        forked.in_parallel([boom, lambda: 2])


def test_a_value_that_does_not_pickle_is_recomputed_here() -> None:
    got = forked.in_parallel([lambda: 1, lambda: (lambda: 2)])      # a lambda does not pickle
    assert got[0] == 1 and got[1]() == 2


def test_one_core_runs_serially(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forked, "usable_cores", lambda: 1)
    got = forked.in_parallel([lambda x=x: _pid_and(x) for x in range(3)])
    assert {pid for pid, _ in got} == {os.getpid()}
