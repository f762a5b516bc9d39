"""Heterogeneous plan search: OR-Tools CP-SAT over layer splits and batch shares, inside an
enumeration of pipeline templates (which groups host which stages, tp per group).

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
The product m_j·τ_j is linearised by the indicator rows above (one per candidate v). Exposed
DP/bridge gradient traffic and the optimizer step are not in the linear model; every solution is
re-estimated with the exact cost model (cost/hetero.py), the best ones are polished by moving
layers across stage boundaries and micro-batches between shapes while the exact step time
improves, then ties are broken towards balanced splits. The search reports CP-SAT's status and
the gap of the chosen template. Deterministic: one worker, fixed seed, a deterministic-time
limit, a fixed evaluation budget for the polish.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from itertools import combinations, product

from ortools.sat.python import cp_model

from baige_plan import runtimes
from baige_plan.cost.compute import ChipRates
from baige_plan.cost.estimate import Estimate, stage_cost
from baige_plan.cost.hetero import _p2p_links, _stage_strategy, estimate_pipelines
from baige_plan.errors import SpecError
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.pipeline import PipelineShape, PipelinesSpec, ShapeKnobs, StageSpec
from baige_plan.specs.strategy import StrategySpec
from baige_plan.specs.topology import ClusterSpec, GroupSpec

TIME_UNIT_S = 1e-5
MEM_UNIT_GIB = 1e-3
MAX_SPANNING_REPLICAS = 6   # replica counts tried per spanning order (fewest pipeline stages first)
GAP_LIMIT = 0.002           # CP-SAT stops within 0.2% of its bound (reported as the gap)
POLISH_EVALS = 600          # exact evaluations spent polishing (half on the best solution)
CP_SAT_MAX_PER_TEMPLATE = 0.1  # deterministic seconds of CP-SAT per template at most
POLISH_TOP = 8              # at most this many solutions are polished with the exact model,
POLISH_WITHIN = 1.25        # those within 25% of the best
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


@dataclass(frozen=True)
class Template:
    """Shapes as (replicas, ((group, tp, stages_on_group), ...), knobs) in pipeline order."""

    shapes: tuple[tuple[int, tuple[tuple[str, int, int], ...], ShapeKnobs], ...]

    def label(self) -> str:
        parts = []
        for r, segs, kn in self.shapes:
            extra = "".join(f" {k}{'' if isinstance(v, str) else ''}{v}" for k, v in sorted(kn.items().items()))
            parts.append(f"{r}x[" + " > ".join(f"{g} tp{tp} pp{n}" for g, tp, n in segs) + f"{extra}]")
        return " + ".join(parts)


def knobs_of(s: StrategySpec) -> ShapeKnobs:
    """Shape knobs from a homogeneous strategy. Interleaving is dropped (vpp 1): the solver moves
    single layers between stages, which whole model chunks would forbid."""
    return ShapeKnobs(micro_batch=s.micro_batch, cp=s.cp, ep=s.ep, etp=s.etp, zero=s.zero, vpp=1,
                      recompute=s.recompute, sequence_parallel=bool(s.sequence_parallel))


def _tp_options(model: ModelSpec, g: GroupSpec) -> list[int]:
    return [t for t in (1, 2, 4, 8, 16) if t <= g.devices_per_node and g.devices_per_node % t == 0
            and model.heads % t == 0 and model.kv_heads % t == 0 and model.ffn_hidden % t == 0]


def runs_on(g: GroupSpec, job: JobSpec) -> bool:
    """The group's chip has the numbers the cost model needs for this precision."""
    try:
        ChipRates.of(g.chip, job.precision)
        g.chip.gemm_curve(ChipRates.of(g.chip, job.precision).dtype)
        g.chip.need("memory_gib")
    except SpecError:
        return False
    return True


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


