"""Plans on part of a homogeneous cluster (issue 12 item 2): fewer nodes than the cluster has, when that is
faster (or, with `--objective cost`, cheaper) or the only way, and `--exclude` of named nodes.

Why. A homogeneous plan's world is tp·pp·cp·dp and its batch rule is global_batch % (dp·micro_batch) == 0
(search/space.py), so some node counts admit no strategy at all -- llama3-70b on 100 nodes x 8 H100 at global
batch 1024: 800 = 2^5·25 devices and dp | 1024 leave dp <= 32 and tp·pp·cp a multiple of 25, which neither
Megatron's splits of 80 layers (pp 25) nor context parallelism (8192 % 2·cp) take -- while 96 nodes
(768 = 2^8·3) run it. Real clusters also have
spare and broken nodes (`--exclude`).

Which node counts. With N nodes available (after `--exclude`) the counts searched are
    C(N) = {N, N-1} ∪ {⌊N/2^j⌋·2^j : 1 <= j <= ⌊log2 N⌋}
i.e. N, one node fewer, and N with its lowest set bits cleared one at a time (the largest count <= N that
is a multiple of 2, 4, 8, ...). Distinct values: at most popcount(N) + 1 <= ⌊log2 N⌋ + 2 -- a bounded
number of searches, never one per count (100 nodes: 100, 99, 96, 64; 64: 64, 63; 2,048: 2,048, 2,047).
Why these: batches, heads, layers and node sizes are mostly 2^a·3^b, so the counts rich in factors of 2
admit the most (tp, pp, cp, dp) layouts; N-1 is the "one node is broken" case. A count outside C(N) may
hold a better plan: C(N) is a documented heuristic set, and within each count the search is exact.

How. Each count n in C(N) is searched by the exact best-first `search` (search/solver.py) on the cluster
restricted to n nodes -- the same code, so the full count keeps its exact-optimum property and
search/oracle.py still checks it. The winner minimises
    throughput / time:  step time            (tokens per step are fixed: tokens/s = global batch·seq / step)
    cost:               n x step time        (USD = hours x used devices x price, idle devices not paid:
                                              cost/money.py; one group, one price, so n·step ranks it)
ties to the larger count (no idle devices when the full cluster is as good). Its `top` plans are the
plans reported (all on that count: the ranking compares like with like).

Cost, and the bound that skips counts. A search's time is dominated by enumerating the count's space (the
best-first walk after it runs a few dozen full estimates), so a bound that skips a count must come before
the enumeration. Counts are searched largest first; before searching n, its compute floor
    floor(n) = F / (n·d · P · e)        F = model FLOPs per step (Megatron's count, cost/flops.py),
                                        d = devices per node, P = the largest peak the precision's GEMMs and
                                        attention run at, e = the largest efficiency they reach (the chip's
                                        GEMM curves' top points, its fused-attention efficiency)
bounds every strategy's step time on n nodes from below: every GEMM of the cost model takes
>= FLOPs / (P·e) (cost/compute.py gemm_time_s: t >= flops / (peak·eff)), a device executes at least its share
F / (n·d) of the step's model FLOPs (executed FLOPs add recomputation and, for standard attention, the masked
half), and the step is at least the micro-batches x the slowest stage (>= the average stage), so
T(n) >= floor(n). A count whose floor x (1 - FLOOR_SLACK) is not below the best found so far (n x floor for
--objective cost) cannot win and is skipped, and so are the smaller ones (the floor grows as n shrinks).
tests/test_partial_clusters.py checks T >= floor on sampled strategies of several models, chips and
precisions (the largest floor / T seen: 0.95). The bound is not used for MoE models (capacity and
routing make executed expert FLOPs differ from the count) or measured profiles (their times are measured):
there every count of C(N) is searched. It skips the counts below about N x MFU / e: gpt3-175b on 100 x 8
A100 at batch 1600 (MFU 61 %, e 0.72) skips 64. Counts with few factors of 2 (N-1 for an even N)
enumerate next to nothing. Measured (benchmarks/run_all.py `partial_*`, 2 CPUs): gpt3-175b on 64x8 and
2,048x8 (C = {N, N-1}, N-1 odd and empty) take the full search's time within noise (0.61 vs 0.61 s, 0.73 vs
0.73 s); gpt3-175b on 100x8 at batch 1600 0.38 s vs 0.22 s for 100 nodes alone (99 and 96 searched, 64
skipped); llama3-70b on 100x8 at batch 1024 0.16 s (100 and 99 empty, 96 wins, 64 skipped). `--time-limit`
is a budget for all counts, the full count first.

Idle devices (`idle_devices` of the estimate, as plans on several groups report them: {group, devices, why}):
excluded nodes ("excluded by --exclude"), and the available nodes the plan leaves unused, with why: no plan
on all of them (the binding constraint: the batch does not split over the data-parallel replicas, memory,
...) or a faster (cheaper) plan on fewer, with both figures.

Placement. Ranks go to the first n available nodes in index order (search/placement.py with the list of
usable node indices), so excluded nodes host nothing and the unused nodes are the highest-numbered ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from baige_plan.cost.compute import ChipRates
from baige_plan.cost.estimate import engine_precision
from baige_plan.cost.flops import megatron_model_flops
from baige_plan.errors import InputError, SpecError
from baige_plan.search.solver import SearchResult, search
from baige_plan.search.space import Bounds, Pins, enumerate_space
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.topology import ClusterSpec

FLOOR_SLACK = 0.05   # a count is skipped only when its compute floor is 5 % above the best found (robustness)


@dataclass(frozen=True)
class CountResult:
    nodes: int
    result: SearchResult | None      # None: not searched (time limit, compute floor) or refused (error)
    error: str = ""                  # why it was not searched
    skipped: bool = False            # the compute floor shows it cannot win


@dataclass(frozen=True)
class PartialResult:
    result: SearchResult             # the chosen count's search: its plans are the plans reported
    cluster: ClusterSpec             # the cluster restricted to the chosen count (its estimates' cluster)
    nodes_used: tuple[int, ...]      # the node indices the plan runs on (placement), ascending
    available: int                   # nodes available after --exclude
    counts: tuple[CountResult, ...]  # every count tried, largest first
    idle: tuple[tuple[str, int, str], ...]   # (group, idle devices, why), as HeteroResult.idle
    seconds: float

    @property
    def nodes(self) -> int:
        return len(self.nodes_used)

    @property
    def candidates(self) -> int:
        return sum(c.result.candidates for c in self.counts if c.result is not None)


def node_counts(n: int) -> list[int]:
    """C(n) of the module docstring, largest first."""
    out = {n}
    if n > 1:
        out.add(n - 1)
    j = 1
    while (1 << j) <= n:
        out.add((n >> j) << j)
        j += 1
    return sorted(out, reverse=True)


def node_list(indices: Sequence[int]) -> str:
    """`3, 7, 96-99`: ascending indices, runs of consecutive ones as ranges."""
    idx = sorted(set(indices))
    if not idx:
        return ""
    runs, start = [], idx[0]
    for a, b in zip(idx, idx[1:] + [None], strict=True):
        if b is None or b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ", ".join(runs)


def parse_exclude(values: Sequence[str] | None, cluster: ClusterSpec) -> dict[str, list[int]]:
    """`--exclude` values (repeatable, each comma- or space-separated) -> {group: sorted node indices}.
    Node names are replan's (search/replan_world.py parse_nodes): GROUP:INDEX, GROUP:FIRST-LAST or GROUP.
    InputError (exit 2) naming an unknown group or an index out of range."""
    specs = [s for v in values or [] for s in v.replace(",", " ").split()]
    if not specs:
        return {}
    from baige_plan.search.replan_world import parse_nodes
    out: dict[str, set[int]] = {}
    for spec in specs:
        for name in parse_nodes(spec, cluster, "--exclude"):
            g, _, i = name.rpartition(":")
            out.setdefault(g, set()).add(int(i))
    return {g.name: sorted(out[g.name]) for g in cluster.groups if g.name in out}


def without(cluster: ClusterSpec, excluded: dict[str, list[int]]) -> ClusterSpec:
    """The cluster with each group's excluded nodes removed (InputError when a group would be empty)."""
    groups = []
    for g in cluster.groups:
        left = g.nodes - len(excluded.get(g.name, ()))
        if left < 1:
            raise InputError("--exclude", g.name, f"excludes every node of group {g.name!r} ({g.nodes} nodes)")
        groups.append(replace(g, nodes=left))
    return replace(cluster, groups=tuple(groups))


