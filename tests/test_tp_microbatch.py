"""TP against micro-batch and DP with pipelining, as the harness runs them (docs/VALIDATION.md, "TP and
micro-batch"; benchmarks/real/runs_h200x4_mb.yaml): the eager per-layer traffic's replicated share, the
16-bit backward TP all-reduce, the host time of the TP autograd Functions, and the pipeline cool-down
window of the DP gradient reduction. Every number below is derived by hand from the constants."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from baige_plan.cost import collectives as C
from baige_plan.cost.compute import ChipRates, gemm_time_s
from baige_plan.cost.estimate import (
    DP_OVERLAP_CONTENTION,
    DpTraffic,
    _gemm_set,
    _layer_terms,
    _logits_terms,
    dp_traffic,
    estimate,
)
from baige_plan.cost.execution import EAGER, EAGER_HOST, eager_host_s
from baige_plan.io.catalog import Catalog
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import StrategySpec

GPT13B = ModelSpec("gpt-1.3b", 24, 2048, 16, 8192, 50304, seq_len=2048, activation="gelu", tie_embeddings=True)


def _group():
    cl, _ = Catalog.create().cluster("h200-sxm-141g:1x4")
    return cl.groups[0]


def _strategy(tp=4, dp=1, pp=1, mb=4, sp=False):
    return StrategySpec(tp=tp, dp=dp, pp=pp, zero=0, micro_batch=mb, recompute="none", sequence_parallel=sp,
                        execution="eager", runtime="pytorch")


def _terms(s, sp=False):
    g = _group()
    r = ChipRates.of(g.chip, "bf16")
    tp_link = C.group_link(g, s.tp, s.tp)
    none = C.group_link(g, 1, 1)
    tokens = s.micro_batch * 2048
    lt = _layer_terms(GPT13B, s, r, 2048, tokens, sp, False, (tp_link, none, none, none), False)
    lin, att = _gemm_set(GPT13B, s, 2048, False)
    gemm_f = sum(gemm_time_s(x, r) for x in lin) + sum(gemm_time_s(x, r) for x in att)
    return lt, r, tp_link, gemm_f


def test_measured_constants_from_the_traces():
    # benchmarks/real/tp_mb_traces.py over raw_h200x4_mb/: T(tp) = R + S/tp at equal tokens per rank
    t2, t4 = 123.48, 102.19                  # ms, gpt-1.3b micro-batch 16, rank 0
    r, s = 2 * t4 - t2, 4 * (t2 - t4)
    assert (r, s) == pytest.approx((80.90, 85.16), abs=0.01)
    assert r / (r + s) == pytest.approx(0.487, abs=0.001)
    assert EAGER.tp_replicated_share == pytest.approx(0.49)
    # host per TP all-reduce call: median of the four host-bound traces (mb 1 and 4, ranks 0 and 3)
    assert statistics.median([136.0, 142.1, 120.0, 136.2]) == pytest.approx(136.1)
    assert EAGER_HOST.tp_collective_s == pytest.approx(136e-6)
    assert statistics.median([10.3, 10.5, 9.4, 12.0]) == pytest.approx(10.4)
    assert EAGER_HOST.tp_passthrough_s == pytest.approx(10.4e-6)


def test_eager_layer_traffic_is_half_replicated_under_tp():
    # forward non-GEMM bytes of one layer = 409 B x tokens x hidden x (0.49 + 0.51 / tp) / 3 (flash: no core)
    nh = 4 * 2048 * 2048                     # 16,777,216 token x hidden elements at micro-batch 4
    assert 409 * nh == 6_861_881_344
    for tp, factor in ((1, 1.0), (2, 0.745), (4, 0.6175)):
        lt, r, _, gemm_f = _terms(_strategy(tp=tp))
        m_f = lt["lf"] - gemm_f
        assert m_f == pytest.approx(6_861_881_344 * factor / 3 / r.hbm_Bps, rel=1e-9)
    # before: all of it replicated (factor 1 at every tp); with sequence parallelism all of it is sharded
    lt, r, _, gemm_f = _terms(_strategy(tp=4, sp=True), sp=True)
    assert lt["lf"] - gemm_f == pytest.approx(6_861_881_344 / 4 / 3 / r.hbm_Bps, rel=1e-9)


def test_tp_backward_all_reduce_moves_16_bit_gradients():
    # 2 all-reduces per pass of 4 x 2048 tokens x 2048 x 2 B = 33,554,432 B each, backward as forward
    lt, _, link, _ = _terms(_strategy(tp=4))
    one = C.all_reduce_s(33_554_432, link)
    assert lt["tp"] == pytest.approx(4 * one, rel=1e-12)
    assert lt["bwd"] - lt["lb"] == pytest.approx(2 * one, rel=1e-12)
    assert EAGER.tp_grad_comm_scale == 1.0


def test_tp_host_is_the_measured_time_per_autograd_function():
    # 24 layers x 290 ops x 6.47 us = 45.031 ms, plus 24 x 4 calls of each kind x (136 + 10.4) us = 14.05 ms
    assert eager_host_s(24, 0, 0, False, 1, 0, 4) == pytest.approx(0.0450312 + 96 * 146.4e-6)
    assert eager_host_s(24, 0, 0, False, 1, 0, 4) == pytest.approx(0.0590856)
    # full recomputation: 24 x (290 + 133) x 6.47 us = 65.684 ms, 144 calls of each kind = 21.08 ms
    assert eager_host_s(24, 0, 0, True, 1, 0, 4) == pytest.approx(0.06568344 + 144 * 146.4e-6)
    # tp 1: no TP calls
    assert eager_host_s(24, 0, 0, False, 1, 0, 1) == pytest.approx(0.0450312)


def test_host_bound_micro_batch_hides_tp_comm_device_bound_does_not():
    """gpt-1.3b TP4 on 4 H200 (runs_h200x4_mb.yaml): at micro-batch 1 the host (76.5 ms modelled, the step measured
    88.6 ms with the slowest rank's host done at 83.7 ms) exceeds
    the device and sets the stage's time; at micro-batch 16 the device (GEMMs + eager traffic + TP
    all-reduces, measured 0.268 s) does."""
    cl, _ = Catalog.create().cluster("h200-sxm-141g:1x4")
    host = eager_host_s(24, 0, 0, False, 1, 0, 4, ranks_per_host=4)   # four ranks share the host
    e1 = estimate(GPT13B, cl, JobSpec(1, 2048, "bf16"), _strategy(mb=1))
    st = e1.stages[0]
    r = ChipRates.of(cl.groups[0].chip, "bf16")
    lg_f, lg_b, _ = _logits_terms(GPT13B, _strategy(mb=1), r, 2048)
    # host-bound: the layers take the host's time (the output layer and loss follow on the device)
    assert st.compute_s - lg_f - lg_b + st.tp_s < host
    assert st.time_s == pytest.approx(host + lg_f + lg_b)
    e16 = estimate(GPT13B, cl, JobSpec(16, 2048, "bf16"), _strategy(mb=16))
    st = e16.stages[0]
    assert st.compute_s + st.tp_s + st.pp_s > host       # device-bound: no host padding
    assert st.time_s == pytest.approx(st.compute_s + st.tp_s)


def test_last_reduction_hides_under_the_pipeline_cool_down():
    # 10 ms reduction, 5 ms window, last bucket 1/10: 5 ms exposed past the stage's own backward (the contention
    # with the compute it overlaps left out here: overlap_contention 0; below with it)
    t = DpTraffic(grads_s=0.010, grad_window_s=0.005, last_bucket=0.1, overlap_contention=0.0)
    assert t.exposed_s == pytest.approx(0.005)
    # a later stage ends 3 ms before stage 0: 2 ms exposed; 10 ms earlier: none
    assert replace(t, tail_s=0.003).exposed_s == pytest.approx(0.002)
    assert replace(t, tail_s=0.010).exposed_s == 0.0
    # once per micro-batch (m = 4): only the last reduction reaches the tail
    t4 = DpTraffic(grads_s=0.010, reductions=4, grad_window_s=0.005, last_bucket=0.1, tail_s=0.003,
                   overlap_contention=0.0)
    assert t4.exposed_s == pytest.approx(3 * 0.005 + 0.002)
    # the contention stretches the stage's own last backward, which the cool-down does not hide: with the tail
    # covering the rest, K x the 5 ms of overlap remain (K = DP_OVERLAP_CONTENTION, measured)
    assert replace(t, tail_s=0.010, overlap_contention=DP_OVERLAP_CONTENTION).exposed_s == \
        pytest.approx(DP_OVERLAP_CONTENTION * 0.005)


def test_estimate_gives_each_stage_its_cool_down():
    """gpt-1.3b PP2 x DP2, 4 micro-batches of 4 on 4 H200: stage 1 ends stage 0's last backward before
    stage 0 (measured: 55 ms; runs_h200x4_mb.yaml traces), so its reduction gets that as tail."""
    cl, _ = Catalog.create().cluster("h200-sxm-141g:1x4")
    s = _strategy(tp=1, dp=2, pp=2, mb=4)
    job = JobSpec(32, 2048, "bf16")
    e = estimate(GPT13B, cl, job, s)
    st0, st1 = e.stages
    g = cl.groups[0]
    x0 = dp_traffic(st0, g, s, job, e.micro_batches).exposed_s
    x1 = dp_traffic(st1, g, s, job, e.micro_batches, tail_s=st0.bwd_s).exposed_s
    assert e.breakdown_s["dp_comm_exposed"] == pytest.approx(max(x0, x1))
    assert x1 <= dp_traffic(st1, g, s, job, e.micro_batches).exposed_s


def test_plans_and_rows_agree_and_custom_shapes_cite_their_sizes():
    import sys
    from pathlib import Path

    import yaml
    real = Path(__file__).resolve().parents[1] / "benchmarks" / "real"
    sys.path.insert(0, str(real))
    import config as HC  # benchmarks/real/config.py (no torch)
    import harness as H  # imports torch only in main

    cfgs = [HC.from_mapping(e) for f in ("h100x4_mb.yaml", "h100x4_mb_pp.yaml")
            for e in yaml.safe_load((real / "plans" / f).read_text())]
    rows = yaml.safe_load((real / "runs_h200x4_mb.yaml").read_text())["rows"]
    assert sorted(c.make_id("h200") for c in cfgs) == sorted(r["id"] for r in rows)
    big = [c for c in cfgs if c.model.name == "gpt-2.7b"]
    assert len(big) == 5 and big[0].model.params() == 2_651_673_600
    cmd = H.cli_command(big[0])
    assert "--preset" not in cmd and "--layers 32 --hidden 2560 --heads 32 --ffn-hidden 10240" in cmd


def test_host_contention_of_ranks_sharing_a_host():
    from baige_plan.cost.execution import EAGER_HOST, host_contention
    # measured: the slowest of 4 ranks at 7.33 us per op, one process alone at 5.29 us (EagerHost docstring)
    assert host_contention(1) == 1.0
    assert host_contention(4) == pytest.approx(7.33 / 5.29)
    assert host_contention(8) == host_contention(4)                 # not measured beyond 4: held
    assert host_contention(2) == pytest.approx(1 + (7.33 / 5.29 - 1) / 3)
    # it scales the counted ops only: the FSDP2 hooks and TP calls were measured on 4-rank hosts already
    ops_only = eager_host_s(24, 0, 0, False, 4, 0, 1, ranks_per_host=4)
    assert ops_only == pytest.approx(24 * (EAGER_HOST.ops_per_layer + EAGER_HOST.ddp_ops_per_layer)
                                     * EAGER_HOST.dense_us_per_op * 1e-6 * 7.33 / 5.29)
