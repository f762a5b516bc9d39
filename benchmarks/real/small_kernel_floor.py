"""How long a small kernel takes on the device, replayed from a CUDA graph, against its bytes at the HBM rate
(docs/COST_MODEL.md §7: the strong-scaling misses of MLPerf v6.0, steps of 73 ms at 512 tokens a GPU).

The cost model charges memory-bound work as bytes / achievable HBM bandwidth, aggregated per layer, and small GEMMs by
the efficiency curve. A kernel also has a fixed device time (launch into the graph's stream, its grid's ramp and
tail) that bytes do not show. This replays, inside one CUDA graph (no host launch cost), a chain of N identical
kernels and divides: elementwise add (read 2, write 1), SiLU x mul (SwiGLU: read 2, write 1), an RMS norm written as
torch ops, a row amax (fp8 current scaling's reduction), a cast to float8_e4m3fn, and bf16 GEMMs of M x 4096 x 4096,
at sizes from 256 KiB to 256 MiB per operand. Prints one JSON line per point and writes them all to --out. Torch only.

    python benchmarks/real/small_kernel_floor.py --out $OUT/small_kernel_floor.raw.json
"""

from __future__ import annotations

import argparse

import torch
from gpu_timing import emit, write_rows

CHAIN = 64           # kernels per graph replay


def graph_s(fn, replays: int = 20) -> float:
    """Seconds per call of fn inside a CUDA graph of CHAIN calls (median over replays)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(CHAIN):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / CHAIN)
    times.sort()
    return times[len(times) // 2]


def ops(rows: int, hidden: int):
    """(name, fn, bytes moved, kernels it issues) for activations of rows x hidden bf16."""
    x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    e = x.numel() * 2

    def add():
        torch.add(x, y, out=out)

    def swiglu():
        torch.mul(torch.nn.functional.silu(x), y, out=out)

    def rmsnorm():
        torch.nn.functional.rms_norm(x, (hidden,), w, 1e-5)

    def amax():
        x.abs().amax()

    def cast():
        x.to(torch.float8_e4m3fn)

    # bytes as the kernels move them: silu writes a temporary the mul reads (5e), abs writes one amax reads (3e)
    return [("add", add, 3 * e, 1), ("silu_mul", swiglu, 5 * e, 2), ("rms_norm", rmsnorm, 2 * e, 1),
            ("abs_amax", amax, 3 * e, 2), ("cast_fp8", cast, 1.5 * e, 1)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    prop = torch.cuda.get_device_properties(0)
    rows = []
    # the achievable copy rate on this device, for the bytes / HBM reference
    big = torch.empty(256 * 2**20 // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(big)
    copy_s = graph_s(lambda: dst.copy_(big))
    hbm_Bps = 2 * big.numel() * 2 / copy_s
    emit({"device": prop.name, "copy_rate_GBps": hbm_Bps / 1e9})
    for rows_, hidden in ((64, 2048), (256, 2048), (1024, 2048), (1024, 4096), (4096, 4096), (16384, 4096),
                          (32768, 4096)):
        for name, fn, nbytes, kernels in ops(rows_, hidden):
            t = graph_s(fn)
            row = {"op": name, "rows": rows_, "hidden": hidden, "bytes": nbytes, "kernels": kernels, "s": t,
                   "bytes_at_copy_rate_s": nbytes / hbm_Bps, "excess_per_kernel_s": (t - nbytes / hbm_Bps) / kernels}
            emit(row)
            rows.append(row)
    wt = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for m in (128, 512, 1024, 2048, 4096, 8192):
        x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        t = graph_s(lambda x=x: torch.mm(x, wt))
        flops = 2.0 * m * 4096 * 4096
        row = {"op": "mm_bf16", "m": m, "k": 4096, "n": 4096, "s": t, "tflops": flops / t / 1e12}
        emit(row)
        rows.append(row)
    write_rows({"device": prop.name, "copy_rate_GBps": hbm_Bps / 1e9, "chain": CHAIN, "rows": rows}, a.out)


if __name__ == "__main__":
    main()
