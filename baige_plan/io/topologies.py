"""Topology files (schema baige-plan/topology/v1) and the cluster shorthand
`CHIP:NODESxDEVICES[+CHIP:NODESxDEVICES...]` -> ClusterSpec."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from baige_plan.errors import InputError, SpecError
from baige_plan.io.chips import link_curves_from_doc, link_domains_from_doc
from baige_plan.io.yamlio import check_keys, expect_schema, get_typed, kind_of, read_document
from baige_plan.specs.chip import ChipSpec
from baige_plan.specs.link import LinkCurves
from baige_plan.specs.topology import (
    DEFAULT_BRIDGE_GBPS_PER_NODE,
    DEFAULT_BRIDGE_LATENCY_US,
    BridgeSpec,
    ClusterSpec,
    GroupSpec,
)

SCHEMA = "baige-plan/topology/v1"
_SHORT = re.compile(r"^(?P<chip>[A-Za-z0-9_.\-/]+):(?P<nodes>\d+)x(?P<dpn>\d+)$")

ChipResolver = Callable[[str, str, str], ChipSpec]   # (ref, source file, field) -> chip


def is_shorthand(text: str) -> bool:
    return all(_SHORT.match(part.strip()) for part in text.split("+")) and not text.endswith((".yaml", ".yml", ".json"))


def cluster_from_shorthand(text: str, resolve_chip: ChipResolver) -> tuple[ClusterSpec, bool]:
    """Parse shorthand; returns (cluster, default_bridge_added)."""
    groups = []
    for i, part in enumerate(text.split("+")):
        m = _SHORT.match(part.strip())
        if not m:
            raise InputError("CLUSTER", f"part {i + 1}", f"{part!r} is not CHIP:NODESxDEVICES")
        chip = resolve_chip(m["chip"], "CLUSTER", f"part {i + 1}")
        nodes, dpn = int(m["nodes"]), int(m["dpn"])
        if nodes == 0 or dpn == 0:
            raise InputError("CLUSTER", f"part {i + 1}", f"{part!r}: nodes and devices must be positive")
        name = chip.id if all(g.chip.id != chip.id for g in groups) else f"{chip.id}-{i}"
        groups.append(GroupSpec(name=name, chip=chip, nodes=nodes, devices_per_node=dpn, chip_ref=m["chip"]))
    bridges = []
    for i, a in enumerate(groups):
        for b in groups[i + 1:]:
            if a.family != b.family:
                bridges.append(BridgeSpec((a.name, b.name), "cpu-forwarding",
                                          DEFAULT_BRIDGE_GBPS_PER_NODE, DEFAULT_BRIDGE_LATENCY_US))
    try:
        return ClusterSpec(name=text, groups=tuple(groups), bridges=tuple(bridges)), bool(bridges)
    except SpecError as e:
        raise InputError("CLUSTER", e.field, e.reason) from None


def cluster_from_dict(d: Any, src: str, resolve_chip: ChipResolver, *, check_schema: bool = True) -> ClusterSpec:
    if check_schema:
        d = expect_schema(d, src, SCHEMA)
    d = check_keys(d, src, "", {"name", "groups"}, {"schema", "bridges", "source", "notes", "sources"})
    name = get_typed(d, "name", src, "", (str,))
    cites = d.get("sources") or {}
    if not isinstance(cites, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in cites.items()):
        raise InputError(src, "sources", "must map source keys to citation strings")
    graw = d["groups"]
    if not isinstance(graw, list) or not graw:
        raise InputError(src, "groups", "must be a non-empty list")
    groups = []
    for i, g in enumerate(graw):
        path = f"groups[{i}]"
        g = check_keys(g, src, path, {"name", "chip", "nodes", "devices_per_node"},
                       {"scaleup_GBps", "scaleout_Gbps", "notes", "links", "profile", "price_usd_per_device_hour",
                        "fp32_matmul", "nics_per_node"})
        ref = g["chip"]
        if isinstance(ref, dict):
            from baige_plan.io.chips import chip_from_doc  # embedded chip (plan files)
            chip = chip_from_doc(ref, f"{src} ({path}.chip)")
            chip_ref = chip.id
        else:
            chip_ref = get_typed(g, "chip", src, path, (str,))
            chip = resolve_chip(chip_ref, src, f"{path}.chip")
        kw: dict[str, Any] = {}
        for k in ("scaleup_GBps", "scaleout_Gbps", "price_usd_per_device_hour"):
            if g.get(k) is not None:
                kw[k] = float(get_typed(g, k, src, path, (int, float)))
        if g.get("nics_per_node") is not None:   # NICs the node's devices share (cost/collectives.py _op_curves)
            kw["nics_per_node"] = get_typed(g, "nics_per_node", src, path, (int,))
        if g.get("fp32_matmul") is not None:   # the group's fp32 matmul engine (cost/estimate.py engine_precision)
            kw["fp32_matmul"] = get_typed(g, "fp32_matmul", src, path, (str,))
        if "links" in g:
            links = link_domains_from_doc(g["links"], src, f"{path}.links", cites)
            kw.update({f"{k}_curves": v for k, v in links.items()})
        if g.get("profile") is not None:
            kw["profile"] = _group_profile(g["profile"], src, f"{path}.profile", chip.id, chip_ref)
        try:
            groups.append(GroupSpec(name=get_typed(g, "name", src, path, (str,)), chip=chip,
                                    nodes=get_typed(g, "nodes", src, path, (int,)),
                                    devices_per_node=get_typed(g, "devices_per_node", src, path, (int,)),
                                    chip_ref=chip_ref, **kw))
        except SpecError as e:
            raise InputError(src, f"{path}.{e.field}", e.reason) from None
    braw = d.get("bridges")
    if braw is None:
        braw = []
    if not isinstance(braw, list):
        raise InputError(src, "bridges", f"must be a list of bridges ({{groups: [A, B], kind, GBps_per_node}}), "
                         f"got {kind_of(braw)}")
    bridges = []
    for i, b in enumerate(braw):
        path = f"bridges[{i}]"
        b = check_keys(b, src, path, {"groups", "kind", "GBps_per_node"}, {"latency_us", "notes", "links"})
        gs = b["groups"]
        if not isinstance(gs, list) or len(gs) != 2 or not all(isinstance(x, str) for x in gs):
            raise InputError(src, f"{path}.groups", f"must list two group names, got {gs!r}")
        try:
            bridges.append(BridgeSpec(groups=(gs[0], gs[1]), kind=get_typed(b, "kind", src, path, (str,)),
                                      GBps_per_node=float(get_typed(b, "GBps_per_node", src, path, (int, float))),
                                      latency_us=float(get_typed(b, "latency_us", src, path, (int, float),
                                                                 DEFAULT_BRIDGE_LATENCY_US)),
                                      curves=(link_curves_from_doc(b["links"], src, f"{path}.links", cites)
                                              if "links" in b else None)))
        except SpecError as e:
            raise InputError(src, f"{path}.{e.field}", e.reason) from None
    try:
        return ClusterSpec(name=name, groups=tuple(groups), bridges=tuple(bridges),
                           sources=tuple(sorted(cites.items())))
    except SpecError as e:
        raise InputError(src, e.field, e.reason) from None


def curves_to_doc(curves: LinkCurves) -> list[dict]:
    """LinkCurves -> the file form (busbw points), for plan files that embed the topology."""
    out = []
    for c in curves.curves:
        d: dict[str, Any] = {"op": c.op, "n": c.n}
        if c.per_node is not None:
            d["per_node"] = c.per_node
        d["points"] = [[p[0], p[1]] for p in c.points]
        d["sources"] = list(c.sources)
        if c.estimated:
            d["estimated"] = True
        out.append(d)
    return out


def link_curve_extras(cluster: ClusterSpec) -> tuple[dict[str, dict], list[dict], dict[str, str]]:
    """What a topology document needs beyond the plain fields to rebuild `cluster`'s measured link
    curves: ({group name: {"links": ...}}, [per bridge {"links": ...} or {}], cited sources). Plan
    writers (io/plans.py cluster_doc) merge these into the groups/bridges they write and add
    `sources:` when it is non-empty; without curves all three are empty."""
    groups: dict[str, dict] = {}
    used: set[str] = set()
    for g in cluster.groups:
        links = {k: curves_to_doc(v) for k, v in (("scaleup", g.scaleup_curves), ("nic", g.nic_curves)) if v}
        if links:
            groups[g.name] = {"links": links}
            used |= {s for v in (g.scaleup_curves, g.nic_curves) if v for c in v.curves for s in c.sources}
    bridges = []
    for b in cluster.bridges:
        bridges.append({"links": curves_to_doc(b.curves)} if b.curves else {})
        used |= {s for c in (b.curves.curves if b.curves else ()) for s in c.sources}
    return groups, bridges, {k: v for k, v in cluster.sources if k in used}


def _group_profile(ref: Any, src: str, field: str, chip_id: str, chip_ref: str | None):
    """A group's measured per-layer profile (issue 10): embedded (plan files) or a path, relative to the
    topology file's folder. It must have been measured on the group's chip."""
    from baige_plan.io.profiles import load_profile, profile_from_dict
    if isinstance(ref, dict):
        p = profile_from_dict(ref, f"{src} ({field})")
    elif isinstance(ref, str):
        path = Path(ref)
        if not path.is_absolute() and not path.is_file() and Path(src).is_file():
            path = Path(src).parent / ref
        p = load_profile(path)
    else:
        raise InputError(src, field, f"expected a profile file path or an embedded profile, got {ref!r}")
    if not p.fits_chip(chip_id, chip_ref):
        raise InputError(src, field, f"profile {p.name!r} was measured on chip {p.chip!r}, the group's chip is "
                         f"{chip_id!r}")
    return p


def load_topology_file(path: str | Path, resolve_chip: ChipResolver) -> ClusterSpec:
    return cluster_from_dict(read_document(path), str(path), resolve_chip)
