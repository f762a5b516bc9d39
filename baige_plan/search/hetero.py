"""Heterogeneous plan search: OR-Tools CP-SAT over layer splits and batch shares, inside an
enumeration of pipeline templates (search/hetero_templates.py: which groups host which stages, in
which order, tp per group, replicas, per-shape knobs).

Model (one template; all times integers in TIME_UNIT_S, rounded up):

Notation
    j ∈ J          pipeline shapes of the template; shape j has stages i = 0..S_j-1, stage i on
                   group g(j,i) with tensor-parallel size tp(j,i), r_j replicas, micro-batch size
                   b_j, interleaving v_j and its other knobs, all fixed by the template so that the
                   devices fit: Σ_j r_j Σ_{i: g(j,i)=g} tp(j,i)·cp_j ≤ D_g
    L, B           transformer layers; global batch (sequences); u_j = r_j·b_j sequences per step
                   of one micro-batch of shape j
    a_ji, c_ji     per-layer and fixed time of stage (j,i) per micro-batch, read off the exact
                   cost model (stage_cost at 1 and 2 layers: it is affine in the layer count)
    u'_ji, k_ji    per-layer and fixed memory of stage (j,i) (states + in-flight activations)
    C_g            usable memory of group g's chip × max memory fraction
    V_j            candidate micro-batch counts of shape j: the exact value B/u_j for a single
                   shape, else a window of ±BATCH_WINDOW around the split proportional to each
                   shape's speed at an even layer split
Variables
    y_ji ∈ {1..L/v_j}, x_ji = v_j·y_ji   layers of stage (j,i) (whole interleaving chunks)
    z_jv ∈ {0,1}, v ∈ V_j                shape j runs v micro-batches per replica (Σ_v z_jv = 1)
    τ_j ≥ 0                              slowest stage time of shape j;  T ≥ 0 step time
Constraints
    Σ_i x_ji = L                          ∀j      (every layer exactly once per shape)
    Σ_j Σ_v u_j·v·z_jv = B                        (the batch adds up)
    u'_ji x_ji + k_ji ≤ C_g(j,i)          ∀j,i    (memory per stage)
    τ_j ≥ a_ji x_ji + c_ji                ∀j,i
    T ≥ (v − 1)·τ_j + Σ_i (a_ji x_ji + c_ji)   if z_jv, v ≥ 1   (1F1B with unequal stages, SPEC §5)
    (v = 0: shape j idle, no bound)
Objective
    minimise T
The product m_j·τ_j is linearised by the indicator rows above (one per candidate v).
A template of ONE shape has a single candidate v = B/u (m fixed), and the model reduces to
    minimise (m − 1)·max_i t_i + Σ_i t_i,  t_i = a_i x_i + c_i,  Σ x_i = L,  1 ≤ x_i ≤ M_i (memory)
which `sweep_single` solves exactly without CP-SAT: at the optimum the slowest stage time is one
of the values τ ∈ {a_i x + c_i}; for a given τ each stage may take x_i ≤ U_i(τ) = min(M_i,
⌊(τ − c_i)/a_i⌋) layers, and Σ a_i x_i is smallest when the layers beyond one per stage go to the
stages of smallest a_i first (a fractional-knapsack fill, exact for integers since every layer
weighs 1). Evaluating T at that fill for every candidate τ and keeping the least (ties: smallest τ)
is the optimum of the same model (numpy over all candidates at once). Exposed
DP/bridge gradient traffic and the optimizer step are not in the linear model; every solution is
re-estimated with the exact cost model (cost/hetero.py), the best ones are polished by moving
layers across stage boundaries and micro-batches between shapes while the exact step time
improves, then ties are broken towards balanced splits. The search reports CP-SAT's status and
the gap of the chosen template. Deterministic: one worker, fixed seed, a deterministic-time
limit, a fixed evaluation budget for the polish.
Wall time: the per-group homogeneous searches with the standalone_best calls the templates and the
standalone throughputs make, and (without --time-limit) the template solves, are independent and
pure; they run over the usable cores (search/forked.py: forked children, results pickled back) and
give the values the serial calls give.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from itertools import accumulate, product

import numpy as np

from baige_plan.cost.estimate import Estimate, stage_cost
from baige_plan.cost.hetero import p2p_links_cached, stage_strategy_cached
from baige_plan.errors import SpecError
from baige_plan.search.forked import in_parallel, usable_cores
from baige_plan.search.hetero_templates import (
    Limits,
    Template,
    climb_neighbours,
    even_split,
    exact,
    knobs_of,
    missing_figure,
    recompute_variants,
    runs_on,
    search_group,
    spanning_templates,
    standalone_best,
    standalone_best_known,
    standalone_key,
    templates,
    tp_options,
)
from baige_plan.search.ranking import sig
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.pipeline import PipelineShape, PipelinesSpec, ShapeKnobs, StageSpec
from baige_plan.specs.strategy import StrategySpec, stage_layers
from baige_plan.specs.topology import ClusterSpec, GroupSpec

# names other modules (oracle, CLI, tests) import from here
_exact, _templates, _search_group = exact, templates, search_group
__all__ = ["HeteroResult", "Limits", "Template", "knobs_of", "runs_on", "solve", "polish", "even_split",
           "standalone_best", "standalone_throughputs", "heterogeneous_efficiency", "pipelines_dicts"]

TIME_UNIT_S = 1e-5
MEM_UNIT_GIB = 1e-3
GAP_LIMIT = 0.002           # CP-SAT stops within 0.2% of its bound (reported as the gap)
POLISH_EVALS = 600          # exact evaluations spent polishing (half on the best solution)
CP_SAT_MAX_PER_TEMPLATE = 0.1  # deterministic seconds of CP-SAT per template at most
POLISH_TOP = 8              # at most this many solutions are polished with the exact model,
POLISH_WITHIN = 1.25        # those within 25% of the best
RUNNERS_UP = 5              # runners-up a result names (HeteroResult.runners_up)
TP_CLIMB_TOP = 3            # spanning solutions whose tp neighbours each climbing round solves (_tp_climb)
TP_CLIMB_POOL = 12          # solutions, by linear time, whose exact step ranks the climb's starts
TP_CLIMB_ROUNDS = 4         # climbing rounds at most (each must lower the best exact step to go on)
BATCH_WINDOW = 8            # micro-batches per replica either side of the speed-proportional split


@dataclass(frozen=True)
class HeteroResult:
    pipelines: PipelinesSpec
    estimate: Estimate
    status: str
    gap: float
    templates: int
    solves: int
    seconds: float
    standalone: dict[str, float]          # group -> tokens/s of its best plan alone
    runners_up: tuple[tuple[str, Estimate], ...]   # (template label, estimate), next best first
    idle: tuple[tuple[str, int, str], ...] = ()    # (group, idle devices, why), for groups not fully used
    cp_sat: int = 0                       # templates of several shapes, solved with CP-SAT (the others by the exact
                                          # layer sweep, `sweep_single`)
    label: str = ""                       # the best plan's template label
    alternatives: tuple[Alternative, ...] = ()   # solve(alternatives=N): the next distinct plans, fastest first


@dataclass(frozen=True)
class Alternative:
    """One more plan `plan --top K` shows on a cluster of several groups: a plan the search estimated exactly,
    normalised like the best, distinct from the plans before it in step time or peak memory."""

    label: str
    pipelines: PipelinesSpec
    estimate: Estimate
    idle: tuple[tuple[str, int, str], ...] = ()


def _affine(model, cluster, job, p_base: PipelinesSpec, shape_stages, j, i, m,
            cache: dict | None = None) -> tuple[float, float, float, float]:
    """(a, c, u, k): time and memory per stage as affine functions of its layer count. `cache` (owned
    by one search) memoises them by everything stage_cost reads: group, strategy, position, links."""
    sh = p_base.shapes[j]
    st = shape_stages[i]
    # everything the strategy and the links below are read from (plan-wide knobs, the shape's replicas and
    # knobs, this stage and its neighbours, the pipeline depth): a hit skips building them (pure, by value)
    pre = ("affine-in", p_base.micro_batch, p_base.zero, p_base.recompute, p_base.sequence_parallel,
           p_base.attention, p_base.runtime, sh.replicas, sh.knobs, len(shape_stages), i, m,
           shape_stages[i - 1] if i > 0 else None, st, shape_stages[i + 1] if i + 1 < len(shape_stages) else None)
    if cache is not None and pre in cache:
        return cache[pre]
    g = cluster.group(st.group)
    # the stage's strategy reads the plan-wide knobs, the shape's replicas, knobs and depth and the stage's tp; its
    # p2p links the stage, its neighbours and the shape's replicas and knobs: each memoised on those alone
    s_in = ("affine-s",) + pre[1:10] + (st.tp,)
    l_in = ("affine-l", sh.replicas, sh.knobs, pre[12], st, pre[14])
    s = cache.get(s_in) if cache is not None else None
    links = cache.get(l_in) if cache is not None else None
    if s is None or links is None:
        shape = replace(sh, micro_batches=m, stages=tuple(shape_stages))
        # (the exact estimates of the template's solutions read the same entries: cost/hetero.py)
        s = stage_strategy_cached(p_base, shape, st, cache) if s is None else s
        links = p2p_links_cached(cluster, shape, i, cache) if links is None else links
        if cache is not None:
            cache[s_in], cache[l_in] = s, links
    key = ("affine", g.name, s, i, m, links)
    if cache is not None and key in cache:
        cache[pre] = cache[key]
        return cache[key]
    vals = []
    for n in (1, 2):
        c = stage_cost(model, g, job, s, i, 0, n, m, p2p_links=links, memo=cache)
        vals.append((c.time_s, c.memory_gib))
    (t1, m1), (t2, m2) = vals
    out = (t2 - t1, t1 - (t2 - t1), m2 - m1, m1 - (m2 - m1))
    if cache is not None:
        cache[key] = cache[pre] = out
    return out


def sweep_single(rows: list[tuple[float, float, float, float, float]], layers: int, m: int,
                 chunk: int = 1) -> list[int] | None:
    """Exact layer split of one shape (see the module docstring): rows (a, c, u, k, cap) per stage,
    `layers` to place in whole chunks of `chunk`, m micro-batches. Returns layers per stage, or None
    when no split fits in memory."""
    a = np.array([r[0] for r in rows], dtype=float)
    c = np.array([r[1] for r in rows], dtype=float)
    u = np.array([r[2] for r in rows], dtype=float)
    k = np.array([r[3] for r in rows], dtype=float)
    cap = np.array([r[4] for r in rows], dtype=float)
    S, Y = len(rows), layers // chunk
    if layers % chunk or Y < S:
        return None
    # memory bound on chunks per stage
    with np.errstate(divide="ignore", invalid="ignore"):
        mem = np.where(u > 0, np.floor((cap - k) / np.where(u > 0, u, 1.0) / chunk + 1e-9), Y)
    mem = np.minimum(mem, Y - (S - 1)).astype(np.int64)
    if (mem < 1).any() or mem.sum() < Y:
        return None
    ac = a * chunk
    ys = np.arange(1, Y + 1)
    taus = np.sort((ac[:, None] * ys[None, :] + c[:, None])[ys[None, :] <= mem[:, None]])
    taus = taus[np.concatenate(([True], taus[1:] != taus[:-1]))] if taus.size else taus   # np.unique, no numpy.ma
    # chunks each stage may take at slowest-stage time tau
    with np.errstate(divide="ignore", invalid="ignore"):
        lim = np.where(ac[None, :] > 0, np.floor((taus[:, None] - c[None, :]) / np.where(ac > 0, ac, 1.0) + 1e-9), Y)
    lim = np.minimum(lim, mem[None, :]).astype(np.int64)
    ok = (lim >= 1).all(axis=1) & (lim.sum(axis=1) >= Y)
    if not ok.any():
        return None
    taus, lim = taus[ok], lim[ok]
    order = np.argsort(a, kind="stable")           # cheapest per layer first
    extra = (lim - 1)[:, order]
    before = np.cumsum(extra, axis=1) - extra
    take = np.clip((Y - S) - before, 0, extra)
    x = np.empty_like(take)
    x[:, order] = take + 1
    t = ac[None, :] * x + c[None, :]
    total = (m - 1) * t.max(axis=1) + t.sum(axis=1)
    best = int(np.lexsort((taus, np.round(total, 12)))[0])
    return [int(v) * chunk for v in x[best]]


def _solve_template(model, cluster, job, t: Template, base: StrategySpec, memory_frac: float,
                    time_limit_s: float, cache: dict | None = None, sp: bool | None = None
                    ) -> tuple[PipelinesSpec, str, float, float] | None:
    """The best solution of template t on the plan-wide knobs of `base`; `sp`: the plan-wide sequence parallelism
    (None: base's own, which StrategySpec turns off at its tp 1 -- the search passes the user's choice, on unless
    --no-sequence-parallel; each stage runs it where its tp > 1)."""
    try:
        return _solve_template_cp(model, cluster, job, t, base, memory_frac, time_limit_s, cache, sp)
    except SpecError:
        return None


def _solve_template_cp(model, cluster, job, t: Template, base: StrategySpec, memory_frac: float,
                       time_limit_s: float, cache: dict | None = None, sp: bool | None = None
                       ) -> tuple[PipelinesSpec, str, float, float] | None:
    B = job.global_batch
    shapes_st = []
    for r, segs, kn in t.shapes:
        stages = []
        for g, tp, n in segs:
            stages += [StageSpec(g, (0, 1), tp)] * n
        shapes_st.append((r, stages, kn))
    p_base = PipelinesSpec(tuple(PipelineShape(r, 1, tuple(st), kn) for r, st, kn in shapes_st),
                           micro_batch=base.micro_batch, zero=base.zero, recompute=base.recompute,
                           sequence_parallel=bool(base.sequence_parallel) if sp is None else sp,
                           attention=base.attention, runtime=base.runtime)
    # sequences per micro-batch step of one shape: replicas x its micro-batch size
    units = [r * p_base.knob(sh, "micro_batch") for (r, _, _), sh in zip(shapes_st, p_base.shapes, strict=True)]
    if len(shapes_st) == 1 and B % units[0]:
        return None
    # per-layer coefficients at a representative micro-batch count (in-flight activations depend on
    # min(pp - i, m); use the even share of the batch)
    m_even = max(1, B // max(1, sum(units)))
    coef = []
    for j, (_r, stages, _kn) in enumerate(shapes_st):
        rows = []
        for i, st in enumerate(stages):
            a, c, u, k = _affine(model, cluster, job, p_base, stages, j, i, m_even, cache)
            cap = cluster.group(st.group).chip.need("memory_gib") * memory_frac
            if k + u > cap:
                return None          # even one layer per stage does not fit
            rows.append((a, c, u, k, cap))
        coef.append(rows)
    if len(shapes_st) == 1:
        (r, stages, kn), sh = shapes_st[0], p_base.shapes[0]
        counts = sweep_single(coef[0], model.layers, B // units[0], p_base.knob(sh, "vpp"))
        if counts is None:
            return None
        start, out = 0, []
        for s_, n in zip(stages, counts, strict=True):
            out.append(StageSpec(s_.group, (start, start + n), s_.tp))
            start += n
        m1 = B // units[0]
        t = [a * n + c for (a, c, *_), n in zip(coef[0], counts, strict=True)]
        # the pipeline time of the linear model (a lower bound of the exact step: no DP sync or optimizer)
        return replace(p_base, shapes=(PipelineShape(r, m1, tuple(out), kn),)), "OPTIMAL", 0.0, \
            (m1 - 1) * max(t) + sum(t)
    # Batch window: around the split proportional to each shape's speed (sequences/s) at an even
    # layer split.
    speed = []
    for (_r, stages, _kn), rows, un in zip(shapes_st, coef, units, strict=True):
        per = model.layers / len(stages)
        speed.append(un / max(a * per + c for a, c, *_ in rows))
    centre = [B * sp_ / sum(speed) / un for sp_, un in zip(speed, units, strict=True)]
    # imported here: only templates of several shapes need CP-SAT, and loading it (with pandas) costs
    # ~0.3 s of start-up on every plan
    from ortools.sat.python import cp_model

    mdl = cp_model.CpModel()
    T = mdl.NewIntVar(0, 10**13, "T")
    xs, choice = [], []
    for j, ((_r, stages, _kn), rows) in enumerate(zip(shapes_st, coef, strict=True)):
        vpp = p_base.knob(p_base.shapes[j], "vpp")
        if model.layers % vpp:
            return None
        # x = vpp * y: every stage holds whole model chunks (interleaved schedule)
        ys = [mdl.NewIntVar(1, model.layers // vpp, f"y{j}_{i}") for i in range(len(stages))]
        x = [vpp * y for y in ys]
        mdl.Add(sum(ys) * vpp == model.layers)
        tau = mdl.NewIntVar(0, 10**10, f"tau{j}")
        ts = []
        for i, (a, c, u, k, cap) in enumerate(rows):
            mdl.Add(int(round(u / MEM_UNIT_GIB)) * x[i] + int(math.ceil(k / MEM_UNIT_GIB)) <= int(cap / MEM_UNIT_GIB))
            ti = mdl.NewIntVar(0, 10**10, f"t{j}_{i}")
            mdl.Add(ti == int(math.ceil(a / TIME_UNIT_S)) * x[i] + int(math.ceil(max(c, 0.0) / TIME_UNIT_S)))
            mdl.Add(tau >= ti)
            ts.append(ti)
        hi = B // units[j]
        values = [hi] if len(shapes_st) == 1 else \
            range(max(0, int(centre[j]) - BATCH_WINDOW), min(hi, int(centre[j]) + BATCH_WINDOW + 1) + 1)
        bs = {}
        for v in values:
            b = mdl.NewBoolVar(f"m{j}={v}")
            bs[v] = b
            if v >= 1:
                # T >= (v - 1) * tau + sum_i t_i   (1F1B with unequal stages)
                mdl.Add(T >= (v - 1) * tau + sum(ts)).OnlyEnforceIf(b)
        mdl.AddExactlyOne(bs.values())
        xs.append(ys)
        choice.append(bs)
    mdl.Add(sum(un * v * b for un, bs in zip(units, choice, strict=True) for v, b in bs.items()) == B)
    mdl.Minimize(T)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_deterministic_time = max(0.05, time_limit_s)
    solver.parameters.relative_gap_limit = GAP_LIMIT
    for (_r, stages, _kn), sh, ys in zip(shapes_st, p_base.shapes, xs, strict=True):
        vpp = p_base.knob(sh, "vpp")
        for yi, (lo, hi_) in zip(ys, even_split(model.layers // vpp, len(stages)), strict=True):
            mdl.AddHint(yi, hi_ - lo)
    st = solver.Solve(mdl)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    shapes = []
    for (r, stages, kn), sh, ys, bs in zip(shapes_st, p_base.shapes, xs, choice, strict=True):
        mv = next(v for v, b in bs.items() if solver.Value(b))
        if mv == 0:
            continue
        vpp = p_base.knob(sh, "vpp")
        start, out = 0, []
        for s_, yv in zip(stages, ys, strict=True):
            n = vpp * solver.Value(yv)
            out.append(StageSpec(s_.group, (start, start + n), s_.tp))
            start += n
        shapes.append(PipelineShape(r, mv, tuple(out), kn))
    obj, bound = solver.ObjectiveValue(), solver.BestObjectiveBound()
    gap = 0.0 if obj <= 0 else max(0.0, (obj - bound) / obj)
    status = "OPTIMAL" if st == cp_model.OPTIMAL else "FEASIBLE"
    return replace(p_base, shapes=tuple(shapes)), status, gap, 0.0   # no bound used for several shapes


def _micro_batch(t: Template, v: StrategySpec) -> int:
    """The micro-batch of a one-shape template solved at variant v (its shape's own, else the plan-wide)."""
    return t.shapes[0][2].micro_batch or v.micro_batch


def _spans(t: Template) -> bool:
    """Whether t is one pipeline across two or more groups (what the climb starts from and moves)."""
    return len(t.shapes) == 1 and len({g for g, _tp, _n in t.shapes[0][1]}) > 1


def _solve_new(model, cluster, job, todo: list[tuple[Template, StrategySpec]], tried: set, refusal_memo: dict,
               memory_frac: float, per: float, cache: dict, sp: bool | None, parallel: bool, solved: list,
               solved_tv: dict) -> tuple[int, list]:
    """Solve the templates of `todo` not in `tried` (adding them) that the runtime may run whatever their split,
    over the usable cores when `parallel`; append their solutions to `solved` (and `solved_tv`), in `todo`'s order.
    Returns (how many templates were solved, the new `solved` entries)."""
    frontier: list[tuple[Template, StrategySpec]] = []
    for tv in todo:
        if tv not in tried:
            tried.add(tv)
            if _template_refusal(model, cluster, tv[0], tv[1], refusal_memo, sp) is None:
                frontier.append(tv)
    if not frontier:
        return 0, []
    sols = _solve_all(model, cluster, job, frontier, memory_frac, per, cache, sp) if parallel else \
        {tv: _solve_template(model, cluster, job, tv[0], tv[1], memory_frac, per, cache, sp) for tv in frontier}
    new = []
    for t2, v in frontier:
        sol = sols[(t2, v)]
        if sol is not None:
            new.append((sol[3], f"{t2.label()} recompute {v.recompute}", sol))
            solved_tv[new[-1][1]] = (t2, v)
    solved += new
    return len(frontier), new


def _combo(t: Template) -> tuple[tuple[str, int], ...]:
    """The (group, tp) pairs of a one-shape template."""
    return tuple(sorted({(g, tp) for g, tp, _n in t.shapes[0][1]}))


def _tp_climb(model, cluster, job, lim: Limits, variants: list[StrategySpec], solved: list, solved_tv: dict,
              tried: set, memory_frac: float, per: float, cache: dict, refusal_memo: dict, deadline: float,
              parallel: bool, sp: bool | None = None, micro_batch: int | None = None) -> int:
    """Hill-climb over tp and replicas from the best solutions. Each round solves (1) the unsolved neighbours
    (hetero_templates.climb_neighbours: one group's tp or the replicas) of the TP_CLIMB_TOP best spanning solutions
    by exact step (of the TP_CLIMB_POOL best by linear time), and (2) every spanning template (spanning_templates:
    every order, replica count and recompute variant, at the best solution's micro-batch) of each tp combination
    one group's tp away from the best solution's, or with every group's tp doubled or halved, that no template had
    yet -- a group's other tp may need another order or recomputation to fit. It appends their solutions to
    `solved` (and `solved_tv`), and stops when a round does not lower the best exact step, after TP_CLIMB_ROUNDS
    rounds, or at the deadline. It climbs from solutions the runtime runs only, not at all when the best of them
    is further than POLISH_WITHIN behind the best solution of any kind (of the TP_CLIMB_POOL best by linear time),
    and skips templates the runtime refuses whatever their split. `micro_batch`: climb from (and so among) the
    solutions at that micro-batch only (`solve` climbs once per micro-batch: the tp and replicas a micro-batch needs
    differ, and the best start at one micro-batch may be several moves from the best plan at another). Returns how
    many templates it solved. Deterministic: candidates in (step, label) order, families in group and tp order."""
    n = 0
    groups = {g.name: g for g in cluster.groups}
    # a tp combination whose family was solved at a micro-batch is not solved again at it
    visited = {(_combo(t), _micro_batch(t, v)) for t, v in tried if len(t.shapes) == 1}

    def ranked_exact(entries: list) -> list[tuple[float, str]]:
        """(exact step, label) of the TP_CLIMB_POOL best spanning one-pipeline solutions the runtime runs, by
        linear time (a lower bound that leaves out DP and bridge traffic, so it cannot rank them alone); their
        stage costs are memoised in `cache`, which the search's own exact estimates read back."""
        out = []
        for _t_lin, lab, sol in sorted(entries, key=lambda x: (x[0], x[1])):
            t, v = solved_tv[lab]
            if len(out) == TP_CLIMB_POOL:
                break
            if micro_batch is not None and _micro_batch(t, v) != micro_batch:
                continue
            if _spans(t) and _refusal(cluster, model, sol[0]) is None:
                e = _exact(model, cluster, job, sol[0], memory_frac, cache)
                if e is not None:
                    out.append((e.step_time_s, lab))
        return sorted(out)

    pool = ranked_exact(solved)
    # a pipeline across groups further behind the best plan found than the search's polish window is not climbed
    # from (the search would neither estimate nor polish its neighbours' like): e.g. the 16,384-device plan, where
    # the H100 group alone is 22 % faster than any pipeline across groups
    best_any = min((e.step_time_s for _t, _lab, sol in sorted(solved, key=lambda x: (x[0], x[1]))[:TP_CLIMB_POOL]
                    if _refusal(cluster, model, sol[0]) is None
                    and (e := _exact(model, cluster, job, sol[0], memory_frac, cache)) is not None), default=math.inf)
    if pool and pool[0][0] > best_any * POLISH_WITHIN:
        return 0
    for _ in range(TP_CLIMB_ROUNDS):
        if not pool or time.perf_counter() > deadline:
            break
        best = pool[0][0]
        # climbing from a refused solution finds its refused neighbours, and with nothing accepted the "no plan"
        # error stays what it was: only solutions the runtime runs start a climb
        starts = [solved_tv[lab] for _e, lab in pool[:TP_CLIMB_TOP]]
        cand: list[tuple[Template, StrategySpec]] = []
        for t, v in starts:
            cand += [(t2, v) for t2 in climb_neighbours(model, cluster, job, t, _micro_batch(t, v), lim, memory_frac)]
        kn0 = starts[0][0].shapes[0][2]
        combo = dict(_combo(starts[0][0]))
        sub = [g for g in cluster.groups if g.name in combo]
        opts = {name: tp_options(model, groups[name], lim) for name in combo}
        moves = [{**combo, name: tp2} for name in combo for tp2 in opts[name]]
        # every group's tp doubled or halved together: the model-parallel width of the whole pipeline
        moves += [c for c in ({k: x * 2 for k, x in combo.items()}, {k: x // 2 for k, x in combo.items()})
                  if all(c[k] in opts[k] for k in c)]
        b0 = _micro_batch(*starts[0])
        for move in moves:
            c2 = tuple(sorted(move.items()))
            if (c2, b0) in visited:
                continue
            visited.add((c2, b0))
            fam = spanning_templates(model, job, sub, {k: [x] for k, x in c2}, variants[0], lim, memory_frac)
            cand += [(t2, v) for t2 in fam if t2.shapes[0][2] == kn0 for v in variants]
        k, new = _solve_new(model, cluster, job, cand, tried, refusal_memo, memory_frac, per, cache, sp, parallel,
                            solved, solved_tv)
        if not k:
            break
        n += k
        pool = sorted(pool + ranked_exact(new))[:TP_CLIMB_POOL]
        if pool[0][0] >= best:
            break
    return n


def _spanning_bests(model, cluster, solved: list, solved_tv: dict, memory_frac: float, cache: dict, job) -> dict:
    """micro-batch -> (exact step, label) of its best pipeline across groups the runtime runs, among the
    TP_CLIMB_POOL best solutions of each micro-batch by linear time (as `_tp_climb` ranks its starts)."""
    seen: dict[int, int] = {}
    out: dict[int, tuple[float, str]] = {}
    for _t_lin, lab, sol in sorted(solved, key=lambda x: (x[0], x[1])):
        t, v = solved_tv[lab]
        if not _spans(t):
            continue
        b = _micro_batch(t, v)
        if seen.get(b, 0) >= TP_CLIMB_POOL or _refusal(cluster, model, sol[0]) is not None:
            continue
        seen[b] = seen.get(b, 0) + 1
        e = _exact(model, cluster, job, sol[0], memory_frac, cache)
        if e is not None and (b not in out or (e.step_time_s, lab) < out[b]):
            out[b] = (e.step_time_s, lab)
    return out


def _climb(model, cluster, job, lim: Limits, variants: list[StrategySpec], solved: list, solved_tv: dict,
           tried: set, memory_frac: float, per: float, cache: dict, refusal_memo: dict, deadline: float,
           parallel: bool, sp: bool | None = None) -> int:
    """The climb over tp and replicas (`_tp_climb`) once per micro-batch of the pipelines across groups solved,
    smallest first; then the tp combination of the best of them at every other micro-batch of the spanning
    templates (SPANNING_MICRO_BATCHES, unless pinned), and a climb again at each micro-batch where that found a
    better start. Why: a group's preferred tps come from its plans alone, so a micro-batch whose pipelines need
    wider tps than the templates' may have no start that fits, or one several moves from its best plan; the best
    tp combination at one micro-batch is the nearest start at another (pin audit, docs/VALIDATION.md: mixtral-8x7b
    on a100-sxm4-80g:8x8+ascend-910b:4x8, batch 512: 8.2 % faster at micro-batch 2 and tp 8 on both groups).
    Returns how many templates it solved."""
    n = 0

    def climb_at(b: int) -> None:
        nonlocal n
        n += _tp_climb(model, cluster, job, lim, variants, solved, solved_tv, tried, memory_frac, per, cache,
                       refusal_memo, deadline, parallel, sp, micro_batch=b)

    for b in sorted(_spanning_bests(model, cluster, solved, solved_tv, memory_frac, cache, job)):
        climb_at(b)
    before = _spanning_bests(model, cluster, solved, solved_tv, memory_frac, cache, job)
    if not before or lim.micro_batch is not None or time.perf_counter() > deadline:
        return n
    best_b = min(before, key=lambda b: before[b])
    t0, _v0 = solved_tv[before[best_b][1]]
    combo = _combo(t0)
    groups = {g.name: g for g in cluster.groups}
    sub = [groups[name] for name, _tp in combo]
    fam = spanning_templates(model, job, sub, {name: [tp] for name, tp in combo}, variants[0], lim, memory_frac)
    k, _new = _solve_new(model, cluster, job, [(t2, v) for t2 in fam if _micro_batch(t2, variants[0]) != best_b
                                               for v in variants],
                         tried, refusal_memo, memory_frac, per, cache, sp, parallel, solved, solved_tv)
    if not k:
        return n
    n += k
    after = _spanning_bests(model, cluster, solved, solved_tv, memory_frac, cache, job)
    for b in sorted(after):
        if b != best_b and (b not in before or after[b] < before[b]):
            climb_at(b)
    return n


def _solve_all(model, cluster, job, todo: list[tuple[Template, StrategySpec]], memory_frac: float, per: float,
               cache: dict, sp: bool | None = None
               ) -> dict[tuple[Template, StrategySpec], tuple[PipelinesSpec, str, float, float] | None]:
    """_solve_template of every (template, variant) in `todo`, in contiguous blocks, one per usable core
    (search/forked.py): neighbouring templates share groups and so their memoised stage costs. The same values
    as solving them one by one (each solve is pure; `cache` only memoises)."""
    if not todo:
        return {}       # every template refused whatever its split: nothing to solve
    n = max(1, min(usable_cores(), len(todo)))
    size = -(-len(todo) // n)
    blocks = [todo[i:i + size] for i in range(0, len(todo), size)]
    done = in_parallel([partial(_solve_block, model, cluster, job, b, memory_frac, per, cache, sp) for b in blocks])
    return {tv: sol for b, sols in zip(blocks, done, strict=True) for tv, sol in zip(b, sols, strict=True)}


def _solve_block(model, cluster, job, block: list[tuple[Template, StrategySpec]], memory_frac: float, per: float,
                 cache: dict, sp: bool | None = None) -> list[tuple[PipelinesSpec, str, float, float] | None]:
    return [_solve_template(model, cluster, job, t, v, memory_frac, per, cache, sp) for t, v in block]


def polish(model, cluster, job, p: PipelinesSpec, memory_frac: float,
           max_evals: int = 400, cache: dict | None = None) -> tuple[PipelinesSpec, Estimate | None]:
    """Exact-model local search: move one layer across a stage boundary (or to the stage two places away) or
    micro-batches between shapes while the step time improves. First improvement, scanning on from where the last move
    was found, until a full pass finds none or `max_evals` exact evaluations (a count, not a
    clock, so results are reproducible) are spent. `cache`: the search's stage-cost memo (pure), shared."""
    cache = {} if cache is None else cache
    best = _exact(model, cluster, job, p, memory_frac, cache)
    if best is None:
        return p, None
    evals = 0
    # improve, then smooth towards balanced splits at equal time; smoothing can open a new improving
    # move, so repeat until a round changes nothing (or the evaluation budget is spent)
    while True:
        pos, since, moved = 0, 0, False
        cands = list(_neighbours(p))
        while cands and since < len(cands) and evals < max_evals:
            cand = cands[pos % len(cands)]
            pos += 1
            since += 1
            evals += 1
            e = _exact(model, cluster, job, cand, memory_frac, cache)
            if e is not None and e.step_time_s < best.step_time_s * (1 - 1e-12):
                p, best, since = cand, e, 0
                cands = list(_neighbours(p))
        # Among equally fast splits prefer balanced ones: move a layer from the larger to the smaller of
        # two adjacent identical stages while the step time does not grow (each move shrinks the imbalance).
        smoothed = True
        while smoothed and evals < 2 * max_evals:
            smoothed = False
            for cand in _smoothing_moves(p):
                evals += 1
                e = _exact(model, cluster, job, cand, memory_frac, cache)
                if e is not None and e.step_time_s <= best.step_time_s * (1 + 1e-12):
                    moved = True
                    p, best, smoothed = cand, e, True
                    break
        if not moved or evals >= max_evals:
            return p, best


def _smoothing_moves(p: PipelinesSpec):
    for j, sh in enumerate(p.shapes):
        vpp = p.knob(sh, "vpp")
        for i in range(len(sh.stages) - 1):
            a, b = sh.stages[i], sh.stages[i + 1]
            if (a.group, a.tp) != (b.group, b.tp) or abs(a.n_layers - b.n_layers) < 2 * vpp:
                continue
            d = -vpp if a.n_layers > b.n_layers else vpp
            yield _move_cut(p, j, i, a.layers[1] + d)


def _move_cut(p: PipelinesSpec, j: int, i: int, cut: int) -> PipelinesSpec:
    """Plan p with the boundary between stages i and i+1 of shape j moved to layer `cut`."""
    sh = p.shapes[j]
    a, b = sh.stages[i], sh.stages[i + 1]
    stages = list(sh.stages)
    stages[i] = StageSpec(a.group, (a.layers[0], cut), a.tp)
    stages[i + 1] = StageSpec(b.group, (cut, b.layers[1]), b.tp)
    shapes = list(p.shapes)
    shapes[j] = replace(sh, stages=tuple(stages))
    return replace(p, shapes=tuple(shapes))


def _neighbours(p: PipelinesSpec):
    for j, sh in enumerate(p.shapes):
        step = p.knob(sh, "vpp")
        for i in range(len(sh.stages) - 1):
            a, b = sh.stages[i], sh.stages[i + 1]
            for d in (step, -step):
                na, nb = a.n_layers + d, b.n_layers - d
                if na < 1 or nb < 1:
                    continue
                yield _move_cut(p, j, i, a.layers[0] + na)
    for j, k in product(range(len(p.shapes)), repeat=2):
        sj, sk = p.shapes[j], p.shapes[k]
        if j == k:
            continue
        # move micro-batches from shape j to k keeping the batch: u_j dj = u_k dk (u = replicas x micro-batch)
        uj, uk = sj.replicas * p.knob(sj, "micro_batch"), sk.replicas * p.knob(sk, "micro_batch")
        g = math.gcd(uj, uk)
        dj, dk = uk // g, uj // g
        if sj.micro_batches <= dj:
            continue
        shapes = list(p.shapes)
        shapes[j] = replace(sj, micro_batches=sj.micro_batches - dj)
        shapes[k] = replace(sk, micro_batches=sk.micro_batches + dk)
        yield replace(p, shapes=tuple(shapes))
    # a layer from a stage to the one two places away (both cuts between them shift by one step): a per-step term
    # the linear model leaves out (the exposed DP reduction grows with a stage's parameters) can make the best split
    # two adjacent moves away, with the intermediate split slower than both. Two places only: farther pairs cost
    # S^2 evaluations a pass on long pipelines (the 16,384-device three-family plan: 1.8 -> 4.0 s)
    for j, sh in enumerate(p.shapes):
        step = p.knob(sh, "vpp")
        for i in range(len(sh.stages) - 2):
            c1, c2 = sh.stages[i].layers[1], sh.stages[i + 1].layers[1]
            for d in (step, -step):     # stage i + 2 -> i, stage i -> i + 2
                if sh.stages[i + 2 if d > 0 else i].n_layers - step < 1:
                    continue
                yield _move_cut(_move_cut(p, j, i, c1 + d), j, i + 1, c2 + d)


def standalone_throughputs(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, memory_frac: float,
                           time_limit_s: float | None = 10.0,
                           searched: dict[str, list[Estimate]] | None = None, lim: Limits = Limits(),
                           runtime: str = "megatron", known: dict | None = None) -> dict[str, float]:
    """Tokens/s of the best plan that uses each group alone (same model, job, caps and pins): the full
    homogeneous search, and the uneven-split pipelines this module also considers; the faster. `known`:
    standalone_best results computed beforehand (hetero_templates.standalone_best_known)."""
    out = {}
    for g in cluster.groups:
        best = 0.0
        if runs_on(g, job, runtime):
            plans = searched[g.name] if searched is not None and g.name in searched else \
                _search_group(model, g, job, memory_frac, 1, time_limit_s, lim, runtime)
            if plans:
                best = plans[0].tokens_per_s
            ranked = []
            for base in _standalone_bases(lim):
                ranked += standalone_best_known(model, g, job, base, memory_frac, lim, 1, known)
            if ranked:
                best = max(best, job.tokens / min(r[0] for r in ranked))
        out[g.name] = best
    return out


def _standalone_bases(lim: Limits) -> list[StrategySpec]:
    """The plan-wide settings standalone_throughputs tries each group's uneven-split pipelines at."""
    return [StrategySpec(micro_batch=lim.micro_batch or 1, zero=1 if lim.zero is None else lim.zero, recompute=rc,
                         sequence_parallel=lim.plan_sequence_parallel)
            for rc in ([lim.recompute] if lim.recompute else ["selective", "full"])]


def _group_work(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, runtime: str, variants: list[StrategySpec],
                memory_frac: float, per_group_top: int, time_limit_s: float | None, lim: Limits
                ) -> tuple[dict[str, list[Estimate]], dict]:
    """Each group's homogeneous search, and the standalone_best calls that `templates` (per variant) and
    `standalone_throughputs` make, computed together over the usable cores (search/forked.py): they are
    independent and pure, so their values are those the serial calls give, only sooner. A standalone_best call
    that raises is left out of `known` (the caller then makes it, and it raises there, as before)."""
    calls: list[tuple[GroupSpec, StrategySpec, int]] = []
    for v in variants:
        calls += [(g, v, per_group_top) for g in cluster.groups if runs_on(g, job)]        # templates' group_plans
    calls += [(g, b, 1) for g in cluster.groups if runs_on(g, job, runtime) for b in _standalone_bases(lim)]
    # each distinct call once (by what it depends on); standalone_best(keep=k) is the first k entries of a larger
    # keep's list (its docstring), so only the largest keep of each (group, base) is computed
    runs: dict[tuple, tuple[GroupSpec, StrategySpec, int]] = {}     # key without keep -> the call at the largest
    keeps: dict[tuple, set[int]] = {}
    for g, b, keep in calls:
        k = standalone_key(g, b, memory_frac, lim, None)
        keeps.setdefault(k, set()).add(keep)
        if k not in runs or keep > runs[k][2]:
            runs[k] = (g, b, keep)
    thunks: list[Callable[[], object]] = [
        partial(_search_group, model, g, job, memory_frac, per_group_top, time_limit_s, lim, runtime)
        for g in cluster.groups]
    thunks += [partial(_or_none, standalone_best, model, g, job, b, memory_frac, lim=lim, keep=keep)
               for g, b, keep in runs.values()]
    values = in_parallel(thunks)
    searched = {g.name: values[i] for i, g in enumerate(cluster.groups)}
    known = {standalone_key(g, b, memory_frac, lim, keep): val[:keep]
             for (k, (g, b, _)), val in zip(runs.items(), values[len(cluster.groups):], strict=True)
             if val is not None for keep in keeps[k]}
    return searched, known


def _or_none(f: Callable, *args, **kwargs):
    """f(*args, **kwargs), or None when it raises (the caller then calls f itself, where it would have)."""
    try:
        return f(*args, **kwargs)
    except Exception:       # noqa: BLE001 -- re-raised by the caller's own call
        return None


def normalized(p: PipelinesSpec) -> PipelinesSpec:
    """The same plan with every knob that all shapes share stated once, plan-wide, and only the
    differing ones per shape: the plan file never states a plan-wide value its pipelines contradict."""
    plan_wide = ("micro_batch", "zero", "recompute", "sequence_parallel")
    shared = {}
    for name in ("micro_batch", "zero", "recompute", "sequence_parallel", "cp", "ep", "etp", "vpp"):
        vals = {p.knob(sh, name) for sh in p.shapes}
        if len(vals) == 1:
            shared[name] = vals.pop()
    shapes = []
    for sh in p.shapes:
        kn = sh.knobs
        for name, v in shared.items():
            if name in plan_wide or v == 1:
                kn = replace(kn, **{name: None})
        shapes.append(replace(sh, knobs=kn))
    return replace(p, shapes=tuple(shapes), **{k: v for k, v in shared.items() if k in plan_wide})


def heterogeneous_efficiency(tokens_per_s: float, standalone: dict[str, float]) -> float:
    """SPEC §4: the plan's tokens/s / sum over groups of the best single-group plan's tokens/s."""
    total = sum(standalone.values())
    return tokens_per_s / total if total > 0 else 0.0


def pipelines_dicts(p: PipelinesSpec) -> tuple[list[dict], dict]:
    """The plan-file form of the shapes (SPEC §4 `pipelines`) and the plan-wide knobs, for runtime rules."""
    shapes = [{"replicas": sh.replicas, "micro_batches": sh.micro_batches, "strategy": dict(sh.knobs.items()),
               "stages": [{"group": st.group, "layers": list(st.layers), "tp": st.tp} for st in sh.stages]}
              for sh in p.shapes]
    defaults = {"micro_batch": p.micro_batch, "zero": p.zero, "recompute": p.recompute,
                "sequence_parallel": p.sequence_parallel, "attention": p.attention, "cp": 1, "ep": 1, "etp": 1,
                "vpp": 1}
    return shapes, defaults


def _runtime_ok(cluster: ClusterSpec, model: ModelSpec, p: PipelinesSpec, refused: list[str]) -> bool:
    """Whether the plan's runtime runs these shapes (its module's `shape_refusal`, when it has one)."""
    why = _refusal(cluster, model, p)
    if why:
        refused.append(why)
    return why is None


def _refusal(cluster: ClusterSpec, model: ModelSpec, p: PipelinesSpec) -> str | None:
    """Why the plan's runtime does not run these shapes (its module's `shape_refusal`), None when it runs them.
    It reads the plan only (shapes, knobs, groups), never its estimate."""
    rule = getattr(runtimes.module(p.runtime), "shape_refusal", None)
    if rule is None:
        return None
    shapes, defaults = pipelines_dicts(p)
    return rule(shapes, defaults, **_refusal_context(cluster, model))


def _refusal_context(cluster: ClusterSpec, model: ModelSpec) -> dict:
    return {"devices_per_node": {g.name: g.devices_per_node for g in cluster.groups},
            "tie_embeddings": model.tie_embeddings, "families": {g.name: g.chip.family for g in cluster.groups}}


def _template_refusal(model: ModelSpec, cluster: ClusterSpec, t: Template, base: StrategySpec,
                      memo: dict | None = None, sp: bool | None = None) -> str | None:
    """Why the runtime refuses every solution of template t whatever its layer split (the runtime's
    `split_free_refusal`), None when it may run one or cannot tell without the split. `memo`: what the calls of
    one search share (the rule, the plan-wide knobs of each base, the cluster's groups)."""
    memo = {} if memo is None else memo
    key = ("template-refusal", base, sp)
    if key not in memo:
        # what pipelines_dicts gives `shape_refusal` for the template's solutions (built on the same base)
        _, defaults = pipelines_dicts(PipelinesSpec((), micro_batch=base.micro_batch, zero=base.zero,
                                                    recompute=base.recompute,
                                                    sequence_parallel=bool(base.sequence_parallel) if sp is None
                                                    else sp,
                                                    attention=base.attention, runtime=base.runtime))
        memo[key] = (getattr(runtimes.module(base.runtime), "split_free_refusal", None), defaults,
                     _refusal_context(cluster, model))
    rule, defaults, ctx = memo[key]
    if rule is None or len(t.shapes) != 1 or sum(n for _g, _tp, n in t.shapes[0][1]) > model.layers:
        return None
    r, segs, kn = t.shapes[0]
    return rule({"replicas": r, "strategy": dict(kn.items()), "segments": segs}, defaults, **ctx)


def _homogeneous_pipelines(model: ModelSpec, job: JobSpec, group: str, s: StrategySpec,
                           runtime: str) -> PipelinesSpec | None:
    """A homogeneous plan of one group as a one-shape PipelinesSpec with Megatron's own layer split
    (specs/strategy.py stage_layers: first/last stage counts, interleaving kept); None when the batch does
    not split into whole micro-batches per replica."""
    if job.global_batch % (s.dp * s.micro_batch):
        return None
    ends = list(accumulate(stage_layers(s, model.layers)))
    stages = tuple(StageSpec(group, (a, b), s.tp) for a, b in zip([0] + ends[:-1], ends, strict=True))
    knobs = ShapeKnobs(cp=s.cp, ep=s.ep, etp=s.etp, vpp=s.vpp)
    shape = PipelineShape(s.dp, job.global_batch // (s.dp * s.micro_batch), stages, knobs)
    return PipelinesSpec((shape,), micro_batch=s.micro_batch, zero=s.zero, recompute=s.recompute,
                         sequence_parallel=bool(s.sequence_parallel), attention=s.attention, runtime=runtime)


def solve(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, base: StrategySpec, *, memory_frac: float = 0.9,
          time_limit_s: float | None = None, per_group_top: int = 2, recompute_pinned: bool = False,
          lim: Limits | None = None, progress: Callable[[str, int, int], None] | None = None,
          alternatives: int = 0) -> HeteroResult:
    """Best heterogeneous plan within the caps and pins `lim`, and up to `alternatives` more (`_alternatives`).
    Tries recompute selective then full unless pinned. `time_limit_s` (None: no limit, and the result is reproducible to the byte): templates
    are solved in label order; at the limit the remaining ones are skipped, and the status says FEASIBLE
    with how many were solved (the single-group searches get the same limit). `progress(stage, done, total)`,
    when given, is told how far the search is (after each group's search, each template solved, each plan
    polished); it does not change the result."""
    t0 = time.perf_counter()
    tell = progress if progress is not None else (lambda stage, done, total: None)
    deadline = math.inf if time_limit_s is None else t0 + time_limit_s
    if lim is None:
        lim = Limits(recompute=base.recompute if recompute_pinned else None)
    sp = lim.plan_sequence_parallel
    variants = recompute_variants(model, cluster, job, base, lim, pinned=bool(recompute_pinned or lim.recompute))
    tell("searching each chip group alone", 0, len(cluster.groups))
    searched, known = _group_work(model, cluster, job, base.runtime, variants, memory_frac, per_group_top,
                                  time_limit_s, lim)
    one_pipeline = bool(getattr(runtimes.module(base.runtime), "ONE_PIPELINE", False))
    results = []
    seen: set[Template] = set()
    solves = cp_sat = 0
    pending: list[tuple[Template, StrategySpec]] = []
    for v in variants:
        temps, _ = _templates(model, cluster, job, v, memory_frac, per_group_top, searched, lim, known)
        for t in temps:
            # templates whose shapes all carry their own knobs do not depend on the variant
            if all(kn.items() for _, _, kn in t.shapes) and t in seen:
                continue
            if one_pipeline and len(t.shapes) > 1:
                continue        # shapes on different groups never merge into the runtime's one pipeline
            seen.add(t)
            pending.append((t, v))
    n_temps = len(pending)
    per = CP_SAT_MAX_PER_TEMPLATE if time_limit_s is None else \
        min(CP_SAT_MAX_PER_TEMPLATE, 0.5 * time_limit_s / max(1, n_temps))
    cache: dict = {}
    solved = []
    stopped = False
    # templates the runtime refuses whatever their layer split (FlagScale: split_free_refusal) are not solved:
    # their solutions would be refused below before being estimated. They count as solved; only the error for
    # "no plan at all", which lists the refusals of plans that fit, solves them (below)
    unsolved_refused: list[tuple[Template, StrategySpec]] = []
    refusal_memo: dict = {}
    solved_tv: dict[str, tuple[Template, StrategySpec]] = {}     # a solution's label -> its template and variant
    # with no time limit every template the runtime may run is solved: solve them over the usable cores first
    # (pure, search/forked.py); the loop below takes each solution in the same order as it would solve it
    refused = [_template_refusal(model, cluster, t, v, refusal_memo, sp) is not None for t, v in pending]
    presolved = None if time_limit_s is not None else _solve_all(
        model, cluster, job, [tv for tv, no in zip(pending, refused, strict=True) if not no], memory_frac, per, cache,
        sp)
    for (t, v), no in zip(pending, refused, strict=True):
        if solved and time.perf_counter() > deadline:
            stopped = True          # --time-limit: keep what is solved (status FEASIBLE below)
            break
        tell("solving pipeline templates", solves, n_temps)
        if no:
            unsolved_refused.append((t, v))
            solves += 1
            continue
        sol = presolved[(t, v)] if presolved is not None else \
            _solve_template(model, cluster, job, t, v, memory_frac, per, cache, sp)
        solves += 1
        cp_sat += len(t.shapes) > 1
        if sol is not None:
            solved.append((sol[3], f"{t.label()} recompute {v.recompute}", sol))
            solved_tv[solved[-1][1]] = (t, v)
    if not stopped:
        climbed = _climb(model, cluster, job, lim, variants, solved, solved_tv, set(pending), memory_frac, per, cache,
                         refusal_memo, deadline, parallel=time_limit_s is None, sp=sp)
        n_temps += climbed
        solves += climbed
    # exact estimates, most promising first; a solution whose linear pipeline time (a lower bound of its
    # exact step) is beyond the polish window of the best exact step so far can neither win nor be polished
    solved.sort(key=lambda x: (x[0], x[1]))
    # keep to what the runtime runs (e.g. FlagScale: one pipeline, no cp/vpp in hetero mode). The runtime's rule
    # reads the plan, not its estimate, so it is asked first and a refused plan is not estimated: it changes
    # nothing above (neither `results` nor the best step), and only the error for "no plan at all" lists the
    # refusals of plans that fit (rebuilt below, in the same order, in that case only)
    refused_unestimated: list[tuple[PipelinesSpec, str]] = []
    best_exact = math.inf
    for t_lin, label, (p, status, gap, _) in solved:
        if t_lin > best_exact * POLISH_WITHIN:
            break
        why = _refusal(cluster, model, p)
        if why is not None:
            refused_unestimated.append((p, why))
            continue
        e = _exact(model, cluster, job, p, memory_frac, cache)
        if e is not None:
            results.append((e.step_time_s, label, p, e, status, gap))
            best_exact = min(best_exact, e.step_time_s)
    n_refused_solved = len(refused_unestimated)
    # each group's best homogeneous plans as they are (their own layer split): the solver re-decides a
    # template's split, and a split Megatron's first/last stages cannot express needs the runtime's hetero
    # mode, which may refuse what the plain plan runs (FlagScale: no cp there), so the best single-group plan
    # would otherwise be lost
    for g in cluster.groups:
        for e0 in searched.get(g.name, []):
            hp = _homogeneous_pipelines(model, job, g.name, e0.strategy, base.runtime)
            why = None if hp is None else _refusal(cluster, model, hp)
            if why is not None:
                refused_unestimated.append((hp, why))
                continue
            e1 = None if hp is None else _exact(model, cluster, job, hp, memory_frac, cache)
            if e1 is not None:
                s0 = e0.strategy
                results.append((e1.step_time_s, f"{s0.dp}x[{g.name} tp{s0.tp} pp{s0.pp} cp{s0.cp} vpp{s0.vpp}, its "
                                f"best plan alone] recompute {s0.recompute}", hp, e1, "OPTIMAL", 0.0))
    refused_homogeneous = refused_unestimated[n_refused_solved:]
    refused: list[str] = []
    # exact-model polish of the most promising solutions (moving layers / micro-batches)
    results.sort(key=lambda r: (r[0], r[1]))
    polished = []
    cut = [r for r in results if r[0] <= results[0][0] * POLISH_WITHIN][:POLISH_TOP] if results else []
    tell("polishing the best plans", 0, len(cut))
    # each polish is pure and independent of the others: over the usable cores (search/forked.py), same values
    budgets = [POLISH_EVALS // 2 if n == 0 else POLISH_EVALS // (2 * max(1, len(cut) - 1)) for n in range(len(cut))]
    done = in_parallel([partial(polish, model, cluster, job, p, memory_frac, b, cache)
                        for (_, _, p, *_), b in zip(cut, budgets, strict=True)])
    for (st_, lab, p, e, status, gap), (p2, e2) in zip(cut, done, strict=True):
        ok2 = e2 is not None and _runtime_ok(cluster, model, p2, refused)
        polished.append((e2.step_time_s, lab, p2, e2, status, gap) if ok2 else (st_, lab, p, e, status, gap))
    results = polished + results[len(cut):]
    if not results:
        if unsolved_refused:
            # the templates refused whatever their split, solved as the loop above would have: with no plan at
            # all, that loop met every solution (best_exact stayed inf), refused or not fitting, in this order
            for t, v in unsolved_refused:
                sol = _solve_template(model, cluster, job, t, v, memory_frac, per, cache, sp)
                if sol is not None:
                    solved.append((sol[3], f"{t.label()} recompute {v.recompute}", sol))
            solved.sort(key=lambda x: (x[0], x[1]))
            refused_unestimated = [(p_, why) for p_, why in ((x[2][0], _refusal(cluster, model, x[2][0]))
                                                             for x in solved) if why is not None]
            refused_unestimated += refused_homogeneous
        # the runtime's refusals of the plans that fit in memory, in the order they were met
        refused = [why for p_, why in refused_unestimated
                   if why and _exact(model, cluster, job, p_, memory_frac, cache) is not None]
        if refused:
            raise SpecError("runtime", f"{base.runtime} runs none of the {len(refused)} plans that fit; first: "
                            f"{refused[0]}")
        if n_temps == 0:
            usable = [g.name for g in cluster.groups if runs_on(g, job, base.runtime)]
            raise SpecError("cluster", f"no pipeline template: no usable chip group ({', '.join(usable) or 'none'}) "
                            "has a plan of its own that fits in memory within the pins and caps"
                            + ("" if len(usable) > 1 else ", and a pipeline across groups needs two usable groups")
                            + f" (tried recompute {', '.join(v.recompute for v in variants)}); add devices, relax "
                            "--max-tp / --max-pp or lower the micro-batch")
        raise SpecError("cluster", f"none of {n_temps} pipeline templates fits in memory (tried recompute "
                        f"{', '.join(v.recompute for v in variants)}); add devices or lower the micro-batch")
    results.sort(key=lambda r: (r[0], r[1]))
    _, label, p, e, status, gap = results[0]
    if stopped:
        status = f"FEASIBLE (time limit: {solves} of {n_temps} templates solved)"
    p = normalized(p)
    e = _exact(model, cluster, job, p, memory_frac, cache) or e
    runners = tuple((lab, e_) for _st, lab, _p, e_, *_ in results[1:1 + RUNNERS_UP])
    tell("the best plan of each chip group alone", 0, 1)
    standalone = standalone_throughputs(model, cluster, job, memory_frac, time_limit_s, searched, lim, base.runtime,
                                        known)
    wider = _wider_plans(model, cluster, job, p, solved, results, memory_frac, cache)
    idle = _idle_reasons(model, cluster, job, p, e, results + wider, base.runtime)
    alts = _alternatives(model, cluster, job, e, results, alternatives, memory_frac, cache, base.runtime, wider)
    return HeteroResult(p, e, status, gap, n_temps, solves, time.perf_counter() - t0, standalone, runners, idle,
                        cp_sat=cp_sat, label=label, alternatives=alts)


def _alternatives(model, cluster, job, best: Estimate, results: list, n: int, memory_frac: float, cache: dict,
                  runtime: str, wider: list = ()) -> tuple[Alternative, ...]:
    """The next `n` plans after the best, in the search's order (exact step time, then label), each normalised
    and estimated as the best is; a plan equal to one before it in step time and peak memory at the plan file's
    rounding (6 significant digits) is the same row and skipped (issue 16: no two rows with the same time and
    memory). Every plan here was estimated exactly and passed the runtime's rules (`solve`). `wider`: _wider_plans'
    plans, read by the idle notes only."""
    out: list[Alternative] = []
    if n <= 0:
        return ()
    seen = {(sig(best.step_time_s), sig(best.peak_memory_gib))}
    note_plans = results + list(wider)   # idle notes as the best plan's: estimated plans and the wider ones
    for _t, lab, p_, e_, *_ in results[1:]:
        if len(out) >= n:
            break
        pn = normalized(p_)
        en = _exact(model, cluster, job, pn, memory_frac, cache) or e_
        k = (sig(en.step_time_s), sig(en.peak_memory_gib))
        if k in seen:
            continue
        seen.add(k)
        out.append(Alternative(lab, pn, en, _idle_reasons(model, cluster, job, pn, en, note_plans, runtime)))
    return tuple(out)


WIDER_TRIES = 16   # solved templates tried per idle group for the idle-devices note (_wider_plans)


def _wider_plans(model, cluster, job, p: PipelinesSpec, solved: list, results: list, memory_frac: float,
                 cache: dict) -> list:
    """For the idle-devices note only (the ranking is not changed): for each group the plan leaves devices of, when
    no exactly estimated plan uses more of it across groups (`results` holds the plans within the polish window and
    each group's best alone), the fastest of the first WIDER_TRIES solved templates that do, in the order of their
    lower bounds, that the runtime runs and that fit, estimated exactly: a mixed plan just outside the window (e.g.
    FlagScale's heterogeneous mode without the cp a group alone uses) is then what the note names, not the group
    alone. Entries are shaped as `results`' (step s, label, plan, estimate, status, gap)."""
    used = p.devices_by_group()
    out = []
    for g in cluster.groups:
        if g.devices - used.get(g.name, 0) <= 0:
            continue
        if any(r[2].devices_by_group().get(g.name, 0) > used.get(g.name, 0) and len(r[2].devices_by_group()) > 1
               for r in results):
            continue
        best = None
        tries = 0
        for _t_lin, label, (p_, status, gap, _) in solved:
            by = p_.devices_by_group()
            if by.get(g.name, 0) <= used.get(g.name, 0) or len(by) < 2:
                continue
            tries += 1
            if tries > WIDER_TRIES:
                break
            if _refusal(cluster, model, p_) is not None:
                continue
            e_ = _exact(model, cluster, job, p_, memory_frac, cache)
            if e_ is not None and (best is None or e_.step_time_s < best[0]):
                best = (e_.step_time_s, label, p_, e_, status, gap)
        if best is not None:
            out.append(best)
    return out


def _nearest_batches(batch: int, cluster: ClusterSpec, pct: float = 2.0) -> str:
    """The batches `--batch-tolerance pct` would try (search/batch_tolerance.py), for the idle-devices note."""
    from baige_plan.search.batch_tolerance import candidate_batches
    near = candidate_batches(batch, cluster, pct)
    if not near:
        return ""
    return f": with {pct:g}, it tries " + ", ".join(f"{b} ({(b - batch) / batch:+.1%})" for b in near)


def _idle_reasons(model, cluster, job, p: PipelinesSpec, e: Estimate, results: list, runtime: str
                  ) -> tuple[tuple[str, int, str], ...]:
    """Why each group with idle devices is not used more: its chip lacks a figure, or the fastest plan
    found that uses more of it is slower by how much, or no such plan fits / runs on the runtime."""
    used = p.devices_by_group()
    out = []
    for g in cluster.groups:
        idle = g.devices - used.get(g.name, 0)
        if idle <= 0:
            continue
        missing = missing_figure(g, job, runtime)
        if missing is not None:
            why = f"its chip file lacks {missing} for {job.precision}"
        else:
            more = sorted((r for r in results if r[2].devices_by_group().get(g.name, 0) > used.get(g.name, 0)),
                          key=lambda r: (r[0], r[1]))
            if more:
                t, lab = more[0][0], more[0][1]
                why = (f"the fastest plan using more of it ({lab}) takes {t:.4g} s per step, "
                       f"{t / e.step_time_s - 1:.1%} slower")
            else:
                why = (f"no plan that uses more of it fits in memory and runs on {runtime} "
                       f"(devices do not divide into whole replicas, or memory)")
            if job.global_batch % max(1, g.devices // max(1, min(g.devices_per_node, g.devices))) != 0:
                # the batch does not split over one replica per node of this group: say how to use it anyway
                why += ("; --batch-tolerance PCT lets the global batch move to a size that splits over whole groups "
                        "(search/batch_tolerance.py)" + _nearest_batches(job.global_batch, cluster))
        out.append((g.name, idle, why))
    return tuple(out)