def compute_floor_s(model: ModelSpec, cluster: ClusterSpec, job: JobSpec) -> float | None:
    """floor(n) x n (module docstring): the step-time floor of one node of the cluster's group, so
    floor(n) = compute_floor_s / n. None where the bound is not used (MoE, measured profile, missing figures)."""
    g = cluster.groups[0]
    if model.moe is not None or g.profile is not None:
        return None
    best = 0.0
    # every engine a runtime may run the job's matmuls in on this chip (issue 18, cost/estimate.py
    # engine_precision: fp32 runs TF32 under Megatron's stack): the fastest, so the floor holds for any runtime
    for prec in sorted({engine_precision(g, job.precision, rt) for rt in runtimes.NAMES}):
        try:
            r = ChipRates.of(g.chip, prec)
            dtypes = {r.dtype, r.attn_dtype} | ({r.fused_dtype} if r.fused_dtype else set())
            eff = max(max(e for _, e in g.chip.gemm_curve(d).points) for d in dtypes)
        except SpecError:
            return None
        if g.chip.flash_efficiency is not None:
            eff = max(eff, g.chip.flash_efficiency)
        best = max(best, max(r.peak_flops, r.attn_peak_flops, r.fused_peak_flops) * eff)
    return megatron_model_flops(model, job.global_batch, job.seq_len) / (g.devices_per_node * best)


