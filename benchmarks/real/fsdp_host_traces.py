"""FSDP2 host time from the profiled step's Chrome traces (no torch): the numbers behind
cost/execution.py `Fsdp2Host` (docs/COST_MODEL.md §2, docs/VALIDATION.md "FSDP host").

    python benchmarks/real/fsdp_host_traces.py [--runs benchmarks/real/runs_h100x4.yaml] [TRACE.json.gz ...]

Default traces: benchmarks/real/raw_h100x4/*fsdp*_r*.json.gz (kept by harness.py with
BAIGE_TRACE_DIR, file name <run id>_r<rank>.json.gz). Per trace:
- profiled host: first CPU op to the end of the last kernel/memcpy/memset launch;
- ratio: that rank's unprofiled `host_step_s` (runs file, results.per_rank) / the profiled host;
- hooks: the wall time of the top-level `FSDP::*` record_function ranges (FSDP2's pre/post forward,
  pre/post backward and root hooks, nested aten ops included), per unit (blocks + root), scaled by ratio;
- optimizer: the `baige::optimizer` range (AdamW over DTensor shards), scaled by ratio;
- all-gather kernels: min / median duration (the slowest rank's are the transfer, the others wait);
- compute-stream idle: gaps where the next kernel was launched late (host) or launched early but
  waited (an event: the all-gather of a slower rank).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent


def _top_level(events: list[dict]) -> list[dict]:
    out, end = [], {}
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] >= end.get(e["tid"], -1.0):
            out.append(e)
            end[e["tid"]] = e["ts"] + e["dur"]
    return out


def analyze(path: Path, units: int, unprofiled_host_s: float | None) -> dict:
    ev = json.loads(gzip.open(path).read())["traceEvents"]
    cpu = [e for e in ev if e.get("cat") in ("cpu_op", "user_annotation") and "dur" in e]
    rt = {e["args"].get("correlation"): e for e in ev
          if e.get("cat") in ("cuda_runtime", "cuda_driver") and "dur" in e and "args" in e}
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    t0 = min(e["ts"] for e in cpu)
    launch_end = max(e["ts"] + e["dur"] for e in rt.values()
                     if any(k in e["name"] for k in ("Launch", "Memcpy", "Memset")))
    prof_host = (launch_end - t0) * 1e-6
    ratio = unprofiled_host_s / prof_host if unprofiled_host_s else 1.0
    hooks = _top_level([e for e in cpu if e["cat"] == "user_annotation" and e["name"].startswith("FSDP::")])
    hooks_s = sum(e["dur"] for e in hooks) * 1e-6
    opt_s = sum(e["dur"] for e in cpu if e["name"] == "baige::optimizer") * 1e-6
    ag = sorted(e["dur"] for e in gpu if "AllGather" in e["name"])
    streams: dict = {}
    for e in gpu:
        streams.setdefault(e["args"].get("stream"), []).append(e)
    comp = sorted(max(streams.values(), key=len), key=lambda e: e["ts"])
    late = waited = 0.0
    for a, b in zip(comp, comp[1:], strict=False):
        gap = b["ts"] - (a["ts"] + a["dur"])
        r = rt.get(b["args"].get("correlation"))
        if gap <= 5 or r is None:
            continue
        issued = r["ts"] + r["dur"]
        if issued > a["ts"] + a["dur"]:
            late += min(gap, issued - (a["ts"] + a["dur"]))
        else:
            waited += gap
    return {"trace": path.name, "profiled_host_s": prof_host, "ratio": ratio,
            "hooks_per_unit_s": hooks_s * ratio / units, "optimizer_s": opt_s * ratio,
            "all_gather_min_us": ag[0] if ag else None, "all_gather_median_us": statistics.median(ag) if ag else None,
            "compute_idle_host_late_s": late * 1e-6, "compute_idle_waiting_s": waited * 1e-6}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--runs", type=Path, default=HERE / "runs_h100x4.yaml")
    ns = ap.parse_args(argv)
    traces = ns.traces or sorted((HERE / "raw_h100x4").glob("*fsdp*_r*.json.gz"))
    rows = {r["id"]: r for r in yaml.safe_load(ns.runs.read_text())["rows"]}
    res = []
    for p in traces:
        m = re.match(r"(.+)_r(\d+)\.json\.gz$", p.name)
        row = rows.get(m.group(1)) if m else None
        host = row["results"].get("per_rank", {}).get("host_step_s", [None] * 64)[int(m.group(2))] if row else None
        units = (row["model"]["layers"] + 1) if row else 25
        r = analyze(p, units, host)
        res.append(r)
        print(f"{r['trace']:40s} ratio {r['ratio']:.3f} hooks/unit {r['hooks_per_unit_s'] * 1e3:5.2f} ms "
              f"optimizer {r['optimizer_s'] * 1e3:5.1f} ms all-gather min/median {r['all_gather_min_us']:.0f}/"
              f"{r['all_gather_median_us']:.0f} us compute idle: host-late {r['compute_idle_host_late_s'] * 1e3:5.1f} "
              f"ms, waiting {r['compute_idle_waiting_s'] * 1e3:5.1f} ms")
    if res:
        print(f"median hooks per unit {statistics.median(r['hooks_per_unit_s'] for r in res) * 1e3:.2f} ms, "
              f"optimizer per step {statistics.median(r['optimizer_s'] for r in res) * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
