"""Fused-attention kernels as a runtime fact: the H100 figures of the FlashAttention-3 paper (Shah et al. 2024,
Fig. 5 forward causal / Fig. 6 backward, head dim 128), read at the launch's sequence length."""

from __future__ import annotations

from dataclasses import replace

import pytest

from baige_plan.cost.compute import ChipRates, gemm_time_s
from baige_plan.cost.flops import Gemm
from baige_plan.io.catalog import Catalog
from baige_plan.specs import runtimes
from baige_plan.specs.calibration import COMMITTED

H100_PEAK = 989.4e12


def _rates(kernel: str) -> ChipRates:
    chip = Catalog.create().chip("h100-sxm5-80g")
    return replace(ChipRates.of(chip, "bf16"), attn_kernel=kernel)


def test_kernel_rates_are_the_papers_figures():
    # one causal QK^T launch: 4096 queries x 2048 keys (the causal half) x head dim 128, 32 heads
    g = Gemm("attn_qk", 4096, 2048, 128, 32, "attention_flash")
    flops = 2 * 4096 * 2048 * 128 * 32
    # Fig. 5 at seq 4k: FA2 319 TFLOP/s, cuDNN 518; Fig. 6 (backward) at 4k: FA2 310, cuDNN 499
    assert gemm_time_s(g, _rates("fa2")) == pytest.approx(flops / (H100_PEAK * round(319 / 989.4, 3)))
    assert gemm_time_s(g, _rates("cudnn")) == pytest.approx(flops / (H100_PEAK * round(518 / 989.4, 3)))
    assert gemm_time_s(g, _rates("fa2"), passes=2, bwd=True) == pytest.approx(
        2 * flops / (H100_PEAK * round(310 / 989.4, 3)))


def test_between_points_log_interpolated_and_small_heads_scaled():
    # 3k queries: between 2k (0.301) and 4k (0.322) in log2: 0.301 + 0.021 * log2(1.5)
    import math
    eff = 0.301 + (0.322 - 0.301) * math.log2(1.5)
    g = Gemm("attn_qk", 3072, 1536, 64, 16, "attention_flash")
    expect = g.flops / (H100_PEAK * eff * math.sqrt(64 / 128))
    assert gemm_time_s(g, _rates("fa2")) == pytest.approx(expect)


def test_runtimes_declare_their_kernel():
    assert runtimes.get("megatron").attention_kernel == "cudnn"     # TE prefers FusedAttention on Hopper+
    assert runtimes.get("torchtitan").attention_kernel == "fa2"     # SDPA flash backend / FlexAttention
    assert runtimes.get("deepspeed").attention_kernel == "fa2"


def test_unknown_kernel_or_chip_without_figures_keeps_the_gemm_rule():
    chip = Catalog.create().chip("a100-sxm4-80g")
    r = replace(ChipRates.of(chip, "bf16"), attn_kernel="fa2")
    g = Gemm("attn_qk", 2048, 1024, 128, 32, "attention_flash")
    curve = chip.gemm_curve("bf16")
    scale = COMMITTED.gemm_scale_for("a100-sxm4-80g")     # the committed calibration of the GEMM curve
    assert gemm_time_s(g, r) == pytest.approx(g.flops / (312e12 * curve.at(g.flops) * scale * 0.80))
