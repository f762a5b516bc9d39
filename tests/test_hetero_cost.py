"""Heterogeneous pipelines cost model: reduces to the homogeneous one, and its pieces follow the
formulas (unequal stages sum t + (m-1) max t; bridge traffic; validation)."""

import math

import pytest

from baige_plan.cost.estimate import estimate
from baige_plan.cost.hetero import estimate_pipelines
from baige_plan.errors import SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.specs.job import JobSpec
from baige_plan.specs.pipeline import PipelineShape, PipelinesSpec, StageSpec
from baige_plan.specs.strategy import StrategySpec

CAT = Catalog.create()


def test_one_shape_equals_homogeneous_estimate():
    m = CAT.model("llama3-70b")
    cl, _ = CAT.cluster("a100-sxm4-80g:8x8")
    job = JobSpec(512, 4096, "bf16")
    e = estimate(m, cl, job, StrategySpec(tp=8, pp=4, dp=2))
    g = cl.groups[0].name
    p = PipelinesSpec((PipelineShape(2, 256, tuple(StageSpec(g, (20 * i, 20 * i + 20), 8) for i in range(4))),))
    h = estimate_pipelines(m, cl, job, p)
    assert math.isclose(h.step_time_s, e.step_time_s, rel_tol=1e-12)
    assert math.isclose(h.peak_memory_gib, e.peak_memory_gib, rel_tol=1e-12)


def test_unequal_stages_and_bridge():
    m = CAT.model("llama3-70b")
    cl, _ = CAT.cluster("mixed-a100-910b-128")
    job = JobSpec(256, 4096, "bf16")
    stages = (StageSpec("gpu", (0, 30), 8), StageSpec("npu", (30, 80), 8))
    p = PipelinesSpec((PipelineShape(8, 32, stages),))
    h = estimate_pipelines(m, cl, job, p)
    (reps, mbs, costs, pipe), = h.shapes
    t = [c.time_s for c in costs]
    assert math.isclose(pipe, sum(t) + (mbs - 1) * max(t), rel_tol=1e-12)
    # PP activations cross the cpu-forwarding bridge: b*s*h*2 bytes / tp per device, at 25 GB/s per node / 8
    kinds = {k for _, _, k, _ in h.bridge_traffic}
    assert "pp-activations" in kinds
    msg = 1 * 4096 * 8192 * 2 / 8
    per_dir = 30e-6 + 8e-6 + msg / (25e9 / 8)
    assert math.isclose(costs[0].pp_s, per_dir, rel_tol=1e-6)


def test_invalid_pipelines_are_rejected():
    m = CAT.model("llama3-70b")
    cl, _ = CAT.cluster("mixed-a100-910b-128")
    job = JobSpec(256, 4096, "bf16")
    gap = PipelinesSpec((PipelineShape(8, 32, (StageSpec("gpu", (0, 30), 8), StageSpec("npu", (31, 80), 8))),))
    with pytest.raises(SpecError, match="layers"):
        estimate_pipelines(m, cl, job, gap)
    batch = PipelinesSpec((PipelineShape(8, 31, (StageSpec("gpu", (0, 80), 8),)),))
    with pytest.raises(SpecError, match="global_batch"):
        estimate_pipelines(m, cl, job, batch)
    over = PipelinesSpec((PipelineShape(16, 16, (StageSpec("gpu", (0, 80), 8),)),))
    with pytest.raises(SpecError, match="devices"):
        estimate_pipelines(m, cl, job, over)


def test_hfu_equals_mfu_without_recompute_any_cp():
    """With flash attention (causal half executed) and no recomputation, executed FLOPs equal
    Megatron's model FLOPs, so HFU == MFU whatever the sharding (guards the device counting)."""
    from baige_plan.specs.pipeline import ShapeKnobs
    m = CAT.model("llama3-8b")
    cl, _ = CAT.cluster("mixed-a100-910b-128")
    job = JobSpec(64, 8192, "bf16")
    p = PipelinesSpec((
        PipelineShape(4, 8, (StageSpec("gpu", (0, 16), 4), StageSpec("gpu", (16, 32), 4)), ShapeKnobs(cp=2)),
        PipelineShape(8, 4, (StageSpec("npu", (0, 32), 8),)),
    ), recompute="none")
    e = estimate_pipelines(m, cl, job, p)
    assert math.isclose(e.hfu, e.mfu, rel_tol=1e-9)
    h = estimate(m, CAT.cluster("a100-sxm4-80g:8x8")[0], job, StrategySpec(tp=4, cp=2, dp=8, recompute="none"))
    assert math.isclose(h.hfu, h.mfu, rel_tol=1e-9)
