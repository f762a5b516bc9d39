"""Transformer Engine's parallel_cross_entropy (Megatron --cross-entropy-fusion-impl te, TE 2.2-2.17): the gradient is
written in place over the 16-bit logits, which are all the loss keeps. References: hand-derived bytes from the kernels
(transformer_engine/pytorch/triton/cross_entropy.py before 01bbe3eea), the frameworks' scripts that select it, and
public runs that ran in the memory the old 6-byte accounting said they lacked."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from _plan_docs import LLAMA3_70B, plan_doc

from baige_plan.cost.compute import ChipRates, gemm_time_s
from baige_plan.cost.estimate import _logits_terms, estimate
from baige_plan.cost.flops import logits_gemm
from baige_plan.exports.megatron import megatron_args
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import _loss_kernel, load_runs, te_cross_entropy
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import StrategySpec

ROOT = Path(__file__).resolve().parents[1]


def test_te_xent_holds_the_16bit_logits_and_moves_five_passes():
    # 8192 tokens x 128256 vocab on one H100, bf16: holds 2 B per logit (the fused native loss: its fp32 copy 4 B + the
    # 16-bit logits 2 B at the cast); forward reads the logits twice and writes the gradient once (3 x 2 B), backward
    # scales the gradient in place (2 x 2 B)
    cat = Catalog.create([])
    chip = cat.chip("h100-sxm5-80g")
    r = ChipRates.of(chip, "bf16")
    m = ModelSpec("llama-8b", 32, 4096, 32, 14336, 128256, seq_len=8192, kv_heads=8)
    s = StrategySpec(dp=8, zero=1, micro_batch=1, runtime="megatron", loss_kernel="te_xent")
    f, b, act = _logits_terms(m, s, r, 8192)
    logits = 8192 * 128256
    t_gemm = gemm_time_s(logits_gemm(m, 8192, 1), r)
    assert act == pytest.approx(logits * 2)
    assert f - t_gemm == pytest.approx(logits * 6 / r.hbm_Bps)
    assert b - 2 * t_gemm == pytest.approx(logits * 4 / r.hbm_Bps)
    f0, b0, act0 = _logits_terms(m, replace(s, loss_kernel=""), r, 8192)
    assert act0 == pytest.approx(logits * 6)                       # the native fused loss
    assert f0 > f and b0 > b


def test_which_frameworks_ran_it():
    # Megatron-Bridge's performance scripts (v0.1.0rc3 configs, v0.2.0 helpers.py, v0.3.0+ overrides.py) and NeMo 2's
    # from v2.4.0 = 25.07 (helpers.py set_primary_perf_configs); not NeMo 25.04 (v2.3.0) or older, not Megatron-LM
    assert te_cross_entropy("NeMo 25.09 (Megatron-Bridge 0.1.0rc3, Megatron-Core 0.14.0, Transformer Engine 2.7)")
    assert te_cross_entropy("NeMo 25.07 (NeMo 2.0, Megatron-Core, Transformer Engine)")
    assert te_cross_entropy("NeMo 26.04.01 (Megatron-Bridge 0.4.x)")
    assert not te_cross_entropy("NeMo 25.04 (NeMo 2.0, Megatron-Core)")
    assert not te_cross_entropy("NeMo 24.12 (NeMo 2.0 recipes, Megatron-Core, Transformer Engine)")
    assert not te_cross_entropy("Megatron-LM / Megatron-Core (main 1e057005)")
    assert not te_cross_entropy("NeMo Automodel 25.11")
    assert _loss_kernel({"framework": "NeMo 25.11 (Megatron-Bridge 0.2.0)"}, []) == "te_xent"
    assert _loss_kernel({"framework": "NeMo 25.11 (Megatron-Bridge 0.2.0)", "loss_kernel": "megatron_unfused"},
                        []) == "megatron_unfused"


@pytest.mark.parametrize("path,row", [
    ("benchmarks/corpus/mbridge_perf_2511.yaml", "mbridge_perf_2511_llama3_70b_gb200_64gpu_fsdp_fp8cs"),
    ("benchmarks/corpus/mbridge_perf_2604.yaml", "mbridge_perf_2604_llama3_70b_gb200_64gpu_fsdp_fp8"),
    ("benchmarks/corpus/nemo_perf_2509.yaml", "nemo_perf_2509_llama3_70b_gb200_64gpu_fsdp_fp8"),
])
def test_published_megatron_fsdp_runs_fit_the_card(path, row):
    # Llama 3 70B on 64 GB200, Megatron-FSDP, micro-batch 2 x 8192, 40 layers offloaded: NVIDIA published these step
    # times, so the configuration ran in 186 GB; with 6 B per logit the model put it at 191.7 GiB > 185.03 GiB
    case = next(c for c in load_runs(ROOT / path, Catalog.create([])) if c.id == row)
    assert case.strategy.loss_kernel == "te_xent"
    e = estimate(case.model, case.cluster, case.job, case.strategy)
    assert e.fits and e.peak_memory_gib <= e.capacity_gib


def test_megatron_export_selects_the_te_kernel():
    doc = plan_doc(LLAMA3_70B, "megatron", tp=8, dp=2, m=4, nodes=2, chip={"architecture": "Hopper"},
                   loss_kernel="te_xent")
    args = dict(megatron_args(doc)[0])
    assert "--cross-entropy-loss-fusion" in args and args["--cross-entropy-fusion-impl"] == "te"
    doc["strategy"]["loss_kernel"] = ""
    assert "--cross-entropy-fusion-impl" not in dict(megatron_args(doc)[0])
