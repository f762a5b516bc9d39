"""Full recomputation through PyTorch's non-reentrant checkpoint stops before the layer's last GEMM (cost/recompute.py).

References: the measurement of benchmarks/real/recompute_cost.py (1x H200, torch 2.11: recompute / forward of
checkpointed MPT and Llama 2 layers), the PyTorch/torchtitan source history for which runs had early stop, and the
hand sum of the skipped GEMM over a step.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from baige_plan.cost import collectives as C
from baige_plan.cost.compute import ChipRates, gemm_time_s
from baige_plan.cost.estimate import _gemm_set, _layer_terms, estimate
from baige_plan.cost.recompute import recompute_early_stop
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import _recompute_early_stop
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import StrategySpec

RAW = Path(__file__).resolve().parents[1] / "benchmarks" / "real" / "recompute_cost_h200.raw.json"
SHAPES = {"mpt-7b": (4096, 16384, 32, 32, "gelu"), "mpt-13b": (5120, 20480, 40, 40, "gelu"),
          "mpt-30b": (7168, 28672, 56, 56, "gelu"), "llama2-70b": (8192, 28672, 64, 8, "swiglu")}


def _h200():
    cl, _ = Catalog.create().cluster("h200-sxm-141g:1x1")
    return cl.groups[0]


def _ratio(model: ModelSpec, mb: int, early: str) -> float:
    g = _h200()
    r = ChipRates.of(g.chip, "bf16")
    none = C.group_link(g, 1, 1)
    s = StrategySpec(dp=1, zero=0, micro_batch=mb, recompute="full", execution="eager", runtime="pytorch",
                     recompute_early_stop=early)
    lt = _layer_terms(model, s, r, 2048, mb * 2048, False, False, (none, none, none, none), False)
    return lt["rc"] / lt["lf"]


def test_measured_recompute_is_a_forward_less_its_last_gemm():
    rows = json.loads(RAW.read_text())["rows"]
    assert len(rows) == 8
    meas_all, on_all, off_all = [], [], []
    for row in rows:
        h, f, a, kv, act = SHAPES[row["shape"]]
        m = ModelSpec(row["shape"], 2, h, a, f, 32000, seq_len=2048, activation=act, kv_heads=kv, tie_embeddings=False)
        meas = row["recompute_s"] / row["fwd_s"]
        on, off = _ratio(m, row["micro_batch"], "on"), _ratio(m, row["micro_batch"], "off")
        meas_all.append(meas), on_all.append(on), off_all.append(off)
        assert off > 0.95      # a whole forward again
        if row["micro_batch"] * row["seq"] >= 4096:   # device-bound (the 2048-token Llama 2 70B point is not)
            assert abs(on - meas) < abs(off - meas), row
            assert on == pytest.approx(meas, abs=0.10), row
    # measured median 0.76 of a forward; early stop models 0.70, a whole forward 0.97
    assert statistics.median(meas_all) == pytest.approx(0.76, abs=0.01)
    assert statistics.median(on_all) == pytest.approx(statistics.median(meas_all), abs=0.08)


def test_which_runs_stopped_early_from_their_versions():
    def rule(framework, recompute="full (non-reentrant)", runtime="torchtitan"):
        return _recompute_early_stop({"framework": framework, "recompute": recompute}, runtime, [])
    # torch 1.13 / 2.0: the non-reentrant checkpoint recomputed the whole function (early stop arrived in 2.1)
    assert rule("LLM Foundry v0.0.4 on Composer, image mosaicml/pytorch:1.13.1_cu117") == "off"
    assert rule("LLM Foundry v0.3.0 on Composer, image mosaicml/pytorch:2.1.0_cu121") == "on"
    assert rule("IBM fms-fsdp (PyTorch FSDP1, PyTorch nightly post-2.2)") == "on"
    # torchtitan: torch's default until pytorch/torchtitan@25413d224 (2025-08-29) set early_stop=False
    assert rule("torchtitan 9dec370 (2024-12-26) on torch 1963fc8") == "on"
    assert rule("torchtitan 1a2b3c4 (2025-09-10) on torch 2.9") == "off"
    assert rule("torchtitan 0.2.2 (PyPI wheel) on torch 2.11.0+cu130") == "off"   # its ACConfig.early_stop = False
    # a reentrant checkpoint re-runs the whole forward; selective / no recompute: nothing to decide
    assert rule("LLM Foundry main @ 2024-01", recompute="full (reentrant)") == "off"
    assert rule("LLM Foundry main @ 2024-01", recompute="none") == ""
    assert rule("Megatron-LM", runtime="megatron") == ""
    assert _recompute_early_stop({"recompute_early_stop": False, "framework": "torch 2.4"}, "torchtitan", []) == "off"


def test_runtime_defaults_and_compiled_blocks():
    s = StrategySpec(dp=8, zero=3, recompute="full", execution="eager", runtime="torchtitan")
    assert not recompute_early_stop(s)                    # torchtitan 0.2/0.3: early_stop=False
    assert recompute_early_stop(replace(s, runtime="pytorch"))   # the harness: torch 2.11 default
    assert recompute_early_stop(replace(s, recompute_early_stop="on"))
    assert not recompute_early_stop(replace(s, recompute_early_stop="on", execution="fused"))   # compiled block
    assert not recompute_early_stop(replace(s, runtime="megatron", execution="fused"))


def test_step_saves_the_last_gemm_of_every_recomputed_layer():
    cl, cat = Catalog.create().cluster("h100-sxm5-80g:2x8")
    model = cat.model("llama3-8b") if hasattr(cat, "model") else None
    if model is None:
        model = ModelSpec("llama-8b", 32, 4096, 32, 14336, 128256, seq_len=4096, kv_heads=8, tie_embeddings=False)
    job = JobSpec(global_batch=64, seq_len=model.seq_len, precision="bf16")
    s = StrategySpec(dp=16, zero=3, micro_batch=2, recompute="full", execution="eager", runtime="torchtitan")
    on = estimate(model, cl, job, replace(s, recompute_early_stop="on"))
    off = estimate(model, cl, job, replace(s, recompute_early_stop="off"))
    r = ChipRates.of(cl.groups[0].chip, "bf16")
    lin, _ = _gemm_set(model, s, model.seq_len, False)
    down = sum(gemm_time_s(g, r) for g in lin if g.name == "mlp_down")
    micro_batches = job.global_batch // (s.dp * s.micro_batch)
    expected = model.layers * micro_batches * down
    assert off.breakdown_s["compute"] - on.breakdown_s["compute"] == pytest.approx(expected, rel=1e-6)
    assert on.step_time_s < off.step_time_s


def test_flash_xent_loss_holds_and_moves_two_16bit_copies_of_the_logits():
    # flash_attn.losses.cross_entropy (LLM Foundry MPT's default loss_fn): forward reads the bf16 logits, backward reads
    # them and writes their bf16 gradient; it holds both. Hand-derived for 8192 tokens x 50368 vocab on one device.
    from baige_plan.cost.estimate import _logits_terms
    from baige_plan.cost.flops import logits_gemm
    g = _h200()
    r = ChipRates.of(g.chip, "bf16")
    m = ModelSpec("mpt-1b", 24, 2048, 16, 8192, 50368, seq_len=2048, activation="gelu", tie_embeddings=True)
    s = StrategySpec(dp=8, zero=3, micro_batch=4, execution="eager", runtime="torchtitan", loss_kernel="flash_xent")
    f, b, act = _logits_terms(m, s, r, 8192)
    logits = 8192 * 50368
    t_gemm = gemm_time_s(logits_gemm(m, 8192, 1), r)
    assert act == pytest.approx(logits * 4)                       # 2 B logits + 2 B gradient
    assert f - t_gemm == pytest.approx(logits * 2 / r.hbm_Bps)
    assert b - 2 * t_gemm == pytest.approx(logits * 4 / r.hbm_Bps)
    f0, b0, act0 = _logits_terms(m, replace(s, loss_kernel=""), r, 8192)
    assert act0 > act and f0 > f and b0 > b                        # torchtitan's fp32 eager loss holds and moves more


def test_llm_foundry_rows_take_flash_xent():
    from baige_plan.io.runs import _loss_kernel
    assert _loss_kernel({"framework": "LLM Foundry v0.3.0 on MosaicML Composer"}, []) == "flash_xent"
    assert _loss_kernel({"framework": "torchtitan @ 2024-04 (FSDP2, 1D)"}, []) == ""
    assert _loss_kernel({"framework": "LLM Foundry", "loss_kernel": "flash_xent"}, []) == "flash_xent"
