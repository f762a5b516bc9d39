"""DeepSpeed's balanced pipeline partition (StrategySpec.balanced_partition): uneven layer counts go one extra
to each of the first layers % pp stages, as PipelineModule's partition_method 'type:transformer' does."""

from __future__ import annotations

import pytest

from baige_plan.errors import SpecError
from baige_plan.specs import runtimes
from baige_plan.specs.strategy import StrategySpec, stage_layers


def test_bloom_split():
    # BLOOM-176B: 70 layers on 12 stages ran as [6] x 10 + [5] x 2 (specs/runtimes/deepspeed.py docstring)
    s = StrategySpec(tp=4, pp=12, dp=8, balanced_partition=True)
    assert stage_layers(s, 70) == (6,) * 10 + (5,) * 2


def test_even_counts_and_megatron_unchanged():
    assert stage_layers(StrategySpec(pp=4, balanced_partition=True), 32) == (8, 8, 8, 8)
    with pytest.raises(SpecError):
        stage_layers(StrategySpec(pp=12), 70)       # Megatron needs first/last counts or split accounting


def test_the_runtime_declares_it():
    assert runtimes.knobs("deepspeed")["balanced_partition"] is True
    assert runtimes.knobs("megatron")["balanced_partition"] is False


def test_fsdp_shard_grad_op_traffic_is_two_collectives_per_micro_batch():
    # torchtitan zero 2 = FSDP SHARD_GRAD_OP: forward gather + gradient reduce-scatter per micro-batch (zero 3: three)
    from baige_plan.cost.estimate import dp_traffic, estimate
    from baige_plan.io.catalog import Catalog
    from baige_plan.specs.job import JobSpec
    cat = Catalog.create()
    model, cluster = cat.model("llama2-7b"), cat.cluster("h100-sxm5-80g:4x8")[0]
    job = JobSpec(global_batch=256, seq_len=4096)
    z3 = StrategySpec(dp=32, zero=3, micro_batch=2, recompute="none", runtime="torchtitan", execution="eager")
    z2 = StrategySpec(dp=32, zero=2, micro_batch=2, recompute="none", runtime="torchtitan", execution="eager")
    e3, e2 = estimate(model, cluster, job, z3), estimate(model, cluster, job, z2)
    t3 = dp_traffic(e3.stages[0], cluster.groups[0], z3, job, e3.micro_batches)
    t2 = dp_traffic(e2.stages[0], cluster.groups[0], z2, job, e2.micro_batches)
    assert t2.zero3_s == pytest.approx(t3.zero3_s * 2 / 3)
    # memory: the whole model's 16-bit parameters stay gathered through the forward (2 B x 6.74e9 ~ 12.6 GiB more)
    assert e2.peak_memory_gib - e3.peak_memory_gib > 10
