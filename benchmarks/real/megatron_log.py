"""Step time and peak memory of one Megatron-LM pretrain_gpt.py log (no torch): what
benchmarks/real/run_megatron_local.sh records per launched plan.

  python benchmarks/real/megatron_log.py LOG [--id ID] [--skip N]

Reads every `elapsed time per iteration (ms): X` line (training.py training_log, printed by the last rank at
--log-interval 1) and every `[Rank r] (after N iterations) memory (MB) | ... | max allocated: A | ... | max
reserved: R` line (utils report_memory, one per data-parallel rank 0 of each tensor/pipeline rank with
--log-memory-interval). Prints one JSON line: the median step time over the iterations after the first
`skip` (default 5: allocator warm-up, first-iteration setup), all step times, and the largest max-allocated /
max-reserved over the reporting ranks, in GiB."""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys

STEP = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*?elapsed time per iteration \(ms\): ([0-9.]+)")
MEM = re.compile(r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\).*?max allocated: ([0-9.]+).*?"
                 r"max reserved: ([0-9.]+)")


def summarise(text: str, skip: int = 5) -> dict:
    steps = {int(i): float(ms) / 1e3 for i, ms in STEP.findall(text)}
    mem: dict[int, tuple[float, float]] = {}
    for rank, _it, alloc, res in MEM.findall(text):
        r = int(rank)
        a, b = float(alloc) / 1024, float(res) / 1024
        old = mem.get(r, (0.0, 0.0))
        mem[r] = (max(old[0], a), max(old[1], b))
    timed = [t for i, t in sorted(steps.items()) if i > skip]
    return {"iterations": len(steps), "step_time_s": round(statistics.median(timed), 5) if timed else None,
            "step_times_s": [round(t, 5) for _, t in sorted(steps.items())],
            "peak_memory_gib": round(max((a for a, _ in mem.values()), default=0.0), 3) or None,
            "reserved_memory_gib": round(max((b for _, b in mem.values()), default=0.0), 3) or None,
            "memory_ranks": sorted(mem)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--id", default="")
    ap.add_argument("--skip", type=int, default=5)
    a = ap.parse_args(argv)
    text = open(a.log, errors="replace").read()
    out = {"id": a.id, **summarise(text, a.skip)}
    print(json.dumps(out))
    return 0 if out["step_time_s"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())
