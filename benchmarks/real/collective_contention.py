"""How much an NCCL collective running beside GEMMs slows them (issue 16: overlapped communication is not free).

benchmarks/real/a2a_overlap.py found that Megatron's EP all-to-all overlap hides only 20-55 % of the all-to-all time
on H200: a compute kernel beside a running all-to-all behaves as if the collective held ~0.40 of the GPU. This asks
the same of the collectives FSDP, ZeRO and DDP overlap with compute: all_gather_into_tensor, reduce_scatter_tensor,
all_reduce (and all_to_all_single for comparison), bf16, on `world` GPUs (torchrun --nproc_per_node N).

Per collective and size: gemm_s, a chain of bf16 GEMMs alone (long enough to cover the collective); coll_s, the
collective alone; both_s, the collective issued on a second stream at the start of the same GEMM chain. With the
chain longer than the collective, both_s = gemm_s + k x coll_s, and the share the collective takes of the GPU while
it runs is k / (1 + k) (the quantity cost/moe.py A2A_OVERLAP_CONTENTION_SHARE states for the all-to-all).

    torchrun --standalone --nproc_per_node 2 benchmarks/real/collective_contention.py --out contention_h200x2.json
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from gpu_timing import emit, events_s, outlasting_contention, write_rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    dist.init_process_group("nccl")
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dt = torch.bfloat16
    x = torch.randn(8192, 8192, device="cuda", dtype=dt)
    w = torch.randn(8192, 8192, device="cuda", dtype=dt)
    comm = torch.cuda.Stream()
    rows = []
    for name in ("all_gather", "reduce_scatter", "all_reduce", "all_to_all"):
        for mib in (32, 128, 512):
            n = mib * 2**20 // 2
            n -= n % world
            full = torch.randn(n, device="cuda", dtype=dt)
            part = torch.empty(n // world, device="cuda", dtype=dt)
            out = torch.empty_like(full)

            def coll(name=name, full=full, part=part, out=out) -> None:
                if name == "all_gather":
                    dist.all_gather_into_tensor(full, part)
                elif name == "reduce_scatter":
                    dist.reduce_scatter_tensor(part, full)
                elif name == "all_reduce":
                    dist.all_reduce(full)
                else:
                    dist.all_to_all_single(out, full)

            for _ in range(3):
                coll()
            coll_s = events_s(coll, args.iters, True)
            per_gemm = events_s(lambda: torch.matmul(x, w), args.iters, True)
            reps, gemm_s, both_s, k = outlasting_contention(lambda: torch.matmul(x, w), per_gemm, coll, coll_s, comm,
                                                            args.iters)
            row = {"world": world, "device": torch.cuda.get_device_name(), "collective": name, "mib": mib,
                   "coll_ms": round(coll_s * 1e3, 4), "gemm_chain_ms": round(gemm_s * 1e3, 4), "gemms": reps,
                   "both_ms": round(both_s * 1e3, 4), "k": round(k, 4), "share": round(k / (1 + k), 4)}
            rows.append(row)
            emit(row)
    write_rows(rows, args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
