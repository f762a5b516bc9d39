"""How much context parallelism's ring exchange slows the attention it overlaps (issue 16: CP traffic is not free).

Transformer Engine's P2P context parallelism (AttnFuncWithCPAndKVP2P; cost/cp.py) sends the next K/V block (and in
the backward the dK/dV partials) to the next CP rank with batched isend/irecv on a side stream while the current
step's flash attention runs. cost/cp.py charged only the part of the exchange longer than the step
((cp-1) max(0, k - c)): a transfer shorter than the attention was free. NCCL's send/recv kernels run on SMs too, so
the attention beside them is slower, as measured for the collectives in collective_contention.py and for the EP
all-to-all in a2a_overlap.py.

Per ring size (world ranks, each sends to rank+1 and receives from rank-1, bf16 K/V blocks of `mib`) and attention
shape: attn_s, a chain of causal flash-attention forward+backward launches (torch SDPA, bf16, head dim 128) alone,
long enough to cover the exchange; p2p_s, the exchange alone; both_s, the exchange issued on a second stream at the
start of the same chain. both_s = attn_s + k x p2p_s, and the share of the GPU the exchange holds while it runs is
k / (1 + k) (cost/cp.py CP_P2P_CONTENTION_SHARE).

    torchrun --standalone --nproc_per_node 4 benchmarks/real/cp_p2p_contention.py --out cp_p2p_contention.json
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from gpu_timing import emit, events_s, outlasting_contention, write_rows


def ring(send: torch.Tensor, recv: torch.Tensor, rank: int, world: int) -> None:
    ops = [dist.P2POp(dist.isend, send, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    dist.init_process_group("nccl")
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dt = torch.bfloat16
    comm = torch.cuda.Stream()
    rows = []
    # attention shapes: (batch, heads, tokens per step); head dim 128 (Llama / GPT shapes per TP rank)
    for b, heads, tok in ((1, 8, 4096), (1, 16, 8192)):
        q = torch.randn(b, heads, tok, 128, device="cuda", dtype=dt, requires_grad=True)
        k = torch.randn(b, heads, tok, 128, device="cuda", dtype=dt, requires_grad=True)
        v = torch.randn(b, heads, tok, 128, device="cuda", dtype=dt, requires_grad=True)
        g = torch.randn(b, heads, tok, 128, device="cuda", dtype=dt)

        def attn(q=q, k=k, v=v, g=g) -> None:
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.autograd.backward(o, g)

        for _ in range(3):
            attn()
        per_attn = events_s(attn, args.iters, True)
        for mib in (4, 16, 64, 256):
            n = mib * 2**20 // 2
            send = torch.randn(n, device="cuda", dtype=dt)
            recv = torch.empty_like(send)

            def p2p(send=send, recv=recv) -> None:
                ring(send, recv, rank, world)

            for _ in range(3):
                p2p()
            p2p_s = events_s(p2p, args.iters, True)
            reps, attn_s, both_s, kk = outlasting_contention(attn, per_attn, p2p, p2p_s, comm, args.iters, min_reps=3)
            row = {"world": world, "device": torch.cuda.get_device_name(), "heads": heads, "tokens": tok,
                   "mib": mib, "p2p_ms": round(p2p_s * 1e3, 4), "attn_chain_ms": round(attn_s * 1e3, 4),
                   "attn_calls": reps, "both_ms": round(both_s * 1e3, 4), "k": round(kk, 4),
                   "share": round(kk / (1 + kk), 4)}
            rows.append(row)
            emit(row)
    write_rows(rows, args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
