"""Exhaustive oracle for small spaces: no pruning, no bounds, no clever enumeration.

It walks the plain Cartesian product of every dimension's range, keeps what
`specs.strategy.check_strategy`, the runtime (`RuntimeSpec.refusal`) and the space's own rules
(`space_rules_ok`) accept, runs the full
`estimate` on each, and ranks the fitting ones by (step time, candidate tuple). Tests compare it
with `solver.search` (the same ranking must come out) and with `space.enumerate_space` (the same
set of candidates).
"""

from __future__ import annotations

import functools
import itertools

from baige_plan.cost.estimate import Estimate, estimate
from baige_plan.errors import SpecError
from baige_plan.search.space import Bounds, Cand, Pins, divisors, from_strategy, shard_choices, split_family
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import RECOMPUTE, StrategySpec, check_strategy, stage_layers
from baige_plan.specs.topology import ClusterSpec


def space_rules_ok(s: StrategySpec, model: ModelSpec, dpn: int, bounds: Bounds, pins: Pins) -> bool:
    """The space's rules beyond check_strategy: bounds, TP packing in a node, allowed splits, pins."""
    if s.tp > (bounds.max_tp or dpn) or (s.tp <= dpn and dpn % s.tp):
        return False
    if s.pp > (bounds.max_pp or model.layers) or (bounds.max_cp and s.cp > bounds.max_cp):
        return False
    if s.micro_batch > bounds.max_micro_batch and pins.micro_batch is None:
        return False
    if model.moe is not None and s.etp > (bounds.max_tp or dpn):
        return False
    split = (s.vpp, s.first_stage_layers or 0, s.last_stage_layers or 0,
             int(s.account_for_embedding) | 2 * int(s.account_for_loss))
    if split not in split_family(model.layers, s.pp, bounds.runtime, pins):
        return False
    for k in ("tp", "pp", "dp", "cp", "ep", "etp", "zero", "micro_batch", "vpp", "recompute"):
        v = getattr(pins, k)
        if v is not None and getattr(s, k) != v:
            return False
    if pins.sequence_parallel is not None and bool(s.sequence_parallel) != (pins.sequence_parallel and s.tp > 1):
        return False
    if pins.moe_a2a_overlap is not None and bool(s.moe_a2a_overlap) != pins.moe_a2a_overlap:
        return False
    if pins.tp_pp_dp_mapping is not None and bool(s.tp_pp_dp_mapping) != pins.tp_pp_dp_mapping:
        return False
    if s.tp_pp_dp_mapping and (s.pp == 1 or s.dp == 1):
        return False     # the same placement as the default order: counted once
    if s.fsdp_shard not in shard_choices(bounds.runtime, s.zero, s.tp, s.dp, s.cp, s.ep, dpn, pins.fsdp_shard):
        return False     # hybrid sharding: the node's share of the dp·cp ranks only
    if runtimes.get(bounds.runtime).refusal(s, model) is not None:
        return False
    return s.attention == pins.attention


def oracle_space(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, bounds: Bounds = Bounds(),
                 pins: Pins = Pins()) -> list[StrategySpec]:
    g = cluster.groups[0]
    n = cluster.devices
    L = model.layers
    rng = range(1, n + 1)
    moe = model.moe is not None
    out = []
    splits = [(None, None, False, False)] + [(f, la, False, False) for f in [None, *range(1, L + 1)]
                                             for la in [None, *range(1, L + 1)] if (f, la) != (None, None)]
    splits += [(None, None, e, lo) for e in (False, True) for lo in (False, True) if e or lo]

    @functools.cache
    def layer_splits(pp: int, vpp: int) -> list:
        """The splits whose layer counts Megatron's rule accepts for (pp, vpp) (what check_strategy's
        stage_layers would refuse anyway, hoisted out of the product for speed)."""
        ok = []
        for first, last, acc_e, acc_l in (splits if pp > 1 else splits[:1]):
            try:
                stage_layers(StrategySpec(pp=pp, vpp=vpp, first_stage_layers=first, last_stage_layers=last,
                                          account_for_embedding=acc_e, account_for_loss=acc_l), L)
            except SpecError:
                continue
            ok.append((first, last, acc_e, acc_l))
        return ok

    for tp, pp, cp in itertools.product(rng, rng, rng):
        if n % (tp * pp * cp):
            continue
        dp = n // (tp * pp * cp)
        for ep, etp in itertools.product(rng if moe else [1], rng if moe else [1]):
            for mb, vpp, zero, rec, sp, a2a, order, shard in itertools.product(
                    range(1, job.global_batch // dp + 1), range(1, L + 1), range(4), RECOMPUTE, (True, False),
                    (False, True) if moe else (False,), (False, True), (0, *divisors(dp * cp))):
                if shard and zero < 2:
                    continue     # hybrid sharding needs ZeRO-2/3 (StrategySpec would refuse it: skipped cheaply)
                for first, last, acc_e, acc_l in layer_splits(pp, vpp):
                    try:
                        s = StrategySpec(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, zero=zero, micro_batch=mb,
                                         vpp=vpp, recompute=rec, sequence_parallel=sp, attention=pins.attention,
                                         first_stage_layers=first, last_stage_layers=last,
                                         account_for_embedding=acc_e, account_for_loss=acc_l, moe_a2a_overlap=a2a,
                                         tp_pp_dp_mapping=order, fsdp_shard=shard,
                                         **runtimes.knobs(bounds.runtime))
                        check_strategy(s, model, job, n)
                    except SpecError:
                        continue
                    if s.tp == 1 and sp:
                        continue   # canonical form stores sp off for tp 1: count it once
                    if space_rules_ok(s, model, g.devices_per_node, bounds, pins):
                        out.append(s)
    return out


def oracle(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, bounds: Bounds = Bounds(), pins: Pins = Pins(),
           top: int = 1) -> list[tuple[float, Cand, Estimate]]:
    ranked = []
    for s in oracle_space(model, cluster, job, bounds, pins):
        e = estimate(model, cluster, job, s, bounds.max_memory_frac)
        if e.fits:
            ranked.append((e.step_time_s, from_strategy(s), e))
    ranked.sort(key=lambda x: (x[0], x[1]))
    return ranked[:top]
