"""Where one profiled training step's GPU time goes, from a torch.profiler Chrome trace (torchtitan's
--profiling.enable_profiling writes DUMP/traces/iteration_N/rankR_trace.json). No torch needed.

  python benchmarks/real/trace_summary.py TRACE.json [--id ID]      -> one JSON line

Over the profiled step's span (its ProfilerStep#N CPU annotation; the whole trace when there is none):
- busy_any_s: union of every GPU kernel, memcpy and memset interval (all streams);
- compute_s: union of the non-NCCL kernels; nccl_s: union of the NCCL kernels;
- nccl_exposed_s: NCCL busy while no other kernel runs (communication nothing overlaps);
- idle_s: span - busy_any_s (the GPU waits on the host: launches, syncs, Python);
- by_kind_s: summed kernel time by kind (gemm, attention, nccl, norm/elementwise/other) -- sums, not unions;
- kernels: how many kernels ran (a host-bound step shows many short ones).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

NCCL = re.compile(r"nccl", re.I)
GEMM = re.compile(r"gemm|nvjet|sm90_xmma|cutlass|cublas|matmul|wgmma", re.I)
ATTN = re.compile(r"flash|fmha|attention|sdpa", re.I)
NORM = re.compile(r"norm", re.I)


def _union(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _length(iv: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in iv)


def _minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of union a not covered by union b (both sorted, disjoint)."""
    total, j = 0.0, 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                total += b[k][0] - cur
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            total += e - cur
    return total


def _kind(name: str) -> str:
    if NCCL.search(name):
        return "nccl"
    if ATTN.search(name):
        return "attention"
    if GEMM.search(name):
        return "gemm"
    if NORM.search(name):
        return "norm"
    return "other"


def load_events(path: str | Path) -> list[dict]:
    """The trace's events (a Chrome trace document or its bare event list)."""
    doc = json.loads(Path(path).read_text())
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def profiled_step(ev: list[dict]) -> tuple[float, float] | None:
    """(start, end) in trace microseconds of the profiled step: the longest ProfilerStep#N CPU annotation; None
    when the trace has none."""
    steps = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"]
    if not steps:
        return None
    st = max(steps, key=lambda e: e.get("dur", 0))
    return float(st["ts"]), float(st["ts"]) + float(st["dur"])


def summary(path: str | Path) -> dict:
    ev = load_events(path)
    span = profiled_step(ev)
    steps = span is not None
    lo, hi = span if steps else (float("inf"), float("-inf"))
    gpu, nccl, comp, by_kind, n = [], [], [], {}, 0
    for e in ev:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        a, b = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
        if steps and (b <= lo or a >= hi):
            continue
        if not steps:
            lo, hi = min(lo, a), max(hi, b)
        a, b = max(a, lo), min(b, hi)
        gpu.append((a, b))
        name = str(e.get("name", ""))
        kind = _kind(name) if e["cat"] == "kernel" else e["cat"]
        by_kind[kind] = by_kind.get(kind, 0.0) + (b - a)
        if e["cat"] == "kernel":
            n += 1
            (nccl if kind == "nccl" else comp).append((a, b))
    u_any, u_nccl, u_comp = _union(gpu), _union(nccl), _union(comp)
    us = 1e-6
    return {"span_s": round((hi - lo) * us, 4), "busy_any_s": round(_length(u_any) * us, 4),
            "compute_s": round(_length(u_comp) * us, 4), "nccl_s": round(_length(u_nccl) * us, 4),
            "nccl_exposed_s": round(_minus(u_nccl, u_comp) * us, 4),
            "idle_s": round((hi - lo - _length(u_any)) * us, 4),
            "by_kind_s": {k: round(v * us, 4) for k, v in sorted(by_kind.items())}, "kernels": n}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--id", default=None)
    a = ap.parse_args(argv)
    out = {"id": a.id or Path(a.trace).stem, **summary(a.trace)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
