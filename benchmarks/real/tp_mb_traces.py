"""TP and pipeline numbers from the profiled steps of plans/h100x4_mb*.yaml (no torch): the constants of
cost/execution.py `EagerTraffic.tp_replicated_share`, `EagerHost.tp_collective_s` / `tp_passthrough_s`
and the check of the DP window with pipelining (docs/VALIDATION.md, "TP and micro-batch").

    python benchmarks/real/tp_mb_traces.py [--dir benchmarks/real/raw_h200x4_mb] [--runs benchmarks/real/runs_h200x4_mb.yaml]

Traces: <run id>_r<rank>.json.gz as harness.py keeps them (BAIGE_TRACE_DIR; the ids carry the harness's
default "h100_" prefix although these ran on H200). Three analyses:
1. replicated share of the eager per-layer traffic: the non-GEMM, non-attention, non-NCCL kernels of one
   micro-batch of gpt-1.3b at TP4 and at TP2 x DP2 (equal tokens per rank), without the optimizer range,
   the loss (vocab-parallel cross-entropy ops), the embedding backward and DDP's bucket copies / gradient
   division. T(tp) = R + S / tp  ->  R = 2 T4 - T2, S = 4 (T2 - T4).
2. host time of a TP autograd Function: top-level `_Reduce` (forward all-reduce) and
   `autograd::engine::evaluate_function: _CopyBackward` (backward all-reduce) ranges, nested ops included,
   and the pass-through ones (`_Copy`, `_ReduceBackward`), scaled by the rank's unprofiled host_step_s /
   profiled host (first CPU op to the last launch); host-bound runs only (TP4 micro-batch 1 and 4).
3. pipelines: per rank the start of the optimizer range and the DDP all-reduce kernels (first start, last
   end, summed duration) against the rank's last non-NCCL kernel before the optimizer.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
LOSS_OPS = {"aten::div_", "aten::mul_", "aten::sub_", "aten::exp_", "aten::max", "aten::gather",
            "aten::scatter_add_", "aten::masked_fill_", "aten::fill_"}


def _events(path: Path) -> list[dict]:
    return json.loads(gzip.open(path).read())["traceEvents"]


def _kind(name: str) -> str:
    n = name.lower()
    if "nccl" in n:
        return "nccl"
    if "flash" in n or "sdpa" in n or "fmha" in n:
        return "attention"
    if "nvjet" in n or "gemm" in n or "cutlass" in n or "xmma" in n:
        return "gemm"
    return "other"


def layer_kernels_ms(path: Path) -> float:
    """Per-layer non-GEMM kernel time of the profiled step (analysis 1), ms."""
    ev = _events(path)
    ops = {e["args"]["External id"]: e["name"] for e in ev
           if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    opt = [(a["ts"], a["ts"] + a["dur"]) for a in ev
           if a.get("cat") == "gpu_user_annotation" and "optimizer" in a["name"].lower()]
    ks = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    per_op: dict[tuple[str, str], list[float]] = {}
    for k in ks:
        if _kind(k["name"]) != "other" or any(a <= k["ts"] <= b for a, b in opt):
            continue
        op = ops.get(k["args"].get("External id"), "?")
        per_op.setdefault((op, k["name"]), []).append(k["dur"])
    total = 0.0
    for (op, kn), durs in per_op.items():
        if op in LOSS_OPS or (op == "aten::sum" and "reduce_kernel<512" in kn) or "embedding" in op:
            continue
        if "Memcpy DtoD" in kn or (op == "aten::mul" and len(durs) > 200):   # DDP bucket copies / grad division
            continue
        total += sum(durs)
    return total / 1e3


def _top_level(events: list[dict]) -> list[dict]:
    out, end = [], {}
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] >= end.get(e["tid"], -1.0):
            out.append(e)
            end[e["tid"]] = e["ts"] + e["dur"]
    return out


def tp_host_us(path: Path, unprofiled_host_s: float) -> tuple[float, float, float]:
    """(all-reduce call, pass-through call) host microseconds, scaled; and the scale (analysis 2)."""
    ev = _events(path)
    cpu = [e for e in ev if e.get("cat") in ("cpu_op", "user_annotation") and "dur" in e]
    rt = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and "dur" in e]
    t0 = min(e["ts"] for e in cpu)
    launch_end = max(e["ts"] + e["dur"] for e in rt if any(k in e["name"] for k in ("Launch", "Memcpy", "Memset")))
    scale = unprofiled_host_s / ((launch_end - t0) * 1e-6)
    top = _top_level(cpu)

    def calls(*names: str) -> list[float]:
        return [e["dur"] for e in top if e["name"] in names or any(e["name"].endswith(": " + n) for n in names)]
    coll = calls("_Reduce", "_CopyBackward")
    thru = calls("_Copy", "_ReduceBackward")
    return statistics.mean(coll) * scale, statistics.mean(thru) * scale, scale


def pipeline(path: Path) -> dict:
    """Optimizer start, DDP all-reduce kernels and last compute kernel, ms from the rank's first kernel."""
    ev = _events(path)
    ks = sorted((e for e in ev if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    opt0 = min(a["ts"] for a in ev if a.get("cat") == "gpu_user_annotation" and "optimizer" in a["name"].lower())
    ar = [e for e in ks if "AllReduce" in e["name"]]
    comp_end = max(e["ts"] + e["dur"] for e in ks if "nccl" not in e["name"].lower() and e["ts"] < opt0)
    out = {"t0": ks[0]["ts"], "optimizer_start_us": opt0, "last_compute_end_us": comp_end}
    if ar:
        out.update(ddp_first_start_us=min(e["ts"] for e in ar), ddp_last_end_us=max(e["ts"] + e["dur"] for e in ar),
                   ddp_kernels=len(ar), ddp_kernel_sum_ms=sum(e["dur"] for e in ar) / 1e3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=HERE / "raw_h200x4_mb")
    ap.add_argument("--runs", type=Path, default=HERE / "runs_h200x4_mb.yaml")
    ns = ap.parse_args(argv)
    rows = {r["id"].split("_", 1)[1]: r["results"] for r in yaml.safe_load(ns.runs.read_text())["rows"]}
    tr = lambda run, rk: ns.dir / f"h100_{run}_r{rk}.json.gz"   # noqa: E731

    print("1. replicated share of the eager per-layer non-GEMM kernels (gpt-1.3b, TP2 x DP2 vs TP4)")
    shares = []
    for mb, rk in ((16, 0), (16, 3), (4, 0)):
        t2 = layer_kernels_ms(tr(f"gpt1p3b_tp2_dp2_mb{mb}_noac", rk))
        t4 = layer_kernels_ms(tr(f"gpt1p3b_tp4_mb{mb}_noac", rk))
        r, s = 2 * t4 - t2, 4 * (t2 - t4)
        shares.append(r / (r + s))
        print(f"   mb {mb:2d} rank {rk}: T2 {t2:7.2f} ms  T4 {t4:7.2f} ms  R {r:6.2f}  S {s:6.2f}  share {r / (r + s):.3f}")
    print(f"   median share {statistics.median(shares):.3f}")

    print("2. host time per TP autograd Function call (host-bound gpt-1.3b TP4 runs)")
    coll, thru = [], []
    for mb in (1, 4):
        res = rows[f"gpt1p3b_tp4_mb{mb}_noac"]
        for rk in (0, 3):
            c, t, sc = tp_host_us(tr(f"gpt1p3b_tp4_mb{mb}_noac", rk), res["per_rank"]["host_step_s"][rk])
            coll.append(c)
            thru.append(t)
            print(f"   mb {mb} rank {rk}: all-reduce call {c:6.1f} us, pass-through {t:5.1f} us (scale {sc:.2f})")
    print(f"   median: all-reduce call {statistics.median(coll):.1f} us, pass-through {statistics.median(thru):.1f} us")

    print("3. pipelines: stage finish and DDP all-reduce (ms from rank 0's first kernel)")
    for run in ("gpt1p3b_pp2_dp2_mb4_ga4_noac", "gpt1p3b_pp4_mb4_ga16_noac"):
        p0 = None
        for rk in (0, 3):
            if not tr(run, rk).exists():
                continue
            p = pipeline(tr(run, rk))
            p0 = p0 or p["t0"]
            ms = {k: (v - p0) / 1e3 for k, v in p.items() if k.endswith("_us")}
            line = (f"   {run} rank {rk}: last compute {ms['last_compute_end_us']:8.1f}  "
                    f"optimizer {ms['optimizer_start_us']:8.1f}")
            if "ddp_kernels" in p:
                line += (f"  DDP all-reduce x{p['ddp_kernels']} {ms['ddp_first_start_us']:8.1f} .. "
                         f"{ms['ddp_last_end_us']:8.1f} (sum {p['ddp_kernel_sum_ms']:.1f} ms)")
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
