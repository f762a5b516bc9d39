"""NeMo Automodel as a backtest runtime: bf16 parameters that are their own master (specs/runtimes/automodel.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from baige_plan.cost.estimate import estimate
from baige_plan.cost.memory import GIB, state_bytes
from baige_plan.cost.moe import expert_gemm_kind
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import load_runs
from baige_plan.specs import runtimes
from baige_plan.specs.strategy import StrategySpec

ROOT = Path(__file__).resolve().parents[1]


def test_state_bytes_of_bf16_parameters_as_their_own_master():
    mem = runtimes.get("automodel").memory
    # bf16 weight 2 B + bf16 gradient 2 B + torch.optim.Adam m, v in the parameter dtype 2 + 2 B, FSDP-sharded over 64
    assert state_bytes(mem, "bf16", 3, 64) == pytest.approx((2 / 64, 2 / 64, 4 / 64, 0.0))
    # Transformer Engine FusedAdam: fp32 m, v (8 B), stated by the row as optimizer_bytes_per_param
    assert state_bytes(mem, "bf16", 3, 64, k_bytes=8.0) == pytest.approx((2 / 64, 2 / 64, 8 / 64, 0.0))
    # torchtitan keeps fp32 parameters as the master: 4 + 4 + 8
    assert state_bytes(runtimes.get("torchtitan").memory, "bf16", 3, 64) == pytest.approx((4 / 64, 4 / 64, 8 / 64, 0.0))


def test_automodel_is_backtest_only_and_executes_as_torchtitan():
    assert "automodel" in runtimes.BACKTEST_ONLY and "automodel" not in runtimes.NAMES
    a, t = runtimes.get("automodel"), runtimes.get("torchtitan")
    assert (a.zero3_impl, a.zero_stages) == (t.zero3_impl, t.zero_stages)
    # CP through torch's context_parallel over SDPA (its recipes: attn_implementation sdpa), not FlexAttention's all-gather
    assert (a.cp_comm, t.cp_comm) == ("torch_ring", "allgather")
    # grouped expert GEMMs (grouped_gemm gmm / torch._grouped_mm), also without torch.compile
    for rt in ("automodel", "torchtitan"):
        assert expert_gemm_kind(StrategySpec(dp=8, ep=8, runtime=rt, execution="eager")) == "expert_grouped"
    assert expert_gemm_kind(StrategySpec(dp=8, ep=8, runtime="pytorch", execution="eager")) == "linear"


def test_published_automodel_runs_fit_where_they_ran():
    # Qwen3-30B-A3B on 8 H100 (FSDP2 8, EP 8, local batch 4, full AC) and Llama 3.1 70B on 64 H100 (FSDP2 32, CP 2,
    # full AC) ran; with fp32 master parameters (torchtitan's states) they were predicted at 88 and 123 GiB. By hand,
    # Qwen3-30B-A3B per GPU: 128 experts x 48 layers x 3 x 2048 x 768 = 29.0 B expert parameters / EP 8 = 3.62 B, plus
    # the 1.5 B dense ones / FSDP 8 = 0.19 B: 3.81 B x (2 + 2 + 4) B, plus FSDP2's transients: the unit in use and the
    # one prefetched (the largest unit is the 151936 x 2048 embedding / output layer, 0.31 B) gathered in bf16 (2 + 2 B),
    # and in its backward that unit's bf16 gradients + its bf16 reduce-scatter input (2 + 2 B): 30.7 GiB
    cat = Catalog.create()
    rows = {c.id: c for c in load_runs(ROOT / "benchmarks/published_heldout.yaml", cat) if "automodel" in c.id}
    q = rows["automodel2025_qwen3_30b_a3b_8gpu_fsdp2_ep8_bf16"]
    e = estimate(q.model, q.cluster, q.job, q.strategy)
    states = e.memory_gib["weights"] + e.memory_gib["grads"] + e.memory_gib["optimizer"]
    experts = 128 * 48 * 3 * 2048 * 768 / 8
    dense = 30_532_304_896 - 128 * 48 * 3 * 2048 * 768       # params_b of the row's model, less the experts
    unit = 151936 * 2048
    assert states == pytest.approx(((experts + dense / 8) * 8 + unit * 8) / GIB, rel=0.01)
    assert e.fits and e.peak_memory_gib < 79.18
    ll = rows["automodel2026_llama3_70b_64gpu_fsdp2_cp2_bf16"]
    assert ll.strategy.recompute == "full" and ll.strategy.optimizer_bytes_per_param == 8.0
    assert estimate(ll.model, ll.cluster, ll.job, ll.strategy).fits
