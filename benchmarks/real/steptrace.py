"""Reading one profiled training step (benchmarks/real/harness.py): where the time goes.

Pure Python (no torch), so that it is tested in CI (tests/test_harness_config.py); not named
`trace.py`, which would shadow the standard library's module on the harness's sys.path. The input
is the `traceEvents` list of a Chrome trace as `torch.profiler.profile.export_chrome_trace` writes it
(Kineto categories: `kernel`, `gpu_memcpy`, `gpu_memset`, `cuda_runtime`, `cuda_driver`,
`cpu_op`, `user_annotation`, ...); times there are microseconds.

Figures (all for one step of one rank):

- `gpu_busy_s`: length of the union of the intervals of every kernel, memcpy and memset on the
  device (streams that overlap, e.g. NCCL beside compute, count once);
- `gpu_kernel_sum_s`: the plain sum of kernel durations (> gpu_busy_s where streams overlap);
- `compute_busy_s` / `nccl_busy_s`: unions over non-NCCL work / NCCL kernels alone
  (`gpu_busy_s - compute_busy_s` is communication not hidden behind compute);
- `gpu_span_s`: first kernel start to last kernel end;
- `kernels_per_step`: kernels (memcpy/memset not counted);
- `cpu_ops_per_step`: `aten::` ops recorded on the host, nested ones included (every dispatcher
  call the profiler saw), all threads (the autograd engine's too);
  `cpu_top_ops_per_step`: those not nested in another `aten::` op;
- `optimizer_kernels_s`: union of the device work launched inside the host range named
  `OPTIMIZER_RANGE` (matched through the launch's correlation id).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

OPTIMIZER_RANGE = "baige::optimizer"
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


def interval_union(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by [start, end) intervals (overlaps counted once)."""
    total = 0.0
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def _span(e: dict) -> tuple[float, float]:
    s = float(e["ts"])
    return s, s + float(e.get("dur", 0.0))


def _on_device(e: dict, device: int | None) -> bool:
    if device is None:
        return True
    d = (e.get("args") or {}).get("device")
    return d is None or int(d) == device


def _top_level_count(ops: list[dict]) -> int:
    """Ops not nested inside another op of the list on the same thread."""
    by_thread: dict[Any, list[tuple[float, float]]] = defaultdict(list)
    for e in ops:
        by_thread[(e.get("pid"), e.get("tid"))].append(_span(e))
    n = 0
    for spans in by_thread.values():
        spans.sort(key=lambda p: (p[0], -p[1]))
        open_end = None
        for s, e in spans:
            if open_end is None or s >= open_end:
                n += 1
                open_end = e
            elif e > open_end:            # overlapping but not nested (clock jitter): a new top op
                n += 1
                open_end = e
    return n


# kernel name -> kind (first match wins); lower-cased substring tests
_KINDS = (
    ("nccl", ("nccl",)),
    ("attention", ("flash", "fmha", "attention", "_attn")),
    ("gemm", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "sm90_", "sm80_", "ampere_", "wgmma")),
    ("optimizer_like", ("adam", "multi_tensor", "foreach")),
    ("norm", ("layer_norm", "layernorm", "rms_norm", "rmsnorm")),
    ("softmax_loss", ("softmax", "nll", "cross_entropy", "log_softmax")),
    ("reduce", ("reduce",)),
    ("copy_cast", ("copy", "cast", "convert", "memcpy")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "gelu", "silu", "add", "mul", "fill", "where")),
)


def kernel_kind(name: str) -> str:
    low = name.lower()
    for kind, keys in _KINDS:
        if any(k in low for k in keys):
            return kind
    return "other"


def kernel_breakdown(kernels: list[dict]) -> tuple[dict[str, float], list[list]]:
    """Seconds of kernel time by kind, and the 12 most expensive kernel names [name, s, count]."""
    by_kind: dict[str, float] = {}
    by_name: dict[str, list[float]] = {}
    for e in kernels:
        name = str(e.get("name", ""))
        d = float(e.get("dur", 0.0)) * 1e-6
        k = kernel_kind(name)
        by_kind[k] = by_kind.get(k, 0.0) + d
        slot = by_name.setdefault(name[:90], [0.0, 0])
        slot[0] += d
        slot[1] += 1
    top = sorted(([n, round(v[0], 6), v[1]] for n, v in by_name.items()), key=lambda x: -x[1])[:12]
    return {k: round(v, 6) for k, v in sorted(by_kind.items())}, top


def analyze_trace(events: list[dict], device: int | None = None) -> dict[str, Any]:
    """Figures of one profiled step from Chrome-trace events (see the module docstring)."""
    xs = [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e]
    dev = [e for e in xs if e.get("cat") in _DEVICE_CATS and _on_device(e, device)]
    kernels = [e for e in dev if e.get("cat") == "kernel"]
    nccl = [e for e in kernels if str(e.get("name", "")).lower().startswith("nccl")]
    other = [e for e in dev if not (e.get("cat") == "kernel" and str(e.get("name", "")).lower().startswith("nccl"))]
    aten = [e for e in xs if e.get("cat") == "cpu_op" and str(e.get("name", "")).startswith("aten::")]
    out: dict[str, Any] = {
        "gpu_busy_s": interval_union(_span(e) for e in dev) * 1e-6,
        "gpu_kernel_sum_s": sum(float(e.get("dur", 0.0)) for e in kernels) * 1e-6,
        "compute_busy_s": interval_union(_span(e) for e in other) * 1e-6,
        "nccl_busy_s": interval_union(_span(e) for e in nccl) * 1e-6,
        "gpu_span_s": ((max(_span(e)[1] for e in dev) - min(_span(e)[0] for e in dev)) * 1e-6) if dev else 0.0,
        "kernels_per_step": len(kernels),
        "cpu_ops_per_step": len(aten),
        "cpu_top_ops_per_step": _top_level_count(aten),
    }
    out["kernel_time_by_kind_s"], out["top_kernels"] = kernel_breakdown(kernels)
    ranges = [_span(e) + ((e.get("pid"), e.get("tid")),) for e in xs
              if e.get("cat") == "user_annotation" and e.get("name") == OPTIMIZER_RANGE]
    if ranges:
        corr = set()
        for e in xs:
            if e.get("cat") not in _LAUNCH_CATS:
                continue
            s, _ = _span(e)
            th = (e.get("pid"), e.get("tid"))
            if any(r0 <= s <= r1 and th == t for r0, r1, t in ranges):
                c = (e.get("args") or {}).get("correlation")
                if c is not None:
                    corr.add(c)
        opt = [e for e in dev if (e.get("args") or {}).get("correlation") in corr]
        out["optimizer_kernels_s"] = interval_union(_span(e) for e in opt) * 1e-6
    return out
