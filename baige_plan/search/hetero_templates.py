"""Pipeline templates of the heterogeneous search: which groups host which stages, with which tp,
how many replicas, and which per-shape knobs. The layer split and the batch shares are then
decided per template by search/hetero.py (exact sweep or CP-SAT).

Two families of templates:
(1) group-local shapes: any non-empty subset of the usable groups, each group running its own
    shape with one of its best single-group plans (tp, pp, replicas, knobs); several shapes are
    data-parallel replicas of each other with their own batch share and micro-batch size;
(2) spanning shapes: one pipeline whose consecutive stage *segments* sit on different groups, in
    any order and visiting a group more than once (e.g. v100 > a100 x4 > v100 x2), each group with
    its own tp, r replicas of the whole pipeline, all of a group's devices used
    (Σ_segments of g tp_g·n_seg·r = D_g), per-shape micro-batch size b; over every subset of two or
    more usable groups (up to EXHAUSTIVE_ORDER_GROUPS groups; beyond, all of them only), so two groups
    of one family may run a pipeline beside a third group left idle.
User caps and pins (`Limits`) apply to every template: tp <= max_tp (or = tp), stages <= max_pp
(or = pp), micro-batch <= max_micro_batch (or = micro_batch), zero/recompute/sequence parallel as
pinned (they reach the single-group searches as pins and the spanning shapes through the base
strategy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import combinations, permutations, product

from baige_plan.cost.compute import ChipRates
from baige_plan.cost.estimate import Estimate, StageCost, engine_precision
from baige_plan.cost.hetero import estimate_pipelines, shape_stage_cost, stage_neighbourhood
from baige_plan.errors import SpecError
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.pipeline import PipelineShape, PipelinesSpec, ShapeKnobs, StageSpec
from baige_plan.specs.strategy import StrategySpec
from baige_plan.specs.topology import ClusterSpec, GroupSpec

MAX_SPANNING_REPLICAS = 4   # replica counts tried per spanning (tp, order), fewest pipeline stages first
SPANNING_TP_PER_GROUP = 2   # tp values tried per group in spanning shapes (its best single-group plans' first)
SPANNING_MICRO_BATCHES = (1, 2, 4)   # micro-batch sizes tried for spanning shapes (unless pinned)
MAX_REVISIT_SPLITS = 3      # ways to split a revisited group's stages between its two segments
# spanning pipelines over up to this many groups try every order of them (4! = 24) and every combination of
# SPANNING_TP_PER_GROUP tps; beyond it the templates grow as n! x 2^n (5 groups: 23,530 templates and 11 s;
# 6: minutes), so a longer pipeline tries every first and last group with the others between them by device
# memory, largest first (`bounded_orders`), and the tp combinations of `tp_combos`
EXHAUSTIVE_ORDER_GROUPS = 4
# beyond this many groups even n (n - 1) orders x (n + 2) tp combinations is too many (13 groups: minutes): each
# group first or last with the others by device memory (2n - 1 orders), and every group at its first or its second tp
FEW_ORDER_GROUPS = 8


@dataclass(frozen=True)
class Limits:
    """Search options of `plan` that every pipeline shape honours (None = free)."""

    max_tp: int | None = None
    max_pp: int | None = None
    max_micro_batch: int = 16
    tp: int | None = None
    pp: int | None = None
    micro_batch: int | None = None
    zero: int | None = None
    recompute: str | None = None
    sequence_parallel: bool | None = None
    # what a chip group's plan alone may use (search_group): the heterogeneous mode runs no cp, ep or vpp, but a group
    # alone does, so `plan --cp 1` (and --max-cp, --ep 1, --etp 1, --vpp 1) must reach that search too
    cp: int | None = None
    max_cp: int | None = None
    ep: int | None = None
    etp: int | None = None
    vpp: int | None = None
    # the attention kernel (`plan --attention`): every shape runs the search base's; a group's plan alone must too
    # (search_group; its Pins default to flash)
    attention: str | None = None

    @property
    def plan_sequence_parallel(self) -> bool:
        """The plan-wide sequence parallelism of heterogeneous plans: on (each stage of tp > 1 runs it, as
        Megatron-family runtimes run TP) unless the user turns it off. A search base StrategySpec cannot carry it:
        StrategySpec turns it off at the base's own tp 1."""
        return True if self.sequence_parallel is None else self.sequence_parallel

    def __post_init__(self) -> None:
        for k in ("max_tp", "max_pp", "max_micro_batch", "tp", "pp", "micro_batch", "cp", "max_cp", "ep", "etp", "vpp"):
            v = getattr(self, k)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise SpecError(f"--{k.replace('_', '-')}", f"must be a positive integer, got {v!r}")

    def tp_ok(self, tp: int) -> bool:
        return (self.tp is None or tp == self.tp) and (self.max_tp is None or tp <= self.max_tp)

    def pp_ok(self, pp: int) -> bool:
        return (self.pp is None or pp == self.pp) and (self.max_pp is None or pp <= self.max_pp)

    def mb_ok(self, b: int) -> bool:
        return (self.micro_batch is None or b == self.micro_batch) and b <= self.max_micro_batch

    def knobs_ok(self, kn: ShapeKnobs, base: StrategySpec) -> bool:
        v = {k: getattr(kn, k) if getattr(kn, k) is not None else getattr(base, k)
             for k in ("micro_batch", "zero", "recompute", "sequence_parallel")}
        return (self.mb_ok(v["micro_batch"]) and (self.zero is None or v["zero"] == self.zero)
                and (self.recompute is None or v["recompute"] == self.recompute)
                and (self.sequence_parallel is None or bool(v["sequence_parallel"]) == self.sequence_parallel))


