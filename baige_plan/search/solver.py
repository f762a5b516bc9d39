"""Search a homogeneous cluster's strategy space for the fastest plans that fit.

1. Enumerate the space (`space.space_array`, one int row per candidate).
2. Memory pre-check, vectorised (`bounds.Bounds.memory_gib`, the cost model's own memory terms):
   rows above the allowed memory are dropped (a relative slack keeps borderline rows for the full
   estimate to decide).
3. Time lower bound, vectorised (`bounds.Bounds.time_lb_s`, provably <= `estimate`'s step time).
4. Best-first: walk rows by (lower bound, candidate tuple) and run the full `estimate` until the
   next lower bound exceeds the K-th best step time found. What is skipped cannot beat the K best,
   so the result equals ranking the whole space by `estimate` (search/oracle.py checks this).
5. With `dp_bound` (the heterogeneous solver's per-group searches), before a pipelined row's full estimate,
   once K plans are found: a second lower bound that adds the exposed data-parallel sync
   (`bounds.Bounds.dp_lb_s`: stage 0 and its gradient/parameter traffic costed exactly, the other stages by
   their bounds); a row above the K-th best step is skipped, not estimated. It only removes rows that cannot
   be among the K best, so the plans are those of step 4; only the count of full estimates (`evaluated`, which
   plan files record) drops, which is why a homogeneous `plan` leaves it off.
Ranking key: (step time, candidate tuple) — ties broken by the tuple, deterministically.
With a time limit, an unfinished walk reports status FEASIBLE and the gap
(best - smallest unexplored lower bound) / best.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from baige_plan.cost.estimate import Estimate, estimate
from baige_plan.errors import SpecError
from baige_plan.search.bounds import Bounds as CostBounds
from baige_plan.search.space import COL, Bounds, Cand, Pins, space_array, to_strategy
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import StrategySpec, check_strategy, infer_dp
from baige_plan.specs.topology import ClusterSpec

MEMORY_SLACK = 1e-6
SOLVER = "enumerate+bound (numpy memory pre-check, step-time lower bound, best-first exact estimate)"


@dataclass(frozen=True)
class SearchResult:
    plans: tuple[Estimate, ...]       # best first, all fit
    keys: tuple[Cand, ...]
    candidates: int                   # size of the space
    feasible: int                     # rows passing the memory pre-check
    evaluated: int                    # full estimates run
    seconds: float
    status: str                       # OPTIMAL | FEASIBLE (time limit) | INFEASIBLE
    gap: float
    binding: str                      # when nothing fits: the binding constraint, with numbers
    solver: str = SOLVER

    @property
    def best(self) -> Estimate | None:
        return self.plans[0] if self.plans else None


def search(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, bounds: Bounds = Bounds(),
           pins: Pins = Pins(), top: int = 1, time_limit_s: float | None = None,
           progress: Callable[[int, int], None] | None = None, dp_bound: bool = False) -> SearchResult:
    """The `top` fastest fitting strategies (exact optimum of `estimate` over the space). `dp_bound`: step 5 of
    the module docstring (the same plans; fewer full estimates, so `evaluated` differs)."""
    if cluster.is_heterogeneous:
        raise SpecError("cluster", f"{cluster.name!r} has {len(cluster.groups)} groups; the search handles "
                        "one group (heterogeneous planning is a later issue)")
    t0 = time.perf_counter()
    group = cluster.groups[0]
    a = space_array(model, cluster.devices, group.devices_per_node, job, bounds, pins)
    cb = CostBounds(model, group, job, bounds.runtime)
    cap = cb.capacity_gib * bounds.max_memory_frac
    mem = cb.memory_gib(a)
    feasible = int(np.count_nonzero(mem <= cap))
    keep = mem <= cap * (1 + MEMORY_SLACK)
    rows = a[keep]
    lb, _micro, t_max_lb, total_lb, t0_lb, opt_lb = cb.time_lb_parts(rows)
    order = np.lexsort(tuple(rows[:, c] for c in reversed(range(rows.shape[1]))) + (lb,))
    best: list[tuple[float, Cand, Estimate]] = []
    evaluated = 0
    status, gap = "OPTIMAL", 0.0
    pp_col = COL["pp"]
    for n, i in enumerate(order.tolist()):
        if len(best) >= top and lb[i] > best[-1][0]:
            break
        if time_limit_s is not None and time.perf_counter() - t0 > time_limit_s and best:
            status = "FEASIBLE"
            gap = max(0.0, (best[0][0] - float(lb[i])) / best[0][0])
            break
        key = tuple(rows[i].tolist())     # Python ints, as int(x) of each gives
        s = to_strategy(key, bounds.runtime)
        if dp_bound and len(best) >= top and key[pp_col] > 1:
            # 5. a pipelined row whose bound with stage 0 and its data-parallel sync costed exactly
            # (bounds.Bounds.dp_lb_s) is above the K-th best step cannot enter the K best: skip its estimate
            try:
                if cb.dp_lb_s(s, float(t_max_lb[i]), float(total_lb[i]), float(t0_lb[i]), float(opt_lb[i])) \
                        > best[-1][0]:
                    continue
            except SpecError:
                pass        # the estimate below says why
        e = estimate(model, cluster, job, s, bounds.max_memory_frac, memo=cb.memo)
        evaluated += 1
        if progress is not None and evaluated % 50 == 0:
            progress(n, len(order))
        if e.fits:
            best.append((e.step_time_s, key, e))
            best.sort(key=lambda x: (x[0], x[1]))
            del best[top:]
    binding = ""
    if not best:
        status = "INFEASIBLE"
        binding = _binding(model, cluster, job, a, mem, cap, bounds, pins)
    return SearchResult(plans=tuple(b[2] for b in best), keys=tuple(b[1] for b in best), candidates=len(a),
                        feasible=feasible, evaluated=evaluated, seconds=time.perf_counter() - t0,
                        status=status, gap=gap, binding=binding)


def _binding(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, a: np.ndarray, mem: np.ndarray, cap: float,
             bounds: Bounds, pins: Pins) -> str:
    if len(a) == 0:
        why = ""
        try:
            tp, pp, cp = pins.tp or 1, pins.pp or 1, pins.cp or 1
            s = StrategySpec(tp=tp, pp=pp, cp=cp, dp=pins.dp or infer_dp(cluster.devices, tp, pp, cp),
                             ep=pins.ep or 1, etp=pins.etp or 1, micro_batch=pins.micro_batch or 1, vpp=pins.vpp or 1)
            check_strategy(s, model, job, cluster.devices)
        except SpecError as e:
            why = f" ({e.field}: {e.reason})"
        return ("no strategy satisfies the divisibility rules, pins and bounds (heads, layers, global batch, "
                f"devices, --max-*){why}; relax a pin or a bound")
    i = int(np.argmin(mem))
    s = to_strategy(tuple(int(x) for x in a[i]), bounds.runtime)
    e = estimate(model, cluster, job, s, bounds.max_memory_frac)
    return (f"memory: the leanest strategy (tp {s.tp} pp {s.pp} dp {s.dp} cp {s.cp} zero {s.zero} "
            f"micro-batch {s.micro_batch} recompute {s.recompute}) needs {e.peak_memory_gib:.1f} GiB per device, "
            f"{e.peak_memory_gib - cap:.1f} GiB over the {cap:.1f} GiB allowed "
            f"({bounds.max_memory_frac:g} x {e.capacity_gib:g} GiB)")
