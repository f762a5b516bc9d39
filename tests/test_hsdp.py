"""Hybrid sharding (HSDP, StrategySpec.fsdp_shard): ZeRO-3 states sharded over groups of S of the dp·cp ranks, the
groups replicated R = dp·cp / S times (torchtitan dp_replicate x dp_shard, FSDP1 HYBRID_SHARD, Megatron-FSDP
--num-distributed-optimizer-instances).

Hand-derived on two nodes of 8 A100s, dp 16, pp 1, one FSDP unit per layer (n_l layers: n_l collectives of each
kind, each the alpha-beta time of its piece; nccl-tests: an all-gather or reduce-scatter of S bytes over n ranks takes
alpha + S (n-1)/n / B, an all-reduce alpha + 2 S (n-1)/n / B):
  full shard (S = 16): per micro-batch 3 x [all-gather of the stage's 16-bit weights W over the 16 ranks]
  HSDP (S = 8):        per micro-batch 3 x [all-gather of W over the node's 8 ranks (NVLink)]
                       + all-reduce of W / 8 (each rank's reduce-scattered shard) over the 2 replicas, one per node (NIC)
States (weights, gradients, optimizer): sharded over 8 ranks instead of 16.
"""

from __future__ import annotations

import math

import pytest

from baige_plan.cost import collectives as C
from baige_plan.cost.estimate import dp_traffic, estimate
from baige_plan.errors import SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.runtimes import knobs
from baige_plan.specs.strategy import StrategySpec

CAT = Catalog.create()
MODEL = ModelSpec("gpt-1b", 16, 2048, 16, 8192, 50304, activation="gelu", dropout=0.0)
CLUSTER, _ = CAT.cluster("a100-sxm4-80g:2x8")
GROUP = CLUSTER.groups[0]
JOB = JobSpec(global_batch=64, seq_len=2048)


def _s(**kw) -> StrategySpec:
    return StrategySpec(**{"dp": 16, "zero": 3, "micro_batch": 2, "recompute": "none", **knobs("torchtitan"), **kw})


def _ag(size: float, n: int, per_node: int, pieces: int) -> float:
    link = C.group_link(GROUP, n, per_node, buckets=pieces)
    return pieces * link.alpha_s + size * (n - 1) / n / (link.busbw_GBps * 1e9)


def _ar(size: float, n: int, per_node: int, pieces: int) -> float:
    link = C.group_link(GROUP, n, per_node, buckets=pieces)
    return pieces * link.alpha_s + 2 * size * (n - 1) / n / (link.busbw_GBps * 1e9)


def test_hsdp_traffic_gathers_inside_the_node_and_all_reduces_the_shard_across_replicas():
    full, hyb = _s(), _s(fsdp_shard=8)
    ef, eh = estimate(MODEL, CLUSTER, JOB, full), estimate(MODEL, CLUSTER, JOB, hyb)
    m = ef.micro_batches
    st = ef.stages[0]
    n_l = st.layers[1] - st.layers[0]
    w = (st.dense_params + st.expert_params) * 2
    tf = dp_traffic(st, GROUP, full, JOB, m)
    th = dp_traffic(eh.stages[0], GROUP, hyb, JOB, m)
    assert math.isclose(tf.zero3_s, m * 3 * _ag(w, 16, 8, n_l), rel_tol=1e-9)
    assert math.isclose(th.zero3_s, m * (3 * _ag(w, 8, 8, n_l) + _ar(w / 8, 2, 1, n_l)), rel_tol=1e-9)


def test_hsdp_states_are_sharded_over_the_shard_group_only():
    # torchtitan's sharded states per parameter (specs/runtimes/torchtitan.py MEMORY): fp32 parameters 4 B, fp32
    # gradients 4 B, AdamW m and v 8 B; over 8 ranks instead of 16 each grows by bytes x (1/8 - 1/16) = bytes / 16 per
    # parameter of the stage (the gathered unit and its gradients, unsharded, are the same in both)
    ef = estimate(MODEL, CLUSTER, JOB, _s())
    eh = estimate(MODEL, CLUSTER, JOB, _s(fsdp_shard=8))
    p = max(ef.stages, key=lambda st: st.memory_gib).dense_params
    for k, b in (("weights", 4), ("grads", 4), ("optimizer", 8)):
        assert math.isclose((eh.memory_gib[k] - ef.memory_gib[k]) * 2 ** 30, p * b / 16, rel_tol=1e-9), k


@pytest.mark.parametrize("kw, field", [
    (dict(fsdp_shard=16), "fsdp_shard"),        # the whole dp group: that is full sharding (0)
    (dict(fsdp_shard=6), "fsdp_shard"),         # does not divide dp·cp
    (dict(fsdp_shard=8, zero=1), "fsdp_shard"),  # ZeRO-1 keeps full parameters: nothing to shard hybridly
])
def test_hsdp_values_are_checked(kw, field):
    with pytest.raises(SpecError) as e:
        _s(**kw)
    assert e.value.field == field


def test_runtimes_without_hybrid_sharding_refuse_it():
    from baige_plan.specs import runtimes
    s = _s(fsdp_shard=8)
    assert runtimes.get("torchtitan").refusal(s, None, JOB) is None
    assert "no hybrid sharding" in runtimes.get("deepspeed").refusal(s.with_(runtime="deepspeed"), None, JOB)
    assert runtimes.get("megatron").refusal(s.with_(runtime="megatron"), None, JOB) is None


def test_a_pipelines_plan_with_hybrid_sharding_is_refused_not_ignored():
    # heterogeneous / multi-shape plans are costed by cost/hetero.py, which has no hybrid sharding
    from baige_plan.errors import InputError
    from baige_plan.io.plans import _pipelines_spec
    with pytest.raises(InputError) as e:
        _pipelines_spec({"fsdp_shard": 2, "micro_batch": 1, "zero": 3, "recompute": "none",
                         "sequence_parallel": False}, [], "plan.yaml")
    assert "strategy.fsdp_shard" in str(e.value)


def test_plan_searches_hybrid_sharding_and_takes_it_where_the_nodes_share_one_slow_nic():
    # 4 nodes of 8 A100 sharing one 25 Gb/s NIC per node (a cloud VM): a full-shard gather of W over 32 ranks moves
    # 3 x 31/32 W per micro-batch through the node's one NIC per 8 ranks; HSDP over the node moves only the all-reduce
    # of the fp32 gradient shards (2 x 2W/8 x 3/4 per rank, 8 ranks sharing the NIC: 0.75 W per node), so with the
    # same tp 1 / pp 1 layout its DP traffic across nodes is ~4x smaller and it is the faster plan
    from baige_plan.search.solver import search
    from baige_plan.search.space import Bounds as SpaceBounds
    from baige_plan.search.space import Pins
    from baige_plan.specs.topology import ClusterSpec, GroupSpec
    g = GroupSpec(name="vm", chip=CAT.chip("a100-sxm4-80g"), nodes=4, devices_per_node=8, scaleout_Gbps=25 / 8,
                  nics_per_node=1)
    cl = ClusterSpec(name="cloud", groups=(g,))
    job = JobSpec(global_batch=64, seq_len=2048)
    r = search(MODEL, cl, job, SpaceBounds(runtime="torchtitan"), Pins(tp=1, pp=1, cp=1, zero=3), top=2)
    shards = [p.strategy.fsdp_shard for p in r.plans]
    assert shards[0] == 8, shards
    full = estimate(MODEL, cl, job, r.plans[0].strategy.with_(fsdp_shard=0))
    assert r.plans[0].step_time_s < full.step_time_s
