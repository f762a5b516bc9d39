"""One row of the AI-efficiency matrix: a chip's peak and measured compute, memory and I/O.

The spec holds plain numbers; provenance (`sources`, `estimated`) stays in the chip file and
is checked by the loader (io/chips.py). `None` means "no public figure" (unknown); the cost
model refuses to use an unknown number instead of guessing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from baige_plan.errors import SpecError, require
from baige_plan.limits import MAX_PRICE_USD
from baige_plan.specs.link import LinkCurves

# issue 19: a figure beyond these is a unit error (or 1e308), never a chip: about 1,000x the largest real one
CEILINGS = {"peak_tflops": 1e7, "memory_gib": 1e6, "hbm_GBps": 1e7, "scaleup_GBps": 1e7, "scaleup_p2p_GBps": 1e7,
            "nic_Gbps": 1e7, "pcie_GBps": 1e6, "host_link_GBps": 1e6, "scaleup_latency_us": 1e7, "nic_latency_us": 1e7}
# least rates and sizes a chip file may state (1 GFLOP/s, 1 MiB, 1 MB/s): a 1e-300 TFLOP/s peak overflowed the
# search's arithmetic into numpy warnings (fuzz pass); latencies only need to be > 0
FLOORS = {"peak_tflops": 1e-3, "memory_gib": 1e-3, "hbm_GBps": 1e-3, "scaleup_GBps": 1e-3, "scaleup_p2p_GBps": 1e-3,
          "nic_Gbps": 1e-3, "pcie_GBps": 1e-3, "host_link_GBps": 1e-3}

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")   # fp4: dense NVFP4 (E2M1, 16-element blocks)
SCALEUP_KINDS = ("switch", "mesh", "pcie", "torus")
# fused attention kernels a runtime may run (specs/runtime.py RuntimeSpec.attention_kernel): FlashAttention-2
# (flash-attn 2.x, PyTorch SDPA's flash backend, FlexAttention-class), cuDNN fused attention (Transformer
# Engine's FusedAttention, PyTorch SDPA's cuDNN backend), FlashAttention-3 (Hopper)
ATTENTION_KERNELS = ("fa2", "cudnn", "fa3")


@dataclass(frozen=True)
class EfficiencyCurve:
    """Achievable fraction of peak as a function of one GEMM's FLOPs.

    Points (gemm_flops, efficiency) sorted by FLOPs; interpolated linearly in log10(FLOPs),
    clamped at both ends.
    """

    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        require(len(self.points) >= 1, "points", "needs at least one (gemm_flops, efficiency) point")
        prev = 0.0
        for i, (f, e) in enumerate(self.points):
            require(f > prev, f"points[{i}]", f"gemm_flops must increase, got {f} after {prev}")
            require(0.0 < e <= 1.0, f"points[{i}]", f"efficiency must be in (0, 1], got {e}")
            prev = f
        # log10 of each point's FLOPs, which `at` (every GEMM the search costs) would otherwise take again each time
        object.__setattr__(self, "_log10_flops", tuple(math.log10(f) for f, _ in self.points))

    def at(self, gemm_flops: float) -> float:
        pts = self.points
        if gemm_flops <= pts[0][0]:
            return pts[0][1]
        if gemm_flops >= pts[-1][0]:
            return pts[-1][1]
        x = math.log10(gemm_flops)
        logs = self._log10_flops
        for k, ((_f0, e0), (f1, e1)) in enumerate(zip(pts, pts[1:], strict=False)):
            if gemm_flops <= f1:
                x0, x1 = logs[k], logs[k + 1]
                return e0 + (e1 - e0) * (x - x0) / (x1 - x0)
        return pts[-1][1]  # unreachable

    @property
    def max_efficiency(self) -> float:
        return max(e for _, e in self.points)


@dataclass(frozen=True)
class ChipSpec:
    """Numbers the cost model uses. Bandwidths are per device, per direction."""

    id: str
    name: str
    vendor: str
    family: str
    peak_tflops: dict[str, float | None]
    memory_gib: float | None            # usable device memory
    hbm_GBps: float | None
    scaleup_GBps: float | None          # per device per direction, all links summed
    scaleup_p2p_GBps: float | None      # one pair of devices (mesh fabrics get a fraction)
    scaleup_kind: str
    devices_per_node: int
    nic_Gbps: float | None              # scale-out NIC per device
    pcie_GBps: float | None
    gemm_efficiency: dict[str, EfficiencyCurve] = field(default_factory=dict)
    hbm_efficiency: float | None = None         # achievable / peak HBM bandwidth
    # the rate of eager PyTorch's memory-bound kernels / peak HBM bandwidth, in the units of cost/execution.py
    # EagerTraffic, where measured (None: hbm_efficiency); EAGER_H100_OVER_H200_TIME says why it differs on H100
    eager_hbm_efficiency: float | None = None
    scaleup_efficiency: float | None = None     # achievable busbw / scaleup_GBps
    nic_efficiency: float | None = None         # achievable per-device busbw / NIC line rate
    scaleup_latency_us: float | None = None     # per collective step
    nic_latency_us: float | None = None
    flash_efficiency: float | None = None       # fused attention (fwd + bwd) achieved / dense peak
    # devices one scale-up (NVLink) domain holds when it spans several nodes (GB200 / GB300 NVL72: 72 over 4-GPU
    # trays); None: the node is the domain. Only the CLI's notes read it: a cluster's devices_per_node says what
    # the cost model takes as the scale-up domain
    scaleup_domain_devices: int | None = None
    # fused-attention kernels (fa2 | cudnn | fa3): (forward, backward) fraction of the 16-bit peak as a function
    # of the sequence length one launch attends over (EfficiencyCurve over seq_len instead of FLOPs)
    attention_kernels: dict[str, tuple[EfficiencyCurve, EfficiencyCurve]] = field(default_factory=dict)
    scaleup_curves: LinkCurves | None = None    # measured.links.scaleup (specs/link.py)
    nic_curves: LinkCurves | None = None        # measured.links.nic
    price_usd_per_device_hour: float | None = None  # price.usd_per_device_hour (list price; None = unknown)
    price_date: str | None = None               # price.usd_per_device_hour.date: when the price was read
    # device <-> host memory per direction where it is not PCIe (Grace superchips: NVLink-C2C); None: pcie_GBps
    host_link_GBps: float | None = None

    def __post_init__(self) -> None:
        require(bool(self.id), "id", "must be a non-empty string")
        require(bool(self.family), "family", "must be a non-empty string")
        for k, v in self.peak_tflops.items():
            require(k in DTYPES, f"peak_tflops.{k}", f"unknown dtype (known: {', '.join(DTYPES)})")
            require(v is None or FLOORS["peak_tflops"] <= v <= CEILINGS["peak_tflops"], f"peak_tflops.{k}",
                    f"must be from {FLOORS['peak_tflops']:g} to {CEILINGS['peak_tflops']:g} or null, got {v}")
        for name in ("memory_gib", "hbm_GBps", "scaleup_GBps", "scaleup_p2p_GBps", "nic_Gbps", "pcie_GBps",
                     "host_link_GBps", "scaleup_latency_us", "nic_latency_us"):
            v = getattr(self, name)
            lo = FLOORS.get(name)
            require(v is None or ((v >= lo) if lo else v > 0) and v <= CEILINGS[name], name,
                    f"must be {f'from {lo:g} to' if lo else '> 0 and at most'} {CEILINGS[name]:g} or null, got {v}")
        v = self.price_usd_per_device_hour
        require(v is None or (math.isfinite(v) and 0 <= v <= MAX_PRICE_USD), "price.usd_per_device_hour",
                f"must be a number from 0 to {MAX_PRICE_USD:,.0f} or null, got {v}")
        for name in ("hbm_efficiency", "eager_hbm_efficiency", "scaleup_efficiency", "nic_efficiency",
                     "flash_efficiency"):
            v = getattr(self, name)
            require(v is None or 0 < v <= 1.2, name, f"must be in (0, 1.2] or null, got {v}")
        require(self.scaleup_kind in SCALEUP_KINDS, "scaleup.kind",
                f"must be one of {', '.join(SCALEUP_KINDS)}, got {self.scaleup_kind!r}")
        require(isinstance(self.devices_per_node, int) and self.devices_per_node > 0,
                "scaleup.devices_per_node", f"must be a positive integer, got {self.devices_per_node!r}")
        for k in self.gemm_efficiency:
            require(k in DTYPES, f"measured.gemm_efficiency.{k}", "unknown dtype")
        for k in self.attention_kernels:
            require(k in ATTENTION_KERNELS, f"measured.attention_kernels.{k}",
                    f"unknown kernel (known: {', '.join(ATTENTION_KERNELS)})")

    # The cost model calls these; each raises a SpecError naming the unknown figure.
    def need(self, name: str) -> float:
        v = getattr(self, name)
        if v is None:
            raise SpecError(f"chip {self.id}.{name}", "unknown (no public figure in the catalog); "
                            "supply a chip file with a measured value")
        return v

    def peak(self, dtype: str) -> float:
        v = self.peak_tflops.get(dtype)
        if v is None:
            raise SpecError(f"chip {self.id}.peak_tflops.{dtype}",
                            f"unknown or unsupported: {self.id} has no {dtype} peak in the catalog")
        return v

    def gemm_curve(self, dtype: str) -> EfficiencyCurve:
        curve = self.gemm_efficiency.get(dtype)
        if curve is None and dtype == "fp16":
            curve = self.gemm_efficiency.get("bf16")
        if curve is None and dtype == "bf16":
            curve = self.gemm_efficiency.get("fp16")
        if curve is None:
            raise SpecError(f"chip {self.id}.measured.gemm_efficiency.{dtype}",
                            "unknown: no measured GEMM efficiency for this dtype")
        return curve
