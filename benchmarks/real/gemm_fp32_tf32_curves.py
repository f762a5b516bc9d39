"""Derive the fp32 / tf32 GEMM efficiency curves of chips/*.yaml from the measured sweeps.

    python benchmarks/real/gemm_fp32_tf32_curves.py      (numpy + baige_plan; no GPU)

Inputs: gemm_fp32_tf32_h100.raw.json and gemm_fp32_tf32_h200.raw.json (written by gemm_fp32_tf32.py
on 1x H100 80GB HBM3 SXM and 1x H200) and the published best-shape figures below (each with its source
key as used in the chip files). Rule, the catalog's existing one (docs/COST_MODEL.md, "Calibration of
the curves" and "Precisions"):

  * measured chips (H100 SXM, H200): the per-decade upper-envelope fit of `baige-plan profile`
    (baige_plan/profile/fit.py) of the sweep, scaled so that its top point = best-shape fraction x
    CALIB_RATIO (0.828, the ratio of the training-realised to the best-shape GEMM efficiency on A100);
  * other chips (estimates): top = published best-shape fraction x CALIB_RATIO; roll-off = the H100
    measured curve of the same dtype normalised to its top, FLOPs axis scaled by peak_X / peak_H100
    (a GEMM that takes as long fills the chip alike).
It prints the points for each chip, and the check of the transferred shape against a published
A100 fp32 curve (cuBLAS, A100 80GB PCIe, triton-lang/triton#2491).
"""

from __future__ import annotations

import json
from pathlib import Path

from baige_plan.profile.fit import fit_gemm_curve, gemm_best
from baige_plan.specs.chip import EfficiencyCurve

HERE = Path(__file__).parent
CALIB_RATIO = 0.828
PEAK_H100 = {"fp32": 67.0, "tf32": 494.7}

# (chip, dtype): (peak TFLOP/s of the chip file, best-shape TFLOP/s, source note)
PUBLISHED = {
    ("a100-sxm4-80g", "fp32"): (19.5, 19.18, "TORCHPERF: A100 SXM4 80GB, torch.mm fp32 best of 1024..10240 squares"),
    ("a100-sxm4-40g", "fp32"): (19.5, 19.18, "TORCHPERF A100 SXM4 80GB figure (same GA100 die and clocks)"),
    ("a100-pcie-80g", "fp32"): (19.5, 18.88 * 19.5 / 19.49, "YHS_SAMPLE: cuBLAS 18.88 of 19.49, 5120x4096x4096"),
    ("a800-sxm4-80g", "fp32"): (19.5, 19.08, "TORCHPERF: A800 SXM4 80GB"),
    ("v100-sxm2-16g", "fp32"): (15.7, 14.51, "TORCHPERF_V100: V100-SXM2-16GB 10240^2"),
    ("v100-sxm2-32g", "fp32"): (15.7, 14.51, "TORCHPERF_V100 16 GB figure (same GV100 SXM2 part)"),
    ("h20", "fp32"): (44.0, 31.95, "TORCHPERF: H20 96GB"),
    ("b200", "fp32"): (80.0, 66.24, "TORCHPERF: B200 180GB"),
    ("gb200", "fp32"): (80.0, 66.24, "TORCHPERF B200 figure (same Blackwell die; fp32 peak 80 in both files)"),
    ("a100-sxm4-80g", "tf32"): (156.0, 2 * 10240 ** 3 / 0.017 / 1e12, "PADDLE_TF32: 10240^2 in 0.017 s"),
    ("a100-sxm4-40g", "tf32"): (156.0, 2 * 10240 ** 3 / 0.017 / 1e12, "PADDLE_TF32"),
    ("a100-pcie-80g", "tf32"): (156.0, 2 * 10240 ** 3 / 0.017 / 1e12, "PADDLE_TF32"),
    ("a800-sxm4-80g", "tf32"): (156.0, 2 * 10240 ** 3 / 0.017 / 1e12, "PADDLE_TF32"),
}
# Hopper parts with the H100 SXM's measured fraction transferred: (chip, dtype): peak
TRANSFER_H100 = {("h800-sxm5-80g", "fp32"): 67.0, ("h800-sxm5-80g", "tf32"): 494.7,
                 ("h100-pcie-80g", "fp32"): 51.0, ("h100-pcie-80g", "tf32"): 378.0}
# cuBLAS fp32 on A100 80GB PCIe (triton-lang/triton#2491), M=N=K: TFLOP/s
A100_CHECK = [(512, 8.19), (768, 13.41), (1024, 16.01), (1536, 16.85), (2048, 17.60), (3072, 17.99)]


def _sig(x: float) -> float:
    return float(f"{x:.2e}")


def measured(raw: dict, dtype: str) -> tuple[list[list[float]], float]:
    rows = [r for r in raw["gemm"] if r["dtype"] == dtype]
    fit = fit_gemm_curve([r["flops"] for r in rows], [r["tflops"] for r in rows], PEAK_H100[dtype])
    best = gemm_best(raw["gemm"], dtype)["tflops"] / PEAK_H100[dtype]
    return fit, best


def scaled(fit: list[list[float]], top: float, flops_scale: float = 1.0) -> list[list[float]]:
    fit_top = max(e for _, e in fit)
    return [[_sig(f * flops_scale), round(e / fit_top * top, 3)] for f, e in fit]


def main() -> None:
    raws = {k: json.loads((HERE / f"gemm_fp32_tf32_{k}.raw.json").read_text()) for k in ("h100", "h200")}
    shape = {}
    for dtype in ("fp32", "tf32"):
        for key, chip in (("h100", "h100-sxm5-80g"), ("h200", "h200-sxm-141g")):
            fit, best = measured(raws[key], dtype)
            pts = scaled(fit, best * CALIB_RATIO)
            print(f"{chip} {dtype}: fit {fit}\n  best {best:.3f} -> top {best * CALIB_RATIO:.3f}: {pts}")
            if key == "h100":
                shape[dtype] = fit
    for (chip, dtype), peak in TRANSFER_H100.items():
        _, best = measured(raws["h100"], dtype)
        print(f"{chip} {dtype}: H100 best {best:.3f} -> top {best * CALIB_RATIO:.3f}: "
              f"{scaled(shape[dtype], best * CALIB_RATIO, peak / PEAK_H100[dtype])}")
    for (chip, dtype), (peak, tflops, src) in PUBLISHED.items():
        b = tflops / peak
        print(f"{chip} {dtype}: {src}: {tflops:.2f}/{peak:g} = {b:.3f} -> top {b * CALIB_RATIO:.3f}: "
              f"{scaled(shape[dtype], b * CALIB_RATIO, peak / PEAK_H100[dtype])}")
    # check: the transferred H100 shape against the published A100 fp32 cuBLAS curve (both normalised)
    curve = EfficiencyCurve(tuple((f * 19.5 / 67.0, e / max(x for _, x in shape["fp32"]))
                                  for f, e in shape["fp32"]))
    top = max(t for _, t in A100_CHECK)
    print("A100 fp32 shape check (size: published / transferred, both / top):")
    for n, t in A100_CHECK:
        print(f"  {n}^3 ({2 * n ** 3:.2e} FLOPs): {t / top:.2f} / {curve.at(2.0 * n ** 3):.2f}")


if __name__ == "__main__":
    main()
