"""The cost model's expert-GEMM rules against moe_expert_streams.py's measurements (no GPU needed).

For every measured point (expert shape, E local experts, m tokens each; fc1 = m x h -> n1) it prints
measured/model for
  streams : Gemm kind "expert_streams" (Transformer Engine GroupedLinear: one cuBLAS GEMM per expert over
            compute.TE_GEMM_STREAMS streams) vs the 4-stream cuBLAS loop replayed from a CUDA graph,
  grouped : kind "expert_grouped" (one launch) vs the same measurement (what Megatron was costed with before),
  grp_mm  : kind "expert_grouped" vs torch._grouped_mm's forward,
and the measured backward / forward ratios (TE-style dgrad + wgrad; torch._grouped_mm autograd backward)
against the 2.0 every GEMM is charged and moe.GROUPED_MM_BWD_OVER_FWD.

    .venv/bin/python benchmarks/real/moe_expert_streams_compare.py benchmarks/real/moe_expert_streams_h100.raw.json \
        h100-sxm5-80g
"""

from __future__ import annotations

import json
import statistics
import sys

from baige_plan.cost.compute import ChipRates, gemm_time_s
from baige_plan.cost.flops import Gemm
from baige_plan.cost.moe import GROUPED_MM_BWD_OVER_FWD
from baige_plan.io.catalog import Catalog


def main() -> int:
    raw, chip_id = sys.argv[1], sys.argv[2]
    doc = json.load(open(raw))
    r = ChipRates.of(Catalog.create().chip(chip_id), "bf16")
    cols = {"streams": [], "grouped": [], "grp_mm": [], "te_bwd": [], "mm_bwd": []}
    print(f"{'shape':20s} {'E':>4s} {'m':>5s} {'streams':>8s} {'grouped':>8s} {'grp_mm':>7s} {'te bwd/f':>9s} "
          f"{'mm bwd/f':>9s}")
    for p in doc["gemm"]:
        E, m, h, n = p["experts"], p["m"], p["h"], p["n1"]
        t_s = gemm_time_s(Gemm("e", m, n, h, E, "expert_streams"), r)
        t_g = gemm_time_s(Gemm("e", m, n, h, E, "expert_grouped"), r)
        meas_s = p["streams4_graph_fwd_s"]
        row = {"streams": meas_s / t_s, "grouped": meas_s / t_g, "grp_mm": p["grouped_fwd_s"] / t_g,
               "te_bwd": (p["streams4_graph_dgrad_s"] + p["streams4_graph_wgrad_s"]) / meas_s,
               "mm_bwd": (p["grouped_fwd_bwd_s"] - p["grouped_fwd_s"]) / p["grouped_fwd_s"]}
        for k, v in row.items():
            cols[k].append(v)
        print(f"{p['shape']:20s} {E:4d} {m:5d} {row['streams']:8.2f} {row['grouped']:8.2f} {row['grp_mm']:7.2f} "
              f"{row['te_bwd']:9.2f} {row['mm_bwd']:9.2f}")
    print("\nmedian (range); measured/model 1.00 = exact, > 1: the model is too fast")
    for k, v in cols.items():
        print(f"  {k:8s} {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})")
    print(f"  charged: TE backward 2.00 x forward; torch._grouped_mm backward {GROUPED_MM_BWD_OVER_FWD:.2f} x forward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
