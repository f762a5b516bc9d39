"""Step time and peak memory of one torchtitan 0.2.2 training log (no torch): what
benchmarks/real/run_torchtitan.sh records per launched plan.

  python benchmarks/real/torchtitan_log.py LOG EXPORT_DIR [--id ID] [--skip N]

torchtitan logs one line per step at --metrics.log_freq 1 (components/metrics.py MetricsProcessor.log), on every
rank (the export's torchrun has no --local-ranks-filter):
  `step: 5  loss: ...  grad_norm: ...  memory: 97.12GiB(68.21%)  tps: 10,234  tflops: ...  mfu: ...%`
- tps = tokens this rank loaded since the last log / (seconds since the last log x cp x tp x pp), the tokens
  counted before CP sharding (train.py batch_generator: labels.numel()); a rank loads global_batch / dp sequences
  per step, so the step's wall time is global_batch x seq_len / (world x tps). The slowest rank's (smallest tps)
  is the step's time; the median is over the steps after the first `skip` (default 3: first-step allocator and
  kernel-selection warm-up).
- memory = torch.cuda max reserved (DeviceMemoryMonitor.get_peak_stats `reserved_bytes.all.peak`, GiB, never
  reset): the largest over ranks and steps.
EXPORT_DIR's torchtitan_args.txt gives global batch, seq_len and the parallel degrees. Prints one JSON line."""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STEP = re.compile(r"step:\s*(\d+)\s+loss:\s*([-0-9.naif]+).*?memory:\s*([0-9.]+)GiB\(([0-9.]+)%\)\s+tps:\s*([0-9,]+)")
ERRORS = ("OutOfMemoryError", "CUDA out of memory", "Traceback (most recent call last)", "ChildFailedError")


def export_shape(export_dir: str | Path) -> dict:
    """global batch, seq_len and world size of an exported plan (its torchtitan_args.txt)."""
    flags = {}
    for ln in (Path(export_dir) / "torchtitan_args.txt").read_text().splitlines():
        w = ln.split()
        if w and w[0].startswith("--") and len(w) > 1:
            flags[w[0][2:]] = w[1]
    p = "parallelism."
    degrees = [int(flags.get(p + k, 1)) for k in ("data_parallel_replicate_degree", "data_parallel_shard_degree",
                                                   "context_parallel_degree", "tensor_parallel_degree",
                                                   "pipeline_parallel_degree")]
    world = 1
    for d in degrees:
        world *= d
    return {"global_batch": int(flags["training.global_batch_size"]), "seq_len": int(flags["training.seq_len"]),
            "world": world}


def summarise(text: str, shape: dict, skip: int = 3) -> dict:
    text = ANSI.sub("", text)
    tokens = shape["global_batch"] * shape["seq_len"]
    tps: dict[int, list[float]] = {}
    mem, loss = [], {}
    for step, lo, gib, _pct, t in STEP.findall(text):
        s = int(step)
        tps.setdefault(s, []).append(float(t.replace(",", "")))
        mem.append(float(gib))
        loss.setdefault(s, lo)
    times = {s: tokens / (shape["world"] * min(v)) for s, v in sorted(tps.items()) if min(v) > 0}
    timed = [t for s, t in times.items() if s > skip]
    err = next((e for e in ERRORS if e in text), None)
    return {"steps": len(times), "step_time_s": round(statistics.median(timed), 5) if timed else None,
            "step_times_s": [round(t, 5) for t in times.values()],
            "ranks_logged": max((len(v) for v in tps.values()), default=0),
            "peak_reserved_gib": round(max(mem), 3) if mem else None,
            "loss_first_last": [loss[min(loss)], loss[max(loss)]] if loss else None,
            "error": err, **shape}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("export_dir")
    ap.add_argument("--id", default="")
    ap.add_argument("--skip", type=int, default=3)
    a = ap.parse_args(argv)
    text = open(a.log, errors="replace").read()
    out = {"id": a.id or Path(a.export_dir).name, **summarise(text, export_shape(a.export_dir), a.skip)}
    print(json.dumps(out))
    return 0 if out["step_time_s"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())
