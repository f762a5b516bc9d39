"""Fit chip-file figures from raw profile measurements (pure numpy; no torch).

Raw format (schema ``baige-plan/profile-raw/v1``, written by measure.py)::

    {"schema": ..., "date": ..., "command": ..., "device": {name, count, driver, torch, cuda, nccl,
     mem_total_bytes, ...},
     "gemm": [{"dtype": "bf16", "m":, "n":, "k":, "flops": 2*m*n*k, "time_s": median, "tflops":}, ...],
     "hbm": [{"bytes": buffer size, "moved_bytes": read+written, "time_s":, "GBps":}, ...],
     "collectives": {"world": n, "results": [{"op": "all_reduce", "bytes": message size, "time_s": median}, ...]}}

Collective conventions are those of nccl-tests (doc/PERFORMANCE.md): ``algbw = bytes / time`` with
``bytes`` the all-reduce buffer, the all-gather *output*, the reduce-scatter *input*, the all-to-all
buffer, or the p2p message; ``busbw = algbw * factor`` with factor ``2(n-1)/n`` for all-reduce,
``(n-1)/n`` for all-gather, reduce-scatter and all-to-all, and 1 for send/recv.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

#: the raw file's schema line (measure.py writes it, writer.check_raw checks it)
RAW_SCHEMA = "baige-plan/profile-raw/v1"

#: ops measured by measure.py, in nccl-tests' naming
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv")


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor for `op` on `n` ranks."""
    if n < 2:
        raise ValueError(f"collectives need n >= 2 ranks, got {n}")
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op == "sendrecv":
        return 1.0
    raise ValueError(f"unknown collective {op!r} (known: {', '.join(COLLECTIVES)})")


def ring_steps(op: str, n: int) -> int:
    """Latency-bearing steps of a ring algorithm: 2(n-1) for all-reduce, n-1 for AG/RS/A2A, 1 for p2p."""
    if op == "all_reduce":
        return 2 * (n - 1)
    if op == "sendrecv":
        return 1
    return n - 1


def busbw_GBps(op: str, nbytes: float, time_s: float, n: int) -> float:
    return nbytes / time_s / 1e9 * busbw_factor(op, n)


def _sig(x: float, digits: int = 3) -> float:
    """Round to `digits` significant figures (stable output for chip files)."""
    if x == 0:
        return 0.0
    return float(f"{x:.{digits - 1}e}")


def fit_gemm_curve(flops: list[float] | np.ndarray, tflops: list[float] | np.ndarray,
                   peak_tflops: float) -> list[list[float]]:
    """Efficiency curve ``[[gemm_flops, efficiency], ...]`` from measured GEMMs.

    Per FLOPs decade (floor(log10 flops)): the upper envelope is the upper half of the decade's
    efficiencies (the ceil(n/2) largest); its median is the decade's efficiency, placed at the
    geometric mean of those samples' FLOPs (3 significant figures). The curve is then made
    monotone non-decreasing (running maximum): a larger GEMM can always be tiled like a smaller one.
    Efficiencies are rounded to 4 decimals and clipped to (0, 1].
    """
    f = np.asarray(flops, dtype=float)
    t = np.asarray(tflops, dtype=float)
    if f.shape != t.shape or f.size == 0:
        raise ValueError("need equally many flops and tflops samples, at least one")
    if peak_tflops is None or peak_tflops <= 0:
        raise ValueError(f"peak_tflops must be positive, got {peak_tflops!r}")
    eff = t / peak_tflops
    dec = np.floor(np.log10(f)).astype(int)
    pts: list[list[float]] = []
    for d in sorted(set(dec.tolist())):
        sel = dec == d
        e, ff = eff[sel], f[sel]
        order = np.argsort(-e, kind="stable")
        top = order[: math.ceil(len(order) / 2)]
        x = _sig(float(np.exp(np.mean(np.log(ff[top])))))
        pts.append([x, float(np.median(e[top]))])
    out: list[list[float]] = []
    run = 0.0
    for x, e in pts:
        run = max(run, e)
        out.append([x, round(min(max(run, 1e-4), 1.0), 4)])
    return out


def gemm_best(samples: list[dict], dtype: str) -> dict | None:
    rows = [s for s in samples if s["dtype"] == dtype]
    return max(rows, key=lambda s: s["tflops"]) if rows else None


def hbm_fit(hbm: list[dict], peak_GBps: float) -> tuple[float, float]:
    """(achieved GB/s, efficiency) from the largest copy (bytes read + written over time)."""
    if not hbm:
        raise ValueError("no HBM measurements")
    big = max(hbm, key=lambda r: r["bytes"])
    gbps = big["moved_bytes"] / big["time_s"] / 1e9
    return gbps, round(gbps / peak_GBps, 4)


@dataclass
class CollectiveFit:
    world: int
    busbw_large_GBps: dict[str, float] = field(default_factory=dict)  # at the largest message
    large_bytes: dict[str, int] = field(default_factory=dict)
    latency_us: dict[str, float] = field(default_factory=dict)        # smallest message / ring steps
    small_bytes: dict[str, int] = field(default_factory=dict)

    def efficiency(self, link_GBps: float, op: str = "all_reduce") -> float:
        return round(self.busbw_large_GBps[op] / link_GBps, 4)

    @property
    def step_latency_us(self) -> float:
        """Per-step latency: median over the collectives (p2p excluded) of smallest-message time / steps."""
        vals = [v for k, v in self.latency_us.items() if k != "sendrecv"]
        return round(float(np.median(vals)), 2)


def collective_fit(coll: dict) -> CollectiveFit:
    n = int(coll["world"])
    fit = CollectiveFit(world=n)
    by_op: dict[str, list[dict]] = {}
    for r in coll["results"]:
        by_op.setdefault(r["op"], []).append(r)
    for op, rows in sorted(by_op.items()):
        big = max(rows, key=lambda r: r["bytes"])
        small = min(rows, key=lambda r: r["bytes"])
        fit.busbw_large_GBps[op] = round(busbw_GBps(op, big["bytes"], big["time_s"], n), 2)
        fit.large_bytes[op] = int(big["bytes"])
        fit.latency_us[op] = round(small["time_s"] * 1e6 / ring_steps(op, n), 2)
        fit.small_bytes[op] = int(small["bytes"])
    return fit


def busbw_table(coll: dict) -> list[dict]:
    """Every collective sample with its algbw and busbw (GB/s), sorted by op then size."""
    n = int(coll["world"])
    out = []
    for r in sorted(coll["results"], key=lambda r: (r["op"], r["bytes"])):
        alg = r["bytes"] / r["time_s"] / 1e9
        out.append({"op": r["op"], "bytes": int(r["bytes"]), "time_us": round(r["time_s"] * 1e6, 2),
                    "algbw_GBps": round(alg, 2), "busbw_GBps": round(alg * busbw_factor(r["op"], n), 2)})
    return out
