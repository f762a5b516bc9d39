"""fp8 quantisation traffic per Transformer Engine recipe (cost/fp8.py), hand-derived per element."""

from __future__ import annotations

from dataclasses import replace

import pytest

from baige_plan.cost.estimate import estimate
from baige_plan.cost.fp8 import fp8_quantize_bytes, fp8_recipe
from baige_plan.io.catalog import Catalog
from baige_plan.specs.job import JobSpec
from baige_plan.specs.strategy import StrategySpec


def test_bytes_per_quantised_element():
    assert fp8_quantize_bytes("delayed") == 4.0          # read bf16 2 B, write fp8 + its transpose 1 + 1 B
    assert fp8_quantize_bytes("current") == 6.0          # + an amax pass over the 16-bit input (2 B)
    assert fp8_quantize_bytes("mxfp8") == pytest.approx(4.0625)   # + one E8M0 scale per 32 elements, twice


def test_chip_default_and_override():
    cat = Catalog.create()
    assert fp8_recipe(StrategySpec(), cat.chip("h100-sxm5-80g")) == "current"
    assert fp8_recipe(StrategySpec(), cat.chip("b200")) == "mxfp8"
    assert fp8_recipe(StrategySpec(fp8_recipe="delayed"), cat.chip("h100-sxm5-80g")) == "delayed"


def test_current_scaling_costs_two_bytes_more_per_element_than_delayed():
    # one dense layer, tp 1: every linear's input (forward) and output gradient (backward) is quantised; the
    # difference between the recipes is 2 B per element of sum(m*k) + sum(m*n) over the layer's GEMMs
    cat = Catalog.create()
    model, cluster = cat.model("llama3-8b"), cat.cluster("h100-sxm5-80g:1x8")[0]
    job = JobSpec(global_batch=8, seq_len=8192, precision="fp8")
    base = StrategySpec(tp=1, pp=1, dp=8, zero=1, recompute="none")
    cur = estimate(model, cluster, job, replace(base, fp8_recipe="current"))
    dly = estimate(model, cluster, job, replace(base, fp8_recipe="delayed"))
    h, f, kv, t = 4096, 14336, 1024, 8192
    ins = t * (h + h + h + f)                   # qkv, proj, fc1 (gate+up), fc2 inputs
    outs = t * ((h + 2 * kv) + h + 2 * f + h)   # their outputs: the backward's gradients
    hbm = cluster.groups[0].chip.hbm_GBps * 1e9 * cluster.groups[0].chip.hbm_efficiency
    per_layer = 2.0 * (ins + outs) / hbm
    assert cur.stages[0].compute_s - dly.stages[0].compute_s == pytest.approx(32 * per_layer, rel=1e-6)


def test_mlperf_v31_gaudi2_rows_run_delayed_scaling():
    # Habana's MLPerf v3.1 GPT-3 code builds recipe.DelayedScaling(interval=16, amax_history_len=1) for its
    # fp8_autocast (Intel-HabanaLabs/benchmarks/gpt3/Megatron-DeepSpeed/megatron/training.py get_hpu_fp8_recipe,
    # run_gpt.sh FP8_MEASURE_INTERVAL=16 @ mlcommons/training_results_v3.1 d06288b2): the rows state it, so the
    # loader prices their quantisation at 4 B per element, not the chip default (current scaling, 6 B)
    from pathlib import Path

    from baige_plan.io.runs import load_runs
    cases = load_runs(Path(__file__).parents[1] / "benchmarks/corpus/mlperf_train_v31.yaml", Catalog.create())
    assert len(cases) == 2
    for c in cases:
        assert c.strategy.fp8_recipe == "delayed"
        assert fp8_quantize_bytes(fp8_recipe(c.strategy, c.cluster.groups[0].chip)) == 4.0


# -- GEMMs fp8 training leaves in 16-bit (RuntimeSpec.fp8_16bit_gemms, cost/fp8.py keep_16bit) ----------------------
def _logits_fwd_s(runtime: str, precision: str, chip: str = "h100-sxm5-80g", **kw) -> float:
    from baige_plan.cost.estimate import _logits_terms, strategy_rates
    cat = Catalog.create()
    s = StrategySpec(tp=1, pp=1, dp=8, zero=1, recompute="none", runtime=runtime, **kw)
    r = strategy_rates(cat.chip(chip), precision, s)
    return _logits_terms(cat.model("llama3-8b"), s, r, 8192.0)[0]


def test_megatron_output_layer_runs_in_bf16_in_fp8_training():
    # Megatron-core's output layer is tensor_parallel.ColumnParallelLinear (models/gpt/gpt_model.py), which TE's
    # fp8_autocast does not reach: the logits GEMM of an fp8 job takes what it takes in a bf16 job. By hand, Llama 3
    # 8B, 8192 tokens, tp 1: F = 2 x 8192 x 128256 x 4096 = 8.61e12 FLOP at H100's bf16 peak 989.4 TFLOP/s x its curve at
    # F (chips/h100-sxm5-80g.yaml: 0.66 there) x the committed Hopper scale, + the fused loss's 8 B per
    # logit over the achievable HBM rate
    from baige_plan.specs.calibration import COMMITTED
    cat = Catalog.create()
    chip = cat.chip("h100-sxm5-80g")
    f = 2 * 8192 * 128256 * 4096
    eff = chip.gemm_curve("bf16").at(f) * COMMITTED.gemm_scale_for(chip.id)
    loss = 8192 * 128256 * 8 / (chip.hbm_GBps * 1e9 * chip.hbm_efficiency)
    assert _logits_fwd_s("megatron", "fp8") == pytest.approx(f / (989.4e12 * eff) + loss, rel=1e-9)
    assert _logits_fwd_s("megatron", "fp8") == pytest.approx(_logits_fwd_s("megatron", "bf16"), rel=1e-12)


def test_torchtitan_keeps_the_output_layer_in_bf16():
    # torchtitan's llama3 train configs filter "output" from the float8 converter, its MX converter skips it by default,
    # and the export keeps lm_head bf16: 16-bit logits on H100 and B200 alike
    for chip in ("h100-sxm5-80g", "b200"):
        assert _logits_fwd_s("torchtitan", "fp8", chip=chip) == pytest.approx(
            _logits_fwd_s("torchtitan", "bf16", chip=chip), rel=1e-12)
    # Megatron-Bridge's gpt-oss / DeepSeek MXFP8 recipes set fp8_output_proj: an MXFP8 output layer
    assert _logits_fwd_s("megatron", "fp8", chip="b200", fp8_output_proj=True) < \
        0.75 * _logits_fwd_s("megatron", "bf16", chip="b200")


def test_keep_16bit_marks_only_what_the_runtime_leaves_16bit():
    from baige_plan.cost.flops import Gemm
    from baige_plan.cost.fp8 import SIXTEEN_BIT_KIND, keep_16bit
    cat = Catalog.create()
    h100 = cat.chip("h100-sxm5-80g")
    gs = [Gemm("qkv", 8, 8, 8), Gemm("router", 8, 8, 8), Gemm("logits", 8, 8, 8)]
    kinds = [g.kind for g in keep_16bit(gs, StrategySpec(runtime="megatron"), h100, "fp8")]
    assert kinds == ["linear", SIXTEEN_BIT_KIND, SIXTEEN_BIT_KIND]
    assert keep_16bit(gs, StrategySpec(runtime="megatron"), h100, "bf16") == gs
    kinds = [g.kind for g in keep_16bit(gs, StrategySpec(runtime="torchtitan"), h100, "fp8")]
    assert kinds == ["linear", "linear", SIXTEEN_BIT_KIND]
