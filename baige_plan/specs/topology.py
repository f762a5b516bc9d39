"""Cluster topology: groups of identical nodes, and bridges between chip families."""

from __future__ import annotations

from dataclasses import dataclass

from baige_plan.errors import SpecError, require
from baige_plan.limits import (
    MAX_DEVICES,
    MAX_DEVICES_PER_NODE,
    MAX_LINK_LATENCY_US,
    MAX_LINK_RATE,
    MAX_PRICE_USD,
    MIN_LINK_RATE,
)
from baige_plan.specs.chip import ChipSpec
from baige_plan.specs.link import LinkCurves
from baige_plan.specs.profile import ProfileSpec

BRIDGE_KINDS = ("cpu-forwarding", "rdma")

# Default bridge for shorthand clusters mixing families (an estimate, see
# shared/reference/chips_reference_NOTES.md "Cross-vendor / CPU-forwarding bridge": about 12-19 GB/s
# per accelerator for a host-staged RDMA bridge over 8x200G; we take the low end per node).
DEFAULT_BRIDGE_GBPS_PER_NODE = 25.0
DEFAULT_BRIDGE_LATENCY_US = 30.0


@dataclass(frozen=True)
class GroupSpec:
    name: str
    chip: ChipSpec
    nodes: int
    devices_per_node: int
    scaleup_GBps: float | None = None     # overrides the chip's (per device, per direction)
    scaleout_Gbps: float | None = None    # overrides the chip's NIC per device
    chip_ref: str | None = None           # as written in the file (catalog id or path)
    scaleup_curves: LinkCurves | None = None  # measured scale-up curves, override the chip's (specs/link.py)
    nic_curves: LinkCurves | None = None      # measured NIC curves, override the chip's
    profile: ProfileSpec | None = None    # measured per-layer profile of the planned model on this chip (issue 10)
    price_usd_per_device_hour: float | None = None  # overrides the chip's price (cost/money.py, issue 12)
    nics_per_node: int | None = None      # NICs a node's devices share (None: one per device, as DGX/HGX nodes);
                                          # NCCL opens one ring channel per NIC (cost/collectives.py _op_curves)
    fp32_matmul: str | None = None        # "fp32" (IEEE) | "tf32": the engine of fp32/tf32 jobs' matmuls on this
                                          # group; None = the runtime's stack default (RuntimeSpec.fp32_matmul)

    def __post_init__(self) -> None:
        require(bool(self.name), "name", "must be a non-empty string")
        for k in ("nodes", "devices_per_node"):
            v = getattr(self, k)
            require(isinstance(v, int) and not isinstance(v, bool) and v > 0, k,
                    f"must be a positive integer, got {v!r}")
        require(self.devices_per_node <= MAX_DEVICES_PER_NODE, "devices_per_node",
                f"{self.devices_per_node:,} exceeds the limit of {MAX_DEVICES_PER_NODE:,} devices in one node")
        require(self.nodes * self.devices_per_node <= MAX_DEVICES, "nodes",
                f"{self.nodes:,} nodes x {self.devices_per_node:,} devices exceed the limit of {MAX_DEVICES:,} devices")
        for k in ("scaleup_GBps", "scaleout_Gbps"):
            v = getattr(self, k)
            require(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                  and MIN_LINK_RATE <= v <= MAX_LINK_RATE), k,
                    f"must be a rate from {MIN_LINK_RATE:g} to {MAX_LINK_RATE:g}, got {v!r}")
        require(self.nics_per_node is None or (isinstance(self.nics_per_node, int) and self.nics_per_node >= 1),
                "nics_per_node", f"must be a positive integer, got {self.nics_per_node!r}")
        require(self.fp32_matmul in (None, "fp32", "tf32"), "fp32_matmul",
                f"must be fp32 (IEEE) or tf32, got {self.fp32_matmul!r}")
        v = self.price_usd_per_device_hour
        require(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= MAX_PRICE_USD),
                "price_usd_per_device_hour", f"must be a number from 0 to {MAX_PRICE_USD:,.0f} (USD per device-hour), "
                f"got {v!r}")

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def family(self) -> str:
        return self.chip.family

    @property
    def scaleup_GBps_eff(self) -> float:
        """Scale-up bandwidth per device per direction (override, else the chip's)."""
        if self.scaleup_GBps is not None:
            return float(self.scaleup_GBps)
        return self.chip.need("scaleup_GBps")

    @property
    def nic_GBps(self) -> float:
        """Scale-out NIC bandwidth per device in GB/s (line rate / 8)."""
        gbps = self.scaleout_Gbps if self.scaleout_Gbps is not None else self.chip.need("nic_Gbps")
        return float(gbps) / 8.0


@dataclass(frozen=True)
class BridgeSpec:
    groups: tuple[str, str]
    kind: str
    GBps_per_node: float
    latency_us: float
    curves: LinkCurves | None = None   # measured bridge curves, GB/s per node (specs/link.py)

    def __post_init__(self) -> None:
        require(len(self.groups) == 2 and self.groups[0] != self.groups[1], "groups",
                f"must name two different groups, got {list(self.groups)}")
        require(self.kind in BRIDGE_KINDS, "kind", f"must be one of {', '.join(BRIDGE_KINDS)}, got {self.kind!r}")
        require(MIN_LINK_RATE <= self.GBps_per_node <= MAX_LINK_RATE, "GBps_per_node",
                f"must be a rate from {MIN_LINK_RATE:g} to {MAX_LINK_RATE:g} GB/s, got {self.GBps_per_node}")
        require(0 <= self.latency_us <= MAX_LINK_LATENCY_US, "latency_us",
                f"must be from 0 to {MAX_LINK_LATENCY_US:g} us, got {self.latency_us}")


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    groups: tuple[GroupSpec, ...]
    bridges: tuple[BridgeSpec, ...] = ()
    sources: tuple[tuple[str, str], ...] = ()   # (key, citation) of the file's `sources:` (link curves cite them)

    def __post_init__(self) -> None:
        require(len(self.groups) >= 1, "groups", "needs at least one group")
        names = [g.name for g in self.groups]
        for i, n in enumerate(names):
            if names.index(n) != i:
                raise SpecError(f"groups[{i}].name", f"duplicate group name {n!r}")
        for i, b in enumerate(self.bridges):
            for g in b.groups:
                require(g in names, f"bridges[{i}].groups", f"unknown group {g!r} (groups: {', '.join(names)})")
        # Groups of different families can only talk through a bridge (SPEC §4).
        for i, a in enumerate(self.groups):
            for b in self.groups[i + 1:]:
                if a.family != b.family and self.bridge(a.name, b.name) is None:
                    raise SpecError("bridges", f"groups {a.name!r} ({a.family}) and {b.name!r} ({b.family}) "
                                    "are different chip families and need a bridge")

    @property
    def devices(self) -> int:
        return sum(g.devices for g in self.groups)

    @property
    def is_heterogeneous(self) -> bool:
        return len(self.groups) > 1

    def group(self, name: str) -> GroupSpec:
        for g in self.groups:
            if g.name == name:
                return g
        raise SpecError("group", f"unknown group {name!r}")

    def bridge(self, a: str, b: str) -> BridgeSpec | None:
        for br in self.bridges:
            if set(br.groups) == {a, b}:
                return br
        return None
