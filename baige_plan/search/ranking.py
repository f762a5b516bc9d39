"""The order `plan` shows its plans in (issue 16 item 5): a presentation step over the search's result, which
stays the exact optimum of the cost model (search/solver.py, checked by search/oracle.py). Pure functions.

1. Equal estimates are one row (`dedupe`). Estimates whose step time and peak memory are equal at the plan
   file's rounding (6 significant digits, io/serialize.py rnd) and whose strategies differ only in knobs that
   leave the layout alone (`KNOBS`: recompute, zero, micro-batch, sequence parallelism, attention, the EP
   all-to-all overlap) collapse into one row. Megatron's selective recomputation (core attention only) costs nothing with flash attention,
   so recompute none and selective give the same estimate and used to fill half of every top-N list. The row
   shows its simplest member (`simplicity`: recompute none, then selective, then full; the lower ZeRO stage;
   the smaller micro-batch; sequence parallelism off; flash attention; no EP overlap) and names the others
   (`equivalent`).
2. Ties (`present_order`). The estimate is uncertain: each carries step_time_band_s, the range its step time
   is expected in (cost/bands.py). Among the TIE_POOL fastest rows, the rows whose bands overlap the band of
   the fastest row are a tie group; the rest of the pool is grouped the same way around its own fastest row,
   and so on. Within a group the order is simpler first:
     fewer parallel dimensions above 1 (tp, pp, cp, ep, vpp, ZeRO-3 and hybrid sharding count one each; dp does
     not; ZeRO-3 not where the runtime shards by default, torchtitan),
     then no context parallelism (a group where every row uses cp is unaffected),
     then a layout (tp, pp, cp, ep, vpp) a published recipe uses (io/recipes.py),
     then predicted step time, then the search's order.
   Rows past the pool follow in the search's order, in no group. Without bands there are no ties and the
   order is the search's.
3. On a cluster of several chip groups (`fastest_first_ties`) the plans are the search's best and its next distinct
   plans (search/hetero.py `_alternatives`), and the order stays the search's, fastest first: the keys above
   describe one strategy, not a plan of several pipeline shapes on several chips. Ties are marked the same way.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, fields

from baige_plan.specs import runtimes
from baige_plan.specs.strategy import ATTENTION, RECOMPUTE, StrategySpec

TIE_POOL = 16     # ties are sought among this many fastest distinct rows, whatever --top is
KNOBS = ("recompute", "zero", "micro_batch", "sequence_parallel", "attention", "moe_a2a_overlap",
         "tp_pp_dp_mapping")   # may be equivalent
ORDER_RULE = ("ties: plans whose step-time bands overlap; shown simpler first: fewer parallel dimensions "
              "(tp, pp, cp, ep, vpp, zero 3 unless the runtime shards by default), no cp unless every tie needs it, "
              "a published recipe's layout, then step time")

HETERO_ORDER_RULE = ("ties: plans whose step-time bands overlap, marked; on a cluster of several chip groups shown "
                     "fastest first (the first is the plan file's plan)")

Layout = tuple[int, int, int, int, int]   # (tp, pp, cp, ep, vpp): what a published recipe's layout is matched on


def sig(x: float, digits: int = 6) -> float:
    """x rounded to `digits` significant digits, as io/serialize.py rnd rounds the plan file's floats."""
    return float(f"{x:.{digits}g}") if x else 0.0


def simplicity(s: StrategySpec) -> tuple:
    """The order of equivalent knobs, simplest first: recompute none < selective < full, lower ZeRO stage, full
    sharding before hybrid, smaller micro-batch, sequence parallelism off, flash attention, the EP all-to-all overlap off, Megatron's
    default rank order."""
    return (RECOMPUTE.index(s.recompute), s.zero, bool(s.fsdp_shard), s.micro_batch, bool(s.sequence_parallel),
            ATTENTION.index(s.attention), bool(s.moe_a2a_overlap), bool(s.tp_pp_dp_mapping))


def _layout_key(s: StrategySpec) -> tuple:
    return tuple((f.name, getattr(s, f.name)) for f in fields(s) if f.name not in KNOBS)


@dataclass(frozen=True)
class Row:
    """One shown row: `members` index the input (the representative, the simplest, first)."""

    members: tuple[int, ...]
    equivalent: tuple[tuple[str, tuple], ...] = ()   # (knob, values of the members, in member order) that differ

    @property
    def index(self) -> int:
        return self.members[0]

    def equivalent_dict(self) -> dict:
        return {k: list(v) for k, v in self.equivalent}


