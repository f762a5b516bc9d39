"""Fused causal attention against sequence length on one GPU: does the catalog's per-kernel curve hold past 16k?

The catalog's attention curves (chips/*.yaml measured.attention_kernels: fa2 / cudnn / fa3, efficiency by the
sequence length one launch covers) come from the FlashAttention-3 paper's figures, which stop at 16k tokens and run
batch x seqlen = 16k. Long-context runs launch one sequence of 32k-128k tokens (LLM Foundry MPT at 32k / 64k on
H100 runs 24-38 % slower than modelled, its 2k rows within 5 %). This times PyTorch's
F.scaled_dot_product_attention, causal, bf16, head dim 128, per backend (flash = FlashAttention-2 inside PyTorch,
cudnn, efficient), forward and forward + backward, at two shapes per length: the paper's (batch = 16k / seq, for
seq <= 16k) and one sequence (batch 1), 32 heads.

TFLOP/s in the paper's convention: forward 4 x b x heads x seq^2 x d / 2 (causal), backward 2.5 x forward.
Prints one JSON line per point and writes them all to --out. Torch only.

    python benchmarks/real/sdpa_long_seq.py --out $OUT/sdpa_long_seq.raw.json
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from gpu_timing import emit, events_s, write_rows
from torch.nn.attention import SDPBackend, sdpa_kernel


def point(backend, b: int, heads: int, seq: int, d: int, iters: int) -> dict:
    q, k, v = (torch.randn(b, heads, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    g = torch.randn(b, heads, seq, d, device="cuda", dtype=torch.bfloat16)
    fwd_flops = 4 * b * heads * seq * seq * d / 2

    def fwd():
        with torch.no_grad(), sdpa_kernel([backend]):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        with sdpa_kernel([backend]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(g)
        q.grad = k.grad = v.grad = None

    row = {"backend": backend.name, "b": b, "heads": heads, "seq": seq, "head_dim": d}
    try:
        for fn in (fwd, fwd_bwd):          # warm-up (kernel selection, workspace)
            fn()
            fn()
        f_s = events_s(fwd, iters)
        fb_s = events_s(fwd_bwd, iters)
    except RuntimeError as e:             # backend not available for this shape
        row["error"] = str(e).splitlines()[0][:200]
        return row
    bwd_s = max(fb_s - f_s, 1e-9)
    row.update(fwd_s=f_s, fwd_bwd_s=fb_s, bwd_s=bwd_s, fwd_tflops=fwd_flops / f_s / 1e12,
               bwd_tflops=2.5 * fwd_flops / bwd_s / 1e12)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version()}
    emit(meta)
    shapes = [(16384 // s, 16, s) for s in (2048, 4096, 8192, 16384)]          # the paper's: 16k tokens, 16 heads
    shapes += [(1, args.heads, s) for s in (4096, 8192, 16384, 32768, 65536, 131072)]
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        for b, heads, seq in shapes:
            iters = max(3, args.iters * 8192 // seq) if seq <= 8192 else max(3, args.iters // (seq // 8192))
            r = point(backend, b, heads, seq, 128, iters)
            emit(r)
            rows.append(r)
            torch.cuda.empty_cache()
    write_rows({"meta": meta, "rows": rows}, args.out)


if __name__ == "__main__":
    main()
