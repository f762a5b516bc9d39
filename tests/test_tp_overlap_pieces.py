"""TP comm overlap runs its GEMMs in pieces (cost/estimate.py ub_split_extra_s): which GEMMs, how many pieces, and
the size of the penalty against the one-GPU measurement (benchmarks/real/tp_overlap_sm_h200.raw.json)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from baige_plan.cost.compute import ChipRates, gemm_time_s
from baige_plan.cost.estimate import estimate, ub_split_extra_s
from baige_plan.cost.flops import Gemm
from baige_plan.io.catalog import Catalog
from baige_plan.specs.job import JobSpec
from baige_plan.specs.strategy import StrategySpec

ROOT = Path(__file__).resolve().parents[1]
CAT = Catalog.create()
H100 = ChipRates.of(CAT.chip("h100-sxm5-80g", "t", "chip"), "bf16")


def t(g: Gemm, bwd: bool = False) -> float:
    return gemm_time_s(g, H100, 1.0, bwd)


# Llama 3 70B, tp 8, 8192 tokens: each rank's GEMMs (M tokens x N out, over K in), and one the overlap leaves alone
LIN = [Gemm("qkv", 8192, 1280, 8192), Gemm("attn_proj", 8192, 8192, 1024), Gemm("mlp_up", 8192, 7168, 8192),
       Gemm("mlp_down", 8192, 8192, 3584), Gemm("router", 8192, 64, 8192)]


def pieces(m: float, n: float, k: float, c: int, bwd: bool = False) -> float:
    """c GEMMs of m/c rows, minus the whole one, by hand."""
    return c * t(Gemm("p", m / c, n, k), bwd) - t(Gemm("p", m, n, k), bwd)


def test_the_overlapped_gemms_run_in_the_pieces_te_issues():
    # forward: qkv and fc1 in tp = 8 pieces (ring exchange), proj and fc2 in 4 (pipeline); backward: the proj and fc2
    # dgrad (M x in-features over out-features) in 8 (ring exchange); the router is not overlapped
    f, b = ub_split_extra_s(LIN, 8, lambda g, passes=1.0, bwd=False: gemm_time_s(g, H100, passes, bwd))
    want_f = pieces(8192, 1280, 8192, 8) + pieces(8192, 7168, 8192, 8) + pieces(8192, 8192, 1024, 4) \
        + pieces(8192, 8192, 3584, 4)
    want_b = pieces(8192, 1024, 8192, 8, True) + pieces(8192, 3584, 8192, 8, True)
    assert f == pytest.approx(want_f, rel=1e-9) and b == pytest.approx(want_b, rel=1e-9)
    assert f > 0 and b > 0
    # fp8 / fp4 presets ring-exchange the proj / fc2 forward too: tp pieces
    fq, _ = ub_split_extra_s(LIN, 8, lambda g, passes=1.0, bwd=False: gemm_time_s(g, H100, passes, bwd), True)
    assert fq == pytest.approx(want_f - pieces(8192, 8192, 1024, 4) - pieces(8192, 8192, 3584, 4)
                               + pieces(8192, 8192, 1024, 8) + pieces(8192, 8192, 3584, 8), rel=1e-9)


def test_piece_penalty_has_the_measured_size():
    """The catalog curve's cost of 4 and 8 pieces, summed over the eight measured shapes, against what the pieces
    took on 1x H200 (independent measurement; the curve has no term fitted to it)."""
    rows = json.loads((ROOT / "benchmarks" / "real" / "tp_overlap_sm_h200.raw.json").read_text())
    h200 = ChipRates.of(CAT.chip("h200-sxm-141g", "t", "chip"), "bf16")
    for c in (4, 8):
        model = sum(gemm_time_s(Gemm("p", r["m"] / c, r["n"], r["k"], c), h200)
                    / gemm_time_s(Gemm("p", r["m"], r["n"], r["k"]), h200) - 1 for r in rows)
        meas = sum(r[f"chunks_{c}_s"] / r["alone_s"] - 1 for r in rows)
        # measured: +14 % (4 pieces) and +19 % (8) on average; the curve gives +8 % and +15 %: the same order,
        # on the low side
        assert 0.4 * meas <= model <= 1.2 * meas, (c, model, meas)


def test_a_plan_with_tp_overlap_pays_for_its_pieces():
    model = CAT.model("llama3-70b")
    cluster, _ = CAT.cluster("h100-sxm5-80g:8x8")
    job = JobSpec(global_batch=64, seq_len=8192, precision="bf16")
    s = StrategySpec(tp=8, pp=1, dp=8, micro_batch=1, sequence_parallel=True, recompute="full", runtime="megatron")
    on = estimate(model, cluster, job, replace(s, tp_comm_overlap=True))
    off = estimate(model, cluster, job, s)
    assert on.breakdown_s["compute"] > off.breakdown_s["compute"]
    assert on.breakdown_s["tp_comm"] < off.breakdown_s["tp_comm"]
