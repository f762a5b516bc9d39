"""Does an FSDP-sized collective slow memory-bound kernels more than GEMMs beside it? (issue 16: FSDP2 per-micro-batch
collectives of a model with many more parameters than active ones, e.g. OLMoE-1B-7B, ran beside compute that is
half index gathers and copies.)

collective_contention.py measured the share a collective holds of the GPU beside a chain of large bf16 GEMMs. This
asks the same for the collectives FSDP2 issues per unit (an all-gather of the unit's bf16 parameters, a
reduce-scatter of its gradients in the fp32 reduce dtype), at one OLMoE layer's size (433 M parameters: 0.87 GB
bf16 gathered, 1.73 GB fp32 reduce-scattered), beside four kinds of work:
  gemm       bf16 8192 x 8192 x 8192 matmuls (compute-bound);
  gemm_moe   bf16 (16384 x 2048) @ (2048 x 1024) matmuls (an expert GEMM's shape at OLMoE's width);
  copy       bf16 copies of a 256 MiB tensor (HBM-bound);
  gather     index_select of 65,536 rows of 2,048 bf16 out of 131,072 (a permutation's gather).
With the work longer than the collective, both_s = work_s + k x coll_s; the share k / (1 + k) is what the
collective holds of the GPU while it runs (gpu_timing.contention_s).

    torchrun --standalone --nproc_per_node 4 benchmarks/real/fsdp_contention.py --out fsdp_contention_h200x4.json
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from gpu_timing import emit, events_s, outlasting_contention, write_rows

UNIT_PARAMS = 433_000_000   # one OLMoE-1B-7B layer: 64 experts x 3 x 2048 x 1024 + attention + router + norms


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--iters", type=int, default=6)
    args = ap.parse_args()
    dist.init_process_group("nccl")
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    bf = torch.bfloat16
    n = UNIT_PARAMS - UNIT_PARAMS % world
    ag_full = torch.empty(n, device="cuda", dtype=bf)
    ag_part = torch.randn(n // world, device="cuda", dtype=bf)
    rs_full = torch.randn(n, device="cuda", dtype=torch.float32)
    rs_part = torch.empty(n // world, device="cuda", dtype=torch.float32)
    colls = {"all_gather_bf16": lambda: dist.all_gather_into_tensor(ag_full, ag_part),
             "reduce_scatter_fp32": lambda: dist.reduce_scatter_tensor(rs_part, rs_full)}
    a = torch.randn(8192, 8192, device="cuda", dtype=bf)
    b = torch.randn(8192, 8192, device="cuda", dtype=bf)
    xm = torch.randn(16384, 2048, device="cuda", dtype=bf)
    wm = torch.randn(2048, 1024, device="cuda", dtype=bf)
    src = torch.randn(128 * 2**20, device="cuda", dtype=bf)
    dst = torch.empty_like(src)
    table = torch.randn(131072, 2048, device="cuda", dtype=bf)
    idx = torch.randint(0, 131072, (65536,), device="cuda")
    works = {"gemm": lambda: torch.matmul(a, b), "gemm_moe": lambda: torch.matmul(xm, wm),
             "copy": lambda: dst.copy_(src), "gather": lambda: torch.index_select(table, 0, idx)}
    comm = torch.cuda.Stream()
    rows = []
    for cname, coll in colls.items():
        for _ in range(2):
            coll()
        coll_s = events_s(coll, args.iters, True)
        for wname, op in works.items():
            reps, work_s, both_s, k = outlasting_contention(op, events_s(op, args.iters, True), coll, coll_s, comm,
                                                            args.iters)
            row = {"world": world, "device": torch.cuda.get_device_name(), "collective": cname,
                   "coll_MB": round((n * (2 if "bf16" in cname else 4)) / 1e6, 1), "work": wname,
                   "coll_ms": round(coll_s * 1e3, 4), "work_ms": round(work_s * 1e3, 4), "ops": reps,
                   "both_ms": round(both_s * 1e3, 4), "k": round(k, 4), "share": round(k / (1 + k), 4)}
            rows.append(row)
            emit(row)
    write_rows(rows, args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
