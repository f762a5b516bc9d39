"""What the device micro-benchmarks share (cp_ring_overhead.py, a2a_overlap.py, collective_contention.py): CUDA-event
timing of a callable and rank 0's JSON output. Needs torch; imported by scripts run as
`torchrun benchmarks/real/NAME.py` (their folder is on sys.path)."""

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


def emit(row: dict) -> None:
    """Print one result row as a JSON line on rank 0."""
    if dist.get_rank() == 0:
        print(json.dumps(row), flush=True)


def write_rows(rows: list[dict], path: str) -> None:
    """Rank 0 writes every row to `path` (a JSON list), creating its folder; no path: nothing."""
    if dist.get_rank() == 0 and path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)
