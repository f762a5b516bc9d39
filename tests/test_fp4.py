"""NVFP4 training (precision fp4, cost/fp8.py): quantisation bytes, saved inputs, weight caches and GEMM rates,
each derived by hand from Transformer Engine's kernels and the chip files' sourced figures."""

from __future__ import annotations

import pytest

from baige_plan.cost.compute import ChipRates, gemm_time_s
from baige_plan.cost.estimate import estimate
from baige_plan.cost.flops import Gemm
from baige_plan.cost.fp8 import QUANTIZED_COPY_BYTES, fp8_quantize_bytes, quant_recipe
from baige_plan.cost.memory import fp8_layer_weight_bytes, layer_activation_bytes
from baige_plan.errors import SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import _precision
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.strategy import StrategySpec


def test_nvfp4_bytes_per_quantised_element():
    # NVFP4Quantizer::quantize_impl: an amax pass (read 2 B), then one cast reading 2 B and writing the row-wise and
    # the column-wise copy, each 4 bits + one E4M3 scale per 16 elements
    assert fp8_quantize_bytes("nvfp4") == pytest.approx(2 + 2 + 2 * (0.5 + 1 / 16))
    assert QUANTIZED_COPY_BYTES["fp4"] == pytest.approx(0.5625)
    b200 = Catalog.create().chip("b200")
    assert quant_recipe(StrategySpec(), b200, "fp4") == "nvfp4"
    assert quant_recipe(StrategySpec(), b200, "fp8") == "mxfp8"
    assert quant_recipe(StrategySpec(), b200, "bf16") == ""


def test_saved_gemm_inputs_shrink_to_the_fp4_copy():
    # Llama 3 8B layer, tp 1, no SP, no recompute: the four saved GEMM inputs (QKV h, proj o, fc1 h, fc2 f) keep
    # 0.5625 B per element under fp4 where fp8 keeps 1 B: (1 - 0.5625) x (4096 + 4096 + 4096 + 14336) B per token
    m = Catalog.create().model("llama3-8b")
    args = (m, 8192, 1, 1, 1, False, "none", False)
    f8 = layer_activation_bytes(*args, fp8_gemm_inputs=True, quant_copy_bytes=1.0)
    f4 = layer_activation_bytes(*args, fp8_gemm_inputs=True, quant_copy_bytes=0.5625)
    assert f8 - f4 == pytest.approx(8192 * 0.4375 * (4096 + 4096 + 4096 + 14336))


def test_fp4_weight_cache_is_two_nvfp4_copies():
    mem = runtimes.get("megatron").memory
    assert fp8_layer_weight_bytes(mem, False) == 2.0                        # fp8 weight + transpose
    assert fp8_layer_weight_bytes(mem, False, precision="fp4") == pytest.approx(1.125)


def test_fp4_gemm_runs_at_the_fp4_peak_on_its_curve():
    # a compute-bound 16k x 16k x 16k GEMM on B200: F / (9000 TFLOP/s (18 PFLOPS sparse / 2) x the fp4 curve at F x
    # the committed Blackwell scale)
    from baige_plan.specs.calibration import COMMITTED
    chip = Catalog.create().chip("b200")
    n = 16384
    g = Gemm(name="fc1", m=n, n=n, k=n, kind="linear")
    r = ChipRates.of(chip, "fp4")
    eff = chip.gemm_curve("fp4").at(2 * n ** 3) * COMMITTED.gemm_scale_for("b200")
    assert gemm_time_s(g, r) == pytest.approx(2 * n ** 3 / (9000e12 * eff), rel=1e-9)
    # attention stays 16-bit in an fp4 job (TE quantises linears only)
    assert r.attn_dtype == "bf16"


@pytest.mark.parametrize("chip,peak8,peak4,best8,best4", [
    # the AIC TensorRT-LLM tables' best per-tensor fp8 and NVFP4 TFLOP/s on each chip (chips/*.yaml AIC)
    ("b200", 4500, 9000, 3151, 4547), ("gb200", 5000, 10000, 3493, 5202),
    ("b300", 4500, 13500, 3376, 5988), ("gb300", 5000, 15000, 3749, 6463),
])
def test_fp4_curve_is_the_fp8_curve_time_matched_and_scaled(chip, peak8, peak4, best8, best4):
    c = Catalog.create().chip(chip)
    assert (c.peak("fp8"), c.peak("fp4")) == (peak8, peak4)
    k = (best4 / peak4) / (best8 / peak8)
    for f in (1e11, 1e12, 1e13):
        assert c.gemm_curve("fp4").at(f * peak4 / peak8) == pytest.approx(c.gemm_curve("fp8").at(f) * k, abs=1.5e-3)


def test_fp4_is_refused_where_it_does_not_run():
    cat = Catalog.create()
    model = cat.model("llama3-8b")
    job = JobSpec(global_batch=8, seq_len=4096, precision="fp4")
    with pytest.raises(SpecError, match="peak_tflops.fp4"):        # Hopper has no fp4 tensor cores
        estimate(model, cat.cluster("h100-sxm5-80g:1x8")[0], job, StrategySpec(dp=8))
    for name in ("torchtitan", "deepspeed", "megatron-local", "flagscale", "paddle"):
        assert "fp4" not in runtimes.get(name).precisions, name
    assert "fp4" in runtimes.get("megatron").precisions
    est = estimate(model, cat.cluster("b200:1x8")[0], job, StrategySpec(dp=8))
    bf = estimate(model, cat.cluster("b200:1x8")[0], JobSpec(global_batch=8, seq_len=4096), StrategySpec(dp=8))
    assert est.step_time_s < bf.step_time_s


def test_runs_read_nvfp4_as_fp4():
    assert _precision("nvfp4 (config_common_fp4.sh: FP4=True, FP8=False, FP4_RECIPE=nvfp4)") == "fp4"
    assert _precision("fp4") == "fp4"
    assert _precision("fp8 (FP8 GEMMs)") == "fp8"