def dedupe(times: Sequence[float], memories: Sequence[float], strategies: Sequence[StrategySpec]) -> list[Row]:
    """Rows of equal estimates (module docstring, 1), placed where their first member stands in the input."""
    groups: dict[tuple, list[int]] = {}
    for i, (t, m, s) in enumerate(zip(times, memories, strategies, strict=True)):
        groups.setdefault((sig(t), sig(m), _layout_key(s)), []).append(i)
    rows = []
    for idx in sorted(groups.values(), key=lambda g: g[0]):
        members = tuple(sorted(idx, key=lambda i: (simplicity(strategies[i]), i)))
        eq = tuple((k, vals) for k in KNOBS
                   if len(set(vals := tuple(getattr(strategies[i], k) for i in members))) > 1)
        rows.append(Row(members, eq))
    return rows


def dimensions(s: StrategySpec) -> int:
    """Parallel dimensions above 1: tp, pp, cp, ep, vpp, ZeRO-3 and hybrid sharding's replication, one each (dp is
    not counted). ZeRO-3 is not
    counted for a runtime whose data parallelism is FSDP by default (RuntimeSpec.fsdp_default: torchtitan), where it is
    the plain setting and ZeRO-2 the variant."""
    z3 = s.zero >= 3 and not runtimes.get(s.runtime).fsdp_default
    return (s.tp > 1) + (s.pp > 1) + (s.cp > 1) + (s.ep > 1) + (s.vpp > 1) + z3 + bool(s.fsdp_shard)


def layout(s: StrategySpec) -> Layout:
    return (s.tp, s.pp, s.cp, s.ep, s.vpp)


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


@dataclass(frozen=True)
class Placed:
    """A row's place in the shown order: its index in the input and its tie group (0: none)."""

    index: int
    tie_group: int = 0

    @property
    def tie(self) -> bool:
        return self.tie_group > 0


def present_order(times: Sequence[float], strategies: Sequence[StrategySpec],
                  bands: Sequence[tuple[float, float]] | None, recipe_layouts: Collection[Layout] = (),
                  pool: int = TIE_POOL) -> list[Placed]:
    """The shown order of rows given fastest first (module docstring, 2). `bands`: each row's
    step_time_band_s, or None (no ties)."""
    n = len(times)
    if bands is None or n < 2:
        return [Placed(i) for i in range(n)]
    out: list[Placed] = []
    group = 0
    for ties in band_groups(times, bands, pool):
        if len(ties) == 1:
            out.append(Placed(ties[0]))
            continue
        group += 1
        ties.sort(key=lambda i: (dimensions(strategies[i]), strategies[i].cp > 1,
                                 layout(strategies[i]) not in recipe_layouts, times[i], i))
        out.extend(Placed(i, group) for i in ties)
    out.extend(Placed(i) for i in range(min(pool, n), n))
    return out


def band_groups(times: Sequence[float], bands: Sequence[tuple[float, float]], pool: int = TIE_POOL
                ) -> list[list[int]]:
    """The rows among the `pool` fastest, grouped (module docstring, 2): the fastest row and every row whose band
    overlaps its band, then the same around the fastest row left, and so on; each group fastest first."""
    head = sorted(range(min(pool, len(times))), key=lambda i: (times[i], i))
    out = []
    while head:
        lead = head[0]
        ties = [i for i in head if overlap(bands[i], bands[lead])]
        tied = set(ties)
        head = [i for i in head if i not in tied]
        out.append(ties)
    return out


def fastest_first_ties(times: Sequence[float], bands: Sequence[tuple[float, float]] | None) -> list[Placed]:
    """Rows given fastest first, kept in that order, with their tie groups (band_groups; 0: none). For plans on
    several chip groups: `simplicity` and `dimensions` describe one strategy, not a plan of several pipeline
    shapes, so the search's order stands and ties are only marked (HETERO_ORDER_RULE)."""
    n = len(times)
    if bands is None or n < 2:
        return [Placed(i) for i in range(n)]
    group_of = {}
    g = 0
    for ties in band_groups(times, bands, n):
        if len(ties) > 1:
            g += 1
            group_of.update({i: g for i in ties})
    return [Placed(i, group_of.get(i, 0)) for i in range(n)]