def _on(cluster: ClusterSpec, n: int) -> ClusterSpec:
    g = cluster.groups[0]
    return replace(cluster, groups=(replace(g, nodes=n),))


def _why_none(model: ModelSpec, cl: ClusterSpec, job: JobSpec, bounds: Bounds, pins: Pins, c: CountResult) -> str:
    """One phrase: why no plan runs on count c."""
    n, g = c.nodes, cl.groups[0]
    if c.result is None:
        return f"not searched on {n} nodes ({c.error})"
    if c.result.plans:
        return ""
    devices = n * g.devices_per_node
    if c.result.candidates == 0:
        # a layout of the devices exists once the batch splits over any dp (global batch = devices x micro-batch)
        relaxed = JobSpec(global_batch=devices * (pins.micro_batch or 1), seq_len=job.seq_len, precision=job.precision)
        try:
            layout = next(enumerate_space(model, devices, g.devices_per_node, relaxed, bounds,
                                          replace(pins, dp=None)), None)
        except SpecError:
            layout = None
        if layout is not None:
            return (f"global batch {job.global_batch} does not split over the data-parallel replicas of any "
                    f"tp·pp·cp·dp layout of {devices} devices on {n} nodes")
        return f"no tp·pp·cp·dp layout of {devices} devices on {n} nodes suits {model.name} and the pins and bounds"
    return f"on {n} nodes {c.result.binding}"


def search_partial(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, bounds: Bounds = Bounds(),
                   pins: Pins = Pins(), top: int = 1, time_limit_s: float | None = None,
                   progress: Callable[[int, int], None] | None = None, objective: str = "throughput",
                   excluded: Sequence[int] = ()) -> PartialResult:
    """The best plans on a count of C(N) nodes of a one-group `cluster` (module docstring); `excluded`: node
    indices of the cluster not to use (`--exclude`). Raises SpecError where `search` does on the full count."""
    t0 = time.perf_counter()
    g = cluster.groups[0]
    gone = sorted(set(excluded))
    usable = [i for i in range(g.nodes) if i not in set(gone)]
    if not usable:
        raise InputError("--exclude", g.name, f"excludes every node of group {g.name!r} ({g.nodes} nodes)")
    avail = len(usable)
    counts: list[CountResult] = []
    floor1 = compute_floor_s(model, cluster, job)
    best_val = float("inf")
    for n in node_counts(avail):
        if floor1 is not None and best_val < float("inf"):
            lb = floor1 if objective == "cost" else floor1 / n      # n x floor(n), or floor(n)
            if lb * (1 - FLOOR_SLACK) >= best_val:
                why = (f"compute floor x nodes {floor1:.4g} s >= the best nodes x step time {best_val:.4g} s"
                       if objective == "cost" else
                       f"compute floor {floor1 / n:.4g} s per step >= the best step time {best_val:.4g} s")
                counts.append(CountResult(n, None, why, skipped=True))
                continue
        left = None if time_limit_s is None else time_limit_s - (time.perf_counter() - t0)
        if left is not None and left <= 0 and any(c.result is not None and c.result.plans for c in counts):
            counts.append(CountResult(n, None, "time limit"))
            continue
        try:
            r = search(model, _on(cluster, n), job, bounds, pins, top=top,
                       time_limit_s=None if left is None else max(left, 0.01), progress=progress)
        except SpecError as ex:
            if n == avail:
                raise
            counts.append(CountResult(n, None, f"{ex.field}: {ex.reason}"))
            continue
        counts.append(CountResult(n, r))
        if r.plans:
            st = r.plans[0].step_time_s
            best_val = min(best_val, n * st if objective == "cost" else st)

    def key(c: CountResult) -> tuple[float, int]:
        st = c.result.plans[0].step_time_s
        return (c.nodes * st if objective == "cost" else st, -c.nodes)

    found = [c for c in counts if c.result is not None and c.result.plans]
    full = counts[0]
    best = min(found, key=key) if found else full
    n = best.nodes
    idle: list[tuple[str, int, str]] = []
    dpn = g.devices_per_node
    if gone:
        idle.append((g.name, len(gone) * dpn, f"{len(gone)} node{'s' if len(gone) > 1 else ''} "
                     f"({node_list(gone)}) excluded by --exclude"))
    if found and n < avail:
        e = best.result.plans[0]
        unused = usable[n:]
        head = f"{len(unused)} node{'s' if len(unused) > 1 else ''} ({node_list(unused)}) unused: "
        here = f"{n} node{'s' if n > 1 else ''}: {e.tokens_per_s:,.0f} tokens/s"
        if full.result is not None and full.result.plans:
            f = full.result.plans[0]
            s = f.strategy
            if objective == "cost":
                why = (f"--objective cost: {here} on {n * dpn} devices costs {1 - key(best)[0] / key(full)[0]:.1%} "
                       f"less to train than the best plan on all {avail} nodes ({f.tokens_per_s:,.0f} tokens/s, "
                       f"tp {s.tp} pp {s.pp} dp {s.dp})")
            else:
                why = (f"the best plan on all {avail} nodes (tp {s.tp} pp {s.pp} dp {s.dp} cp {s.cp} micro-batch "
                       f"{s.micro_batch}) gives {f.tokens_per_s:,.0f} tokens/s, {1 - f.tokens_per_s / e.tokens_per_s:.1%} "
                       f"less than {here}")
        else:
            why = f"{_why_none(model, _on(cluster, avail), job, bounds, pins, full)}; {here}"
        idle.append((g.name, len(unused) * dpn, head + why))
    return PartialResult(result=best.result if best.result is not None else _empty(full),
                         cluster=_on(cluster, n), nodes_used=tuple(usable[:n]), available=avail,
                         counts=tuple(counts), idle=tuple(idle), seconds=time.perf_counter() - t0)


