"""ZeRO stages and data-parallel sync costed as each runtime executes them (issue: runtimes).

Hand-derived: one node of 8 A100s, data parallel 8 (pp 1) or 4x2 (pp 2), so every DP collective runs on
the node's scale-up link with busbw B and latency alpha; a reduce-scatter or all-gather of S bytes
takes alpha + S (n-1)/n / B (nccl-tests). Per stage, with P its parameters, n_l its layers, m the
micro-batches per step, f/b its forward/backward time per micro-batch:
  Megatron ZeRO-1 (distributed optimizer, overlap_grad_reduce + overlap_param_gather):
      exposed = max(RS/n_l, RS - b(1 - 1/n_l)) + max(0, AG - f),  RS of 4P bytes, AG of 2P bytes
  Megatron ZeRO-0 (DDP grad buffer): max(AR/n_l, AR - b(1 - 1/n_l)), AR of 4P bytes
  DeepSpeed ZeRO-2 (pp 1): every micro-batch's backward reduces: m max(RS/n_l, RS - b(1-1/n_l)) + AG
      (the parameter all-gather runs after the optimizer step, exposed)
  DeepSpeed ZeRO-1 with pp > 1 (PipelineEngine: reduce after the flush): RS + AG, all exposed
  torchtitan ZeRO-3 with pp > 1 (pipelining disables sync but for the last micro-batch): one AG of 2P
      under the forward, one RS of 2P in the last backward
An overlapped collective slows the compute beside it by K x their overlap (cost/estimate.py DP_OVERLAP_CONTENTION):
each overlapped term is max(the above, K min(collective, window)), K the median of the contention measured beside
512 MiB all-gathers, reduce-scatters and all-reduces (benchmarks/real/collective_contention_h200x{2,4}.raw.json).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import median

import pytest
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.cost import collectives as C
from baige_plan.cost.estimate import DP_OVERLAP_CONTENTION, dp_traffic, estimate
from baige_plan.io.catalog import Catalog
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.runtimes import knobs
from baige_plan.specs.strategy import StrategySpec

CAT = Catalog.create()
MODEL = ModelSpec("gpt-1b", 16, 2048, 16, 8192, 50304, activation="gelu", dropout=0.0)
CLUSTER, _ = CAT.cluster("a100-sxm4-80g:1x8")
GROUP = CLUSTER.groups[0]
JOB = JobSpec(global_batch=64, seq_len=2048)


def _link(n: int) -> C.Link:
    return C.group_link(GROUP, n, n)


def _coll(size: float, n: int) -> float:
    link = _link(n)
    return link.alpha_s + size * (n - 1) / n / (link.busbw_GBps * 1e9)


def _est(runtime: str, **kw):
    s = StrategySpec(**kw, **knobs(runtime))
    return s, estimate(MODEL, CLUSTER, JOB, s)


ROOT = Path(__file__).resolve().parents[1]
MEASURED_K = median(r["k"] for n in (2, 4)
                    for r in json.loads((ROOT / f"benchmarks/real/collective_contention_h200x{n}.raw.json").read_text())
                    if r["mib"] == 512 and r["collective"] in ("all_gather", "reduce_scatter", "all_reduce"))
K = DP_OVERLAP_CONTENTION


def _over(x: float, window: float, n_l: int, reductions: int = 1) -> float:
    """One overlapped reduction's exposed time (the last bucket or what exceeds its window), or its contention."""
    return max(max(x / n_l, x - window), K * reductions * min(x, window))


def _param(ag: float, window: float) -> float:
    return max(ag - window, K * min(ag, window))


def test_committed_contention_is_the_measured_median():
    assert K == pytest.approx(MEASURED_K, abs=5e-4)


def test_megatron_zero1_once_per_step_overlapped():
    s, e = _est("megatron", dp=8, zero=1, micro_batch=2)
    st = e.stages[0]
    n_l, P = 16, st.dense_params
    rs, ag = _coll(4 * P, 8), _coll(2 * P, 8)
    want = _over(rs, st.bwd_s * (1 - 1 / n_l), n_l) + _param(ag, st.fwd_s)
    assert math.isclose(e.breakdown_s["dp_comm_exposed"], want, rel_tol=1e-9)
    assert math.isclose(dp_traffic(st, GROUP, s, JOB, e.micro_batches).total_s, rs + ag, rel_tol=1e-9)