def standalone_best(model: ModelSpec, g: GroupSpec, job: JobSpec, base: StrategySpec, memory_frac: float,
                    max_pp: int = 64) -> list[tuple[float, tuple[int, int, int], Estimate]]:
    """Best plans of one group alone (same model and job): (step s, (tp, pp, dp), estimate), fastest
    first, over tp and pp with the layers split as evenly as possible (uneven when pp does not
    divide them), all the group's devices used."""
    out = []
    cl = ClusterSpec(name=g.name, groups=(g,))
    for tp in _tp_options(model, g):
        for pp in range(1, min(max_pp, model.layers) + 1):
            if g.devices % (tp * pp):
                continue
            dp = g.devices // (tp * pp)
            if job.global_batch % (dp * base.micro_batch):
                continue
            m = job.global_batch // (dp * base.micro_batch)
            stages = tuple(StageSpec(g.name, rng, tp) for rng in even_split(model.layers, pp))
            p = PipelinesSpec((PipelineShape(dp, m, stages),), micro_batch=base.micro_batch, zero=base.zero,
                              runtime=base.runtime,
                              recompute=base.recompute, sequence_parallel=bool(base.sequence_parallel),
                              attention=base.attention)
            e = _exact(model, cl, job, p, memory_frac)
            if e is not None:
                out.append((e.step_time_s, (tp, pp, dp), e))
    out.sort(key=lambda t: (t[0], t[1]))
    return out


def _search_group(model: ModelSpec, g: GroupSpec, job: JobSpec, memory_frac: float, top: int,
                  time_limit_s: float | None) -> list[Estimate]:
    """The homogeneous search's top plans for group g alone (any cp, zero, micro-batch, vpp, recompute)."""
    from baige_plan.search.solver import search
    from baige_plan.search.space import Bounds

    if not runs_on(g, job):
        return []
    try:
        return list(search(model, ClusterSpec(name=g.name, groups=(g,)), job, Bounds(max_memory_frac=memory_frac),
                           top=top, time_limit_s=time_limit_s).plans)
    except SpecError:
        return []


def _group_plans(model: ModelSpec, g: GroupSpec, job: JobSpec, base: StrategySpec, memory_frac: float,
                 top: int, searched: list[Estimate]) -> list[tuple[float, int, int, int, ShapeKnobs]]:
    """A group's best single-group plans as (step s, tp, pp, replicas, knobs): the homogeneous
    search's top plans (their layer split is re-decided by the solver) and even/uneven pipelines
    at the plan-wide settings."""
    out = [(e.step_time_s, e.strategy.tp, e.strategy.pp, e.strategy.dp, knobs_of(e.strategy)) for e in searched]
    for t, (tp, pp, dp), _e in standalone_best(model, g, job, base, memory_frac)[:top]:
        out.append((t, tp, pp, dp, ShapeKnobs()))
    out.sort(key=lambda x: (x[0], x[1], x[2], x[3], sorted(x[4].items().items())))
    return out[:top]


