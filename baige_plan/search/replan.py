"""Elastic re-plan after failures or growth (`baige-plan replan`, issue 12 item 3).

Given a plan (a plan file written by `plan --out`: model, cluster, job, pipelines, placement) and a change
to its cluster -- nodes lost (`--drop NODE`, `--drop-count GROUP:N`), nodes or a group added (`--add
CHIP:NODESxDEVICES`), a bridge lost (`--drop-bridge A:B`) -- return in seconds a new plan that keeps as much
of the running state where it already is as the throughput allows, with the throughput change and the
bytes that have to move.

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
import re
import time
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import linear_sum_assignment

from baige_plan import runtimes
from baige_plan.cost.estimate import Estimate, estimate
from baige_plan.cost.memory import precision_state_bytes, weight_bytes
from baige_plan.cost.params import layer_params_split
from baige_plan.errors import InputError, SpecError
from baige_plan.io.topologies import DEFAULT_BRIDGE_GBPS_PER_NODE, DEFAULT_BRIDGE_LATENCY_US
from baige_plan.limits import MAX_DEVICES, MAX_GROUPS
from baige_plan.search.placement import Slot, placement
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.pipeline import PipelineShape, PipelinesSpec
from baige_plan.specs.strategy import StrategySpec, stage_layers
from baige_plan.specs.topology import BridgeSpec, ClusterSpec, GroupSpec

SIZE_SLACK = 0.05        # a smaller node count is searched while it could be this much faster per device
FRESH_TOP = 6            # plans kept per node count of the homogeneous search
MAX_LOSS = 0.03          # default --max-loss
MICRO_BATCHES = (1, 2, 4, 8, 16)   # micro-batch sizes the keep family tries besides the old one
RECOMPUTE = ("selective", "full", "none")
# what each family's plan label says (the JSON `family` keeps the short name)
LABELS = {"keep": "old layout kept", "rebalance": "old stages, layers rebalanced",
          "same tp": "old tp/cp kept, new pipeline", "fresh": "new layout"}
NEAR_BYTES = 2.0           # a layout farther from the old one is chosen only below 1/NEAR_BYTES of the bytes
MAX_ASSIGN = 4_000_000     # node pairs of the max-weight assignment (2,000 x 2,000); beyond it the natural order
OVERLAP_BLOCK = 4_000_000   # elements per numpy block of the overlap computation (bounded memory)
_NODE = re.compile(r"^(?P<group>.+?):(?P<lo>[0-9]+)(?:-(?P<hi>[0-9]+))?$")   # ASCII digits only (not '²')


# -- the change ---------------------------------------------------------------------------------------------
@dataclass
class World:
    """The cluster after the change: per group its spec (node count = the old one) and its available
    physical nodes (names, natural order), the bridges left, and what changed."""

    groups: dict[str, GroupSpec]
    avail: dict[str, list[str]]
    bridges: list[BridgeSpec]
    cut: set[frozenset]                       # pairs of groups that can no longer talk
    dropped: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    dropped_bridges: list[str] = field(default_factory=list)
    name: str = ""
    sources: tuple = ()
    notes: list[str] = field(default_factory=list)

    def talk(self, a: str, b: str) -> bool:
        if frozenset((a, b)) in self.cut:
            return False
        ga, gb = self.groups[a], self.groups[b]
        return ga.family == gb.family or any(set(br.groups) == {a, b} for br in self.bridges)


def node_name(group: str, index: int) -> str:
    return f"{group}:{index}"


def world_of(cluster: ClusterSpec) -> World:
    return World(groups={g.name: g for g in cluster.groups},
                 avail={g.name: [node_name(g.name, i) for i in range(g.nodes)] for g in cluster.groups},
                 bridges=list(cluster.bridges), cut=set(), name=cluster.name, sources=cluster.sources)


def parse_nodes(spec: str, cluster: ClusterSpec, option: str = "--drop") -> list[str]:
    """NODE names: GROUP:INDEX, GROUP:FIRST-LAST (inclusive) or GROUP (all its nodes)."""
    names = [g.name for g in cluster.groups]
    spec = spec.strip()
    if spec in names:
        return [node_name(spec, i) for i in range(cluster.group(spec).nodes)]
    m = _NODE.match(spec)
    if not m or m["group"] not in names:
        grp = m["group"] if m else spec
        raise InputError(option, spec, f"unknown node or group {grp!r}: nodes are GROUP:INDEX, GROUP:FIRST-LAST "
                         f"or GROUP, groups: {', '.join(names)}")
    g = cluster.group(m["group"])
    if any(x is not None and len(x) > 9 for x in (m["lo"], m["hi"])):     # int() of 5,000 digits raises
        raise InputError(option, spec[:60] + ("..." if len(spec) > 60 else ""),
                         f"node index out of range: group {g.name!r} has nodes 0-{g.nodes - 1}")
    lo = int(m["lo"])
    hi = int(m["hi"]) if m["hi"] is not None else lo
    if hi < lo or hi >= g.nodes:
        raise InputError(option, spec, f"node {hi if hi >= g.nodes else lo} is out of range: group {g.name!r} "
                         f"has nodes 0-{g.nodes - 1}")
    return [node_name(g.name, i) for i in range(lo, hi + 1)]


def least_disruptive(group: str, n: int, cluster: ClusterSpec, slots: list[Slot], taken: set[str],
                     option: str = "--drop-count") -> list[str]:
    """The n nodes of `group` whose loss breaks the fewest replicas: nodes hosting no rank first, then the
    nodes of the last data-parallel replicas (the highest (pipeline, replica) they host), highest index
    first -- with the usual placement, whole replicas go one by one."""
    g = cluster.group(group)
    left = [i for i in range(g.nodes) if node_name(group, i) not in taken]
    if n > len(left):
        raise InputError(option, f"{group}:{n}", f"group {group!r} has {len(left)} nodes left to drop, not {n}")
    hosted: dict[int, tuple[int, int]] = {}
    for s in slots:
        if s.group == group:
            hosted[s.node] = max(hosted.get(s.node, (-1, -1)), (s.pipeline, s.replica))
    order = sorted(left, key=lambda i: (i in hosted, tuple(-x for x in hosted.get(i, (0, 0))), -i))
    return [node_name(group, i) for i in order[:n]]


def apply_changes(cluster: ClusterSpec, slots: list[Slot], drops: list[str], drop_counts: list[str],
                  adds: list[GroupSpec], drop_bridges: list[str]) -> World:
    """The world after the change. `adds` are groups as the user named them (chip, nodes, devices per
    node): nodes join the group of the same chip and node size, else a new group. InputError on bad input."""
    w = world_of(cluster)
    gone: list[str] = []
    for spec in drops:
        for name in parse_nodes(spec, cluster):
            if name not in gone:
                gone.append(name)
    for spec in drop_counts:
        grp, _, num = spec.strip().rpartition(":")
        if not grp or not (num.isascii() and num.isdigit()) or len(num) > 9 or int(num) < 1:
            raise InputError("--drop-count", spec, "expected GROUP:N (N >= 1 nodes of group GROUP)")
        if grp not in w.groups:
            raise InputError("--drop-count", spec, f"unknown group {grp!r} (groups: {', '.join(w.groups)})")
        gone += least_disruptive(grp, int(num), cluster, slots, set(gone))
    for name in gone:
        grp = name.rpartition(":")[0]
        w.avail[grp].remove(name)
    w.dropped = gone
    for a in adds:
        same = [g for g in w.groups.values() if g.chip.id == a.chip.id and g.devices_per_node == a.devices_per_node]
        if same:
            g = same[0]
            # added nodes are numbered after every node the group ever had
            start = g.nodes + sum(1 for x in w.added if x.rpartition(":")[0] == g.name)
            new = [node_name(g.name, start + i) for i in range(a.nodes)]
        else:
            name = a.name
            k = 1
            while name in w.groups:
                k += 1
                name = f"{a.name}-{k}"
            g = replace(a, name=name)
            w.groups[name] = g
            w.avail[name] = []
            new = [node_name(name, i) for i in range(a.nodes)]
            for other in list(w.groups.values()):
                if other.name != name and other.family != g.family:
                    w.bridges.append(BridgeSpec((other.name, name), "cpu-forwarding", DEFAULT_BRIDGE_GBPS_PER_NODE,
                                                DEFAULT_BRIDGE_LATENCY_US))
                    w.notes.append(f"added group {name!r} ({g.family}) talks to {other.name!r} ({other.family}) over a "
                                   f"default cpu-forwarding bridge ({DEFAULT_BRIDGE_GBPS_PER_NODE:g} GB/s per node)")
        w.avail[g.name] += new
        w.added += new
    total = sum(len(w.avail[n]) * w.groups[n].devices_per_node for n in w.groups)
    if adds and total > MAX_DEVICES:
        raise InputError("--add", "", f"the cluster would have {total:,} devices, more than the limit of "
                         f"{MAX_DEVICES:,}")
    if len(w.groups) > MAX_GROUPS:
        raise InputError("--add", "", f"the cluster would have {len(w.groups)} groups, more than the limit of "
                         f"{MAX_GROUPS}")
    for spec in drop_bridges:
        a, sep, b = spec.strip().partition(":")
        if not sep or a not in w.groups or b not in w.groups or a == b:
            raise InputError("--drop-bridge", spec, f"expected A:B, two different groups of {', '.join(w.groups)}")
        if not w.talk(a, b):
            raise InputError("--drop-bridge", spec, f"groups {a!r} and {b!r} have no link between them to lose")
        w.cut.add(frozenset((a, b)))
        w.bridges = [br for br in w.bridges if set(br.groups) != {a, b}]
        w.dropped_bridges.append(f"{a}:{b}")
    return w


def sub_clusters(w: World) -> list[tuple[str, ...]]:
    """Groups a plan may span: every maximal clique of the can-talk graph over groups with nodes left
    (Bron-Kerbosch), and each group alone; in cluster order."""
    names = [n for n in w.groups if w.avail[n]]
    adj = {a: {b for b in names if b != a and w.talk(a, b)} for a in names}
    cliques: list[set[str]] = []

    def bk(r: set[str], p: set[str], x: set[str]) -> None:
        if not p and not x:
            cliques.append(r)
            return
        for v in sorted(p, key=names.index):
            bk(r | {v}, p & adj[v], x & adj[v])
            p = p - {v}
            x = x | {v}

    bk(set(), set(names), set())
    out: list[tuple[str, ...]] = []
    for c in cliques:
        t = tuple(n for n in names if n in c)
        if len(t) > 1 and t not in out:
            out.append(t)
    for n in names:
        out.append((n,))
    return out


def sub_cluster(w: World, groups: tuple[str, ...], nodes: dict[str, int] | None = None) -> ClusterSpec:
    gs = tuple(replace(w.groups[n], nodes=(nodes or {}).get(n, len(w.avail[n]))) for n in groups)
    brs = tuple(b for b in w.bridges if set(b.groups) <= set(groups))
    return ClusterSpec(name=f"{w.name}-replan" if len(groups) > 1 or len(w.groups) == 1 else f"{w.name}-{groups[0]}",
                       groups=gs, bridges=brs, sources=w.sources)


# -- what each rank holds -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StageLayout:
    group: str
    tp: int
    layers: tuple[int, int]                  # as the plan writes it
    chunks: tuple[tuple[int, int], ...]      # layer ranges it actually runs


@dataclass(frozen=True)
class ShapeLayout:
    replicas: int
    cp: int
    ep: int
    etp: int
    zero: int
    stages: tuple[StageLayout, ...]


def layout_of_strategy(model: ModelSpec, s: StrategySpec, group: str) -> tuple[ShapeLayout, ...]:
    counts = stage_layers(s, model.layers)
    stages, start = [], 0
    for i, n in enumerate(counts):
        if s.vpp > 1:
            k = model.layers // (s.pp * s.vpp)
            chunks = tuple(((c * s.pp + i) * k, (c * s.pp + i + 1) * k) for c in range(s.vpp))
        else:
            chunks = ((start, start + n),)
        stages.append(StageLayout(group, s.tp, (start, start + n), chunks))
        start += n
    return (ShapeLayout(s.dp, s.cp, s.ep, s.etp, s.zero, tuple(stages)),)


def layout_of_pipelines(p: PipelinesSpec) -> tuple[ShapeLayout, ...]:
    out = []
    for sh in p.shapes:
        vpp = p.knob(sh, "vpp")
        stages = []
        for st in sh.stages:
            a, b = st.layers
            if vpp > 1 and (b - a) % vpp == 0:
                k = (b - a) // vpp
                chunks = tuple((a + c * k, a + (c + 1) * k) for c in range(vpp))
            else:
                chunks = ((a, b),)
            stages.append(StageLayout(st.group, st.tp, (a, b), chunks))
        out.append(ShapeLayout(sh.replicas, p.knob(sh, "cp"), p.knob(sh, "ep"), p.knob(sh, "etp"), p.knob(sh, "zero"),
                               tuple(stages)))
    return tuple(out)


class Axis:
    """The parameter axis: positions embedding, layer 0..L-1, output; dense and expert parameters on
    disjoint ranges (the expert range starts after the dense one)."""

    def __init__(self, model: ModelSpec, precision: str):
        vh = float(model.vocab * model.hidden)
        dense, expert = [vh], [0.0]
        for i in range(model.layers):
            d, e = layer_params_split(model, model.is_moe_layer(i))
            dense.append(float(d))
            expert.append(float(e))
        dense.append(vh)
        expert.append(0.0)
        self.cd = np.concatenate([[0.0], np.cumsum(dense)])
        self.ce = np.concatenate([[0.0], np.cumsum(expert)])
        self.off = 2.0 * self.cd[-1] + 1.0
        self.L = model.layers
        self.tie = model.tie_embeddings
        self.w_bytes = float(weight_bytes(precision))
        self.k_bytes = float(precision_state_bytes(precision)[2])

    def dense(self, a: int, b: int, one_stage: bool) -> tuple[float, float]:
        lo = 0.0 if a == 0 else float(self.cd[a + 1])
        if b < self.L:
            hi = float(self.cd[b + 1])
        else:
            hi = float(self.cd[self.L + 1] if (self.tie and one_stage) else self.cd[self.L + 2])
        return lo, hi

    def expert(self, a: int, b: int) -> tuple[float, float] | None:
        lo, hi = float(self.ce[a + 1]), float(self.ce[b + 1])
        return (self.off + lo, self.off + hi) if hi > lo else None


Piece = tuple[float, float, float, float]     # (x0, x1, f0, f1)


def rank_pieces(ax: Axis, sh: ShapeLayout, slot: Slot) -> tuple[list[Piece], list[Piece]]:
    """(parameter pieces, optimizer pieces) of one rank (module docstring)."""
    st = sh.stages[slot.stage]
    t, c, r = slot.tp_rank, slot.cp_rank, slot.replica
    D, d = sh.replicas * sh.cp, r * sh.cp + c
    E = max(1, sh.ep * sh.etp)
    local = t + st.tp * (c + sh.cp * r)
    q, De = local % E, max(1, st.tp * sh.cp * sh.replicas // E)
    de = min(local // E, De - 1)
    one = len(sh.stages) == 1
    params: list[Piece] = []
    opt: list[Piece] = []

    def add(x0: float, x1: float, f0: float, f1: float, n: int, k: int) -> None:
        w = (x1 - x0) / n
        sl = (x0 + k * w, x0 + (k + 1) * w, f0, f1)
        full = (x0, x1, f0, f1)
        params.append(sl if sh.zero >= 3 else full)
        opt.append(sl if sh.zero >= 1 else full)

    for a, b in st.chunks:
        x0, x1 = ax.dense(a, b, one)
        add(x0, x1, t / st.tp, (t + 1) / st.tp, D, d)
        ex = ax.expert(a, b)
        if ex is not None:
            add(ex[0], ex[1], q / E, (q + 1) / E, De, de)
    return params, opt


Store = dict[tuple[str, int, int], tuple[list[Piece], list[Piece]]]   # (group, node, device) -> pieces


def holdings(ax: Axis, shapes: tuple[ShapeLayout, ...], slots: list[Slot]) -> Store:
    out: Store = {}
    for s in slots:
        out[(s.group, s.node, s.device)] = rank_pieces(ax, shapes[s.pipeline], s)
    return out


def _pack(store: Store, keys: list[tuple[str, int] | None], dpn: int) -> tuple[np.ndarray, np.ndarray]:
    """Arrays (nodes, dpn, K, 4) of the parameter and optimizer pieces of the listed nodes (None: empty)."""
    k = 1
    for key in keys:
        if key is None:
            continue
        for dev in range(dpn):
            hp = store.get((key[0], key[1], dev))
            if hp:
                k = max(k, len(hp[0]), len(hp[1]))
    P = np.zeros((len(keys), dpn, k, 4))
    Q = np.zeros((len(keys), dpn, k, 4))
    for i, key in enumerate(keys):
        if key is None:
            continue
        for dev in range(dpn):
            hp = store.get((key[0], key[1], dev))
            if hp:
                if hp[0]:
                    P[i, dev, :len(hp[0])] = hp[0]
                if hp[1]:
                    Q[i, dev, :len(hp[1])] = hp[1]
    return P, Q


def _volume(A: np.ndarray) -> np.ndarray:
    """Per node and device: the measure of its pieces (nodes, dpn)."""
    return ((A[..., 1] - A[..., 0]) * (A[..., 3] - A[..., 2])).sum(axis=-1)


FOOTPRINT_BINS = 512      # bins of the parameter axis for the pair pre-filter of `_overlap`


def _footprint(A: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """(nodes, FOOTPRINT_BINS) bool: the bins of the parameter axis some piece of the node covers."""
    n = A.shape[0]
    x0 = A[..., 0].reshape(n, -1)
    x1 = A[..., 1].reshape(n, -1)
    live = x1 > x0
    scale = FOOTPRINT_BINS / max(hi - lo, 1e-30)
    b0 = np.clip(np.floor((x0 - lo) * scale).astype(np.int64), 0, FOOTPRINT_BINS - 1)
    b1 = np.clip(np.ceil((x1 - lo) * scale).astype(np.int64), 1, FOOTPRINT_BINS)
    marks = np.zeros((n, FOOTPRINT_BINS + 1))
    rows = np.repeat(np.arange(n), x0.shape[1]).reshape(n, -1)
    np.add.at(marks, (rows[live], b0[live]), 1.0)
    np.add.at(marks, (rows[live], b1[live]), -1.0)
    return np.cumsum(marks, axis=1)[:, :FOOTPRINT_BINS] > 0.5


def _overlap(A: np.ndarray, B: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """(n, m): measure of node i's pieces (A) inside node j's pieces (B), device by device; only the pairs
    where `mask` is true are computed (the others are 0)."""
    n, m = A.shape[0], B.shape[0]
    out = np.zeros((n, m))
    if n == 0 or m == 0:
        return out
    ii, jj = np.nonzero(mask) if mask is not None else np.indices((n, m)).reshape(2, -1)
    per = A.shape[1] * A.shape[2] * B.shape[2]
    step = max(1, OVERLAP_BLOCK // max(1, per))
    for k in range(0, len(ii), step):
        a = A[ii[k:k + step]][:, :, :, None, :]
        b = B[jj[k:k + step]][:, :, None, :, :]
        dx = np.minimum(a[..., 1], b[..., 1]) - np.maximum(a[..., 0], b[..., 0])
        df = np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 2], b[..., 2])
        out[ii[k:k + step], jj[k:k + step]] = (np.clip(dx, 0, None) * np.clip(df, 0, None)).sum(axis=(1, 2, 3))
    return out


def _overlap_pairs(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """(n, dpn): overlap of node i's pieces in A with node i's in B, per device."""
    a, b = A[:, :, :, None, :], B[:, :, None, :, :]
    dx = np.minimum(a[..., 1], b[..., 1]) - np.maximum(a[..., 0], b[..., 0])
    df = np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 2], b[..., 2])
    return (np.clip(dx, 0, None) * np.clip(df, 0, None)).sum(axis=(2, 3))


# -- candidates -------------------------------------------------------------------------------------------
@dataclass
class Move:
    nodes: list[str]          # physical nodes (old names)
    role: str                 # what they run in the new plan
    params_bytes: float
    optimizer_bytes: float


@dataclass
class Candidate:
    label: str
    family: str                              # keep | rebalance | same tp | fresh
    cluster: ClusterSpec                     # the new plan's cluster (node indices 0..n-1 per group)
    estimate: Estimate
    strategy: StrategySpec | None = None     # homogeneous plans
    pipelines: PipelinesSpec | None = None   # plans written as pipeline shapes
    result: object = None                    # the search's result (SearchResult / HeteroResult)
    # filled by `settle`
    node_map: dict[str, list[str]] = field(default_factory=dict)
    spare: list[str] = field(default_factory=list)
    params_bytes: float = 0.0
    optimizer_bytes: float = 0.0
    ranks: int = 0
    ranks_kept: int = 0
    moves: list[Move] = field(default_factory=list)
    slots: list[Slot] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.estimate.tokens_per_s

    @property
    def bytes_moved(self) -> float:
        return self.params_bytes + self.optimizer_bytes

    @property
    def devices(self) -> int:
        return self.estimate.devices

    def layout(self, model: ModelSpec) -> tuple[ShapeLayout, ...]:
        if self.strategy is not None:
            return layout_of_strategy(model, self.strategy, self.cluster.groups[0].name)
        assert self.pipelines is not None
        return layout_of_pipelines(self.pipelines)

    def placement(self) -> list[Slot]:
        if self.strategy is not None:
            s, g = self.strategy, self.cluster.groups[0]
            return placement(s.tp, s.cp, s.dp, s.pp, g.name, g.devices_per_node)
        from baige_plan.search.hetero_placement import hetero_placement
        assert self.pipelines is not None
        return hetero_placement(self.pipelines, self.cluster)


def _fits(model, cluster, job, s: StrategySpec, frac: float) -> Estimate | None:
    try:
        e = estimate(model, cluster, job, s, frac)
    except SpecError:
        return None
    if not e.fits or runtimes.get(s.runtime).refusal(s, model, job):
        return None
    return e


def _batch_options(old_mb: int, B: int, r: int) -> list[int]:
    out = [old_mb] + [b for b in MICRO_BATCHES if b != old_mb]
    return [b for b in out if B % (r * b) == 0]


def keep_homogeneous(model, w: World, job, s: StrategySpec, group: str, intact: int, frac: float) -> list[Candidate]:
    """The old strategy with r' replicas, r' from the most the group's nodes hold down to `intact` (the
    old replicas with no rank lost), stopping at the first r' <= intact that fits."""
    g = w.groups[group]
    dpn = g.devices_per_node
    per = s.tp * s.pp * s.cp
    out: list[Candidate] = []
    from baige_plan.search.space import divisors
    most = len(w.avail[group]) * dpn // per
    # r x micro-batch divides the global batch (_batch_options), so only divisors of it: a 10^6-device cluster
    # is a few dozen counts, not 10^6
    for r in sorted((d for d in divisors(job.global_batch) if d <= most), reverse=True):
        if (r * per) % dpn:
            continue
        cl = sub_cluster(w, (group,), {group: r * per // dpn})
        found = []
        for mb in _batch_options(s.micro_batch, job.global_batch, r):
            for rc in (s.recompute,) + tuple(x for x in RECOMPUTE if x != s.recompute):
                e = _fits(model, cl, job, s.with_(dp=r, micro_batch=mb, recompute=rc), frac)
                if e is not None:
                    found.append(e)
        if found:
            e = min(found, key=lambda x: (x.step_time_s, x.strategy.micro_batch != s.micro_batch,
                                          x.strategy.recompute != s.recompute))
            out.append(Candidate(f"{LABELS['keep']}: " + (f"{r} of {s.dp} replicas" if r <= s.dp else
                                                          f"{r} replicas (was {s.dp})") + (f", micro-batch {e.strategy.micro_batch}"
                                 if e.strategy.micro_batch != s.micro_batch else "")
                                 + (f", recompute {e.strategy.recompute}" if e.strategy.recompute != s.recompute
                                    else ""), "keep", cl, e, strategy=e.strategy))
            if r <= intact:
                break
    return out


def _exact_ok(model, cl, job, p: PipelinesSpec, frac: float) -> Estimate | None:
    from baige_plan.search.hetero import _runtime_ok
    from baige_plan.search.hetero_templates import exact
    e = exact(model, cl, job, p, frac)
    if e is None or not _runtime_ok(cl, model, p, []):
        return None
    return e


def _as_strategy(model, cl: ClusterSpec, job, p: PipelinesSpec, frac: float) -> tuple[StrategySpec, Estimate] | None:
    """A one-shape plan on one group, using all its devices, written as a homogeneous strategy when the
    layer split is one Megatron runs (even, or uneven first/last stages)."""
    if len(p.shapes) != 1 or len(cl.groups) != 1:
        return None
    sh = p.shapes[0]
    if len({st.tp for st in sh.stages}) != 1 or sh.knobs.items().get("micro_batch") not in (None, p.micro_batch):
        return None
    counts = [st.n_layers for st in sh.stages]
    pp, tp = len(counts), sh.stages[0].tp
    first = last = None
    if len(set(counts)) > 1:
        mid = counts[1:-1]
        if mid and len(set(mid)) > 1:
            return None
        m0 = mid[0] if mid else None
        first = counts[0] if counts[0] != m0 else None
        last = counts[-1] if counts[-1] != m0 else None
    try:
        s = StrategySpec(tp=tp, pp=pp, dp=sh.replicas, cp=p.knob(sh, "cp"), ep=p.knob(sh, "ep"), etp=p.knob(sh, "etp"),
                         zero=p.knob(sh, "zero"), micro_batch=p.micro_batch, vpp=p.knob(sh, "vpp"),
                         recompute=p.knob(sh, "recompute"), sequence_parallel=bool(p.knob(sh, "sequence_parallel")),
                         attention=p.attention, first_stage_layers=first, last_stage_layers=last,
                         **runtimes.knobs(p.runtime))
        if tuple(counts) != stage_layers(s, model.layers):
            return None
    except SpecError:
        return None
    e = _fits(model, cl, job, s, frac)
    return (s, e) if e is not None else None


def _one_group_cluster(w: World, p: PipelinesSpec, group: str) -> ClusterSpec | None:
    used = p.devices_by_group().get(group, 0)
    dpn = w.groups[group].devices_per_node
    if used % dpn or used // dpn > len(w.avail[group]):
        return None
    return sub_cluster(w, (group,), {group: used // dpn})


def _pipelines_candidate(model, w: World, job, groups: tuple[str, ...], p: PipelinesSpec, frac: float, label: str,
                         family: str) -> Candidate | None:
    """A one-shape pipelines plan on `groups`: as a homogeneous strategy when it is one (one group, every
    device of its nodes), else as pipeline shapes on the sub-cluster."""
    from baige_plan.search.hetero import normalized
    p = normalized(p)
    if len(groups) == 1:
        cl = _one_group_cluster(w, p, groups[0])
        if cl is None:
            return None
        hs = _as_strategy(model, cl, job, p, frac)
        if hs is not None:
            return Candidate(label, family, cl, hs[1], strategy=hs[0])
    else:
        cl = sub_cluster(w, groups)
    e = _exact_ok(model, cl, job, p, frac)
    return Candidate(label, family, cl, e, pipelines=p) if e is not None else None


def _max_replicas(w: World, sh: PipelineShape, cp: int, groups: tuple[str, ...]) -> int:
    need: dict[str, int] = {}
    for st in sh.stages:
        need[st.group] = need.get(st.group, 0) + st.tp * cp
    if not set(need) <= set(groups):
        return 0
    return min(len(w.avail[g]) * w.groups[g].devices_per_node // n for g, n in need.items())


def keep_pipelines(model, w: World, job, p: PipelinesSpec, groups: tuple[str, ...], intact: int, frac: float
                   ) -> list[Candidate]:
    """The old one-shape pipelines plan (stages, groups, tp, layers as they are) with r' replicas."""
    if len(p.shapes) != 1:
        return []
    sh = p.shapes[0]
    out: list[Candidate] = []
    for r in range(_max_replicas(w, sh, p.knob(sh, "cp"), groups), 0, -1):
        for mb in _batch_options(p.knob(sh, "micro_batch"), job.global_batch, r):
            kn = replace(sh.knobs, micro_batch=None)
            q = replace(p, micro_batch=mb, shapes=(replace(sh, replicas=r, knobs=kn,
                                                           micro_batches=job.global_batch // (r * mb)),))
            used = tuple(g for g in groups if g in q.devices_by_group())
            c = _pipelines_candidate(model, w, job, used, q, frac,
                                     f"{LABELS['keep']}: " + (f"{r} of {sh.replicas} replicas" if r <= sh.replicas
                                                              else f"{r} replicas (was {sh.replicas})")
                                     + (f", micro-batch {mb}" if mb != p.micro_batch else ""), "keep")
            if c is not None:
                out.append(c)
                break
        if out and r <= intact:
            break
    return out


def _segments(sh: PipelineShape, groups: tuple[str, ...]) -> tuple[tuple[str, int, int], ...]:
    segs: list[list] = []
    for st in sh.stages:
        if st.group not in groups:
            continue
        if segs and segs[-1][0] == st.group and segs[-1][1] == st.tp:
            segs[-1][2] += 1
        else:
            segs.append([st.group, st.tp, 1])
    return tuple((g, tp, n) for g, tp, n in segs)


def rebalance(model, w: World, job, p: PipelinesSpec, groups: tuple[str, ...], frac: float, time_limit_s: float
              ) -> list[Candidate]:
    """The old shape restricted to `groups`, r' replicas (most first), layers re-split by the solver."""
    from baige_plan.search.hetero import POLISH_EVALS, Template, _solve_template, polish
    if len(p.shapes) != 1:
        return []
    sh = p.shapes[0]
    segs = _segments(sh, groups)
    if not segs:
        return []
    used = tuple(g for g in groups if any(s_[0] == g for s_ in segs))
    cl = sub_cluster(w, used)
    cp = p.knob(sh, "cp")
    units = {g: sum(tp * n * cp for g2, tp, n in segs if g2 == g) for g in used}
    rmax = min(len(w.avail[g]) * w.groups[g].devices_per_node // u for g, u in units.items())
    base = StrategySpec(micro_batch=p.knob(sh, "micro_batch"), zero=p.knob(sh, "zero"), recompute=p.knob(sh, "recompute"),
                        sequence_parallel=bool(p.knob(sh, "sequence_parallel")), attention=p.attention,
                        **runtimes.knobs(p.runtime))
    kn = replace(sh.knobs, micro_batch=None, zero=None, recompute=None, sequence_parallel=None)
    cache: dict = {}
    for r in range(rmax, 0, -1):
        if job.global_batch % (r * base.micro_batch):
            continue
        out = []
        for rc in (base.recompute,) + tuple(x for x in RECOMPUTE if x != base.recompute):
            sol = _solve_template(model, cl, job, Template(((r, segs, kn),)), base.with_(recompute=rc), frac,
                                  min(0.1, time_limit_s), cache)
            if sol is None:
                continue
            q, e = polish(model, cl, job, sol[0], frac, POLISH_EVALS // 2)
            if e is None:
                continue
            label = (f"{LABELS['rebalance']}: " + " > ".join(f"{g} tp{tp} x{n}" for g, tp, n in segs) + f", {r} replicas"
                     + (f", recompute {rc}" if rc != base.recompute else ""))
            c = _pipelines_candidate(model, w, job, used, q, frac, label, "rebalance")
            if c is not None:
                out.append(c)
        if out:
            return [min(out, key=lambda c: c.estimate.step_time_s)]
    return []


def fresh_homogeneous(model, w: World, job, group: str, frac: float, runtime: str, attention: str,
                      deadline: float, same_tp: tuple[int, int] | None = None) -> tuple[list[Candidate], str]:
    """The homogeneous search's best plans at each node count, largest first (module docstring); with
    `same_tp` = (tp, cp) of the old plan, also the best plans at that tp and cp (family "same tp": every
    parameter shard keeps its width, so a rank can keep the layers its new stage shares with its old one)."""
    from baige_plan.search.solver import search
    from baige_plan.search.space import Bounds, Pins
    out: list[Candidate] = []
    best_tok = best_dev = 0.0
    binding = ""
    g = w.groups[group]
    bounds = Bounds(max_memory_frac=frac, runtime=runtime)
    runs = [("fresh", Pins(attention=attention))]
    if same_tp is not None and same_tp[0] <= g.devices_per_node:
        runs.append(("same tp", Pins(tp=same_tp[0], cp=same_tp[1], attention=attention)))
    for n in range(len(w.avail[group]), 0, -1):
        if best_tok and n * g.devices_per_node * best_dev * (1 + SIZE_SLACK) < best_tok:
            break
        if time.perf_counter() > deadline:     # --time-limit holds even when nothing is found yet
            binding = binding or f"no plan found within the time limit on {len(w.avail[group])} to {n + 1} nodes"
            break
        cl = sub_cluster(w, (group,), {group: n})
        for family, pins in runs:
            try:
                r = search(model, cl, job, bounds, pins, top=FRESH_TOP,
                           time_limit_s=max(0.05, deadline - time.perf_counter()))
            except SpecError as ex:
                binding = binding or f"{ex.field}: {ex.reason}"
                continue
            if not r.plans:
                if r.candidates and not binding and family == "fresh":
                    binding = r.binding
                continue
            for e in r.plans:
                s = e.strategy
                out.append(Candidate(f"{LABELS[family]}: {n} nodes, tp{s.tp} pp{s.pp} dp{s.dp} cp{s.cp} vpp{s.vpp} "
                                     f"mb{s.micro_batch} {s.recompute}", family, cl, e, strategy=s, result=r))
                if e.tokens_per_s > best_tok:
                    best_tok, best_dev = e.tokens_per_s, e.tokens_per_s_per_device
    if not out and not binding:
        binding = (f"no strategy runs {model.name} at global batch {job.global_batch} on 1 to "
                   f"{len(w.avail[group])} nodes of group {group!r}")
    return out, binding


def fresh_hetero(model, w: World, job, groups: tuple[str, ...], frac: float, base: StrategySpec, time_limit_s: float
                 ) -> tuple[list[Candidate], str]:
    from baige_plan.search.hetero import solve
    cl = sub_cluster(w, groups)
    try:
        r = solve(model, cl, job, base, memory_frac=frac, time_limit_s=time_limit_s)
    except SpecError as ex:
        return [], f"{ex.field}: {ex.reason}"
    used = tuple(g for g in groups if g in r.pipelines.devices_by_group())
    if len(used) < len(groups):
        return [], ""        # a plan on fewer groups: the searches of those groups alone cover it
    label = f"{LABELS['fresh']}: " + " + ".join(shape_label(sh) for sh in r.pipelines.shapes)
    return [Candidate(label, "fresh", cl, r.estimate, pipelines=r.pipelines, result=r)], ""


def shape_label(sh: PipelineShape) -> str:
    """`8x[gpu tp4 x2 L44 > npu tp8 x1 L36]`: replicas, then runs of stages on one group and tp (stages, layers)."""
    runs: list[list] = []
    for st in sh.stages:
        if runs and runs[-1][0] == st.group and runs[-1][1] == st.tp:
            runs[-1][2] += 1
            runs[-1][3] += st.n_layers
        else:
            runs.append([st.group, st.tp, 1, st.n_layers])
    return f"{sh.replicas}x[" + " > ".join(f"{g} tp{tp} x{n} L{n_l}" for g, tp, n, n_l in runs) + "]"


# -- placement and bytes -------------------------------------------------------------------------------------------
def settle(model, ax: Axis, w: World, old: Store, c: Candidate, optimise: bool = True) -> Candidate:
    """Choose the physical node of each new node index (max-weight assignment, or the natural order) and
    count the bytes that move."""
    slots = c.placement()
    new = holdings(ax, c.layout(model), slots)
    c.slots = slots
    c.node_map, c.spare, c.moves = {}, [], []
    c.params_bytes = c.optimizer_bytes = 0.0
    c.ranks, c.ranks_kept = len(slots), 0
    roles = _roles(model, c, slots)
    for g in c.cluster.groups:
        avail = w.avail[g.name]
        dpn = g.devices_per_node
        A_p, A_o = _pack(new, [(g.name, i) for i in range(g.nodes)], dpn)
        old_keys = [_old_key(n) for n in avail]
        B_p, B_o = _pack(old, old_keys, dpn)
        if optimise and g.nodes * len(avail) > MAX_ASSIGN:
            optimise_here = False       # a 10^5-node group: an n x n matrix would not fit; old nodes first
        else:
            optimise_here = optimise
        if optimise_here:
            # pairs sharing no part of the parameter axis keep nothing: computed only where the footprints meet
            # (optimizer pieces lie inside the parameter pieces of their device)
            hi = float(max(A_p[..., 1].max(initial=0.0), B_p[..., 1].max(initial=0.0)))
            mask = _footprint(A_p, 0.0, hi) @ _footprint(B_p, 0.0, hi).T.astype(np.float64) > 0.5 \
                if A_p.size and B_p.size else np.zeros((A_p.shape[0], B_p.shape[0]), bool)
            kept = _overlap(A_p, B_p, mask) * ax.w_bytes + _overlap(A_o, B_o, mask) * ax.k_bytes
            i, j = np.indices(kept.shape)
            # weights in GB; ties to the natural order (a node stays at its position when nothing is gained)
            cost = -kept / 1e9 + 1e-7 * np.abs(i - j)
            rows, cols = linear_sum_assignment(cost)
            col = dict(zip(rows.tolist(), cols.tolist(), strict=True))
            pick = [col[i] for i in range(g.nodes)]
        else:
            pick = list(range(g.nodes))
        c.node_map[g.name] = [avail[k] for k in pick]
        picked = set(pick)
        c.spare += [n for k, n in enumerate(avail) if k not in picked]
        Bp, Bo = B_p[pick], B_o[pick]
        need_p, need_o = _volume(A_p) * ax.w_bytes, _volume(A_o) * ax.k_bytes
        mv_p = np.clip(need_p - _overlap_pairs(A_p, Bp) * ax.w_bytes, 0, None)
        mv_o = np.clip(need_o - _overlap_pairs(A_o, Bo) * ax.k_bytes, 0, None)
        mv_p[mv_p <= 1e-9 * np.maximum(need_p, 1.0)] = 0.0
        mv_o[mv_o <= 1e-9 * np.maximum(need_o, 1.0)] = 0.0
        c.params_bytes += float(mv_p.sum())
        c.optimizer_bytes += float(mv_o.sum())
        c.ranks_kept += int(((need_p > 0) & (mv_p == 0)).sum())
        for i in range(g.nodes):
            p_b, o_b = float(mv_p[i].sum()), float(mv_o[i].sum())
            if p_b > 0 or o_b > 0:
                c.moves.append(Move([c.node_map[g.name][i]], roles.get((g.name, i), "idle"), p_b, o_b))
    c.spare += [n for grp, ns in w.avail.items() if grp not in c.node_map for n in ns]
    c.moves = _merge_moves(c.moves)
    return c


def _old_key(name: str) -> tuple[str, int]:
    """(group, node index in the old plan) of a physical node; added nodes have indices the old plan never
    used, so they hold nothing."""
    grp, _, idx = name.rpartition(":")
    return grp, int(idx)


def _roles(model, c: Candidate, slots: list[Slot]) -> dict[tuple[str, int], str]:
    lay = c.layout(model)
    seen: dict[tuple[str, int], set[tuple[int, int]]] = {}
    for s in slots:
        seen.setdefault((s.group, s.node), set()).add((s.pipeline, s.stage))
    out = {}
    for key, st in seen.items():
        parts = []
        for j, i in sorted(st):
            st = lay[j].stages[i]
            a, b = st.layers
            parts.append((f"pipeline {j} " if len(lay) > 1 else "") + f"stage {i} layers [{a}, {b})"
                         + (f" in {len(st.chunks)} interleaved chunks" if len(st.chunks) > 1 else ""))
        out[key] = "; ".join(parts)
    return out


def _merge_moves(moves: list[Move]) -> list[Move]:
    """One entry per new role (stage and layers), its nodes in index order, the bytes summed; roles in pipeline
    order."""
    by: dict[str, Move] = {}
    for mv in moves:
        m = by.setdefault(mv.role, Move([], mv.role, 0.0, 0.0))
        m.nodes += mv.nodes
        m.params_bytes += mv.params_bytes
        m.optimizer_bytes += mv.optimizer_bytes
    for m in by.values():
        m.nodes.sort(key=lambda n: (n.rpartition(":")[0], int(n.rpartition(":")[2])))

    def order(role: str) -> tuple:
        return tuple(int(x) for x in re.findall(r"\d+", role)[:3])
    return [by[r] for r in sorted(by, key=order)]


def nodes_text(names: list[str]) -> str:
    """`gpu:0,8,12-15 npu:3`: nodes per group, runs of consecutive indices as ranges."""
    groups: dict[str, list[int]] = {}
    for n in names:
        g, _, i = n.rpartition(":")
        groups.setdefault(g, []).append(int(i))
    parts = []
    for g, idx in groups.items():
        idx = sorted(set(idx))
        runs, start = [], idx[0]
        for a, b in zip(idx, idx[1:] + [None], strict=True):
            if b is None or b != a + 1:
                runs.append(f"{start}" if start == a else f"{start}-{a}")
                start = b
        parts.append(f"{g}:" + ",".join(runs))
    return " ".join(parts)


def node_range(nodes: list[str]) -> str:
    if len(nodes) == 1:
        return nodes[0]
    grp = nodes[0].rpartition(":")[0]
    return f"{grp}:{nodes[0].rpartition(':')[2]}-{nodes[-1].rpartition(':')[2]}"


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