def _empty(c: CountResult) -> SearchResult:
    return SearchResult(plans=(), keys=(), candidates=0, feasible=0, evaluated=0, seconds=0.0, status="INFEASIBLE",
                        gap=0.0, binding=c.error)


def why_none(r: PartialResult) -> str:
    """The binding constraint when no count has a plan: the full count's, and the smaller counts tried."""
    full = r.counts[0]
    text = full.result.binding if full.result is not None else full.error
    rest = [c.nodes for c in r.counts[1:]]
    if rest:
        text += (f" (nor on {', '.join(map(str, rest[:-1]))}{' or ' if len(rest) > 1 else ''}{rest[-1]} of the "
                 f"{r.available} nodes)")
    return text


def smallest_fitting(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, bounds: Bounds, pins: Pins,
                     budget_s: float = 4.0) -> tuple[int, str] | None:
    """When no plan fits a one-group cluster in memory: the smallest node count of the same chip and node size
    on which the search finds a plan (issue 19: "the smallest cluster that fits"). Doubles the node count until
    a plan fits, then halves the gap between the last count that did not and the first that did (the global
    batch may not split over some counts in between: the smallest *found* is reported). None when nothing fits
    within the device limit or `budget_s` seconds. Returns (nodes, the best plan's short description)."""
    from baige_plan.limits import MAX_DEVICES
    if len(cluster.groups) != 1:
        return None
    g = cluster.groups[0]
    t_end = time.perf_counter() + budget_s
    cache: dict[int, str | None] = {}

    def fits(n: int) -> str | None:
        if n not in cache:
            left = t_end - time.perf_counter()
            if left <= 0:
                raise TimeoutError
            try:
                r = search(model, replace(cluster, groups=(replace(g, nodes=n),)), job, bounds, pins, top=1,
                           time_limit_s=min(2.0, left))
            except SpecError:
                r = None
            s = r.plans[0].strategy if r is not None and r.plans else None
            cache[n] = None if s is None else (f"tp {s.tp} pp {s.pp} dp {s.dp} cp {s.cp} zero {s.zero} "
                                               f"recompute {s.recompute}")
        return cache[n]

    lo, hi = g.nodes, g.nodes * 2
    try:
        while fits(hi) is None:
            lo, hi = hi, hi * 2
            if hi * g.devices_per_node > MAX_DEVICES:
                return None
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid) is not None:
                hi = mid
            else:
                lo = mid
    except TimeoutError:
        found = [n for n, v in cache.items() if v is not None]
        if not found:
            return None
        hi = min(found)
    return hi, cache[hi]