@dataclass(frozen=True)
class Template:
    """Shapes as (replicas, ((group, tp, stages_on_group), ...), knobs) in pipeline order."""

    shapes: tuple[tuple[int, tuple[tuple[str, int, int], ...], ShapeKnobs], ...]

    def label(self) -> str:
        parts = []
        for r, segs, kn in self.shapes:
            extra = "".join(f" {k}{v}" for k, v in sorted(kn.items().items()))
            parts.append(f"{r}x[" + " > ".join(f"{g} tp{tp} pp{n}" for g, tp, n in segs) + f"{extra}]")
        return " + ".join(parts)


def knobs_of(s: StrategySpec) -> ShapeKnobs:
    """Shape knobs from a homogeneous strategy. Interleaving is dropped (vpp 1): the solver moves
    single layers between stages, which whole model chunks would forbid."""
    return ShapeKnobs(micro_batch=s.micro_batch, cp=s.cp, ep=s.ep, etp=s.etp, zero=s.zero, vpp=1,
                      recompute=s.recompute, sequence_parallel=bool(s.sequence_parallel))


def tp_options(model: ModelSpec, g: GroupSpec, lim: Limits = Limits()) -> list[int]:
    return [t for t in (1, 2, 4, 8, 16) if t <= g.devices_per_node and g.devices_per_node % t == 0
            and model.heads % t == 0 and model.kv_heads % t == 0 and model.ffn_hidden % t == 0 and lim.tp_ok(t)]


def runs_on(g: GroupSpec, job: JobSpec, runtime: str = "flagscale") -> bool:
    """The group's chip has the numbers the cost model needs for this precision."""
    return missing_figure(g, job, runtime) is None


def missing_figure(g: GroupSpec, job: JobSpec, runtime: str = "flagscale") -> str | None:
    """The first figure the cost model needs for this precision that g's chip file lacks (None: none). The
    precision is the one g's chip runs the job's matmuls in (cost/estimate.py engine_precision: a tf32 job
    runs IEEE fp32 on a chip without TF32)."""
    try:
        r = ChipRates.of(g.chip, engine_precision(g, job.precision, runtime))
        g.chip.gemm_curve(r.dtype)
        g.chip.need("memory_gib")
    except SpecError as ex:
        return ex.field
    return None


def even_split(layers: int, pp: int) -> tuple[tuple[int, int], ...]:
    """Layer ranges for pp stages as even as possible; the extra layers go to the middle stages
    (the first and last also carry the embedding and the logits)."""
    base, extra = divmod(layers, pp)
    counts = [base] * pp
    order = sorted(range(pp), key=lambda i: (i in (0, pp - 1), abs(i - (pp - 1) / 2), i))
    for i in order[:extra]:
        counts[i] += 1
    out, start = [], 0
    for c in counts:
        out.append((start, start + c))
        start += c
    return tuple(out)


