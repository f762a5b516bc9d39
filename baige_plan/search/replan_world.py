"""The damaged (or grown) cluster of a re-plan (search/replan.py): node names, --drop/--drop-count/--add/
--drop-bridge applied to the old cluster, and the sub-clusters a new plan may run on."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from baige_plan.errors import InputError
from baige_plan.limits import MAX_DEVICES, MAX_GROUPS
from baige_plan.search.placement import Slot
from baige_plan.specs.topology import (
    DEFAULT_BRIDGE_GBPS_PER_NODE,
    DEFAULT_BRIDGE_LATENCY_US,
    BridgeSpec,
    ClusterSpec,
    GroupSpec,
)

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
