"""The cost model's MoE pieces against moe_device_pieces.py's H100 measurements (no GPU needed).

Per measured point (expert shape, L local experts, m tokens each) and per piece, measured device seconds and what
cost/compute.py + cost/moe.py charge for the same work on the chip (`h100-sxm5-80g`, the committed hopper
calibration):
  gemm  : fc1 + fc2 of the L experts, forward and dgrad + wgrad (kind "expert_streams", 2 x forward backward), bf16
          and fp8 (TE's 4-stream per-expert cuBLAS loop measured);
  quant : Float8CurrentScaling quantisation of the expert GEMM inputs (forward) and output gradients (backward), TE's
          per-expert amax + scale + cast-transpose (measured) against the bytes the model charges for them;
  permute / router: the routing and token-permutation kernels against compute.moe_dispatch_bytes' terms.

    .venv/bin/python benchmarks/real/moe_device_pieces_compare.py benchmarks/real/moe_device_pieces_h100.raw.json
"""

from __future__ import annotations

import json
import statistics
import sys

from baige_plan.cost.compute import ChipRates, gemm_time_s
from baige_plan.cost.flops import Gemm
from baige_plan.cost.fp8 import fp8_quantize_bytes
from baige_plan.cost.moe import QUANT_KERNEL_DEVICE_S
from baige_plan.io.catalog import Catalog