def selective_is_none(model: ModelSpec, groups: list[GroupSpec], job: JobSpec, base: StrategySpec, lim: Limits
                      ) -> bool:
    """Whether `recompute selective` costs exactly what `none` does (time and memory) on every group: a middle
    stage of a two-stage pipeline at each group's tp options, costed both ways. True for Megatron-family runtimes
    with fused attention (the checkpointed core is flash attention, whose backward recomputes its scores anyway:
    nothing more runs and nothing less is kept); false with standard attention (the scores are kept or recomputed),
    torchtitan's op-level SAC, a fused kernel the runtime checkpoints on that chip (RuntimeSpec.
    selective_attention_recompute) or measured profiles. The heterogeneous search then solves `none` only where it
    is not the same plan as `selective` under another name."""
    for g in groups:
        cl = ClusterSpec(name=g.name, groups=(g,))
        for tp in tp_options(model, g, lim):
            got = []
            for rc in ("none", "selective"):
                p = PipelinesSpec((PipelineShape(1, 1, tuple(StageSpec(g.name, rng, tp)
                                                             for rng in even_split(model.layers, 2))),),
                                  micro_batch=base.micro_batch, zero=base.zero, runtime=base.runtime, recompute=rc,
                                  sequence_parallel=lim.plan_sequence_parallel, attention=base.attention)
                try:
                    c = shape_stage_cost(model, cl, job, p, p.shapes[0], 1, stage_neighbourhood(p, p.shapes[0], 1),
                                         None)[1]
                except SpecError:
                    return False
                got.append((c.time_s, c.memory_gib))
            if got[0] != got[1]:
                return False
    return True


def recompute_variants(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, base: StrategySpec, lim: Limits,
                       pinned: bool) -> list[StrategySpec]:
    """The plan-wide recomputation settings a heterogeneous search solves its templates at: base's alone when
    pinned, else selective and full, and none first where it is another plan than selective (selective_is_none)."""
    if pinned:
        return [base]
    groups = [g for g in cluster.groups if runs_on(g, job)]
    return [replace(base, recompute=rc) for rc in ("none", "selective", "full")
            if rc != "none" or not selective_is_none(model, groups, job, base, lim)]


def exact(model, cluster, job, p: PipelinesSpec, memory_frac: float, cache: dict | None = None) -> Estimate | None:
    """The exact estimate of p when it fits, else None. `cache` (one search's: one model, cluster and job) keeps it
    by plan, so the climb, the search's exact pass and the polish estimate a plan once."""
    key = ("exact", p, memory_frac)
    if cache is not None and key in cache:
        return cache[key]
    try:
        e = estimate_pipelines(model, cluster, job, p, memory_frac, cache)
    except SpecError:
        e = None
    out = e if e is not None and e.fits else None
    if cache is not None:
        cache[key] = out
    return out


