"""Exhaustive oracle for small heterogeneous instances: every template the solver considers
(same outer enumeration), every layer split of every shape and every batch split, each costed
with the exact model. Exponential: for tests only (<= 32 devices, a handful of layers)."""

from __future__ import annotations

from itertools import combinations, product

from baige_plan.cost.estimate import Estimate
from baige_plan.search.hetero import _exact, _templates
from baige_plan.search.hetero_templates import Limits, recompute_variants
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.pipeline import PipelineShape, PipelinesSpec, StageSpec
from baige_plan.specs.strategy import StrategySpec
from baige_plan.specs.topology import ClusterSpec


def compositions(n: int, k: int):
    """All ways to write n as an ordered sum of k positive integers."""
    for cuts in combinations(range(1, n), k - 1):
        bounds = (0, *cuts, n)
        yield tuple(b - a for a, b in zip(bounds, bounds[1:], strict=False))


def batch_splits(total: int, replicas: tuple[int, ...]):
    """All (m_j) >= 0 with sum u_j m_j = total (u_j = replicas x micro-batch of shape j)."""
    def rec(i, left):
        if i == len(replicas) - 1:
            if left % replicas[i] == 0:
                yield (left // replicas[i],)
            return
        for m in range(left // replicas[i] + 1):
            for rest in rec(i + 1, left - m * replicas[i]):
                yield (m, *rest)
    yield from rec(0, total)


def oracle(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, base: StrategySpec, memory_frac: float = 0.9,
           per_group_top: int = 2, recompute_pinned: bool = False, sp: bool = True
           ) -> tuple[float, PipelinesSpec | None, Estimate | None]:
    """`sp`: the plan-wide sequence parallelism, on as hetero.solve runs it unless --no-sequence-parallel."""
    variants = recompute_variants(model, cluster, job, base, Limits(attention=base.attention), recompute_pinned)
    best: tuple[float, PipelinesSpec | None, Estimate | None] = (float("inf"), None, None)
    for v in variants:
        temps, _ = _templates(model, cluster, job, v, memory_frac, per_group_top)
        for t in temps:
            stage_groups = []
            for _r, segs, _kn in t.shapes:
                sg = []
                for g, tp, n in segs:
                    sg += [(g, tp)] * n
                stage_groups.append(sg)
            reps = tuple(r for r, _, _ in t.shapes)
            knobs = tuple(kn for _, _, kn in t.shapes)
            units = tuple(r * (kn.micro_batch or v.micro_batch) for r, kn in zip(reps, knobs, strict=True))
            vpps = [kn.vpp or 1 for kn in knobs]
            splits = [[tuple(c * vp for c in comp) for comp in compositions(model.layers // vp, len(sg))]
                      if model.layers % vp == 0 else [] for sg, vp in zip(stage_groups, vpps, strict=True)]
            for ms in batch_splits(job.global_batch, units):
                for layer_choice in product(*splits):
                    shapes = []
                    for r, kn, m, sg, counts in zip(reps, knobs, ms, stage_groups, layer_choice, strict=True):
                        if m == 0:
                            continue
                        start, stages = 0, []
                        for (g, tp), c in zip(sg, counts, strict=True):
                            stages.append(StageSpec(g, (start, start + c), tp))
                            start += c
                        shapes.append(PipelineShape(r, m, tuple(stages), kn))
                    p = PipelinesSpec(tuple(shapes), micro_batch=v.micro_batch, zero=v.zero, recompute=v.recompute,
                                      sequence_parallel=sp, attention=v.attention,
                                      runtime=v.runtime)
                    e = _exact(model, cluster, job, p, memory_frac)
                    if e is not None and e.step_time_s < best[0]:
                        best = (e.step_time_s, p, e)
    return best
