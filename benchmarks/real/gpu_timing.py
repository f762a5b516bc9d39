"""What the device micro-benchmarks share (cp_ring_overhead.py, a2a_overlap.py, collective_contention.py, the one-GPU
sdpa_long_seq.py and tp_overlap_sm.py): CUDA-event timing of a callable and rank 0's JSON output (the only rank
when no process group is set up). Needs torch; imported by scripts run as `torchrun benchmarks/real/NAME.py` or
`python benchmarks/real/NAME.py` (their folder is on sys.path)."""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist


def events_s(fn, iters: int, barrier: bool = False) -> float:
    """Device seconds per call of fn over `iters` calls issued back to back (CUDA events); barrier: all ranks start
    together (collectives timed across ranks)."""
    torch.cuda.synchronize()
    if barrier:
        dist.barrier()
        torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / 1e3 / iters


def contention_s(work, comm, comm_s: float, stream, iters: int) -> tuple[float, float, float]:
    """(work alone, work with `comm` issued on `stream` at its start, k) in seconds, every rank together: k = the
    extra time over the collective's own `comm_s` (the share of the GPU it holds while it runs is k / (1 + k));
    `work` must outlast `comm`."""
    def both() -> None:
        cur = torch.cuda.current_stream()
        stream.wait_stream(cur)
        with torch.cuda.stream(stream):
            comm()
        work()
        cur.wait_stream(stream)

    work_s = events_s(work, iters, True)
    both_s = events_s(both, iters, True)
    return work_s, both_s, max(0.0, both_s - work_s) / comm_s


def outlasting_contention(op, per_s: float, comm, comm_s: float, stream, iters: int,
                          min_reps: int = 4) -> tuple[int, float, float, float]:
    """(reps, work alone s, work with `comm` beside it s, k): contention_s of a chain of `op` (`per_s` each) long
    enough to outlast the collective (2.5x its `comm_s`, at least `min_reps` calls)."""
    reps = max(min_reps, int(2.5 * comm_s / per_s) + 1)

    def chain() -> None:
        for _ in range(reps):
            op()

    return (reps, *contention_s(chain, comm, comm_s, stream, iters))


def _rank0() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def emit(row: dict) -> None:
    """Print one result row as a JSON line on rank 0."""
    if _rank0():
        print(json.dumps(row), flush=True)


def write_rows(rows: list[dict] | dict, path: str) -> None:
    """Rank 0 writes `rows` (a JSON list of rows, or a document holding them) to `path`, creating its folder; no
    path: nothing."""
    if _rank0() and path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)
