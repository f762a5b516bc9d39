"""The profiled step's heaviest GPU kernels and host calls, from a torch.profiler Chrome trace (what
trace_summary.py sums by kind, here by name; the same step: trace_summary.profiled_step). No torch needed.

  python benchmarks/real/trace_top.py TRACE.json [--id ID] [--top N]      -> one JSON line

Within the ProfilerStep#N span: `kernels` = (name[:90], count, summed ms) of the N heaviest GPU kernel names;
`runtime` = the same for CUDA runtime calls (cudaStreamSynchronize / cudaMemcpyAsync show host syncs);
`cpu_ops` = aten / python ops by summed self-inclusive host ms (nested ops overlap: a ranking, not a sum)."""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

from trace_summary import load_events, profiled_step     # this folder is on sys.path when run as a script


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--id", default="")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    ev = load_events(a.trace)
    span = profiled_step(ev)
    lo, hi = span if span is not None else (float("-inf"), float("inf"))
    by = {"kernel": defaultdict(lambda: [0, 0.0]), "cuda_runtime": defaultdict(lambda: [0, 0.0]),
          "cpu_op": defaultdict(lambda: [0, 0.0])}
    for e in ev:
        cat = e.get("cat")
        if e.get("ph") != "X" or cat not in by or not (lo <= e.get("ts", 0) <= hi):
            continue
        d = by[cat][str(e.get("name", ""))[:90]]
        d[0] += 1
        d[1] += e.get("dur", 0) / 1e3
    out = {"id": a.id, "span_ms": round((hi - lo) / 1e3, 2) if span is not None else None}
    for cat, key in (("kernel", "kernels"), ("cuda_runtime", "runtime"), ("cpu_op", "cpu_ops")):
        rows = sorted(by[cat].items(), key=lambda kv: -kv[1][1])[:a.top]
        out[key] = [(n, c, round(ms, 2)) for n, (c, ms) in rows]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
