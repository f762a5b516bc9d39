"""Context-parallel attention (cost/cp.py) against hand-derived numbers, and its effect on estimates."""

from __future__ import annotations

import pytest

from baige_plan.cost.collectives import Link
from baige_plan.cost.cp import CpAttention, cp_attention
from baige_plan.cost.estimate import estimate
from baige_plan.io.catalog import Catalog
from baige_plan.specs.job import JobSpec
from baige_plan.specs.strategy import StrategySpec

# a link of 10 GB/s with 10 us latency: a 1 MB block takes 10 + 100 = 110 us
LINK = Link(busbw_GBps=10.0, n=4, alpha_s=10e-6, crosses="nic")


def test_p2p_ring_exposes_what_the_step_does_not_hide():
    # cp 4; forward step 50 us < 110 us transfer: 3 transfers each expose 60 us (the contention, 0.146 x 50 us,
    # is less than that)
    # backward carries K/V and dK/dV (2 MB: 210 us) against a 300 us step: hidden, but the send/recv kernels beside
    # the attention stretch it by K x 210 us per step (K = 0.146 measured: benchmarks/real/cp_p2p_contention.py)
    a = cp_attention(4, "p2p", 50e-6, 300e-6, q_elems=1e6, kv_block_bytes=1e6, act_bytes=2, hbm_Bps=1e12, link=LINK)
    assert a.exposed_fwd_s == pytest.approx(3 * 60e-6)
    assert a.exposed_bwd_s == pytest.approx(3 * 0.146 * 210e-6)
    # merging: (4 steps x 10 B + 6 B) per output element at 1 TB/s; accumulation: 4 x 6 B x (q + kv elems)
    assert a.extra_fwd_s == pytest.approx((4 * 10 + 6) * 1e6 / 1e12)
    assert a.extra_bwd_s == pytest.approx(4 * 6 * (1e6 + 0.5e6) / 1e12)


def test_allgather_is_not_overlapped():
    # all-gather of 4 blocks (4 MB) over 4 ranks: 10 us + 4 MB x 3/4 / 10 GB/s = 310 us; reduce-scatter alike
    a = cp_attention(4, "allgather", 1.0, 1.0, q_elems=1e6, kv_block_bytes=1e6, act_bytes=2, hbm_Bps=1e12, link=LINK)
    assert a.exposed_fwd_s == pytest.approx(310e-6)
    assert a.exposed_bwd_s == pytest.approx(310e-6)


def test_no_cp_costs_nothing():
    assert cp_attention(1, "p2p", 1.0, 1.0, 1.0, 1.0, 2, 1e12, LINK) == CpAttention(0.0, 0.0, 0.0, 0.0)


def test_cp_across_nodes_is_costed_and_within_a_node_cheaper():
    cat = Catalog.create()
    model = cat.model("llama3-70b")
    cluster = cat.cluster("h100-sxm5-80g:16x8")[0]
    job = JobSpec(global_batch=256, seq_len=8192)
    # tp 8 fills a node, so cp 4 rings cross nodes over the NIC: exposed communication
    across = estimate(model, cluster, job, StrategySpec(tp=8, pp=4, cp=4, dp=1, recompute="full"))
    assert across.breakdown_s["cp_comm"] > 0
    # the same cp inside a node (tp 2): NVLink hides more of it
    inside = estimate(model, cluster, job, StrategySpec(tp=2, pp=4, cp=4, dp=4, recompute="full"))
    assert inside.breakdown_s["cp_comm"] < across.breakdown_s["cp_comm"]