def _templates(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, base: StrategySpec, memory_frac: float,
               per_group_top: int, searched: dict[str, list[Estimate]] | None = None
               ) -> tuple[list[Template], dict[str, float]]:
    """Outer enumeration: (1) any non-empty subset of groups, each running its own shape with one
    of its best single-group plans (tp, pp, replicas and knobs); (2) one spanning shape over all
    groups (both orders for two groups), tp = each group's best, replicas r common with no idle
    device, pp_g = D_g / (tp_g r), plan-wide knobs."""
    best: dict[str, list[tuple[int, int, int, ShapeKnobs]]] = {}
    standalone: dict[str, float] = {}
    for g in cluster.groups:
        if searched is None or g.name not in searched:
            found = _search_group(model, g, job, memory_frac, per_group_top, None)
        else:
            found = searched[g.name]
        ranked = _group_plans(model, g, job, base, memory_frac, per_group_top, found) if runs_on(g, job) else []
        if ranked:
            standalone[g.name] = job.tokens / ranked[0][0]
        best[g.name] = [(tp, pp, dp, kn) for _, tp, pp, dp, kn in ranked]
    temps: list[Template] = []
    usable = [g for g in cluster.groups if best[g.name]]
    # every non-empty subset of the usable groups (leaving a group out avoids its bridge traffic)
    for size in range(1, len(usable) + 1):
        for subset in combinations(usable, size):
            for combo in product(*[best[g.name] for g in subset]):
                temps.append(Template(tuple((dp, ((g.name, tp, pp),), kn)
                                            for g, (tp, pp, dp, kn) in zip(subset, combo, strict=True))))
    groups = [g for g in cluster.groups if runs_on(g, job)]
    orders = [groups] if len(groups) != 2 else [groups, groups[::-1]]
    tp_best = {g.name: (best[g.name][0][0] if best[g.name] else max(_tp_options(model, g) or [1]))
               for g in groups}
    for order in orders:
        # replicas r with no idle device: r divides every D_g / tp_g; fewest stages first
        rs = [r for r in range(1, min(g.devices // tp_best[g.name] for g in order) + 1)
              if all((g.devices // tp_best[g.name]) % r == 0 for g in order)
              and sum(g.devices // (tp_best[g.name] * r) for g in order) <= model.layers]
        for r in sorted(rs, reverse=True)[:MAX_SPANNING_REPLICAS]:
            segs = tuple((g.name, tp_best[g.name], g.devices // (tp_best[g.name] * r)) for g in order)
            temps.append(Template(((r, segs, ShapeKnobs()),)))
    uniq = sorted(set(temps), key=lambda t: t.label())
    return uniq, standalone


def _affine(model, cluster, job, p_base: PipelinesSpec, shape_stages, j, i, m) -> tuple[float, float, float, float]:
    """(a, c, u, k): time and memory per stage as affine functions of its layer count."""
    sh = p_base.shapes[j]
    st = shape_stages[i]
    g = cluster.group(st.group)
    vals = []
    for n in (1, 2):
        stages = tuple(StageSpec(s.group, (0, n), s.tp) if k == i else s for k, s in enumerate(shape_stages))
        shape = replace(sh, micro_batches=m, stages=stages)
        s = _stage_strategy(p_base, shape, stages[i])
        c = stage_cost(model, g, job, s, i, 0, n, m, p2p_links=_p2p_links(cluster, shape, i))
        vals.append((c.time_s, c.memory_gib))
    (t1, m1), (t2, m2) = vals
    return t2 - t1, t1 - (t2 - t1), m2 - m1, m1 - (m2 - m1)


def _solve_template(model, cluster, job, t: Template, base: StrategySpec, memory_frac: float,
                    time_limit_s: float) -> tuple[PipelinesSpec, str, float] | None:
    try:
        return _solve_template_cp(model, cluster, job, t, base, memory_frac, time_limit_s)
    except SpecError:
        return None


def _solve_template_cp(model, cluster, job, t: Template, base: StrategySpec, memory_frac: float,
                       time_limit_s: float) -> tuple[PipelinesSpec, str, float] | None:
    B = job.global_batch
    shapes_st = []
    for r, segs, kn in t.shapes:
        stages = []
        for g, tp, n in segs:
            stages += [StageSpec(g, (0, 1), tp)] * n
        shapes_st.append((r, stages, kn))
    p_base = PipelinesSpec(tuple(PipelineShape(r, 1, tuple(st), kn) for r, st, kn in shapes_st),
                           micro_batch=base.micro_batch, zero=base.zero, recompute=base.recompute,
                           sequence_parallel=bool(base.sequence_parallel), attention=base.attention,
                           runtime=base.runtime)
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
            a, c, u, k = _affine(model, cluster, job, p_base, stages, j, i, m_even)
            cap = cluster.group(st.group).chip.need("memory_gib") * memory_frac
            if k + u > cap:
                return None          # even one layer per stage does not fit
            rows.append((a, c, u, k, cap))
        coef.append(rows)
    # Batch window: around the split proportional to each shape's speed (sequences/s) at an even
    # layer split.
    speed = []
    for (_r, stages, _kn), rows, un in zip(shapes_st, coef, units, strict=True):
        per = model.layers / len(stages)
        speed.append(un / max(a * per + c for a, c, *_ in rows))
    centre = [B * sp_ / sum(speed) / un for sp_, un in zip(speed, units, strict=True)]
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
    return replace(p_base, shapes=tuple(shapes)), status, gap


def _exact(model, cluster, job, p: PipelinesSpec, memory_frac: float, cache: dict | None = None) -> Estimate | None:
    try:
        e = estimate_pipelines(model, cluster, job, p, memory_frac, cache)
    except SpecError:
        return None
    return e if e.fits else None


def polish(model, cluster, job, p: PipelinesSpec, memory_frac: float,
           max_evals: int = 400) -> tuple[PipelinesSpec, Estimate | None]:
    """Exact-model local search: move one layer across a stage boundary or micro-batches between
    shapes while the step time improves. First improvement, scanning on from where the last move
    was found, until a full pass finds none or `max_evals` exact evaluations (a count, not a
    clock, so results are reproducible) are spent."""
    cache: dict = {}
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


def standalone_throughputs(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, memory_frac: float,
                           time_limit_s: float | None = 10.0,
                           searched: dict[str, list[Estimate]] | None = None) -> dict[str, float]:
    """Tokens/s of the best plan that uses each group alone (same model and job): the full
    homogeneous search, and the uneven-split pipelines this module also considers; the faster."""
    out = {}
    for g in cluster.groups:
        best = 0.0
        if runs_on(g, job):
            plans = searched[g.name] if searched is not None and g.name in searched else \
                _search_group(model, g, job, memory_frac, 1, time_limit_s)
            if plans:
                best = plans[0].tokens_per_s
            ranked = standalone_best(model, g, job, StrategySpec(), memory_frac)
            ranked += standalone_best(model, g, job, StrategySpec(recompute="full"), memory_frac)
            if ranked:
                best = max(best, job.tokens / min(r[0] for r in ranked))
        out[g.name] = best
    return out


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
    rule = getattr(runtimes.module(p.runtime), "shape_refusal", None)
    if rule is None:
        return True
    shapes, defaults = pipelines_dicts(p)
    why = rule(shapes, defaults, devices_per_node={g.name: g.devices_per_node for g in cluster.groups},
               tie_embeddings=model.tie_embeddings, families={g.name: g.chip.family for g in cluster.groups})
    if why:
        refused.append(why)
    return why is None


def solve(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, base: StrategySpec, *, memory_frac: float = 0.9,
          time_limit_s: float = 10.0, per_group_top: int = 2, recompute_pinned: bool = False) -> HeteroResult:
    """Best heterogeneous plan. Tries recompute selective then full unless pinned."""
    t0 = time.perf_counter()
    variants = [base] if recompute_pinned else [replace(base, recompute=rc) for rc in ("selective", "full")]
    searched = {g.name: _search_group(model, g, job, memory_frac, per_group_top, time_limit_s)
                for g in cluster.groups}
    results = []
    seen: set[Template] = set()
    solves = 0
    pending: list[tuple[Template, StrategySpec]] = []
    for v in variants:
        temps, _ = _templates(model, cluster, job, v, memory_frac, per_group_top, searched)
        for t in temps:
            # templates whose shapes all carry their own knobs do not depend on the variant
            if all(kn.items() for _, _, kn in t.shapes) and t in seen:
                continue
            seen.add(t)
            pending.append((t, v))
    n_temps = len(pending)
    per = min(CP_SAT_MAX_PER_TEMPLATE, 0.5 * time_limit_s / max(1, n_temps))
    for t, v in pending:
        sol = _solve_template(model, cluster, job, t, v, memory_frac, per)
        solves += 1
        if sol is None:
            continue
        p, status, gap = sol
        e = _exact(model, cluster, job, p, memory_frac)
        if e is not None:
            results.append((e.step_time_s, f"{t.label()} recompute {v.recompute}", p, e, status, gap))
    # keep to what the runtime runs (e.g. FlagScale: one pipeline, no cp/vpp in hetero mode)
    refused: list[str] = []
    results = [r for r in results if _runtime_ok(cluster, model, r[2], refused)]
    # exact-model polish of the most promising solutions (moving layers / micro-batches)
    results.sort(key=lambda r: (r[0], r[1]))
    polished = []
    cut = [r for r in results if r[0] <= results[0][0] * POLISH_WITHIN][:POLISH_TOP] if results else []
    for n, (st_, lab, p, e, status, gap) in enumerate(cut):
        budget = POLISH_EVALS // 2 if n == 0 else POLISH_EVALS // (2 * max(1, len(cut) - 1))
        p2, e2 = polish(model, cluster, job, p, memory_frac, budget)
        ok2 = e2 is not None and _runtime_ok(cluster, model, p2, refused)
        polished.append((e2.step_time_s, lab, p2, e2, status, gap) if ok2 else (st_, lab, p, e, status, gap))
    results = polished + results[len(cut):]
    if not results:
        if refused:
            raise SpecError("runtime", f"{base.runtime} runs none of the {len(refused)} plans that fit; first: "
                            f"{refused[0]}")
        raise SpecError("cluster", f"none of {n_temps} pipeline templates fits in memory (tried recompute "
                        f"{', '.join(v.recompute for v in variants)}); add devices or lower the micro-batch")
    results.sort(key=lambda r: (r[0], r[1]))
    _, label, p, e, status, gap = results[0]
    runners = tuple((lab, e_) for _st, lab, _p, e_, *_ in results[1:6])
    standalone = standalone_throughputs(model, cluster, job, memory_frac, time_limit_s, searched)
    return HeteroResult(p, e, status, gap, n_temps, solves, time.perf_counter() - t0, standalone, runners)
