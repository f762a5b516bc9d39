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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from baige_plan.specs.topology import BridgeSpec, GroupSpec

# Model constants (estimates; a chip file's measured latencies override the per-step values).
LAUNCH_US = 8.0            # fixed cost of one NCCL collective launch + sync
SCALEUP_STEP_US = 1.0      # one ring step over NVLink/NVSwitch-class links
NIC_STEP_US = 6.0          # one ring step over IB/RoCE (NIC + switch + NCCL proxy)
DEFAULT_SCALEUP_EFF = 0.78  # used only when a chip file has no measured value (NOTES.md rule 78-83%)
DEFAULT_NIC_EFF = 0.75      # idem, hierarchical all-reduce per accelerator 73-77%


@dataclass(frozen=True)
class Link:
    """What a collective group sees: bus bandwidth (GB/s) and latency terms (seconds)."""

    busbw_GBps: float
    n: int
    alpha_s: float          # per-collective latency (launch + steps)
    crosses: str = "scaleup"  # scaleup | nic | bridge (for reporting)


def _eff(v: float | None, default: float) -> float:
    return default if v is None else v


def scaleup_busbw(group: GroupSpec, g: int) -> float:
    chip = group.chip
    eff = _eff(chip.scaleup_efficiency, DEFAULT_SCALEUP_EFF)
    bw = group.scaleup_GBps_eff * eff
    if chip.scaleup_kind == "mesh" and g < group.devices_per_node and chip.scaleup_p2p_GBps:
        # Full mesh: each peer link carries p2p_GBps; a g-rank ring uses the g-1 links among them.
        bw = min(bw, chip.scaleup_p2p_GBps * max(g - 1, 1) * eff)
    return bw


def group_link(group: GroupSpec, n: int, per_node: int, flat: bool = False) -> Link:
    """Link model for a collective group of n ranks placed `per_node` per node of `group`."""
    if n <= 1:
        return Link(float("inf"), 1, 0.0)
    g = max(1, min(per_node, n))
    nodes = math.ceil(n / g)
    chip = group.chip
    su_step = _eff(chip.scaleup_latency_us, SCALEUP_STEP_US)
    if nodes == 1:
        return Link(scaleup_busbw(group, g), n, (LAUNCH_US + su_step * 2 * (n - 1)) * 1e-6, "scaleup")
    nic = group.nic_GBps * _eff(chip.nic_efficiency, DEFAULT_NIC_EFF)
    inter = nic if flat else g * nic
    busbw = min(scaleup_busbw(group, g), inter) if g > 1 else inter
    nic_step = _eff(chip.nic_latency_us, NIC_STEP_US)
    alpha = LAUNCH_US + su_step * 2 * (g - 1) + nic_step * 2 * math.log2(nodes)
    return Link(busbw, n, alpha * 1e-6, "nic")


def flat_ring_link(group: GroupSpec, n: int) -> Link:
    """A flat ring over n ranks on different nodes' NICs: every step crosses the network, and
    latency grows linearly with n (no tree). Used for ZeRO-3/FSDP parameter collectives over a
    whole DP world (see cost/estimate.py)."""
    if n <= 1:
        return Link(float("inf"), 1, 0.0)
    nic = group.nic_GBps * _eff(group.chip.nic_efficiency, DEFAULT_NIC_EFF)
    nic_step = _eff(group.chip.nic_latency_us, NIC_STEP_US)
    return Link(nic, n, (LAUNCH_US + nic_step * (n - 1)) * 1e-6, "nic")


def bridge_link(bridge: BridgeSpec, devices_per_node: int) -> Link:
    """A cross-family bridge: the node's bridge bandwidth shared by its devices."""
    return Link(bridge.GBps_per_node / devices_per_node, 2, (LAUNCH_US + bridge.latency_us) * 1e-6, "bridge")


def all_reduce_s(size_bytes: float, link: Link) -> float:
    """t = alpha + S * 2(n-1)/n / busbw  (nccl-tests all-reduce bus bandwidth)."""
    if link.n <= 1 or size_bytes <= 0:
        return 0.0
    return link.alpha_s + size_bytes * 2.0 * (link.n - 1) / link.n / (link.busbw_GBps * 1e9)


def all_gather_s(size_bytes: float, link: Link) -> float:
    """t = alpha + S * (n-1)/n / busbw, S = the gathered (output) size."""
    if link.n <= 1 or size_bytes <= 0:
        return 0.0
    return link.alpha_s + size_bytes * (link.n - 1) / link.n / (link.busbw_GBps * 1e9)


def reduce_scatter_s(size_bytes: float, link: Link) -> float:
    """t = alpha + S * (n-1)/n / busbw, S = the full (input) size."""
    return all_gather_s(size_bytes, link)


def all_to_all_s(size_bytes: float, link: Link) -> float:
    """t = alpha + S * (n-1)/n / busbw, S = bytes each rank sends in total."""
    return all_gather_s(size_bytes, link)


def p2p_s(size_bytes: float, link: Link) -> float:
    """Send/recv: t = alpha + S / bw."""
    if size_bytes <= 0:
        return 0.0
    return link.alpha_s + size_bytes / (link.busbw_GBps * 1e9)
