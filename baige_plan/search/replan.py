"""Elastic re-plan after failures or growth (`baige-plan replan`, issue 12 item 3).

Given a plan (a plan file written by `plan --out`: model, cluster, job, pipelines, placement) and a change
to its cluster -- nodes lost (`--drop NODE`, `--drop-count GROUP:N`), nodes or a group added (`--add
CHIP:NODESxDEVICES`), a bridge lost (`--drop-bridge A:B`) -- return in seconds a new plan that keeps as much
of the running state where it already is as the throughput allows, with the throughput change and the
bytes that have to move.

By phase: replan_world.py (the changed cluster), replan_holdings.py (what each rank holds, overlaps),
replan_candidates.py (the layouts tried), replan_placement.py (rank-keeping placement, bytes to move), and
here the choice among them and its labels.

Node names. A node is GROUP:INDEX in the old plan's cluster (the group and node of its `placement`, e.g.
`gpu:17`). Added nodes continue their group's numbering (`gpu:64`, ...) or start a new group at 0. A plan
file numbers its nodes 0..n-1 per group, so the new plan's node i of a group is a *physical* node named in
the report's `node_map` (old names); nodes the new plan leaves out are `spare`.

State model (what has to move). Each rank holds a box of model state, measured in parameters:
  parameters   for every model chunk it runs, the chunk's range on a parameter axis x (the embedding, the
               transformer layers in order, the output layer; routed-expert parameters on a second,
               disjoint axis) times its shard of each tensor: [t/tp, (t+1)/tp) for tp rank t (experts:
               [q/E, (q+1)/E), E = ep*etp, q = its index among the stage's tp*cp*dp ranks mod E, Megatron's
               expert folding);
  optimizer    (fp32 master + Adam m, v) with ZeRO >= 1, the distributed optimizer: the d-th of D equal
               slices of each chunk's x-range times the same shard (D = dp*cp, d = replica*cp + cp_rank;
               experts: D = edp, d = index // E); with ZeRO 0 the whole parameter box; ZeRO-3 slices the
               parameters the same way.
Interleaved stages (vpp > 1) run chunks c*pp + i, c = 0..vpp-1 (Megatron's interleaved schedule); the first
stage also holds the embedding, the last the output layer (not with tied embeddings on one stage). Bytes
per parameter: the weight copy (2 B; 4 B in fp32/tf32) and K = 12 B of optimizer state (8 B in fp32/tf32),
as cost/memory.py counts them. Gradients are rebuilt every step and never move. For each new rank on
device u:
    moved(rank) = |new box| - |new box ∩ state device u held in the old plan|      (bytes)
i.e. the state it must hold that its device did not hold before (sent by a surviving peer or read back
from the checkpoint); added devices held nothing. Boxes are unions of products of intervals, so the
overlaps are sums of products of interval overlaps: exact for this model.

Placement. A plan's placement function (search/placement.py, search/hetero_placement.py) decides which
node *index* hosts which ranks; which physical node gets which index is free. Per group we choose it by a
maximum-weight assignment (scipy's linear_sum_assignment) of the new plan's node indices to the group's
available physical nodes, the weight of a pair being the bytes of its new state the physical node already
holds; ties keep the natural order. `plan` run on the new cluster puts its ranks on the surviving nodes in
order: that is the "fresh" plan's movement we report next to ours.

Candidates (each costed by the exact cost model, all with the old global batch, runtime, attention and
memory fraction):
  keep       the old pipeline shape, layers and tp as they are, with r' data-parallel replicas (replicas with
             a lost rank are dropped first; added devices may grow r'); the micro-batches per replica grow
             to keep the global batch (r' x micro-batch must divide it; the micro-batch size and recompute
             may change -- neither moves state). Every surviving rank stays on its stage and layers: no
             parameter moves, only the optimizer slices re-shard over the new data-parallel size.
  rebalance  (plans on several groups) the old shape restricted to the groups that remain (same group order
             and tp, adjacent stages of one group merged), r' replicas, layers re-split by the heterogeneous
             solver (exact sweep or CP-SAT, then the exact-model polish): only layers near the moved stage
             boundaries change hands.
  same tp    (one group) the homogeneous search pinned to the old plan's tp and cp on that group, at the node
             counts the fresh search visits: every shard keeps its width, so ranks keep the layers their new
             stage shares with their old one (losing one node of gpt3-175b's 64 nodes: tp4 pp20 within 3 % of
             the fastest fresh plan, tp2 pp20, moving under a third of its parameter bytes;
             benchmarks/run_all.py replan_gpt3_512_lose_one_node prints the figures).
  fresh      the existing searches on the new cluster: one group by the exact best-first `search` at each
             node count n from the largest down (a homogeneous plan uses every device of its cluster, and
             many counts admit no strategy at all -- 504 A100s for gpt3-175b at global batch 1536 -- so
             smaller counts are tried until n x devices per node x (best tokens/s per device so far) x
             (1 + SIZE_SLACK) < best tokens/s), its FRESH_TOP best plans per count; several groups by
             `hetero.solve`.
Islands. Groups that can still talk (same family, or a bridge not dropped) form the sub-clusters a plan may
span: every maximal clique of that graph, and each of its groups alone. Candidates come from all of them;
a plan lives on one (e.g. losing the only bridge of a mixed cluster: a plan on each side, the better kept).
Choice. T_ref = tokens/s of the fastest fresh plan (of the fastest candidate when no fresh plan fits);
among the candidates with tokens/s >= (1 - max_loss) T_ref, the fewest bytes moved, ties to the faster --
except that a layout farther from the old one (`layout_distance`: another tp or cp, each doubling or halving of
pp, an uneven layer split, interleaving or ZeRO-3 switched) must clearly move less (issue 19: losing one of 32
nodes picked tp1 pp28 cp8): among the plans moving at most NEAR_BYTES x the fewest bytes (and less than the fresh
plan placed in order) the closest layout wins, then the fewest bytes, then the faster. Healthy nodes the plan
leaves idle are named hot spares, with why (no plan of the global batch fits on more nodes, or more move more).
`--drop-count GROUP:N` loses the N least disruptive nodes: nodes hosting no rank first, then those of the
highest (pipeline, replica) they host, highest index first -- whole last replicas with the usual placement.
Not modelled: devices keep their index inside a node (no permutation within a node: a tp 4 -> 2 change keeps
a quarter of each shard where a permutation could keep half); where moved state comes from (a peer or the
checkpoint) and the time to move it; the global batch never changes (a replica count that does not divide
it is skipped); old plans of several pipeline shapes get no keep/rebalance candidates (FlagScale runs one).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

from baige_plan.cost.estimate import Estimate
from baige_plan.search.placement import Slot
from baige_plan.search.replan_candidates import (
    Candidate,
    fresh_hetero,
    fresh_homogeneous,
    keep_homogeneous,
    keep_pipelines,
    rebalance,
)
from baige_plan.search.replan_holdings import (
    Axis,
    ShapeLayout,
    holdings,
    layout_of_pipelines,
    layout_of_strategy,
)
from baige_plan.search.replan_placement import (
    settle,
)
from baige_plan.search.replan_world import (
    World,
    node_name,
    sub_clusters,
)
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.pipeline import PipelinesSpec
from baige_plan.specs.strategy import StrategySpec
from baige_plan.specs.topology import (
    ClusterSpec,
)

MAX_LOSS = 0.03          # default --max-loss
NEAR_BYTES = 2.0           # a layout farther from the old one is chosen only below 1/NEAR_BYTES of the bytes


# -- the whole re-plan ----------------------------------------------------------------------------------------------
@dataclass
class ReplanResult:
    old: Estimate
    old_devices: int
    chosen: Candidate
    fresh: Candidate | None                 # the fastest fresh plan, placed as `plan` would (natural order)
    candidates: list[Candidate]             # settled ones (within the tolerance), best first
    considered: int
    islands: list[tuple[tuple[str, ...], float]]   # (groups, best tokens/s) per sub-cluster
    world: World
    reason: str
    seconds: float
    standalone: dict[str, float] = field(default_factory=dict)   # group -> best tokens/s of the group alone


class Infeasible(Exception):
    """No candidate fits; the message names the binding constraint."""


def intact_replicas(w: World, slots: list[Slot]) -> dict[int, int]:
    """Per old pipeline shape: replicas none of whose ranks sat on a lost node."""
    alive = {n for ns in w.avail.values() for n in ns}
    broken: dict[int, set[int]] = {}
    total: dict[int, set[int]] = {}
    for s in slots:
        total.setdefault(s.pipeline, set()).add(s.replica)
        if node_name(s.group, s.node) not in alive:
            broken.setdefault(s.pipeline, set()).add(s.replica)
    return {j: len(rs) - len(broken.get(j, set())) for j, rs in total.items()}


def replan(model: ModelSpec, job: JobSpec, old_cluster: ClusterSpec, old_e: Estimate, old_s: StrategySpec | None,
           old_p: PipelinesSpec | None, old_slots: list[Slot], w: World, *, frac: float, max_loss: float = MAX_LOSS,
           time_limit_s: float | None = None) -> ReplanResult:
    t0 = time.perf_counter()
    limit = 10.0 if time_limit_s is None else time_limit_s
    deadline = t0 + limit
    if not any(w.avail.values()):
        raise Infeasible("devices: every node of the cluster is dropped")
    ax = Axis(model, job.precision)
    old_layout = (layout_of_strategy(model, old_s, old_cluster.groups[0].name) if old_s is not None
                  else layout_of_pipelines(old_p))
    old_store = holdings(ax, old_layout, old_slots)
    intact = intact_replicas(w, old_slots)
    runtime = old_s.runtime if old_s is not None else old_p.runtime
    attention = old_s.attention if old_s is not None else old_p.attention
    cands: list[Candidate] = []
    bindings: list[str] = []
    islands = []
    standalone: dict[str, float] = {}
    for groups in sub_clusters(w):
        here: list[Candidate] = []
        if old_s is not None and groups == (old_cluster.groups[0].name,):
            here += keep_homogeneous(model, w, job, old_s, groups[0], intact.get(0, 0), frac)
        if old_p is not None:
            here += keep_pipelines(model, w, job, old_p, groups, intact.get(0, 0), frac)
            if len(old_p.devices_by_group()) > 1 or not set(old_p.devices_by_group()) <= set(groups):
                here += rebalance(model, w, job, old_p, groups, frac, limit)
        if len(groups) == 1:
            found, why = fresh_homogeneous(model, w, job, groups[0], frac, runtime, attention, deadline,
                                           _old_tp(old_layout, groups[0]))
        else:
            rt = runtime if runtimes.get(runtime).heterogeneous else runtimes.DEFAULT_HETEROGENEOUS
            base = _hetero_base(old_s, old_p, rt)
            found, why = fresh_hetero(model, w, job, groups, frac, base, max(0.5, deadline - time.perf_counter()))
        if why:
            bindings.append(f"{'+'.join(groups)}: {why}")
        here += found
        if here:
            islands.append((groups, max(c.tokens_per_s for c in here)))
        if len(groups) == 1 and found:
            standalone[groups[0]] = max(c.tokens_per_s for c in found)
        cands += here
    if not cands:
        raise Infeasible("; ".join(bindings) or "no plan fits the remaining devices")
    fresh = [c for c in cands if c.family == "fresh"]
    ref = max(fresh or cands, key=lambda c: c.tokens_per_s)
    t_ref = ref.tokens_per_s
    ok, seen = [], set()
    for c in cands:
        if c.tokens_per_s < (1 - max_loss) * t_ref * (1 - 1e-12):
            continue
        key = (c.strategy, c.pipelines, tuple((g.name, g.nodes) for g in c.cluster.groups))
        if key not in seen:         # the same plan found by two families: keep the first (keep, rebalance, ...)
            seen.add(key)
            ok.append(c)
    done: dict = {}
    for c in ok:
        # plans that differ only in micro-batch size or recompute hold the same state: settled once
        key = (c.strategy is not None, c.layout(model), tuple((g.name, g.nodes) for g in c.cluster.groups))
        if key in done:
            src = done[key]
            c.slots, c.node_map, c.spare, c.moves = src.slots, src.node_map, src.spare, src.moves
            c.params_bytes, c.optimizer_bytes, c.ranks, c.ranks_kept = (src.params_bytes, src.optimizer_bytes,
                                                                         src.ranks, src.ranks_kept)
        else:
            done[key] = settle(model, ax, w, old_store, c)
    # issue 19: the fewest bytes moved, but a layout farther from the old one (layout_distance: a deeper pipeline,
    # another tp or cp, an uneven split) only when it clearly moves less: among the plans moving at most
    # NEAR_BYTES x the fewest bytes (and less than the fresh plan placed in order), the closest layout, then the
    # fewest bytes, then the fastest
    dist = {id(c): layout_distance(c, old_s, old_layout, model) for c in ok}
    ok.sort(key=lambda c: (round(c.bytes_moved / 1e6), dist[id(c)], -c.tokens_per_s, c.label))
    fewest = ok[0]
    fresh_ref = None
    if fresh:
        best_fresh = max(fresh, key=lambda c: (c.tokens_per_s, -len(c.label)))
        fresh_ref = settle(model, ax, w, old_store, replace(best_fresh), optimise=False)
    near = [c for c in ok if c is fewest or (c.bytes_moved <= NEAR_BYTES * fewest.bytes_moved + 1e9 and
                                             (fresh_ref is None or c.bytes_moved < fresh_ref.bytes_moved))]
    chosen = min(near, key=lambda c: (dist[id(c)], round(c.bytes_moved / 1e6), -c.tokens_per_s, c.label))
    ok.sort(key=lambda c: (c is not chosen, round(c.bytes_moved / 1e6), dist[id(c)], -c.tokens_per_s, c.label))
    reason = (f"the fewest bytes moved among the {len(ok)} plan(s) within {max_loss:.1%} of the fastest "
              f"{'fresh ' if fresh else ''}plan's {t_ref:,.0f} tokens/s")
    if fewest is not chosen:
        reason += (f"; a layout closer to the old one ({_gb_text(chosen.bytes_moved)} moved) is preferred to "
                   f"{fewest.label} ({_gb_text(fewest.bytes_moved)}): a farther layout must move under "
                   f"1/{NEAR_BYTES:g} of the bytes to be chosen")
    idle = spare_reason(w, chosen, cands, job)
    if idle:
        reason += "; " + idle
    sides = [(g, t) for g, t in islands if not any(set(g) < set(h) for h, _ in islands)]
    if len(sides) > 1:
        reason += ("; the groups no longer all talk, so the plan runs on one side (" +
                   ", ".join(f"{'+'.join(g)}: {t:,.0f} tokens/s" for g, t in sides) +
                   f"): {'+'.join(g.name for g in chosen.cluster.groups)}")
    return ReplanResult(old=old_e, old_devices=old_e.devices, chosen=chosen, fresh=fresh_ref, candidates=ok,
                        considered=len(cands), islands=islands, world=w, reason=reason,
                        seconds=time.perf_counter() - t0, standalone=standalone)


def _gb_text(b: float) -> str:
    return f"{b / 1e9:,.1f} GB"


def layout_distance(c: Candidate, old_s: StrategySpec | None, old_layout: tuple[ShapeLayout, ...],
                    model: ModelSpec) -> int:
    """How far `c`'s layout is from the old plan's: 0 for the old layout kept (families keep, rebalance), else
    one per change of tp, of cp, per doubling or halving of pp, for an uneven layer split where the old one was
    even, for interleaving switched on or off and for ZeRO-3 switched on or off (homogeneous plans); a new
    layout on several groups counts 2 (1 when it keeps the old tp and cp)."""
    if c.family in ("keep", "rebalance"):
        return 0
    s = c.strategy
    if s is None or old_s is None:
        return 1 if c.family == "same tp" else 2
    d = int(s.tp != old_s.tp) + int(s.cp != old_s.cp)
    d += abs(round(math.log2(s.pp / old_s.pp)))
    d += int(model.layers % s.pp != 0 and model.layers % old_s.pp == 0)
    d += int((s.vpp > 1) != (old_s.vpp > 1)) + int((s.zero == 3) != (old_s.zero == 3))
    return d


def spare_reason(w: World, chosen: Candidate, cands: list[Candidate], job: JobSpec) -> str:
    """Why healthy nodes are left out of the chosen plan (they are the hot spares of the next failure)."""
    out = []
    for g in chosen.cluster.groups:
        avail = len(w.avail[g.name])
        if g.nodes >= avail:
            continue
        most = max((c.cluster.group(g.name).nodes for c in cands if len(c.cluster.groups) == 1
                    and c.cluster.groups[0].name == g.name), default=g.nodes)
        spare = avail - g.nodes
        if most < avail:
            why = (f"no plan of global batch {job.global_batch} fits on {most + 1}"
                   + (f"-{avail}" if avail > most + 1 else "") + f" nodes of {g.name!r}")
        else:
            why = "the plans on more nodes move more state or run slower"
        out.append(f"{spare} healthy node(s) of {g.name!r} left as hot spares ({why})")
    return "; ".join(out)


def _old_tp(layout: tuple[ShapeLayout, ...], group: str) -> tuple[int, int] | None:
    """(tp, cp) of the old plan's stages on `group` when they all agree, else None."""
    tps = {(st.tp, sh.cp) for sh in layout for st in sh.stages if st.group == group}
    return tps.pop() if len(tps) == 1 else None


def _hetero_base(old_s: StrategySpec | None, old_p: PipelinesSpec | None, rt: str) -> StrategySpec:
    if old_p is not None and len(old_p.shapes) == 1:
        sh = old_p.shapes[0]
        k = old_p.knob
        return StrategySpec(micro_batch=k(sh, "micro_batch"), zero=k(sh, "zero"), recompute=k(sh, "recompute"),
                            sequence_parallel=True, attention=old_p.attention, **runtimes.knobs(rt))
    s = old_s or StrategySpec()
    zero = s.zero if s.zero in runtimes.get(rt).zero_stages else 1
    return StrategySpec(micro_batch=s.micro_batch, zero=zero, recompute=s.recompute, sequence_parallel=True,
                        attention=s.attention, **runtimes.knobs(rt))


def change_pct(new: float, old: float) -> float:
    return (new / old - 1.0) if old > 0 else math.inf