def standalone_best(model: ModelSpec, g: GroupSpec, job: JobSpec, base: StrategySpec, memory_frac: float,
                    max_pp: int = 64, lim: Limits = Limits(), keep: int | None = None
                    ) -> list[tuple[float, tuple[int, int, int], Estimate]]:
    """Best plans of one group alone (same model and job): (step s, (tp, pp, dp), estimate), fastest
    first, over tp and pp with the layers split as evenly as possible (uneven when pp does not
    divide them), all the group's devices used. `keep`: only the first `keep` of that list (the same
    entries). Each plan's first stage is costed first, exactly as the estimate costs it: a plan whose first
    stage does not fit in memory does not fit (it is not estimated), and with `keep`, nor is a plan whose
    step is bound to exceed the keep-th fastest found (step >= m x that stage's time: the pipeline runs m
    micro-batches through its slowest stage; exposed DP traffic and the optimizer step add to it)."""
    if keep is not None and keep < 1:
        return []
    cl = ClusterSpec(name=g.name, groups=(g,))
    cap = g.chip.need("memory_gib") * memory_frac
    cache: dict = {}        # the stage costs of these plans (pure): each plan's first stage is costed once
    todo = []       # (bound, (tp, pp, dp), plan): the plans that may fit, most promising first
    for tp in tp_options(model, g, lim):
        for pp in range(1, min(max_pp, model.layers) + 1):
            if g.devices % (tp * pp) or not lim.pp_ok(pp):
                continue
            dp = g.devices // (tp * pp)
            if job.global_batch % (dp * base.micro_batch):
                continue
            m = job.global_batch // (dp * base.micro_batch)
            stages = tuple(StageSpec(g.name, rng, tp) for rng in even_split(model.layers, pp))
            p = PipelinesSpec((PipelineShape(dp, m, stages),), micro_batch=base.micro_batch, zero=base.zero,
                              runtime=base.runtime, recompute=base.recompute,
                              sequence_parallel=lim.plan_sequence_parallel, attention=base.attention)
            c0 = _first_stage(model, cl, job, p, cache)
            if c0 is not None and c0.memory_gib > cap:
                continue            # estimate_pipelines: fits is False (exact: None)
            todo.append((m * c0.time_s if c0 is not None else 0.0, (tp, pp, dp), p))
    todo.sort(key=lambda x: (x[0], x[1]))
    out = []
    for bound, key, p in todo:
        if keep is not None and len(out) >= keep and bound > sorted(x[0] for x in out)[keep - 1]:
            break                   # step >= its bound > the keep-th best, and so for every later plan
        e = exact(model, cl, job, p, memory_frac, cache)
        if e is not None:
            out.append((e.step_time_s, key, e))
    out.sort(key=lambda t: (t[0], t[1]))
    return out if keep is None else out[:keep]


def _first_stage(model: ModelSpec, cl: ClusterSpec, job: JobSpec, p: PipelinesSpec,
                 memo: dict | None = None) -> StageCost | None:
    """Stage 0 of a one-shape plan, costed exactly as cost/hetero.py estimate_pipelines costs it (the same
    stage_cost call); None when the cost model refuses it (the estimate then says so)."""
    sh = p.shapes[0]
    try:
        # kept in `memo` where estimate_pipelines reads it: the plan's exact estimate does not cost it again
        return shape_stage_cost(model, cl, job, p, sh, 0, stage_neighbourhood(p, sh, 0), memo)[1]
    except SpecError:
        return None


def search_group(model: ModelSpec, g: GroupSpec, job: JobSpec, memory_frac: float, top: int,
                 time_limit_s: float | None, lim: Limits = Limits(), runtime: str = "megatron") -> list[Estimate]:
    """The homogeneous search's top plans for group g alone (any cp, zero, micro-batch, vpp, recompute),
    within the user's caps and pins (Limits: --cp 1 keeps these plans without context parallelism too)."""
    from baige_plan.search.solver import search
    from baige_plan.search.space import Bounds, Pins

    if not runs_on(g, job):
        return []
    try:
        bounds = Bounds(max_tp=lim.max_tp, max_pp=lim.max_pp, max_cp=lim.max_cp, max_micro_batch=lim.max_micro_batch,
                        max_memory_frac=memory_frac, runtime=runtime)
        pins = Pins(tp=lim.tp, pp=lim.pp, cp=lim.cp, ep=lim.ep, etp=lim.etp, vpp=lim.vpp, zero=lim.zero,
                    micro_batch=lim.micro_batch, recompute=lim.recompute, sequence_parallel=lim.sequence_parallel,
                    **({"attention": lim.attention} if lim.attention else {}))
        return list(search(model, ClusterSpec(name=g.name, groups=(g,)), job, bounds, pins,
                           top=top, time_limit_s=time_limit_s, dp_bound=True).plans)
    except SpecError:
        return []


def standalone_key(g: GroupSpec, base: StrategySpec, memory_frac: float, lim: Limits, keep: int | None) -> tuple:
    """What a `standalone_best(model, g, job, base, memory_frac, lim=lim, keep=keep)` call of one search (one model
    and job) depends on besides them: the key under which its result is kept in a `known` dict."""
    return ("standalone", g.name, base, memory_frac, lim, keep)


