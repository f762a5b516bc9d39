"""Collective times, alpha-beta model with nccl-tests bus-bandwidth factors.

nccl-tests (doc/PERFORMANCE.md): busbw = algbw * factor, algbw = S / t, with
  all-reduce factor 2(n-1)/n, all-gather / reduce-scatter (n-1)/n (S = full gathered size),
  all-to-all (n-1)/n, send/recv 1.
So t = alpha + S * factor / busbw, busbw being what the link sustains (spec x efficiency).

Which busbw a group gets (`group_link`): a group of n ranks, g per node over N nodes, rides
  - scale-up only (N = 1): busbw = scaleup_GBps * scaleup_efficiency (mesh fabrics: a sub-node
    group only owns g-1 of the node's 7 peer links, so p2p_GBps * (g-1) caps it);
  - across nodes, rings hierarchical as NCCL builds them (one channel per NIC, node-contiguous
    rings): the inter-node hop of each ring moves the full per-rank volume, and the g NICs of the
    group's ranks on a node share it, so busbw = min(scale-up busbw, g * nic_GBps * nic_efficiency).
    A *flat* collective (no per-node aggregation) gets nic_GBps * nic_efficiency.
Latency: alpha = base + (ring steps) * per-step latency; across nodes NCCL switches to tree
algorithms for latency-bound sizes, so the inter-node part grows as 2*log2(N).

Measured curves (specs/link.py; chip `measured.links`, topology group `links`, bridge `links`):
when the link a collective rides has a curve for its op, t = S * factor(op, n) / busbw(S) and *no*
alpha is added -- a benchmark's busbw is S * factor / (measured time), launch and latency included.
Which curve: one node -> the scale-up curve of the op measured nearest (n, g); across nodes -> the
NIC curve of the op if measured, else one built from the NIC p2p curve as a ring of n ranks does
(2(n-1) or n-1 steps of S/n each: the p2p curve read at S/n, times g NICs for hierarchical rings,
capped by the scale-up busbw), else the alpha-beta constants. A collective issued in `buckets`
equal pieces (DP gradient buckets, ZeRO-3 per-layer gathers) reads the curve at S / buckets.
With no curve every function below is exactly the alpha-beta model.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from baige_plan.specs.frozen import hash_once
from baige_plan.specs.link import BandwidthCurve, LinkCurves
from baige_plan.specs.topology import BridgeSpec, GroupSpec

# Model constants (estimates; a chip file's measured latencies override the per-step values).
LAUNCH_US = 8.0            # fixed cost of one NCCL collective launch + sync
SCALEUP_STEP_US = 1.0      # one ring step over NVLink/NVSwitch-class links
NIC_STEP_US = 6.0          # one ring step over IB/RoCE (NIC + switch + NCCL proxy)
DEFAULT_SCALEUP_EFF = 0.78  # used only when a chip file has no measured value (NOTES.md rule 78-83%)
DEFAULT_NIC_EFF = 0.75      # idem, hierarchical all-reduce per accelerator 73-77%


COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


@hash_once
@dataclass(frozen=True)
class CurveTerm:
    """One measured curve as a link uses it: `scale` x busbw read at S / `div`."""

    curve: BandwidthCurve
    scale: float = 1.0      # g NICs of a hierarchical ring
    div: float = 1.0        # bucket pieces x ring steps: the curve is read at the piece a step moves

    def GBps(self, size_bytes: float) -> float:
        return self.scale * self.curve.busbw_GBps(size_bytes / self.div)


@hash_once
@dataclass(frozen=True)
class OpCurve:
    """busbw(S) of one op on one link: the slowest of its measured terms, capped by a constant part
    (a hop with no curve, e.g. the scale-up busbw over a NIC-curve ring)."""

    op: str
    terms: tuple[CurveTerm, ...]
    cap_GBps: float = math.inf

    def busbw_GBps(self, size_bytes: float) -> float:
        terms = self.terms
        if len(terms) == 1:         # the common case (read for every collective the search costs): the same value
            return min(self.cap_GBps, terms[0].GBps(size_bytes))
        return min(self.cap_GBps, min(t.GBps(size_bytes) for t in terms))


@hash_once
@dataclass(frozen=True)
class Link:
    """What a collective group sees: bus bandwidth (GB/s) and latency terms (seconds), and the measured
    curves (per op) that replace both where present."""

    busbw_GBps: float
    n: int
    alpha_s: float          # per-collective latency (launch + steps)
    crosses: str = "scaleup"  # scaleup | nic | bridge (for reporting)
    curves: tuple[OpCurve, ...] = ()

    def curve(self, op: str) -> OpCurve | None:
        for c in self.curves:
            if c.op == op:
                return c
        return None


def latency_s(link: Link, op: str) -> float:
    """The alpha a caller adds per extra collective on `link`: 0 where a measured curve of `op`
    carries the latency inside it."""
    return 0.0 if link.curve(op) is not None else link.alpha_s


def _eff(v: float | None, default: float) -> float:
    return default if v is None else v


def scaleup_curves(group: GroupSpec) -> LinkCurves | None:
    """The group's measured scale-up curves (topology override, else the chip's)."""
    return group.scaleup_curves or group.chip.scaleup_curves


def nic_curves(group: GroupSpec) -> LinkCurves | None:
    """The group's measured NIC curves (topology override, else the chip's)."""
    return group.nic_curves or group.chip.nic_curves


def _group_op_curves(group: GroupSpec, n: int, g: int, nodes: int, flat: bool, buckets: int,
                     su_busbw: float) -> tuple[OpCurve, ...]:
    """Per op, the measured busbw of a group of n ranks, g per node over `nodes` nodes (see the module
    docstring). NIC p2p curves are read with every device of a node sending at once: in SPMD training
    every device is in one group of each dimension and the groups of a dimension communicate together,
    so a node's devices share its NICs (what a per-device NIC figure assumes)."""
    return _op_curves(scaleup_curves(group), nic_curves(group), group.devices_per_node, n, g, nodes, flat, buckets,
                      su_busbw, group.nics_per_node or group.devices_per_node)


