"""Measured link bandwidth by message size (and group size): what nccl-tests and p2p benchmarks report.

A `BandwidthCurve` is one measured series: operation `op`, `n` ranks in the measurement, `per_node`
of them on each node, and points (message bytes, bus bandwidth GB/s) with nccl-tests conventions
(doc/PERFORMANCE.md): the message is the all-reduce buffer, the all-gather *output*, the
reduce-scatter *input*, the all-to-all buffer per rank, or the p2p message; busbw = algbw * factor,
factor 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for p2p.
So the time of one operation of S bytes is t = S * factor / busbw(S) -- everything the benchmark
timed (launch, latency, protocol switches) is inside the curve.

Interpolation: busbw linear in log(bytes) between points. Clamped at the ends: above the largest
measured size the bandwidth of the largest; below the smallest the *time* of the smallest (busbw
falls in proportion to the size), since a flat bandwidth there would make a tiny message nearly free
while a real one pays at least the launch and latency the smallest measurement paid.

`LinkCurves` is the set of curves of one link domain (a chip's or a group's scale-up fabric or NIC,
a bridge) and picks the curve measured closest to a use (`pick`).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

from baige_plan.errors import SpecError, require
from baige_plan.specs.frozen import hash_once

LINK_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")
METRICS = ("busbw", "algbw")


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor of `op` on `n` ranks (p2p: 1)."""
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op == "p2p":
        return 1.0
    raise SpecError("op", f"must be one of {', '.join(LINK_OPS)}, got {op!r}")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@hash_once
@dataclass(frozen=True)
class BandwidthCurve:
    """Bus bandwidth (GB/s) of `op` by message size (bytes), measured on `n` ranks, `per_node` per node
    (None: all on one node, i.e. n). For p2p, GB/s is each transfer's bandwidth while `n/2` transfers
    (pairs) run at once; a p2p benchmark's algbw."""

    op: str
    points: tuple[tuple[float, float], ...]
    n: int = 2
    per_node: int | None = None
    estimated: bool = False
    sources: tuple[str, ...] = ()   # citation keys, as written in the file (kept for plan files)

    def __post_init__(self) -> None:
        require(self.op in LINK_OPS, "op", f"must be one of {', '.join(LINK_OPS)}, got {self.op!r}")
        require(_is_int(self.n) and self.n >= 2, "n", f"must be an integer >= 2 (ranks measured), got {self.n!r}")
        require(self.per_node is None or (_is_int(self.per_node) and 1 <= self.per_node <= self.n), "per_node",
                f"must be an integer in [1, n={self.n}], got {self.per_node!r}")
        require(len(self.points) >= 1, "points", "needs at least one [bytes, GBps] point")
        prev = 0.0
        for i, p in enumerate(self.points):
            require(len(p) == 2, f"points[{i}]", f"expected [bytes, GBps], got {p!r}")
            b, bw = p
            require(math.isfinite(b) and b > prev, f"points[{i}]",
                    f"bytes must be finite and increase, got {b} after {prev}")
            require(math.isfinite(bw) and bw > 0, f"points[{i}]", f"GBps must be finite and > 0, got {bw}")
            prev = b

    @classmethod
    def from_algbw(cls, op: str, points, n: int = 2, per_node: int | None = None,
                   estimated: bool = False, sources: tuple[str, ...] = ()) -> BandwidthCurve:
        """A curve from algorithm bandwidth (bytes / time) points: busbw = algbw * factor(op, n)."""
        require(op in LINK_OPS, "op", f"must be one of {', '.join(LINK_OPS)}, got {op!r}")
        require(_is_int(n) and n >= 2, "n", f"must be an integer >= 2 (ranks measured), got {n!r}")
        f = busbw_factor(op, n)
        return cls(op, tuple((float(b), float(bw) * f) for b, bw in points), n, per_node, estimated, sources)

    @property
    def ranks_per_node(self) -> int:
        """Ranks per node in the measurement (per_node, or all n on one node)."""
        return self.per_node if self.per_node is not None else self.n

    @property
    def max_GBps(self) -> float:
        return max(bw for _, bw in self.points)

    def busbw_GBps(self, size_bytes: float) -> float:
        """Interpolated busbw at `size_bytes` (see the module docstring for the clamping)."""
        pts = self.points
        b0, bw0 = pts[0]
        if size_bytes <= b0:
            return bw0 * max(size_bytes, 0.0) / b0 if size_bytes > 0 else bw0
        if size_bytes >= pts[-1][0]:
            return pts[-1][1]
        i = bisect_left(pts, (size_bytes, -math.inf))   # first point with bytes >= size
        (_x0, y0), (x1, y1) = pts[i - 1], pts[i]
        if size_bytes == x1:
            return y1
        # the log of each point's size, taken once and kept (not pickled: hash_once), the same floats
        logs = self.__dict__.get("_log_bytes")
        if logs is None:
            logs = tuple(math.log(b) for b, _ in pts)
            object.__setattr__(self, "_log_bytes", logs)
        w = (math.log(size_bytes) - logs[i - 1]) / (logs[i] - logs[i - 1])
        return y0 + (y1 - y0) * w

    def time_s(self, size_bytes: float) -> float:
        """Seconds for one operation of `size_bytes` on the measured `n` ranks: S * factor / busbw(S)."""
        if size_bytes <= 0:
            return 0.0
        return size_bytes * busbw_factor(self.op, self.n) / (self.busbw_GBps(size_bytes) * 1e9)


@hash_once
@dataclass(frozen=True)
class LinkCurves:
    """The measured curves of one link domain (scale-up, NIC or a bridge)."""

    curves: tuple[BandwidthCurve, ...]

    def __post_init__(self) -> None:
        seen = set()
        for i, c in enumerate(self.curves):
            require(isinstance(c, BandwidthCurve), f"[{i}]", f"expected a BandwidthCurve, got {type(c).__name__}")
            key = (c.op, c.n, c.ranks_per_node)
            if key in seen:
                raise SpecError(f"[{i}]", f"duplicate curve for op {c.op!r}, n {c.n}, per_node {c.ranks_per_node}")
            seen.add(key)

    def __bool__(self) -> bool:
        return bool(self.curves)

    def ops(self) -> tuple[str, ...]:
        return tuple(sorted({c.op for c in self.curves}))

    def pick(self, op: str, n: int, per_node: int) -> BandwidthCurve | None:
        """The curve of `op` measured closest to a use on `n` ranks, `per_node` per node: nearest
        per_node first (it sets how many ranks share a node's links), then nearest n, both by
        |log ratio|; ties go to the larger measurement. None when `op` has no curve. Each answer is kept on the
        (frozen) object: the search asks the same few questions thousands of times a plan."""
        picks = self.__dict__.get("_picks")
        if picks is None:
            picks = {}
            object.__setattr__(self, "_picks", picks)
        q = (op, n, per_node)
        if q in picks:
            return picks[q]
        best, key = None, None
        for c in self.curves:
            if c.op != op:
                continue
            k = (abs(math.log(c.ranks_per_node / max(per_node, 1))), abs(math.log(c.n / max(n, 2))),
                 -c.ranks_per_node, -c.n)
            if key is None or k < key:
                best, key = c, k
        picks[q] = best
        return best
