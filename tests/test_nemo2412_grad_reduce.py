"""NeMo 24.12's table (the first NeMo 2.0 one) ran the NeMo v2.2.0 performance scripts' layouts, whose fp8 scripts set
plugins.grad_reduce_in_fp32 = False: bf16 main grads. Reference: the published run itself, which ran on 80 GB H100."""

from __future__ import annotations

from pathlib import Path

from baige_plan.cost.estimate import estimate
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import load_runs

ROOT = Path(__file__).resolve().parents[1]


def _case(path: str, row: str):
    return next(c for c in load_runs(ROOT / path, Catalog.create([])) if c.id == row)


def test_nemotron4_340b_on_128_h100_fits_with_bf16_main_grads():
    c = _case("benchmarks/corpus/nemo_perf_2412.yaml", "nemo_perf_2412_nemotron4_340b_128gpu_fp8")
    assert c.strategy.grad_reduce_bf16
    e = estimate(c.model, c.cluster, c.job, c.strategy)
    # first stage: 12 layers of (2 x 18432^2 + 2 x 18432 x 1536 + 2 x 18432 x 73728) parameters plus the 50257 x 18432
    # embedding (the fp8 perf script's GPT-2 tokenizer), over tp 8: 5.297 B; bf16 grads 2 B each (9.87 GiB), where
    # fp32 grads (19.7 GiB) would not have fitted with the 256000-vocab embedding it was checked on first (89 GiB)
    layer = 2 * 18432**2 + 2 * 18432 * 1536 + 2 * 18432 * 73728
    assert abs(e.memory_gib["grads"] - (12 * layer + 50257 * 18432) / 8 * 2 / 2**30) < 0.1
    assert e.fits and e.peak_memory_gib <= e.capacity_gib


def test_which_releases_reduce_in_bf16():
    # (grad_reduce_bf16, fp8_param_gather, optimizer bytes): 24.12 fp8 -> bf16 grads (v2.2.0 fp8 scripts); 24.12 bf16 ->
    # the v2.1.0 recipes' bf16_mixed (fp32 grads); 25.02 -> bf16 for both; 24.07 (NeMo 1) -> per row, its optimizer 10 B
    from baige_plan.io.runs import _recipe_memory
    nemo2 = "NeMo {} (NeMo 2.0, Megatron-Core, Transformer Engine)"
    assert _recipe_memory({"framework": nemo2.format("24.12")}, "fp8", "megatron", 1, [])[0] is True
    assert _recipe_memory({"framework": nemo2.format("24.12")}, "bf16", "megatron", 1, [])[0] is False
    assert _recipe_memory({"framework": nemo2.format("25.02")}, "bf16", "megatron", 1, [])[0] is True
    assert _recipe_memory({"framework": "NeMo 24.07 (NeMo 1 launcher)"}, "fp8", "megatron", 1, []) == (False, False, 10.0)
    assert _recipe_memory({"framework": nemo2.format("24.12"), "grad_reduce_in_fp32": True}, "fp8", "megatron", 1,
                          [])[0] is False      # a stated value wins


def test_mxfp8_runs_keep_fp8_primary_weights():
    # Megatron-Bridge bf16_with_mxfp8_mixed sets fp8_param_gather and reuse_grad_buf_for_mxfp8_param_ag
    # (training/mixed_precision.py @ fcbb6031, v0.5.0); only the blockwise (subchannel) presets keep bf16 weights.
    # The MXFP8 rows' precision text says "1x32-block-scaled", which is not "blockwise".
    from baige_plan.io.runs import _recipe_memory
    mb = {"framework": "NeMo 26.06 (Megatron-Bridge 0.5.0, Megatron-Core 0.18.0, Transformer Engine 2.16)"}
    mx = dict(mb, precision="fp8 (MXFP8: 1x32-block-scaled FP8 GEMMs via Transformer Engine, bf16 elsewhere)")
    assert _recipe_memory(mx, "fp8", "megatron", 1, [])[1] is True
    for text in ("fp8 blockwise (subchannel)", "fp8 (block-wise 128x128 weights)", "fp8 sub-channel scaling"):
        assert _recipe_memory(dict(mb, precision=text), "fp8", "megatron", 1, [])[1] is False, text


def test_gb300_405b_mxfp8_fits_with_fp8_primary_weights():
    # Llama 3.1 405B, tp 2 pp 8 cp 2 vpp 4 on 256 GB300 ran (Megatron-Bridge 26.06 table). Per device, the layer
    # weights are fp8 data + transpose (2 B, no bf16 copy): 405.9e9 / (tp 2 x pp 8) parameters x 2 B = 47.3 GiB,
    # where bf16 weights + TE's cached fp8 copy (4 B) gave 94.5 GiB and a 293.5 GiB peak over 277.55 GiB
    c = _case("benchmarks/corpus/mbridge_perf_2606.yaml", "mbridge_perf_2606_llama31_405b_gb300_256gpu_mxfp8")
    assert c.strategy.fp8_param_gather
    e = estimate(c.model, c.cluster, c.job, c.strategy)
    assert abs(e.memory_gib["weights"] - 405.9e9 / 16 * 2 / 2**30) < 1.0
    assert e.fits and e.peak_memory_gib <= e.capacity_gib


def test_fp8_recipe_of_containers_before_current_scaling():
    # Transformer Engine had DelayedScaling only until MXFP8BlockScaling (TE 2.0 code, 2025-02-07) and
    # Float8CurrentScaling (v2.2, 2025-03-07): an unstated recipe of an older NeMo container is delayed scaling
    from baige_plan.io.runs import _fp8_recipe
    mlperf = {"framework": "NeMo 24.09 (MLPerf NVIDIA GPT-3 implementation, Megatron-core, Transformer Engine)"}
    assert _fp8_recipe(mlperf, "fp8", "megatron", "h100-sxm5-80g", []) == "delayed"
    assert _fp8_recipe(mlperf, "fp8", "megatron", "b200", []) == "delayed"
    assert _fp8_recipe({"framework": "NeMo 25.02 (NeMo 2.0)"}, "fp8", "megatron", "b200", []) == ""      # MXFP8
    assert _fp8_recipe({"framework": "NeMo 25.02 (NeMo 2.0)"}, "fp8", "megatron", "h100-sxm5-80g", []) == "delayed"
    assert _fp8_recipe({"framework": "NeMo 25.11 (Megatron-Bridge 0.2.0)"}, "fp8", "megatron", "h100-sxm5-80g",
                       []) == ""                                  # current scaling exists: the chip's default
    assert _fp8_recipe(dict(mlperf, fp8_recipe="current"), "fp8", "megatron", "h100-sxm5-80g", []) == "current"
    assert _fp8_recipe(mlperf, "bf16", "megatron", "h100-sxm5-80g", []) == ""
    assert _fp8_recipe({"framework": "torchtitan 2024-08"}, "fp8", "torchtitan", "h100-sxm5-80g", []) == ""