def test_megatron_zero0_all_reduce():
    s, e = _est("megatron", dp=8, zero=0, micro_batch=2)
    st = e.stages[0]
    link = _link(8)
    ar = link.alpha_s + 4 * st.dense_params * 2 * 7 / 8 / (link.busbw_GBps * 1e9)
    assert math.isclose(e.breakdown_s["dp_comm_exposed"], _over(ar, st.bwd_s * (1 - 1 / 16), 16), rel_tol=1e-9)


def test_deepspeed_zero2_reduces_every_micro_batch():
    s, e = _est("deepspeed", dp=8, zero=2, micro_batch=2)
    st, m = e.stages[0], e.micro_batches
    assert m == 4
    rs, ag = _coll(4 * st.dense_params, 8), _coll(2 * st.dense_params, 8)
    w = st.bwd_s * (1 - 1 / 16)
    want = max(m * max(rs / 16, rs - w), K * m * min(rs, w)) + ag
    assert math.isclose(e.breakdown_s["dp_comm_exposed"], want, rel_tol=1e-9)
    t = dp_traffic(st, GROUP, s, JOB, m)
    assert t.reductions == m and math.isclose(t.total_s, m * rs + ag, rel_tol=1e-9)


def test_deepspeed_pipeline_reduces_after_the_flush():
    s, e = _est("deepspeed", dp=4, pp=2, zero=1, micro_batch=2)
    # the step takes the stage with the most exposed traffic: both stages' RS + AG, fully exposed
    want = max(_coll(4 * st.dense_params, 4) + _coll(2 * st.dense_params, 4) for st in e.stages)
    assert math.isclose(e.breakdown_s["dp_comm_exposed"], want, rel_tol=1e-9)


def test_torchtitan_fsdp_with_pipelining_gathers_once_per_step():
    s, e = _est("torchtitan", dp=4, pp=2, zero=3, micro_batch=1)
    assert e.micro_batches == 16
    got = []
    for st in e.stages:
        P = st.dense_params
        rs, ag = _coll(2 * P, 4), _coll(2 * P, 4)
        got.append(_over(rs, st.bwd_s * (1 - 1 / 8), 8) + _param(ag, st.fwd_s))
        # unsharded 16-bit parameters and gradients stay resident through the step
        assert st.weights_gib * 2 ** 30 >= 2 * P and st.grads_gib * 2 ** 30 >= 2 * P
    assert math.isclose(e.breakdown_s["dp_comm_exposed"], max(got), rel_tol=1e-9)


def test_torchtitan_fsdp_without_pipelining_gathers_every_micro_batch():
    s, e = _est("torchtitan", dp=8, zero=3, micro_batch=2)
    t = dp_traffic(e.stages[0], GROUP, s, JOB, e.micro_batches)
    assert t.zero3_s > 0 and t.reductions == 0
    one = dp_traffic(e.stages[0], GROUP, s, JOB, 1)
    assert math.isclose(t.zero3_s, e.micro_batches * one.zero3_s, rel_tol=1e-9)


@pytest.mark.parametrize("args", [
    ["gpt3-175b", "a100-sxm4-80g:64x8", "--global-batch", "1536", "--seq-len", "2048", "--tp", "2", "--pp", "8",
     "--vpp", "12"],
    ["llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--seq-len", "4096", "--micro-batch", "2"],
    ["llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "128", "--seq-len", "4096", "--tp", "2"],
])
def test_evaluate_zero2_slower_than_zero1_with_accumulation(args):
    runner = CliRunner()
    out = {}
    for z in ("1", "2"):
        r = runner.invoke(app, ["evaluate", *args, "--zero", z, "--format", "json"])
        assert r.exit_code in (0, 1), r.output
        out[z] = json.loads(r.stdout)
    assert out["1"]["strategy"]["micro_batch"] * out["1"]["strategy"]["dp"] < out["1"]["strategy"]["global_batch"]
    assert out["2"]["step_time_s"] > out["1"]["step_time_s"]
    assert out["2"]["breakdown_s"]["dp_comm_exposed"] > out["1"]["breakdown_s"]["dp_comm_exposed"]
