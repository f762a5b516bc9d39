"""Issue 18 item 5 (search speed): the heterogeneous search's memos change no number. The affine stage
coefficients read through the search's cache (`_affine`, keyed first by its inputs, then by strategy and links)
equal fresh ones on every stage of every template of random mixed clusters; and loading the search does not
load CP-SAT (only templates of several shapes need it)."""

import random
import subprocess
import sys

import pytest

from baige_plan.io.catalog import Catalog
from baige_plan.search import hetero as H
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import StrategySpec

CAT = Catalog.create()
CHIPS = ["a100-sxm4-80g", "v100-sxm2-32g", "h100-sxm5-80g", "ascend-910b", "a100-sxm4-40g"]


def instances(n=6, seed=7):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        L = rng.choice([6, 8, 12])
        h = rng.choice([1024, 2048])
        model = ModelSpec("t", L, h, 16, 4 * h, 32000, seq_len=2048)
        parts = [f"{rng.choice(CHIPS)}:{rng.choice([1, 2, 4])}x{rng.choice([4, 8])}" for _ in range(2)]
        cl, _ = CAT.cluster("+".join(parts))
        out.append((model, cl, JobSpec(rng.choice([16, 32, 64]), 2048, "bf16")))
    return out


def _base(recompute="selective"):
    return StrategySpec(sequence_parallel=True, recompute=recompute, runtime="flagscale")


def _stages(t):
    from baige_plan.specs.pipeline import PipelineShape, PipelinesSpec, StageSpec

    shapes = []
    for r, segs, kn in t.shapes:
        st = []
        for g, tp, n in segs:
            st += [StageSpec(g, (0, 1), tp)] * n
        shapes.append((r, st, kn))
    b = _base()
    p = PipelinesSpec(tuple(PipelineShape(r, 1, tuple(st), kn) for r, st, kn in shapes), micro_batch=b.micro_batch,
                      zero=b.zero, recompute=b.recompute, sequence_parallel=True, attention=b.attention,
                      runtime=b.runtime)
    return p, shapes


@pytest.mark.parametrize("k", range(6))
def test_cached_affine_equals_fresh(k):
    model, cl, job = instances()[k]
    temps, _ = H._templates(model, cl, job, _base(), 0.9, 2, None)
    cache: dict = {}
    checked = 0
    for t in temps[:60]:
        p, shapes = _stages(t)
        for j, (_r, st, _kn) in enumerate(shapes):
            for m in (1, 4):
                for i in range(len(st)):
                    try:
                        fresh = H._affine(model, cl, job, p, st, j, i, m)
                    except Exception as e:      # noqa: BLE001 - the cached path must fail the same way
                        with pytest.raises(type(e)):
                            H._affine(model, cl, job, p, st, j, i, m, cache)
                        continue
                    assert H._affine(model, cl, job, p, st, j, i, m, cache) == fresh
                    assert H._affine(model, cl, job, p, st, j, i, m, cache) == fresh    # now a hit
                    checked += 1
    assert checked > 0


def test_search_module_loads_without_cp_sat():
    code = "import sys, baige_plan.search.hetero; print('ortools' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_shared_cache_does_not_mix_plan_wide_knobs():
    """One search shares its stage cache across plans that differ only in plan-wide knobs (PipelinesSpec
    recompute, micro_batch, ...); a 'full' plan must cost what it costs with a fresh cache, not the 'selective'
    plan's stage times (it was 1.402 s shared vs 1.715 s fresh before the cache key held those knobs)."""
    from dataclasses import replace

    from baige_plan.cost.hetero import estimate_pipelines
    from baige_plan.io.catalog import Catalog
    from baige_plan.specs.job import JobSpec
    from baige_plan.specs.pipeline import PipelineShape, PipelinesSpec, StageSpec

    cat = Catalog.create()
    cl, _ = cat.cluster("topologies/cloud-a100-v100-512.yaml")
    m, job = cat.model("opt-350m"), JobSpec(1024, 2048, "fp32")
    st = (StageSpec("v100", (0, 5), 4), StageSpec("v100", (5, 10), 4), StageSpec("v100", (10, 14), 4),
          StageSpec("a100", (14, 24), 4))
    p = PipelinesSpec((PipelineShape(32, 32, st),), recompute="selective", sequence_parallel=False, runtime="flagscale")
    q = replace(p, recompute="full")
    cache: dict = {}
    sel = estimate_pipelines(m, cl, job, p, 0.9, cache).step_time_s
    full_shared = estimate_pipelines(m, cl, job, q, 0.9, cache).step_time_s
    full_fresh = estimate_pipelines(m, cl, job, q, 0.9).step_time_s
    assert full_shared == full_fresh
    assert full_fresh > sel      # full recompute re-runs the whole forward


def test_estimate_summary_states_the_shape_knobs():
    """The plan's strategy summary (and every runner-up's in the plan file) states the knobs the pipeline runs:
    a shape's own micro-batch and cp over the plan-wide defaults (it used to print micro_batch 1, cp 1)."""
    from baige_plan.cost.hetero import estimate_pipelines
    from baige_plan.io.catalog import Catalog
    from baige_plan.specs.job import JobSpec
    from baige_plan.specs.pipeline import PipelineShape, PipelinesSpec, ShapeKnobs, StageSpec

    cat = Catalog.create()
    cl, _ = cat.cluster("topologies/cloud-a100-v100-512.yaml")
    m, job = cat.model("opt-350m"), JobSpec(1024, 2048, "fp32")
    st = (StageSpec("v100", (0, 12), 4), StageSpec("a100", (12, 24), 4))
    p = PipelinesSpec((PipelineShape(32, 16, st, ShapeKnobs(micro_batch=2)),), micro_batch=1, recompute="full",
                      sequence_parallel=False, runtime="flagscale")
    s = estimate_pipelines(m, cl, job, p, 0.9).strategy
    assert (s.micro_batch, s.cp, s.pp, s.dp, s.tp, s.recompute) == (2, 1, 2, 32, 4, "full")
