"""What an overlapped tensor-parallel collective costs the GEMM beside it, on one GPU (docs/COST_MODEL.md §7).

The cost model hides a TP collective under the GEMM it overlaps at the GEMM's full speed (cost/estimate.py,
tp_comm_overlap). The runtimes do not leave that GEMM alone:
  - Transformer Engine userbuffers' "pipeline" reduce-scatter overlap (Megatron-Bridge comm_overlap.py: proj_fprop,
    fc2_fprop, num_sm 16-24, set_sm_margin) launches the GEMM on the SMs left after the communication kernel's;
  - its "ring_exchange" all-gather overlap and torchtitan's async TP split the GEMM into tp chunks along M, each
    issued when its shard arrives (copy-engine transfers beside them);
  - a collective running beside a GEMM reads and writes HBM.
This times, per GEMM shape of a TP-sharded layer (M tokens x K -> N), bf16:
  alone; with n SMs carved out of cuBLAS (torch._C._set_sm_carveout_experimental, cuBLASLt SM_COUNT_TARGET);
  split into c chunks along M, back to back; and beside a device-to-device copy of the collective's bytes on a side
  stream. Prints one JSON line per point and writes them all to --out. Torch only.

    python benchmarks/real/tp_overlap_sm.py --out $OUT/tp_overlap_sm.raw.json
"""

from __future__ import annotations

import argparse

import torch
from gpu_timing import emit, events_s, write_rows

# (name, M, K, N): Llama 3 70B (h 8192, ffn 28672, 64 q / 8 kv heads of 128) and 8B (h 4096, ffn 14336) at
# 8192 tokens per micro-batch, sharded over tp
SHAPES = [("70b_tp8_fc1", 8192, 8192, 2 * 28672 // 8), ("70b_tp8_fc2", 8192, 28672 // 8, 8192),
          ("70b_tp8_qkv", 8192, 8192, (8192 + 2 * 1024) // 8), ("70b_tp8_proj", 8192, 8192 // 8, 8192),
          ("70b_tp4_fc1", 8192, 8192, 2 * 28672 // 4), ("70b_tp4_fc2", 8192, 28672 // 4, 8192),
          ("8b_tp2_fc1", 8192, 4096, 2 * 14336 // 2), ("8b_tp2_fc2", 8192, 14336 // 2, 4096)]


def carveout(n: int | None) -> bool:
    f = getattr(torch._C, "_set_sm_carveout_experimental", None)
    if f is None:
        return False
    f(n)
    return True


def point(name: str, m: int, k: int, n: int, iters: int) -> dict:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * m * n * k
    out: dict = {"shape": name, "m": m, "k": k, "n": n, "flops": flops}

    def gemm():
        torch.mm(a, b)

    t0 = events_s(gemm, iters)
    out["alone_s"] = t0
    out["alone_tflops"] = flops / t0 / 1e12
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out["sms"] = sms
    for c in (8, 16, 24, 32):
        if not carveout(c):
            out["carveout"] = "unavailable"
            break
        out[f"carveout_{c}_s"] = events_s(gemm, iters)
        carveout(None)
    chunks = {}
    for c in (2, 4, 8):
        parts = [a[i * m // c:(i + 1) * m // c] for i in range(c)]

        def chunked(parts=parts):
            for p in parts:
                torch.mm(p, b)
        chunks[c] = events_s(chunked, iters)
        out[f"chunks_{c}_s"] = chunks[c]
    # the collective's bytes beside it: an all-gather or reduce-scatter of the M x h activation moves about M x h x 2 B
    h = max(k, n)
    src = torch.empty(m * h, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    side = torch.cuda.Stream()

    def copy():
        dst.copy_(src, non_blocking=True)
    out["copy_alone_s"] = events_s(copy, iters)

    def both():
        cur = torch.cuda.current_stream()
        side.wait_stream(cur)
        with torch.cuda.stream(side):
            dst.copy_(src, non_blocking=True)
        torch.mm(a, b)
        cur.wait_stream(side)
    out["with_copy_s"] = events_s(both, iters)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    meta = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}
    for name, m, k, n in SHAPES:
        for _ in range(3):      # warm-up of cuBLAS heuristics and clocks
            torch.mm(torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                     torch.randn(k, n, device="cuda", dtype=torch.bfloat16))
        r = {**meta, **point(name, m, k, n, args.iters)}
        emit(r)
        rows.append(r)
    write_rows(rows, args.out)


if __name__ == "__main__":
    main()
