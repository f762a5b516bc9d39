"""Heterogeneous plans: pipeline shapes with stages on different groups (chips, families), each
stage with its own tp, layer range and the shape's share of the batch.

Per shape j (replicas r_j, micro-batches m_j per replica), stage i on group g_i with tp_i:
    t_ij = stage_cost(...)  (compute on g_i's chip, TP inside a g_i node, p2p to its neighbours
           over scale-up, NIC or the bridge between the two groups' families)
    T_j  = m_j * max_i t_ij + (sum_i t_ij - max_i t_ij)           (unequal 1F1B stages, SPEC §5)
DP gradient sync for the layers of stage i: reduce-scatter/all-reduce among the r_j replicas of
the shape (intra-group), then, when other shapes also hold those layers, an all-reduce of the
shards among the k shapes over the slowest path between their groups (bridge when families
differ: the node's bridge bandwidth shared by its devices) -- hierarchical, as Baige keeps heavy
traffic inside a family. Scheduled as the runtime runs it (RuntimeSpec.grad_sync): overlapped with the last
micro-batch's backward (Megatron/FlagScale --overlap-grad-reduce) or issued after it; stage i ends
sum_{j<i} t_b,j before stage 0 (1F1B cool-down), and that lead hides the rest (DpTraffic.tail_s), as in the
homogeneous estimate.
Step: T = max_j (T_j + exposed DP_j) + optimizer. Shapes with fewer micro-batches finish early:
that idle time is the straggler cost of an uneven batch split.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import replace

from baige_plan.cost import collectives as C
from baige_plan.cost.compute import ChipRates
from baige_plan.cost.estimate import (
    GRAD_BYTES,
    Estimate,
    StageCost,
    _bottleneck,
    dp_traffic,
    engine_precision,
    host_breakdown,
    optimizer_rate,
    pipeline_s,
    pp_neighbours_share_node,
    stage_cost,
)
from baige_plan.cost.flops import megatron_model_flops
from baige_plan.cost.memo import kept
from baige_plan.specs import runtimes
from baige_plan.specs.frozen import make
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.pipeline import PipelineShape, PipelinesSpec, StageSpec, check_pipelines
from baige_plan.specs.strategy import StrategySpec
from baige_plan.specs.topology import ClusterSpec, GroupSpec


def path_link(cluster: ClusterSpec, a: GroupSpec, b: GroupSpec, devices_on_node: int) -> C.Link:
    """Per-device link between devices of groups a and b: scale-up/NIC inside a family, the
    bridge across families (its per-node bandwidth shared by the devices sending at once)."""
    if a.family != b.family:
        br = cluster.bridge(a.name, b.name)
        assert br is not None   # ClusterSpec guarantees a bridge between families
        return C.bridge_link(br, max(1, devices_on_node))
    # the slower NIC of the two (measured p2p curves of both groups where present, read with
    # devices_on_node devices of a node sending at once)
    return C.nic_p2p_link(a, b, per_node=max(1, devices_on_node))


def _stage_strategy(p: PipelinesSpec, sh: PipelineShape, st: StageSpec) -> StrategySpec:
    k = p.knob
    # make: StrategySpec(...) with its checks, without its frozen __init__'s 45 object.__setattr__ calls
    return make(StrategySpec, tp=st.tp, pp=len(sh.stages), dp=sh.replicas, cp=k(sh, "cp"), ep=k(sh, "ep"),
                etp=k(sh, "etp"), micro_batch=k(sh, "micro_batch"), zero=k(sh, "zero"), vpp=k(sh, "vpp"),
                recompute=k(sh, "recompute"), sequence_parallel=bool(k(sh, "sequence_parallel")) and st.tp > 1,
                attention=p.attention, **runtimes.knobs(p.runtime))


def stage_strategy_cached(p: PipelinesSpec, sh: PipelineShape, st: StageSpec, cache: dict | None) -> StrategySpec:
    """_stage_strategy(p, sh, st), kept in `cache` (one search's) by what it reads: the plan-wide knobs, the shape's
    replicas, knobs and depth, and the stage's tp (the stages of a shape on one tp share it)."""
    if cache is None:
        return _stage_strategy(p, sh, st)
    key = ("stage-strategy", p.micro_batch, p.zero, p.recompute, p.sequence_parallel, p.attention, p.runtime,
           sh.replicas, sh.knobs, len(sh.stages), st.tp)
    s = cache.get(key)
    if s is None:
        s = cache[key] = _stage_strategy(p, sh, st)
    return s


def p2p_links_cached(cluster: ClusterSpec, sh: PipelineShape, i: int, cache: dict | None
                     ) -> tuple[C.Link | None, C.Link | None]:
    """_p2p_links(cluster, sh, i), kept in `cache` (one search's, on one cluster) by what it reads: the shape's
    replicas and cp, the stage's group and tp, and its neighbours' groups."""
    if cache is None:
        return _p2p_links(cluster, sh, i)
    st = sh.stages
    key = ("stage-links", sh.replicas, sh.knobs.cp, st[i].group, st[i].tp, st[i - 1].group if i > 0 else None,
           st[i + 1].group if i < len(st) - 1 else None)
    links = cache.get(key)
    if links is None:
        links = cache[key] = _p2p_links(cluster, sh, i)
    return links


def _p2p_links(cluster: ClusterSpec, sh: PipelineShape, i: int) -> tuple[C.Link | None, C.Link | None]:
    def link(a: StageSpec, b: StageSpec) -> C.Link:
        ga, gb = cluster.group(a.group), cluster.group(b.group)
        if ga.name == gb.name:
            stride = a.tp * (sh.knobs.cp or 1) * sh.replicas    # ranks between neighbouring stages
            if pp_neighbours_share_node(ga.devices_per_node, stride):
                return C.scaleup_p2p_link(ga, 2 * stride)
        return path_link(cluster, ga, gb, min(ga.devices_per_node, a.tp * sh.replicas))
    st = sh.stages
    prev = link(st[i], st[i - 1]) if i > 0 else None
    nxt = link(st[i], st[i + 1]) if i < len(st) - 1 else None
    return prev, nxt


def stage_neighbourhood(p: PipelinesSpec, sh: PipelineShape, i: int) -> tuple:
    """What stage i of shape sh's strategy, links and cost are read from besides its layers and micro-batches
    (`shape_stage_cost`'s key). The plan-wide knobs too: a shape's knobs fall back to them (PipelinesSpec.knob), and
    one search shares its cache across plans that differ only there (recompute selective vs full)."""
    st = sh.stages[i]
    return (sh.replicas, sh.knobs, st.tp, len(sh.stages), i, sh.stages[i - 1].group if i else None, st.group,
            sh.stages[i + 1].group if i + 1 < len(sh.stages) else None,
            sh.stages[i - 1].tp if i else 0,
            p.micro_batch, p.zero, p.recompute, p.sequence_parallel, p.attention, p.runtime)


def shape_stage_cost(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, p: PipelinesSpec, sh: PipelineShape,
                     i: int, nb: tuple, cache: dict | None) -> tuple[StrategySpec, StageCost]:
    """(strategy, stage_cost) of stage i of shape sh as `estimate_pipelines` costs it; `nb`:
    stage_neighbourhood(p, sh, i). With a cache, one look-up by that small key replaces hashing the strategy and
    links (the search's polish estimates long pipelines thousands of times, each differing from the last in two
    stages)."""
    st = sh.stages[i]
    skey = ("stage", nb, st.layers, sh.micro_batches)
    hit = cache.get(skey) if cache is not None else None
    if hit is None:
        ctx = cache.get(("ctx", nb)) if cache is not None else None
        if ctx is None:
            ctx = (stage_strategy_cached(p, sh, st, cache), p2p_links_cached(cluster, sh, i, cache))
            if cache is not None:
                cache[("ctx", nb)] = ctx
        s, links = ctx
        hit = (s, stage_cost(model, cluster.group(st.group), job, s, i, st.layers[0], st.n_layers, sh.micro_batches,
                             p2p_links=links, memo=cache))
        if cache is not None:
            cache[skey] = hit
    return hit


def estimate_pipelines(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, p: PipelinesSpec,
                       memory_frac: float = 1.0, cache: dict | None = None) -> Estimate:
    """Exact estimate of a heterogeneous plan. `cache` (a dict owned by the caller, e.g. one search)
    memoises stage costs, which depend only on their own arguments (and is stage_cost's `memo`)."""
    check_pipelines(p, model, cluster, job, cache)
    groups = {g.name: g for g in cluster.groups}
    shapes = []
    strategies: dict[int, tuple[StrategySpec, ...]] = {}
    # per stage, what its strategy, links and cost are read from (nb below, its layers and micro-batches)
    nbs: dict[int, tuple[tuple, ...]] = {}
    for sh in p.shapes:
        # a shape's stage costs and pipeline time read the shape and the plan-wide knobs only (stage_neighbourhood):
        # a plan that keeps a shape object of one estimated before (the polish moves one shape at a time) reads
        # them back whole, by the shape object (kept alive in the entry) and those knobs
        def shape_costs(sh: PipelineShape = sh) -> tuple:
            nbl = tuple(stage_neighbourhood(p, sh, i) for i in range(len(sh.stages)))
            sc = [shape_stage_cost(model, cluster, job, p, sh, i, nb, cache) for i, nb in enumerate(nbl)]
            costs = tuple(c for _, c in sc)
            return costs, tuple(s for s, _ in sc), nbl, pipeline_s([c.time_s for c in costs], sh.micro_batches,
                                                                   p.knob(sh, "vpp"))
        costs, strategies[id(sh)], nbs[id(sh)], pipe = kept(
            cache, (sh,), ("shape-costs", p.micro_batch, p.zero, p.recompute, p.sequence_parallel, p.attention,
                           p.runtime), shape_costs)
        shapes.append((sh, costs, pipe))

    bridge_traffic: dict[tuple[str, str, str], float] = {}
    # per shape: stage layer starts, ends and groups, for overlap look-ups
    stage_spans = [(sh, ([st.layers[0] for st in sh.stages], [st.layers[1] for st in sh.stages],
                         [st.group for st in sh.stages])) for sh, _, _ in shapes]
    step = 0.0
    crit = None
    for sh, costs, pipe in shapes:
        dp_exposed = 0.0
        vpp = p.knob(sh, "vpp")
        lead = 0      # Σ_{j<i} t_b,j, accumulated left to right as sum() adds (same floats, O(S) not O(S²))
        for st, c, s, nb in zip(sh.stages, costs, strategies[id(sh)], nbs[id(sh)], strict=True):
            g = groups[st.group]
            # 1F1B cool-down, as the homogeneous estimate: the last micro-batch's backward runs on stage i, then on
            # i-1 ... 0, so stage i ends sum_{j<i} t_b,j before stage 0, which finishes
            # last; what stage i's reduction exposes past its own end hides under that lead (DpTraffic.tail_s).
            # Whether the reduction starts under the last backward (Megatron/FlagScale --overlap-grad-reduce) or
            # after it (DeepSpeed's pipeline engine) is the runtime's GradSync (dp_traffic).
            tail = lead / vpp
            lead += c.bwd_s
            # (traffic, its exposed seconds) by what they are read from: c and s follow from nb, the layers and m
            dkey2 = ("dp-stage", nb, st.layers, sh.micro_batches, tail)
            hit = cache.get(dkey2) if cache is not None else None
            if hit is None:
                traffic = dp_traffic(c, g, s, job, sh.micro_batches, tail_s=tail, memo=cache)
                hit = (traffic, traffic.exposed_s)
                if cache is not None:
                    cache[dkey2] = hit
            traffic, exposed = hit
            # cross-shape sync of this stage's layers (hierarchical: shards after the intra reduce)
            other_groups = sorted({og for o, spans in stage_spans if o is not sh
                                   for og in _overlapping_groups(spans, st.layers)}) if len(shapes) > 1 else ()
            if other_groups:
                k = sum(1 for o, _ in stage_spans if o is not sh) + 1
                shard = (c.dense_params + c.expert_params) * GRAD_BYTES / max(1, sh.replicas * s.cp)
                on_node = min(g.devices_per_node, st.tp * s.cp * sh.replicas)
                links = [(path_link(cluster, g, groups[og], on_node), og) for og in other_groups]
                slow, og = min(links, key=lambda lk: (lk[0].busbw_GBps, lk[1]))
                cross = C.all_reduce_s(shard, C.ring_link(slow, k))
                traffic = traffic.plus(cross)
                exposed = traffic.exposed_s
                if slow.crosses == "bridge":
                    key = tuple(sorted((g.name, og))) + ("dp-gradients",)
                    bridge_traffic[key] = max(bridge_traffic.get(key, 0.0), cross)
            dp_exposed = max(dp_exposed, exposed)
        for i in range(len(sh.stages) - 1):
            a, b = groups[sh.stages[i].group], groups[sh.stages[i + 1].group]
            if a.family != b.family:
                key = tuple(sorted((a.name, b.name))) + ("pp-activations",)
                bridge_traffic[key] = bridge_traffic.get(key, 0.0) + costs[i].pp_s * sh.micro_batches
        total = pipe + dp_exposed
        if total >= step:
            step, crit = total, (sh, costs, pipe, dp_exposed)
    assert crit is not None
    sh, costs, pipe, dp_exposed = crit

    opt_s = 0.0
    used = p.devices_by_group()
    rates = {name: ChipRates.of(groups[name].chip, engine_precision(groups[name], job.precision, p.runtime))
             for name in used}
    for s_, costs_, _ in shapes:
        shard = s_.replicas * p.knob(s_, "cp") if p.knob(s_, "zero") >= 1 else 1
        for st, c in zip(s_.stages, costs_, strict=True):
            owned = (c.dense_params + c.expert_params) / shard
            opt_s = max(opt_s, owned * optimizer_rate(c, rates[st.group]))   # measured profile or Adam bytes / HBM
    step += opt_s

    devices = sum(used.values())
    peak_sum = sum(n * rates[gname].peak_flops for gname, n in used.items())   # MFU against each group's engine peak
    tokens = job.global_batch * job.seq_len
    mflops = megatron_model_flops(model, job.global_batch, job.seq_len)
    cps = {id(s_): p.knob(s_, "cp") for s_, _, _ in shapes}
    hw = sum(c.hw_flops * s_.micro_batches * s_.replicas * st.tp * cps[id(s_)]
             for s_, costs_, _ in shapes for st, c in zip(s_.stages, costs_, strict=True))
    times = [c.time_s for c in costs]
    t_max = max(times)
    cstage = costs[times.index(t_max)]
    m = sh.micro_batches
    breakdown = {"compute": m * cstage.compute_s, "tp_comm": m * cstage.tp_s, "cp_comm": m * cstage.cp_s,
                 "ep_comm": m * cstage.ep_s, "pp_comm": m * cstage.pp_s, "pp_bubble": pipe - m * t_max,
                 "dp_comm_exposed": dp_exposed, "optimizer": opt_s}
    breakdown.update(host_breakdown(cstage, m))
    fits = True
    worst: tuple[float, StageCost, float] | None = None
    caps = {name: groups[name].chip.need("memory_gib") for name in {st.group for s_ in p.shapes for st in s_.stages}}
    for s_, costs_, _ in shapes:
        for st, c in zip(s_.stages, costs_, strict=True):
            cap = caps[st.group]
            frac = c.memory_gib / cap
            if c.memory_gib > cap * memory_frac:
                fits = False
            if worst is None or frac > worst[0]:
                worst = (frac, c, cap)
    assert worst is not None
    _, mstage, cap = worst
    memory = {"weights": mstage.weights_gib, "grads": mstage.grads_gib, "optimizer": mstage.optimizer_gib,
              "activations": mstage.activations_gib, "other": mstage.other_gib}
    first = p.shapes[0]
    # the first shape's widest stage as it runs (its own knobs over the plan-wide values), over every replica
    summary = replace(_stage_strategy(p, first, max(first.stages, key=lambda st: st.tp)),
                      dp=sum(s_.replicas for s_ in p.shapes))
    return make(Estimate, strategy=summary, global_batch=job.global_batch, fits=fits, step_time_s=step,
                          tokens_per_s=tokens / step, tokens_per_s_per_device=tokens / step / devices,
                          model_tflops_per_device=mflops / step / devices / 1e12, mfu=mflops / (step * peak_sum),
                          hfu=hw / (step * peak_sum), peak_memory_gib=mstage.memory_gib, capacity_gib=cap,
                          breakdown_s=breakdown, memory_gib=memory, stages=costs, micro_batches=m, devices=devices,
                          bottleneck=_bottleneck(breakdown, step, fits, mstage.memory_gib, cap * memory_frac, 0.0),
                          shapes=tuple((s_.replicas, s_.micro_batches, c_, t_) for s_, c_, t_ in shapes),
                          bridge_traffic=tuple((a, b, kind, t) for (a, b, kind), t in sorted(bridge_traffic.items())),
                          memory_frac=memory_frac)


def _overlapping_groups(spans, rng: tuple[int, int]) -> set[str]:
    """Groups of a shape's stages whose layer ranges overlap [rng[0], rng[1])."""
    starts, ends, groups = spans
    i = bisect_right(ends, rng[0])          # first stage ending after rng start
    out = set()
    while i < len(starts) and starts[i] < rng[1]:
        out.add(groups[i])
        i += 1
    return out