def standalone_best_known(model: ModelSpec, g: GroupSpec, job: JobSpec, base: StrategySpec, memory_frac: float,
                          lim: Limits, keep: int | None, known: dict | None
                          ) -> list[tuple[float, tuple[int, int, int], Estimate]]:
    """standalone_best, or its result already computed for this search (`known`, by standalone_key; pure)."""
    key = standalone_key(g, base, memory_frac, lim, keep)
    if known is not None and key in known:
        return known[key]
    return standalone_best(model, g, job, base, memory_frac, lim=lim, keep=keep)


def group_plans(model: ModelSpec, g: GroupSpec, job: JobSpec, base: StrategySpec, memory_frac: float,
                top: int, searched: list[Estimate], lim: Limits = Limits(), known: dict | None = None
                ) -> list[tuple[float, int, int, int, ShapeKnobs]]:
    """A group's best single-group plans as (step s, tp, pp, replicas, knobs): the homogeneous
    search's top plans (their layer split is re-decided by the solver) and even/uneven pipelines
    at the plan-wide settings. `known`: standalone_best results computed beforehand (standalone_best_known)."""
    out = [(e.step_time_s, e.strategy.tp, e.strategy.pp, e.strategy.dp, knobs_of(e.strategy)) for e in searched]
    for t, (tp, pp, dp), _e in standalone_best_known(model, g, job, base, memory_frac, lim, top, known):
        out.append((t, tp, pp, dp, ShapeKnobs()))
    out.sort(key=lambda x: (x[0], x[1], x[2], x[3], sorted(x[4].items().items())))
    return out[:top]


def tp_combos(names: list[str], tp_pref: dict[str, list[int]], whole: frozenset[str] = frozenset()
              ) -> list[tuple[int, ...]]:
    """tp per group of a spanning pipeline: every combination of each group's first SPANNING_TP_PER_GROUP
    preferences (every preference of the groups in `whole`) up to EXHAUSTIVE_ORDER_GROUPS groups; beyond, every
    group at its first, every group at its second, and each group alone at its second (n + 2 instead of 2^n).

    >>> tp_combos(["a", "b", "c", "d", "e"], {"a": [2, 1], "b": [2, 4], "c": [1], "d": [2, 1], "e": [2, 1]})
    [(2, 2, 1, 2, 2), (1, 4, 1, 1, 1), (1, 2, 1, 2, 2), (2, 4, 1, 2, 2), (2, 2, 1, 1, 2), (2, 2, 1, 2, 1)]
    """
    if len(names) <= EXHAUSTIVE_ORDER_GROUPS:
        return list(product(*[tp_pref[n] if n in whole else tp_pref[n][:SPANNING_TP_PER_GROUP] for n in names]))
    first = tuple(tp_pref[n][0] for n in names)
    second = tuple(tp_pref[n][min(1, len(tp_pref[n]) - 1)] for n in names)
    alone = [first[:i] + (second[i],) + first[i + 1:] for i in range(len(names))] \
        if len(names) <= FEW_ORDER_GROUPS else []
    return list(dict.fromkeys([first, second] + alone))


def bounded_orders(names: list[str], memory_gib: dict[str, float]) -> list[tuple[str, ...]]:
    """Orders of more than EXHAUSTIVE_ORDER_GROUPS groups: every (first, last) pair of distinct groups -- the
    positions that hold the embedding and most in-flight micro-batches, and the logits -- with the other groups
    between them by device memory, largest first (ties: name order). n (n - 1) orders instead of n!; beyond
    FEW_ORDER_GROUPS groups each group first and each group last only (at most 2n - 1 orders).

    >>> bounded_orders(["a", "b", "c"], {"a": 40, "b": 80, "c": 80})
    [('a', 'c', 'b'), ('a', 'b', 'c'), ('b', 'c', 'a'), ('b', 'a', 'c'), ('c', 'b', 'a'), ('c', 'a', 'b')]
    """
    by_mem = sorted(names, key=lambda n: (-memory_gib[n], names.index(n)))
    if len(names) > FEW_ORDER_GROUPS:     # each group first, then each last, the others by memory
        return list(dict.fromkeys([(f,) + tuple(n for n in by_mem if n != f) for f in names]
                                  + [tuple(n for n in by_mem if n != last) + (last,) for last in names]))
    return [(f,) + tuple(n for n in by_mem if n not in (f, last)) + (last,)
            for f in names for last in names if last != f]


