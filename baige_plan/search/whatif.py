"""Money-aware searches (issue 12): the cheapest plan on a mixed cluster (`plan --objective cost`) and
which mix of chips to rent (`baige-plan whatif`). Both run the existing searches unchanged -- the
homogeneous `search` (search/solver.py) and the heterogeneous `solve` (search/hetero.py), each with a
time limit -- over a small, documented set of candidates, and rank the results by money
(cost/money.py).

`plan --objective cost` on a cluster of several groups: on a given cluster every plan that uses the
same devices costs the same per hour, so time and cost rank plans alike -- except that a plan may leave
a whole group idle, and idle devices are not paid (cost/money.py). The candidates are therefore the
subsets of groups: `solve` runs on the sub-cluster of each non-empty subset (all 2^G - 1 subsets up to
4 groups; beyond, each group alone, all groups, and all but one), the plan is re-estimated on the full
cluster (the dropped groups idle) and priced for the devices it uses. The cheapest wins; ties go to the
faster plan. `--time-limit` applies to each subset's solve.

`whatif`: a pool of chips, each with at most MAX devices and a price. Grid (bounded work):
  * node counts of one chip: the powers of two up to its most nodes, and its most nodes
    (MAX // devices per node; a pool smaller than one node is one node of MAX devices);
  * homogeneous options: every chip at every node count of its grid (`search`, megatron);
  * two-chip mixes: every pair of chips at the three largest node counts of each grid (up to 9 mixes
    per pair; `solve`, flagscale; shorthand clusters, so families that differ get the default
    cpu-forwarding bridge).
Every device of a mix is rented, so every device of the mix is paid (even those a plan leaves idle).
Ranked against a deadline: the mixes that finish in time, cheapest first; against a budget: the mixes
within budget, earliest finish first; then the rest, closest to the constraint first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from itertools import combinations

from baige_plan.cost.estimate import Estimate
from baige_plan.cost.money import Price, TrainingCost, fmt_usd, training_cost
from baige_plan.errors import InputError, SpecError
from baige_plan.limits import MAX_PRICE_USD
from baige_plan.specs.chip import ChipSpec
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.topology import ClusterSpec

MAX_ALL_SUBSETS = 4      # groups up to which every subset is tried by the cost objective
MIX_SIZES = 3            # node counts per chip tried in two-chip mixes (the largest of its grid)


# -- plan --objective cost on a mixed cluster ------------------------------------------------------------
def group_subsets(names: list[str]) -> list[tuple[str, ...]]:
    """The group subsets the cost objective tries, largest first (deterministic)."""
    n = len(names)
    if n <= MAX_ALL_SUBSETS:
        subs = [c for k in range(n, 0, -1) for c in combinations(names, k)]
    else:
        subs = [tuple(names)] + [tuple(x for x in names if x != d) for d in names] + [(x,) for x in names]
    return subs


def sub_cluster(cluster: ClusterSpec, keep: tuple[str, ...]) -> ClusterSpec:
    if len(keep) == len(cluster.groups):
        return cluster
    return replace(cluster, groups=tuple(g for g in cluster.groups if g.name in keep),
                   bridges=tuple(b for b in cluster.bridges if set(b.groups) <= set(keep)))


@dataclass(frozen=True)
class SubsetOption:
    groups: tuple[str, ...]
    result: object | None              # HeteroResult re-estimated on the full cluster, or None
    cost: TrainingCost | None
    why: str = ""                      # when result is None: why this subset has no plan


def cheapest_subset(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, base, *, memory_frac: float,
                    time_limit_s: float, recompute_pinned: bool, lim, price: dict[str, Price], tokens: float
                    ) -> tuple[object, list[SubsetOption]]:
    """(the cheapest plan's HeteroResult on the full cluster, every subset tried, cheapest first).
    Raises SpecError when no subset has a plan (the full cluster's reason)."""
    from baige_plan.search.hetero import solve
    from baige_plan.search.hetero_templates import exact

    all_devices = {g.name: g.devices for g in cluster.groups}
    names = [g.name for g in cluster.groups]
    options: list[SubsetOption] = []
    standalone: dict[str, float] = {}
    first_error: SpecError | None = None
    for keep in group_subsets(names):
        sub = sub_cluster(cluster, keep)
        try:
            r = solve(model, sub, job, base, memory_frac=memory_frac, time_limit_s=time_limit_s,
                      recompute_pinned=recompute_pinned, lim=lim)
        except SpecError as e:
            first_error = first_error or e
            options.append(SubsetOption(keep, None, None, f"{e.field}: {e.reason}"))
            continue
        for g, v in r.standalone.items():
            standalone.setdefault(g, v)
        e_full = r.estimate if sub is cluster else exact(model, cluster, job, r.pipelines, memory_frac)
        if e_full is None:
            options.append(SubsetOption(keep, None, None, "its plan does not re-estimate on the full cluster"))
            continue
        used = r.pipelines.devices_by_group()
        tc = training_cost(tokens, job.global_batch, job.seq_len, e_full.step_time_s, used, all_devices, price)
        options.append(SubsetOption(keep, replace(r, estimate=e_full), tc))
    ok = [o for o in options if o.result is not None]
    if not ok:
        raise first_error or SpecError("cluster", "no subset of the groups has a plan that fits")
    inf = float("inf")
    ok.sort(key=lambda o: (o.cost.usd if o.cost.usd is not None else inf, o.cost.step_time_s, o.groups))
    best = ok[0]
    r = best.result
    # idle groups: say why (the plan using them costs more), keep the solver's reasons for the others
    idle = [x for x in r.idle if x[0] in best.groups]
    for g in cluster.groups:
        if g.name in best.groups:
            continue
        more = [o for o in ok if g.name in o.groups]
        if more and more[0].cost.usd is not None and best.cost.usd:
            o = more[0]
            why = (f"left idle by --objective cost: the cheapest plan using it ({'+'.join(o.groups)}) costs "
                   f"{fmt_usd(o.cost.usd)}, {o.cost.usd / best.cost.usd - 1:.1%} more, though "
                   f"{'faster' if o.cost.step_time_s < best.cost.step_time_s else 'not faster'} "
                   f"({o.cost.hours:.4g} h vs {best.cost.hours:.4g} h)")
        else:
            why = "left idle by --objective cost: no plan that uses it fits (or it has no price)"
        idle.append((g.name, g.devices, why))
    order = {g.name: i for i, g in enumerate(cluster.groups)}
    idle.sort(key=lambda x: order[x[0]])
    for g in cluster.groups:
        standalone.setdefault(g.name, 0.0)
    r = replace(r, idle=tuple(idle), standalone={k: standalone[k] for k in names})
    rest = [o for o in options if o.result is None]
    return r, ok + rest


# -- whatif ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PoolEntry:
    ref: str                  # as written (catalog id or chip file)
    chip: ChipSpec
    max_devices: int
    devices_per_node: int     # node size used for this chip (the chip's, or MAX when smaller)
    usd_per_device_hour: float
    price_origin: str

    @property
    def max_nodes(self) -> int:
        return self.max_devices // self.devices_per_node


def parse_pool(raw: list[str], resolve_chip) -> list[PoolEntry]:
    """`--pool CHIP:MAX_DEVICES[:USD_PER_DEVICE_HOUR]` values -> entries; InputError naming the value."""
    if not raw:
        raise InputError("--pool", "", "give at least one --pool CHIP:MAX_DEVICES[:USD_PER_DEVICE_HOUR]")
    out: list[PoolEntry] = []
    for item in raw:
        parts = item.split(":")
        if len(parts) not in (2, 3) or not parts[0]:
            raise InputError("--pool", item, "expected CHIP:MAX_DEVICES[:USD_PER_DEVICE_HOUR], e.g. "
                             "a100-sxm4-80g:64:3.43")
        ref = parts[0]
        try:
            if not (parts[1].isascii() and parts[1].isdigit() and len(parts[1]) <= 9):
                raise ValueError(parts[1])
            n = int(parts[1])
        except ValueError:
            raise InputError("--pool", item, f"MAX_DEVICES must be a whole number from 1 to 65,536, got {parts[1]!r}"
                             ) from None
        if not 1 <= n <= 65536:
            raise InputError("--pool", item, f"MAX_DEVICES must be from 1 to 65,536, got {n}")
        chip = resolve_chip(ref, "--pool", item)
        if any(e.chip.id == chip.id for e in out):
            raise InputError("--pool", item, f"{chip.id} is in the pool twice")
        if len(parts) == 3:
            try:
                usd = float(parts[2])
            except ValueError:
                raise InputError("--pool", item, f"USD_PER_DEVICE_HOUR {parts[2]!r} is not a number") from None
            if not 0 <= usd <= MAX_PRICE_USD:
                raise InputError("--pool", item, f"USD_PER_DEVICE_HOUR must be a number from 0 to "
                                 f"{MAX_PRICE_USD:,.0f}, got {parts[2]}")
            origin = "--pool"
        elif chip.price_usd_per_device_hour is not None:
            usd, origin = chip.price_usd_per_device_hour, f"chip file ({chip.price_date})"
        else:
            raise InputError(f"chip {chip.id}", "price.usd_per_device_hour",
                             f"unknown (no price in the chip file); give it in the pool: --pool {ref}:{n}:USD")
        dpn = min(chip.devices_per_node, n)
        out.append(PoolEntry(ref, chip, n, dpn, usd, origin))
    return out


def node_grid(max_nodes: int) -> list[int]:
    """Powers of two up to max_nodes, and max_nodes."""
    out, k = set(), 1
    while k <= max_nodes:
        out.add(k)
        k *= 2
    if max_nodes >= 1:
        out.add(max_nodes)
    return sorted(out)


@dataclass
class Option:
    mix: str                               # shorthand CHIP:NODESxDEVICES[+...]
    parts: tuple[tuple[PoolEntry, int], ...]
    kind: str                              # "homogeneous" | "mix"
    estimate: Estimate | None = None
    devices_used: int = 0
    hours: float = 0.0
    usd: float = 0.0
    meets: bool = False
    why: str = ""                          # no plan: the binding constraint
    solver: str = ""
    detail: dict = field(default_factory=dict)

    @property
    def devices(self) -> int:
        return sum(e.devices_per_node * n for e, n in self.parts)

    @property
    def usd_per_hour(self) -> float:
        return sum(e.devices_per_node * n * e.usd_per_device_hour for e, n in self.parts)


def options_grid(pool: list[PoolEntry]) -> list[Option]:
    opts: list[Option] = []
    for e in pool:
        for n in node_grid(e.max_nodes):
            opts.append(Option(f"{e.ref}:{n}x{e.devices_per_node}", ((e, n),), "homogeneous"))
    for a, b in combinations(pool, 2):
        for na in node_grid(a.max_nodes)[-MIX_SIZES:]:
            for nb in node_grid(b.max_nodes)[-MIX_SIZES:]:
                opts.append(Option(f"{a.ref}:{na}x{a.devices_per_node}+{b.ref}:{nb}x{b.devices_per_node}",
                                   ((a, na), (b, nb)), "mix"))
    return opts


def solve_option(o: Option, cat, model: ModelSpec, job: JobSpec, *, tokens: float, memory_frac: float,
                 time_limit_s: float, attention: str = "flash") -> Option:
    """Plan one option with the existing searches and fill its time and money."""
    from baige_plan.search.hetero import solve
    from baige_plan.search.solver import search
    from baige_plan.search.space import Bounds, Pins
    from baige_plan.specs import runtimes
    from baige_plan.specs.strategy import StrategySpec

    cl, _ = cat.cluster(o.mix)
    try:
        if o.kind == "homogeneous":
            res = search(model, cl, job, Bounds(max_memory_frac=memory_frac, runtime=runtimes.DEFAULT),
                         Pins(attention=attention), top=1, time_limit_s=time_limit_s)
            if not res.plans:
                o.why = res.binding or "no feasible plan"
                return o
            o.estimate, o.devices_used = res.plans[0], cl.devices
            o.solver = f"search ({runtimes.DEFAULT}): {res.status}"
            s = res.plans[0].strategy
            o.detail = {"tp": s.tp, "pp": s.pp, "dp": s.dp, "cp": s.cp, "micro_batch": s.micro_batch,
                        "zero": s.zero, "recompute": s.recompute}
        else:
            rt = runtimes.DEFAULT_HETEROGENEOUS
            base = StrategySpec(micro_batch=1, zero=1, recompute="selective", sequence_parallel=True,
                                attention=attention, **runtimes.knobs(rt))
            r = solve(model, cl, job, base, memory_frac=memory_frac, time_limit_s=time_limit_s)
            o.estimate = r.estimate
            used = r.pipelines.devices_by_group()
            o.devices_used = sum(used.values())
            o.solver = f"solve ({rt}): {r.status}"
            o.detail = {"devices_used": dict(sorted(used.items())),
                        "shapes": [{"replicas": sh.replicas, "micro_batches": sh.micro_batches,
                                    "stages": [f"{st.group} tp{st.tp} layers {st.layers[0]}-{st.layers[1]}"
                                               for st in sh.stages]} for sh in r.pipelines.shapes]}
    except SpecError as ex:
        o.why = f"{ex.field}: {ex.reason}"
        return o
    o.hours = tokens / o.estimate.tokens_per_s / 3600.0
    o.usd = o.hours * o.usd_per_hour
    return o


@dataclass
class WhatIf:
    ranked: list[Option]                   # options with a plan, best first
    infeasible: list[Option]
    constraint: str                        # "deadline" | "budget"
    limit: float                           # hours or USD
    seconds: float

    @property
    def best(self) -> Option | None:
        return self.ranked[0] if self.ranked and self.ranked[0].meets else None

    @property
    def closest(self) -> Option | None:
        return self.ranked[0] if self.ranked else None


def rank(options: list[Option], *, deadline_h: float | None, budget_usd: float | None) -> list[Option]:
    ok = [o for o in options if o.estimate is not None]
    if deadline_h is not None:
        for o in ok:
            o.meets = o.hours <= deadline_h
        return sorted(ok, key=lambda o: (not o.meets, o.usd if o.meets else o.hours,
                                         o.hours if o.meets else o.usd, o.mix))
    for o in ok:
        o.meets = o.usd <= budget_usd
    return sorted(ok, key=lambda o: (not o.meets, o.hours if o.meets else o.usd,
                                     o.usd if o.meets else o.hours, o.mix))


def whatif(cat, model: ModelSpec, job: JobSpec, pool: list[PoolEntry], *, tokens: float,
           deadline_h: float | None, budget_usd: float | None, memory_frac: float, time_limit_s: float,
           attention: str = "flash", progress=None) -> WhatIf:
    t0 = time.perf_counter()
    opts = options_grid(pool)
    for i, o in enumerate(opts):
        solve_option(o, cat, model, job, tokens=tokens, memory_frac=memory_frac, time_limit_s=time_limit_s,
                     attention=attention)
        if progress is not None:
            progress(i + 1, len(opts), o)
    ranked = rank(opts, deadline_h=deadline_h, budget_usd=budget_usd)
    return WhatIf(ranked, [o for o in opts if o.estimate is None],
                  "deadline" if deadline_h is not None else "budget",
                  deadline_h if deadline_h is not None else budget_usd, time.perf_counter() - t0)