@functools.lru_cache(maxsize=8192)
def _op_curves(su: LinkCurves | None, nic: LinkCurves | None, dpn: int, n: int, g: int, nodes: int, flat: bool,
               buckets: int, su_busbw: float, nics: int | None = None) -> tuple[OpCurve, ...]:
    """`_group_op_curves` as a pure function of values (memoised: the search asks the same groups again
    and again; the key is the curves' contents, so equal inputs give equal answers).

    Hierarchical rings (issue 18): NCCL opens one ring channel per NIC, and each channel's node-contiguous ring
    crosses a node boundary on one connection. A node's `nics` NICs are shared by the dpn/g groups of this
    dimension that communicate at once, so a group crosses on k = max(1, nics * g / dpn) connections while
    max(1, k * dpn / g) connections of the node send at once: the group's rate is k x the p2p curve measured
    with that many senders. One NIC per device (nics = dpn, DGX/HGX) gives k = g and every device sending: the
    g x p2p(dpn senders) of before. A VM whose 4 GPUs share one NIC (GCP a2/n1, topologies/cloud-*) gives a
    group of 4 ranks one connection at the single-sender rate (Sailor's sync model reads the same curve:
    eth-easl/sailor runtime_simulator.py estimate_sync_time, sender_gpu_count = 1). Flat: every rank's step
    crosses the network, all dpn devices sending at once."""
    nics = dpn if nics is None else nics
    out = []
    for op in (*COLLECTIVE_OPS, "p2p"):
        if nodes == 1:
            c = su.pick(op, n, g) if su else None
            if c is not None:
                out.append(OpCurve(op, (CurveTerm(c, 1.0, buckets),)))
            continue
        if not nic:
            continue
        c = nic.pick(op, n, g) if op != "p2p" else None
        if c is not None:                   # a collective measured across nodes: used as measured
            out.append(OpCurve(op, (CurveTerm(c, 1.0, buckets),)))
            continue
        p = nic.pick("p2p", 2 * dpn, dpn)
        if p is None:
            continue
        if op == "p2p":
            out.append(OpCurve(op, (CurveTerm(p, 1.0, buckets),)))
            continue
        # a ring built from p2p steps: each step moves S/n per rank; hierarchical: over the group's k ring
        # connections crossing the node boundary (see above), capped by the scale-up hop
        if flat:
            inter = CurveTerm(p, 1.0, float(buckets * n))
        else:
            k = max(1, nics * g // dpn)
            senders = max(1, min(dpn, k * dpn // g))
            pk = nic.pick("p2p", 2 * senders, senders) or p
            inter = CurveTerm(pk, float(k), float(buckets * n))
        if g > 1:
            s = su.pick(op, g, g) if su else None
            terms = (inter, CurveTerm(s, 1.0, buckets)) if s is not None else (inter,)
            out.append(OpCurve(op, terms, math.inf if s is not None else su_busbw))
        else:
            out.append(OpCurve(op, (inter,)))
    return tuple(out)


def scaleup_busbw(group: GroupSpec, g: int) -> float:
    chip = group.chip
    eff = _eff(chip.scaleup_efficiency, DEFAULT_SCALEUP_EFF)
    bw = group.scaleup_GBps_eff * eff
    if chip.scaleup_kind == "mesh" and g < group.devices_per_node and chip.scaleup_p2p_GBps:
        # Full mesh: each peer link carries p2p_GBps; a g-rank ring uses the g-1 links among them.
        bw = min(bw, chip.scaleup_p2p_GBps * max(g - 1, 1) * eff)
    return bw


def group_link(group: GroupSpec, n: int, per_node: int, flat: bool = False, buckets: int = 1) -> Link:
    """Link model for a collective group of n ranks placed `per_node` per node of `group`;
    `buckets`: each collective is issued in that many equal pieces (measured curves are read at the
    piece size; the alpha-beta part is unchanged)."""
    if n <= 1:
        return Link(float("inf"), 1, 0.0)
    g = max(1, min(per_node, n))
    nodes = math.ceil(n / g)
    chip = group.chip
    su_step = _eff(chip.scaleup_latency_us, SCALEUP_STEP_US)
    curves: tuple[OpCurve, ...] = ()
    if scaleup_curves(group) or nic_curves(group):
        curves = _group_op_curves(group, n, g, nodes, flat, max(1, buckets), scaleup_busbw(group, g))
    if nodes == 1:
        return Link(scaleup_busbw(group, g), n, (LAUNCH_US + su_step * 2 * (n - 1)) * 1e-6, "scaleup", curves)
    nic = group.nic_GBps * _eff(chip.nic_efficiency, DEFAULT_NIC_EFF)
    inter = nic if flat else g * nic
    busbw = min(scaleup_busbw(group, g), inter) if g > 1 else inter
    nic_step = _eff(chip.nic_latency_us, NIC_STEP_US)
    alpha = LAUNCH_US + su_step * 2 * (g - 1) + nic_step * 2 * math.log2(nodes)
    return Link(busbw, n, alpha * 1e-6, "nic", curves)


def flat_ring_link(group: GroupSpec, n: int, buckets: int = 1) -> Link:
    """A flat ring over n ranks on different nodes' NICs: every step crosses the network, and
    latency grows linearly with n (no tree). Used for ZeRO-3/FSDP parameter collectives over a
    whole DP world (see cost/estimate.py). With a NIC p2p curve: each step's piece S/(n*buckets)
    at the p2p bandwidth, every device of a node sending at once."""
    if n <= 1:
        return Link(float("inf"), 1, 0.0)
    nic = group.nic_GBps * _eff(group.chip.nic_efficiency, DEFAULT_NIC_EFF)
    nic_step = _eff(group.chip.nic_latency_us, NIC_STEP_US)
    curves: tuple[OpCurve, ...] = ()
    nc = nic_curves(group)
    d = group.devices_per_node            # every device of a node sends at once (see _group_op_curves)
    p = nc.pick("p2p", 2 * d, d) if nc else None
    if p is not None:
        curves = tuple(OpCurve(op, (CurveTerm(p, 1.0, float(max(1, buckets) * n)),)) for op in COLLECTIVE_OPS)
    return Link(nic, n, (LAUNCH_US + nic_step * (n - 1)) * 1e-6, "nic", curves)


def scaleup_p2p_link(group: GroupSpec, devices: int = 2) -> Link:
    """Point-to-point between two devices of one node (pipeline neighbours), `devices` of the node
    taking part at once: the pair bandwidth x scale-up efficiency, or the measured scale-up p2p
    curve nearest that many devices."""
    chip = group.chip
    su = scaleup_curves(group)
    c = su.pick("p2p", max(2, devices), max(2, devices)) if su else None
    curves = (OpCurve("p2p", (CurveTerm(c),)),) if c is not None else ()
    return Link(chip.need("scaleup_p2p_GBps") * (chip.scaleup_efficiency or DEFAULT_SCALEUP_EFF),
                2, (LAUNCH_US + SCALEUP_STEP_US) * 1e-6, "scaleup", curves)


def nic_p2p_link(a: GroupSpec, b: GroupSpec | None = None, per_node: int = 1) -> Link:
    """Point-to-point over the NICs between a node of group a and one of group b (default a),
    `per_node` devices of each node sending at once: the slower per-device NIC x efficiency, or the
    measured NIC p2p curves (the slower of the two at each size; a side without a curve caps the
    bandwidth with its constant and adds no latency)."""
    b = a if b is None else b
    na = a.nic_GBps * (a.chip.nic_efficiency or DEFAULT_NIC_EFF)
    nb = b.nic_GBps * (b.chip.nic_efficiency or DEFAULT_NIC_EFF)
    k = max(1, per_node)
    terms, cap = [], math.inf
    for grp, const in ((a, na), (b, nb)) if b is not a else ((a, na),):
        nc = nic_curves(grp)
        c = nc.pick("p2p", 2 * k, k) if nc else None
        if c is not None:
            terms.append(CurveTerm(c))
        else:
            cap = min(cap, const)
    curves = (OpCurve("p2p", tuple(terms), cap),) if terms else ()
    return Link(min(na, nb), 2, (LAUNCH_US + NIC_STEP_US) * 1e-6, "nic", curves)


def bridge_link(bridge: BridgeSpec, devices_per_node: int) -> Link:
    """A cross-family bridge: the node's bridge bandwidth shared by its devices; with measured
    bridge curves (each transfer's GB/s while `per_node` devices of a node send at once) the p2p
    curve nearest `devices_per_node`."""
    curves: tuple[OpCurve, ...] = ()
    if bridge.curves:
        d = max(1, devices_per_node)
        curves = tuple(OpCurve(op, (CurveTerm(c),)) for op in ("p2p",)
                       if (c := bridge.curves.pick(op, 2 * d, d)) is not None)
    return Link(bridge.GBps_per_node / devices_per_node, 2, (LAUNCH_US + bridge.latency_us) * 1e-6, "bridge",
                curves)


def ring_link(link: Link, n: int) -> Link:
    """A ring of n ranks over a p2p `link` (e.g. the cross-shape gradient all-reduce over
    `path_link`): the same alpha-beta figures with n ranks, and, where the link has a measured p2p
    curve, collectives built from it as a ring does (each step moves S/n: the curve read at S/n)."""
    p = link.curve("p2p")
    curves: tuple[OpCurve, ...] = ()
    if p is not None and n > 1:
        terms = tuple(CurveTerm(t.curve, t.scale, t.div * n) for t in p.terms)
        curves = tuple(OpCurve(op, terms, p.cap_GBps) for op in COLLECTIVE_OPS)
    return Link(link.busbw_GBps, n, link.alpha_s, link.crosses, curves)


def _curve_s(op: str, size_bytes: float, link: Link, factor: float) -> float | None:
    """S * factor / busbw(S) from the link's measured curve of `op` (latency inside), or None."""
    c = link.curve(op)
    if c is None:
        return None
    return size_bytes * factor / (c.busbw_GBps(size_bytes) * 1e9)


def all_reduce_s(size_bytes: float, link: Link) -> float:
    """t = alpha + S * 2(n-1)/n / busbw  (nccl-tests all-reduce bus bandwidth); with a measured
    curve t = S * 2(n-1)/n / busbw(S)."""
    if link.n <= 1 or size_bytes <= 0:
        return 0.0
    if link.curves and (t := _curve_s("all_reduce", size_bytes, link, 2.0 * (link.n - 1) / link.n)) is not None:
        return t
    return link.alpha_s + size_bytes * 2.0 * (link.n - 1) / link.n / (link.busbw_GBps * 1e9)


def _n1_s(op: str, size_bytes: float, link: Link) -> float:
    if link.n <= 1 or size_bytes <= 0:
        return 0.0
    if link.curves and (t := _curve_s(op, size_bytes, link, (link.n - 1) / link.n)) is not None:
        return t
    return link.alpha_s + size_bytes * (link.n - 1) / link.n / (link.busbw_GBps * 1e9)


def all_gather_s(size_bytes: float, link: Link) -> float:
    """t = alpha + S * (n-1)/n / busbw, S = the gathered (output) size."""
    return _n1_s("all_gather", size_bytes, link)


def reduce_scatter_s(size_bytes: float, link: Link) -> float:
    """t = alpha + S * (n-1)/n / busbw, S = the full (input) size."""
    return _n1_s("reduce_scatter", size_bytes, link)


def all_to_all_s(size_bytes: float, link: Link) -> float:
    """t = alpha + S * (n-1)/n / busbw, S = bytes each rank sends in total."""
    return _n1_s("all_to_all", size_bytes, link)


def p2p_s(size_bytes: float, link: Link) -> float:
    """Send/recv: t = alpha + S / bw; with a measured curve t = S / bw(S)."""
    if size_bytes <= 0:
        return 0.0
    if link.curves and (t := _curve_s("p2p", size_bytes, link, 1.0)) is not None:
        return t
    return link.alpha_s + size_bytes / (link.busbw_GBps * 1e9)