def segment_orders(counts: dict[str, int], names: list[str],
                   memory_gib: dict[str, float] | None = None) -> list[tuple[tuple[str, int], ...]]:
    """Orders of group segments for one spanning pipeline: every permutation of the groups (each one
    segment holding all its stages; more than EXHAUSTIVE_ORDER_GROUPS groups with `memory_gib`: the
    `bounded_orders`), and every such order whose first group reappears at the end with its stages split
    k / n-k (k in 1, n//2, n-1: the embedding stage and the logits stage on the same chip type, the others
    in between)."""
    out: list[tuple[tuple[str, int], ...]] = []
    bounded = memory_gib is not None and len(names) > EXHAUSTIVE_ORDER_GROUPS
    for perm in bounded_orders(names, memory_gib) if bounded else permutations(names):
        out.append(tuple((g, counts[g]) for g in perm))
        if len(perm) < 2:
            continue
        head, n = perm[0], counts[perm[0]]
        for k in sorted({1, n // 2, n - 1})[:MAX_REVISIT_SPLITS]:
            if 1 <= k < n:
                out.append(((head, k),) + tuple((g, counts[g]) for g in perm[1:]) + ((head, n - k),))
    return list(dict.fromkeys(out))      # first occurrence of each, in order


def _states_may_fit(model: ModelSpec, groups: list[GroupSpec], tp: dict[str, int], stages: int, r: int,
                    memory_frac: float) -> bool:
    """Necessary condition for a spanning pipeline of `stages` stages and r replicas: the model states
    of an average stage, P/(stages·tp) parameters at >= 2 B (16-bit weights) + 2 B (16-bit grads) +
    12/r B (fp32 master and Adam m, v sharded over the r replicas: ZeRO-1, Rajbhandari 2020 Sec. 3),
    fit the largest device. Activations are ignored, so this never drops a plan that fits; it only
    skips replica counts whose pipelines are far too short for the model."""
    from baige_plan.cost.params import total_params

    per_param = 4 + 12 / r
    cap = max(g.chip.need("memory_gib") for g in groups) * memory_frac * 2**30
    need = total_params(model) / (stages * min(tp[g.name] for g in groups)) * per_param
    return need <= cap


def spanning_templates(model: ModelSpec, job: JobSpec, groups: list[GroupSpec], tp_pref: dict[str, list[int]],
                       base: StrategySpec, lim: Limits, memory_frac: float = 0.9,
                       whole: frozenset[str] = frozenset()) -> list[Template]:
    """One pipeline over all of `groups` (family (2) above; `templates` passes each subset). `whole`: the groups
    whose every tp preference is tried (tp_combos)."""
    temps: list[Template] = []
    if len(groups) < 2:
        return temps
    names = [g.name for g in groups]
    bs = [b for b in SPANNING_MICRO_BATCHES if lim.mb_ok(b)] if lim.micro_batch is None else [lim.micro_batch]
    mem = {g.name: g.chip.need("memory_gib") for g in groups}     # segment_orders bounds long orders with it
    for tps in tp_combos(names, tp_pref, whole):
        tp = dict(zip(names, tps, strict=True))
        units = {g.name: g.devices // tp[g.name] for g in groups}
        # replicas r: every device used (r divides each group's stage slots), or, when the batch does not
        # split over such r, the r that divide the batch with the remainder of a group left idle (a
        # runtime gives every replica the same share); fewest pipeline stages first
        exact_r = {r for r in range(1, min(units.values()) + 1)
                   if all(units[n] % r == 0 for n in names)}
        batch_r = {r for r in _divisors_upto(job.global_batch, min(units.values())) if r not in exact_r}
        rs = [r for r in exact_r | batch_r
              if 2 <= sum(units[n] // r for n in names) <= model.layers
              and lim.pp_ok(sum(units[n] // r for n in names))
              and _states_may_fit(model, groups, tp, sum(units[n] // r for n in names), r, memory_frac)]
        rs.sort(key=lambda r: (-r, r not in exact_r))
        for r in rs[:MAX_SPANNING_REPLICAS]:
            counts = {n: units[n] // r for n in names}
            for order in segment_orders(counts, names, mem):
                segs = tuple((g, tp[g], n) for g, n in order)
                for b in bs:
                    if job.global_batch % (r * b):
                        continue
                    kn = ShapeKnobs() if b == base.micro_batch else ShapeKnobs(micro_batch=b)
                    temps.append(Template(((r, segs, kn),)))
    return temps


def climb_neighbours(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, t: Template, micro_batch: int,
                     lim: Limits, memory_frac: float = 0.9) -> list[Template]:
    """Templates one move away from t's pipeline across groups, on the same devices: one group's stages at another
    of its tp options (tp_options; its stage count scales by tp / tp'), or the replicas halved or doubled (every
    group's stage count scales by r / r'; the batch must split over r' replicas of `micro_batch`). Each segment
    must stay a whole number of stages. Templates of several shapes or of one group have none. `solve` climbs
    along these from its best solutions (TP_CLIMB_*), which finds the tp and replica count a group needs when its
    preferred tps (SPANNING_TP_PER_GROUP, ranked from its plans alone) or the replica counts tried with them
    (MAX_SPANNING_REPLICAS) miss it -- e.g. a group that holds no plan of the model alone, ranked from tp 1 up,
    where a memory-bound stage needs a wider tp and a longer pipeline.

    >>> from baige_plan.io.catalog import Catalog
    >>> from baige_plan.specs.job import JobSpec
    >>> cat = Catalog.create(); cl, _ = cat.cluster("a100-sxm4-80g:1x8+h100-sxm5-80g:1x8")
    >>> t = Template(((2, (("a100-sxm4-80g", 2, 2), ("h100-sxm5-80g", 4, 1)), ShapeKnobs()),))
    >>> [x.label() for x in climb_neighbours(cat.model("llama3-8b"), cl, JobSpec(64, 4096), t, 1, Limits())]
    ... # doctest: +NORMALIZE_WHITESPACE
    ['2x[a100-sxm4-80g tp1 pp4 > h100-sxm5-80g tp4 pp1]', '2x[a100-sxm4-80g tp4 pp1 > h100-sxm5-80g tp4 pp1]',
     '2x[a100-sxm4-80g tp2 pp2 > h100-sxm5-80g tp1 pp4]', '2x[a100-sxm4-80g tp2 pp2 > h100-sxm5-80g tp2 pp2]',
     '1x[a100-sxm4-80g tp2 pp4 > h100-sxm5-80g tp4 pp2]']
    """
    if len(t.shapes) != 1:
        return []
    r, segs, kn = t.shapes[0]
    names = list(dict.fromkeys(g for g, _tp, _n in segs))
    if len(names) < 2:
        return []
    groups = {g.name: g for g in cluster.groups}
    moves: list[tuple[int, tuple[tuple[str, int, int], ...]]] = []
    for name in names:
        cur = next(tp for g, tp, _n in segs if g == name)
        for tp2 in tp_options(model, groups[name], lim):
            if tp2 != cur and not any(n * cur % tp2 for g, _tp, n in segs if g == name):
                moves.append((r, tuple((g, tp2, n * cur // tp2) if g == name else (g, tp, n) for g, tp, n in segs)))
    for r2 in ([r // 2] if r % 2 == 0 else []) + [2 * r]:
        if not any(n * r % r2 for _g, _tp, n in segs) and job.global_batch % (r2 * micro_batch) == 0:
            moves.append((r2, tuple((g, tp, n * r // r2) for g, tp, n in segs)))
    out: list[Template] = []
    for r2, new in moves:
        stages = sum(n for _g, _tp, n in new)
        tps = {g: tp for g, tp, _n in new}
        if 2 <= stages <= model.layers and lim.pp_ok(stages) and \
                _states_may_fit(model, [groups[n] for n in names], tps, stages, r2, memory_frac):
            out.append(Template(((r2, new, kn),)))
    return out


def _divisors_upto(n: int, cap: int) -> list[int]:
    """Divisors of n that are <= cap (search/space.py `divisors`: O(sqrt n))."""
    from baige_plan.search.space import divisors

    return [d for d in divisors(n) if d <= cap]


def templates(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, base: StrategySpec, memory_frac: float,
              per_group_top: int, searched: dict[str, list[Estimate]] | None = None, lim: Limits = Limits(),
              known: dict | None = None) -> tuple[list[Template], dict[str, float]]:
    """Every template of families (1) and (2), deduplicated, in label order; and each group's
    standalone tokens/s (its best single-group plan here). `known`: as group_plans'."""
    best: dict[str, list[tuple[int, int, int, ShapeKnobs]]] = {}
    standalone: dict[str, float] = {}
    for g in cluster.groups:
        if searched is None or g.name not in searched:
            found = search_group(model, g, job, memory_frac, per_group_top, None, lim, base.runtime)
        else:
            found = searched[g.name]
        ranked = group_plans(model, g, job, base, memory_frac, per_group_top, found, lim, known) if runs_on(g, job) \
            else []
        ranked = [x for x in ranked if lim.knobs_ok(x[4], base) and lim.tp_ok(x[1]) and lim.pp_ok(x[2])]
        if ranked:
            standalone[g.name] = job.tokens / ranked[0][0]
        best[g.name] = [(tp, pp, dp, kn) for _, tp, pp, dp, kn in ranked]
    temps: list[Template] = []
    usable = [g for g in cluster.groups if best[g.name]]
    # every non-empty subset of the usable groups (leaving a group out avoids its bridge traffic); a runtime that
    # runs one pipeline (FlagScale) runs no several-shape template, and beyond EXHAUSTIVE_ORDER_GROUPS groups the
    # 2^n subsets are cut to single groups and all of them
    one_pipeline = bool(getattr(runtimes.module(base.runtime), "ONE_PIPELINE", False))
    sizes = [1] if one_pipeline else list(range(1, len(usable) + 1)) if len(usable) <= EXHAUSTIVE_ORDER_GROUPS \
        else sorted({1, len(usable)})
    for size in sizes:
        for subset in combinations(usable, size):
            for combo in product(*[best[g.name] for g in subset]):
                temps.append(Template(tuple((dp, ((g.name, tp, pp),), kn)
                                            for g, (tp, pp, dp, kn) in zip(subset, combo, strict=True))))
    groups = [g for g in cluster.groups if runs_on(g, job) and tp_options(model, g, lim)]
    # tp per group in a spanning pipeline: the tp of the group's best single-group plan, then the closest
    # to that plan's model-parallel width (tp x cp) -- the heterogeneous runtime has no cp across groups,
    # so a plan that needed cp 16 alone needs the widest tp here (ties: the wider tp)
    tp_pref = {}
    for g in groups:
        opts = tp_options(model, g, lim)
        width = (best[g.name][0][0] * (best[g.name][0][3].cp or 1)) if best[g.name] else 1
        width = min(width, max(opts))
        by_width = sorted(opts, key=lambda t: (abs(math.log2(t) - math.log2(width)), -t))
        first = [best[g.name][0][0]] if best[g.name] and best[g.name][0][0] in opts else []
        tp_pref[g.name] = first + [t for t in by_width if t not in first]
    # one pipeline over every subset of two or more groups: leaving a group out avoids its bridge (and what the
    # runtime refuses across families, e.g. FlagScale's multi-stage meshes before a CPU-forwarded hop), so two
    # groups of one family may run together beside a third; beyond EXHAUSTIVE_ORDER_GROUPS groups, all of them only
    spans = [groups] if len(groups) > EXHAUSTIVE_ORDER_GROUPS else \
        [list(sub) for k in range(2, len(groups) + 1) for sub in combinations(groups, k)]
    # a group that holds no plan of the model alone has no tp of its own to rank from (its preferences start at the
    # narrowest, where its stages need memory most): every tp of it is tried
    whole = frozenset(g.name for g in groups if not best[g.name])
    for sub in spans:
        temps += spanning_templates(model, job, sub, tp_pref, base, lim, memory_frac, whole)
    uniq = sorted(set(temps), key=lambda t: t.label())
    return uniq, standalone
