"""The candidate layouts of a re-plan (search/replan.py): the old layout kept, rebalanced, the old tp/cp
with a new pipeline, and fresh plans, each checked by the exact cost model."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from baige_plan.cost.estimate import Estimate, estimate
from baige_plan.errors import SpecError
from baige_plan.search.placement import Slot, placement
from baige_plan.search.replan_holdings import (
    ShapeLayout,
    layout_of_pipelines,
    layout_of_strategy,
)
from baige_plan.search.replan_world import (
    World,
    sub_cluster,
)
from baige_plan.specs import runtimes
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.pipeline import PipelineShape, PipelinesSpec
from baige_plan.specs.strategy import StrategySpec, stage_layers
from baige_plan.specs.topology import (
    ClusterSpec,
)

SIZE_SLACK = 0.05        # a smaller node count is searched while it could be this much faster per device
FRESH_TOP = 6            # plans kept per node count of the homogeneous search
MICRO_BATCHES = (1, 2, 4, 8, 16)   # micro-batch sizes the keep family tries besides the old one
RECOMPUTE = ("selective", "full", "none")
# what each family's plan label says (the JSON `family` keeps the short name)
LABELS = {"keep": "old layout kept", "rebalance": "old stages, layers rebalanced",
          "same tp": "old tp/cp kept, new pipeline", "fresh": "new layout"}


# -- candidates -------------------------------------------------------------------------------------------
@dataclass
class Move:
    nodes: list[str]          # physical nodes (old names)
    role: str                 # what they run in the new plan
    params_bytes: float
    optimizer_bytes: float


@dataclass
class Candidate:
    label: str
    family: str                              # keep | rebalance | same tp | fresh
    cluster: ClusterSpec                     # the new plan's cluster (node indices 0..n-1 per group)
    estimate: Estimate
    strategy: StrategySpec | None = None     # homogeneous plans
    pipelines: PipelinesSpec | None = None   # plans written as pipeline shapes
    result: object = None                    # the search's result (SearchResult / HeteroResult)
    # filled by `settle`
    node_map: dict[str, list[str]] = field(default_factory=dict)
    spare: list[str] = field(default_factory=list)
    params_bytes: float = 0.0
    optimizer_bytes: float = 0.0
    ranks: int = 0
    ranks_kept: int = 0
    moves: list[Move] = field(default_factory=list)
    slots: list[Slot] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.estimate.tokens_per_s

    @property
    def bytes_moved(self) -> float:
        return self.params_bytes + self.optimizer_bytes

    @property
    def devices(self) -> int:
        return self.estimate.devices

    def layout(self, model: ModelSpec) -> tuple[ShapeLayout, ...]:
        if self.strategy is not None:
            return layout_of_strategy(model, self.strategy, self.cluster.groups[0].name)
        assert self.pipelines is not None
        return layout_of_pipelines(self.pipelines)

    def placement(self) -> list[Slot]:
        if self.strategy is not None:
            s, g = self.strategy, self.cluster.groups[0]
            return placement(s.tp, s.cp, s.dp, s.pp, g.name, g.devices_per_node, tp_pp_dp=s.tp_pp_dp_mapping)
        from baige_plan.search.hetero_placement import hetero_placement
        assert self.pipelines is not None
        return hetero_placement(self.pipelines, self.cluster)


def _fits(model, cluster, job, s: StrategySpec, frac: float) -> Estimate | None:
    try:
        e = estimate(model, cluster, job, s, frac)
    except SpecError:
        return None
    if not e.fits or runtimes.get(s.runtime).refusal(s, model, job):
        return None
    return e


def _batch_options(old_mb: int, B: int, r: int) -> list[int]:
    out = [old_mb] + [b for b in MICRO_BATCHES if b != old_mb]
    return [b for b in out if B % (r * b) == 0]


def keep_homogeneous(model, w: World, job, s: StrategySpec, group: str, intact: int, frac: float) -> list[Candidate]:
    """The old strategy with r' replicas, r' from the most the group's nodes hold down to `intact` (the
    old replicas with no rank lost), stopping at the first r' <= intact that fits."""
    g = w.groups[group]
    dpn = g.devices_per_node
    per = s.tp * s.pp * s.cp
    out: list[Candidate] = []
    from baige_plan.search.space import divisors
    most = len(w.avail[group]) * dpn // per
    # r x micro-batch divides the global batch (_batch_options), so only divisors of it: a 10^6-device cluster
    # is a few dozen counts, not 10^6
    for r in sorted((d for d in divisors(job.global_batch) if d <= most), reverse=True):
        if (r * per) % dpn:
            continue
        cl = sub_cluster(w, (group,), {group: r * per // dpn})
        found = []
        for mb in _batch_options(s.micro_batch, job.global_batch, r):
            for rc in (s.recompute,) + tuple(x for x in RECOMPUTE if x != s.recompute):
                e = _fits(model, cl, job, s.with_(dp=r, micro_batch=mb, recompute=rc), frac)
                if e is not None:
                    found.append(e)
        if found:
            e = min(found, key=lambda x: (x.step_time_s, x.strategy.micro_batch != s.micro_batch,
                                          x.strategy.recompute != s.recompute))
            out.append(Candidate(f"{LABELS['keep']}: " + (f"{r} of {s.dp} replicas" if r <= s.dp else
                                                          f"{r} replicas (was {s.dp})") + (f", micro-batch {e.strategy.micro_batch}"
                                 if e.strategy.micro_batch != s.micro_batch else "")
                                 + (f", recompute {e.strategy.recompute}" if e.strategy.recompute != s.recompute
                                    else ""), "keep", cl, e, strategy=e.strategy))
            if r <= intact:
                break
    return out


def _exact_ok(model, cl, job, p: PipelinesSpec, frac: float) -> Estimate | None:
    from baige_plan.search.hetero import _runtime_ok
    from baige_plan.search.hetero_templates import exact
    e = exact(model, cl, job, p, frac)
    if e is None or not _runtime_ok(cl, model, p, []):
        return None
    return e


def _as_strategy(model, cl: ClusterSpec, job, p: PipelinesSpec, frac: float) -> tuple[StrategySpec, Estimate] | None:
    """A one-shape plan on one group, using all its devices, written as a homogeneous strategy when the
    layer split is one Megatron runs (even, or uneven first/last stages)."""
    if len(p.shapes) != 1 or len(cl.groups) != 1:
        return None
    sh = p.shapes[0]
    if len({st.tp for st in sh.stages}) != 1 or sh.knobs.items().get("micro_batch") not in (None, p.micro_batch):
        return None
    counts = [st.n_layers for st in sh.stages]
    pp, tp = len(counts), sh.stages[0].tp
    first = last = None
    if len(set(counts)) > 1:
        mid = counts[1:-1]
        if mid and len(set(mid)) > 1:
            return None
        m0 = mid[0] if mid else None
        first = counts[0] if counts[0] != m0 else None
        last = counts[-1] if counts[-1] != m0 else None
    try:
        s = StrategySpec(tp=tp, pp=pp, dp=sh.replicas, cp=p.knob(sh, "cp"), ep=p.knob(sh, "ep"), etp=p.knob(sh, "etp"),
                         zero=p.knob(sh, "zero"), micro_batch=p.micro_batch, vpp=p.knob(sh, "vpp"),
                         recompute=p.knob(sh, "recompute"), sequence_parallel=bool(p.knob(sh, "sequence_parallel")),
                         attention=p.attention, first_stage_layers=first, last_stage_layers=last,
                         **runtimes.knobs(p.runtime))
        if tuple(counts) != stage_layers(s, model.layers):
            return None
    except SpecError:
        return None
    e = _fits(model, cl, job, s, frac)
    return (s, e) if e is not None else None


def _one_group_cluster(w: World, p: PipelinesSpec, group: str) -> ClusterSpec | None:
    used = p.devices_by_group().get(group, 0)
    dpn = w.groups[group].devices_per_node
    if used % dpn or used // dpn > len(w.avail[group]):
        return None
    return sub_cluster(w, (group,), {group: used // dpn})


def _pipelines_candidate(model, w: World, job, groups: tuple[str, ...], p: PipelinesSpec, frac: float, label: str,
                         family: str) -> Candidate | None:
    """A one-shape pipelines plan on `groups`: as a homogeneous strategy when it is one (one group, every
    device of its nodes), else as pipeline shapes on the sub-cluster."""
    from baige_plan.search.hetero import normalized
    p = normalized(p)
    if len(groups) == 1:
        cl = _one_group_cluster(w, p, groups[0])
        if cl is None:
            return None
        hs = _as_strategy(model, cl, job, p, frac)
        if hs is not None:
            return Candidate(label, family, cl, hs[1], strategy=hs[0])
    else:
        cl = sub_cluster(w, groups)
    e = _exact_ok(model, cl, job, p, frac)
    return Candidate(label, family, cl, e, pipelines=p) if e is not None else None


def _max_replicas(w: World, sh: PipelineShape, cp: int, groups: tuple[str, ...]) -> int:
    need: dict[str, int] = {}
    for st in sh.stages:
        need[st.group] = need.get(st.group, 0) + st.tp * cp
    if not set(need) <= set(groups):
        return 0
    return min(len(w.avail[g]) * w.groups[g].devices_per_node // n for g, n in need.items())


def keep_pipelines(model, w: World, job, p: PipelinesSpec, groups: tuple[str, ...], intact: int, frac: float
                   ) -> list[Candidate]:
    """The old one-shape pipelines plan (stages, groups, tp, layers as they are) with r' replicas."""
    if len(p.shapes) != 1:
        return []
    sh = p.shapes[0]
    out: list[Candidate] = []
    for r in range(_max_replicas(w, sh, p.knob(sh, "cp"), groups), 0, -1):
        for mb in _batch_options(p.knob(sh, "micro_batch"), job.global_batch, r):
            kn = replace(sh.knobs, micro_batch=None)
            q = replace(p, micro_batch=mb, shapes=(replace(sh, replicas=r, knobs=kn,
                                                           micro_batches=job.global_batch // (r * mb)),))
            used = tuple(g for g in groups if g in q.devices_by_group())
            c = _pipelines_candidate(model, w, job, used, q, frac,
                                     f"{LABELS['keep']}: " + (f"{r} of {sh.replicas} replicas" if r <= sh.replicas
                                                              else f"{r} replicas (was {sh.replicas})")
                                     + (f", micro-batch {mb}" if mb != p.micro_batch else ""), "keep")
            if c is not None:
                out.append(c)
                break
        if out and r <= intact:
            break
    return out


def _segments(sh: PipelineShape, groups: tuple[str, ...]) -> tuple[tuple[str, int, int], ...]:
    segs: list[list] = []
    for st in sh.stages:
        if st.group not in groups:
            continue
        if segs and segs[-1][0] == st.group and segs[-1][1] == st.tp:
            segs[-1][2] += 1
        else:
            segs.append([st.group, st.tp, 1])
    return tuple((g, tp, n) for g, tp, n in segs)


def rebalance(model, w: World, job, p: PipelinesSpec, groups: tuple[str, ...], frac: float, time_limit_s: float
              ) -> list[Candidate]:
    """The old shape restricted to `groups`, r' replicas (most first), layers re-split by the solver."""
    from baige_plan.search.hetero import POLISH_EVALS, Template, _solve_template, polish
    if len(p.shapes) != 1:
        return []
    sh = p.shapes[0]
    segs = _segments(sh, groups)
    if not segs:
        return []
    used = tuple(g for g in groups if any(s_[0] == g for s_ in segs))
    cl = sub_cluster(w, used)
    cp = p.knob(sh, "cp")
    units = {g: sum(tp * n * cp for g2, tp, n in segs if g2 == g) for g in used}
    rmax = min(len(w.avail[g]) * w.groups[g].devices_per_node // u for g, u in units.items())
    base = StrategySpec(micro_batch=p.knob(sh, "micro_batch"), zero=p.knob(sh, "zero"), recompute=p.knob(sh, "recompute"),
                        sequence_parallel=bool(p.knob(sh, "sequence_parallel")), attention=p.attention,
                        **runtimes.knobs(p.runtime))
    kn = replace(sh.knobs, micro_batch=None, zero=None, recompute=None, sequence_parallel=None)
    cache: dict = {}
    for r in range(rmax, 0, -1):
        if job.global_batch % (r * base.micro_batch):
            continue
        out = []
        for rc in (base.recompute,) + tuple(x for x in RECOMPUTE if x != base.recompute):
            sol = _solve_template(model, cl, job, Template(((r, segs, kn),)), base.with_(recompute=rc), frac,
                                  min(0.1, time_limit_s), cache, sp=bool(p.knob(sh, "sequence_parallel")))
            if sol is None:
                continue
            q, e = polish(model, cl, job, sol[0], frac, POLISH_EVALS // 2)
            if e is None:
                continue
            label = (f"{LABELS['rebalance']}: " + " > ".join(f"{g} tp{tp} x{n}" for g, tp, n in segs) + f", {r} replicas"
                     + (f", recompute {rc}" if rc != base.recompute else ""))
            c = _pipelines_candidate(model, w, job, used, q, frac, label, "rebalance")
            if c is not None:
                out.append(c)
        if out:
            return [min(out, key=lambda c: c.estimate.step_time_s)]
    return []


def fresh_homogeneous(model, w: World, job, group: str, frac: float, runtime: str, attention: str,
                      deadline: float, same_tp: tuple[int, int] | None = None) -> tuple[list[Candidate], str]:
    """The homogeneous search's best plans at each node count, largest first (module docstring); with
    `same_tp` = (tp, cp) of the old plan, also the best plans at that tp and cp (family "same tp": every
    parameter shard keeps its width, so a rank can keep the layers its new stage shares with its old one)."""
    from baige_plan.search.solver import search
    from baige_plan.search.space import Bounds, Pins
    out: list[Candidate] = []
    best_tok = best_dev = 0.0
    binding = ""
    g = w.groups[group]
    bounds = Bounds(max_memory_frac=frac, runtime=runtime)
    runs = [("fresh", Pins(attention=attention))]
    if same_tp is not None and same_tp[0] <= g.devices_per_node:
        runs.append(("same tp", Pins(tp=same_tp[0], cp=same_tp[1], attention=attention)))
    for n in range(len(w.avail[group]), 0, -1):
        if best_tok and n * g.devices_per_node * best_dev * (1 + SIZE_SLACK) < best_tok:
            break
        if time.perf_counter() > deadline:     # --time-limit holds even when nothing is found yet
            binding = binding or f"no plan found within the time limit on {len(w.avail[group])} to {n + 1} nodes"
            break
        cl = sub_cluster(w, (group,), {group: n})
        for family, pins in runs:
            try:
                r = search(model, cl, job, bounds, pins, top=FRESH_TOP,
                           time_limit_s=max(0.05, deadline - time.perf_counter()))
            except SpecError as ex:
                binding = binding or f"{ex.field}: {ex.reason}"
                continue
            if not r.plans:
                if r.candidates and not binding and family == "fresh":
                    binding = r.binding
                continue
            for e in r.plans:
                s = e.strategy
                out.append(Candidate(f"{LABELS[family]}: {n} nodes, tp{s.tp} pp{s.pp} dp{s.dp} cp{s.cp} vpp{s.vpp} "
                                     f"mb{s.micro_batch} {s.recompute}", family, cl, e, strategy=s, result=r))
                if e.tokens_per_s > best_tok:
                    best_tok, best_dev = e.tokens_per_s, e.tokens_per_s_per_device
    if not out and not binding:
        binding = (f"no strategy runs {model.name} at global batch {job.global_batch} on 1 to "
                   f"{len(w.avail[group])} nodes of group {group!r}")
    return out, binding


def fresh_hetero(model, w: World, job, groups: tuple[str, ...], frac: float, base: StrategySpec, time_limit_s: float
                 ) -> tuple[list[Candidate], str]:
    from baige_plan.search.hetero import solve
    cl = sub_cluster(w, groups)
    try:
        r = solve(model, cl, job, base, memory_frac=frac, time_limit_s=time_limit_s)
    except SpecError as ex:
        return [], f"{ex.field}: {ex.reason}"
    used = tuple(g for g in groups if g in r.pipelines.devices_by_group())
    if len(used) < len(groups):
        return [], ""        # a plan on fewer groups: the searches of those groups alone cover it
    label = f"{LABELS['fresh']}: " + " + ".join(shape_label(sh) for sh in r.pipelines.shapes)
    return [Candidate(label, "fresh", cl, r.estimate, pipelines=r.pipelines, result=r)], ""


def shape_label(sh: PipelineShape) -> str:
    """`8x[gpu tp4 x2 L44 > npu tp8 x1 L36]`: replicas, then runs of stages on one group and tp (stages, layers)."""
    runs: list[list] = []
    for st in sh.stages:
        if runs and runs[-1][0] == st.group and runs[-1][1] == st.tp:
            runs[-1][2] += 1
            runs[-1][3] += st.n_layers
        else:
            runs.append([st.group, st.tp, 1, st.n_layers])
    return f"{sh.replicas}x[" + " > ".join(f"{g} tp{tp} x{n} L{n_l}" for g, tp, n, n_l in runs) + "]"
