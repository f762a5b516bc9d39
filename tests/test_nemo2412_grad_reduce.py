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
    # 5.77 B parameters on the first stage: bf16 grads 2 B each (10.75 GiB), where fp32 grads (21.5 GiB) made 89 GiB
    assert abs(e.memory_gib["grads"] - 5.77e9 * 2 / 2**30) < 0.1
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