def main() -> int:
    raw = sys.argv[1]
    chip_id = sys.argv[2] if len(sys.argv) > 2 else "h100-sxm5-80g"
    doc = json.load(open(raw))
    chip = Catalog.create().chip(chip_id)
    rates = {p: ChipRates.of(chip, p) for p in ("bf16", "fp8")}
    print(f"{doc['device']}, torch {doc['torch']}; reference: 8192^3 bf16 {doc['floor']['gemm_8192_bf16_TFLOPs']:.0f}, "
          f"fp8 {doc['floor']['gemm_8192_fp8_TFLOPs']:.0f} TFLOP/s, copy {doc['floor']['copy_512MiB_GBps']:.0f} GB/s, "
          f"tiny kernel {doc['floor']['tiny_add_per_kernel_s'] * 1e6:.2f} us")
    print("\nexpert GEMMs (fc1 + fc2, all local experts), microseconds: measured / model (ratio)")
    print(f"{'shape':16s} {'L':>3s} {'m':>5s} | {'bf16 fwd':>17s} {'bf16 bwd':>17s} | {'fp8 fwd':>17s} {'fp8 bwd':>17s}"
          f" | {'fp8 quant f+b':>19s}")
    ratios = {k: [] for k in ("bf16_fwd", "bf16_bwd", "fp8_fwd", "fp8_bwd", "quant", "quant_cast")}
    per_kernel = []    # (measured amax + scale + cast-transpose per expert - 6 B/element / HBM) / 3 kernels
    for r in doc["experts"]:
        L, m, h, f = r["experts"], r["m"], r["h"], r["f"]
        gs = [Gemm("expert_up", m, 2 * f, h, L, "expert_streams"), Gemm("expert_down", m, h, f, L, "expert_streams")]
        cells = []
        for p in ("bf16", "fp8"):
            mod_f = sum(gemm_time_s(g, rates[p]) for g in gs)
            mea_f = r[f"fc1_{p}_fwd_s"] + r[f"fc2_{p}_fwd_s"]
            mea_b = sum(r[f"fc{i}_{p}_{t}_s"] for i in (1, 2) for t in ("dgrad", "wgrad"))
            ratios[f"{p}_fwd"].append(mea_f / mod_f)
            ratios[f"{p}_bwd"].append(mea_b / (2 * mod_f))
            cells += [f"{mea_f * 1e6:6.0f}/{mod_f * 1e6:5.0f} ({mea_f / mod_f:4.2f})",
                      f"{mea_b * 1e6:6.0f}/{2 * mod_f * 1e6:5.0f} ({mea_b / (2 * mod_f):4.2f})"]
        for k in ("fc1_qx", "fc2_qx", "fc1_qdy", "fc2_qdy"):
            e = r[f"{k}_elems"] / L
            per_kernel.append((r[f"{k}_te_like_s"] / L - e * fp8_quantize_bytes("current") / rates["fp8"].hbm_Bps) / 3)
        elems = sum(r[f"{k}_elems"] for k in ("fc1_qx", "fc2_qx", "fc1_qdy", "fc2_qdy"))
        mod_q = elems * fp8_quantize_bytes("current") / rates["fp8"].hbm_Bps
        mea_q = sum(r[f"{k}_te_like_s"] for k in ("fc1_qx", "fc2_qx", "fc1_qdy", "fc2_qdy"))
        mea_c = sum(r[f"{k}_cast_transpose_s"] for k in ("fc1_qx", "fc2_qx", "fc1_qdy", "fc2_qdy"))
        ratios["quant"].append(mea_q / mod_q)
        ratios["quant_cast"].append(mea_c / (elems * 4 / rates["fp8"].hbm_Bps))
        print(f"{r['shape']:16s} {L:3d} {m:5d} | {cells[0]} {cells[1]} | {cells[2]} {cells[3]} | "
              f"{mea_q * 1e6:6.0f}/{mod_q * 1e6:5.0f} ({mea_q / mod_q:4.2f})")
    print("\nmedian (range) measured / model:")
    for k, v in ratios.items():
        print(f"  {k:10s} {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})")

    print(f"  quantisation: device time per kernel beyond 6 B/element at the HBM rate, median of {len(per_kernel)}: "
          f"{statistics.median(per_kernel) * 1e6:.2f} us ({min(per_kernel) * 1e6:.2f}-{max(per_kernel) * 1e6:.2f}); "
          f"cost/moe.py QUANT_KERNEL_DEVICE_S = {QUANT_KERNEL_DEVICE_S * 1e6:.2f} us")
    hbm = rates["bf16"].hbm_Bps
    print("\npermutation (bf16 rows), microseconds: measured / bytes-over-HBM model")
    for p in doc["permute"]:
        a, n = p["row_bytes"], p["token_bytes"]
        rows = [("permute gather (A rows)", p["permute_index_select_s"], 2 * a),
                ("sort_chunks (A rows)", p["sort_chunks_index_select_s"], 2 * a),
                ("unpermute gather+bmm k-sum", p["unpermute_gather_s"] + p["unpermute_weighted_sum_bmm_s"], a + n),
                ("unpermute index_add_ (unfused)", p["unpermute_index_add_s"], a + n)]
        for name, t, b in rows:
            print(f"  N={p['tokens']:5d} h={p['hidden']:4d} {name:32s} {t * 1e6:7.1f} / {b / hbm * 1e6:6.1f} "
                  f"({t / (b / hbm):4.2f})")
    print("\nrouter (fp32 logits over 128 experts), microseconds")
    for q in doc["router"]:
        N, E, h = q["tokens"], q["experts"], q["hidden"]
        mod = (9 + 13) * N * E / hbm
        g = Gemm("router", N, E, h)
        print(f"  N={N:5d} h={h:4d}: softmax/top-k/aux fwd+bwd {q['router_fwd_bwd_graph_s'] * 1e6:6.1f} "
              f"({q['router_fwd_bwd_kernels']:.0f} kernels, unfused) vs 22 B/logit {mod * 1e6:5.1f}; gating GEMM "
              f"fwd+bwd bf16 {(q['gating_bf16_fwd_s'] + q['gating_bf16_bwd_s']) * 1e6:5.1f}, fp32 "
              f"{(q['gating_fp32_fwd_s'] + q['gating_fp32_bwd_s']) * 1e6:5.1f} vs model {3 * gemm_time_s(g, rates['bf16']) * 1e6:5.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
