"""Compare the cost model's expert-GEMM times with moe_gemm_sweep.py's measurements (no GPU needed).

For every measured point (expert shape, GEMM, tokens per expert m, E local experts) it prints the
cost model's time (compute.gemm_time_s on the chip file) for
  grouped : Gemm kind "expert_grouped" (efficiency at the whole launch's FLOPs, roofline over all
            experts' weights)  vs the measured torch._grouped_mm,
  loop    : E GEMMs of kind "linear" (efficiency at one expert's FLOPs)  vs the measured torch.mm loop,
  percall : the old rule (grouped launch costed at one expert's FLOPs) vs the measured grouped time,
as measured/model ratios, and their medians by m. Forward GEMMs (fc1, fc2) only: the weight-gradient
row is printed for reference (its reduction runs over m).

    .venv/bin/python benchmarks/real/moe_gemm_compare.py benchmarks/real/moe_gemm_sweep_h100.raw.json h100-sxm5-80g
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict

from baige_plan.cost.compute import ChipRates, gemm_time_s
from baige_plan.cost.flops import Gemm
from baige_plan.io.catalog import Catalog


def main() -> int:
    raw, chip_id = sys.argv[1], sys.argv[2]
    doc = json.load(open(raw))
    r = ChipRates.of(Catalog.create().chip(chip_id), "bf16")
    by_m = defaultdict(lambda: defaultdict(list))
    print(f"{'shape':22s} {'gemm':9s} {'m':>5s} {'grp meas/model':>15s} {'loop meas/model':>16s} {'grp/old rule':>13s}")
    for p in doc["gemm"]:
        m, k, n, E = p["m"], p["k"], p["n"], p["experts"]
        if p["gemm"] == "fc1_wgrad":
            continue
        g_grp = Gemm("e", m, n, k, E, "expert_grouped")
        g_loop = Gemm("e", m, n, k, E, "linear")
        t_grp, t_loop = gemm_time_s(g_grp, r), gemm_time_s(g_loop, r)
        row = {"grp": p["grouped_s"] / t_grp if "grouped_s" in p else float("nan"),
               "loop": p["loop_s"] / t_loop, "old": p["grouped_s"] / t_loop if "grouped_s" in p else float("nan")}
        for key, v in row.items():
            by_m[m][key].append(v)
        print(f"{p['shape']:22s} {p['gemm']:9s} {m:5d} {row['grp']:15.2f} {row['loop']:16.2f} {row['old']:13.2f}")
    print("\nmedian measured/model by tokens per expert m (1.00 = exact; < 1: the model is too slow)")
    print(f"{'m':>5s} {'grouped':>8s} {'loop':>6s} {'old rule':>9s}")
    allg = []
    for m in sorted(by_m):
        d = by_m[m]
        allg += d["grp"]
        print(f"{m:5d} {statistics.median(d['grp']):8.2f} {statistics.median(d['loop']):6.2f} "
              f"{statistics.median(d['old']):9.2f}")
    print(f"all   grouped median {statistics.median(allg):.2f}, range {min(allg):.2f}-{max(allg):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
