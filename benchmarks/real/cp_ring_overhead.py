"""What PyTorch's context-parallel ring attention costs beyond the attention it computes (issue 16, CP mechanism).

torchtitan runs context parallelism through torch.distributed.tensor.experimental.context_parallel: inside the
context, F.scaled_dot_product_attention is replaced by a ring attention (torch/distributed/tensor/experimental/
_context_parallel/_attention.py `_templated_ring_attention`, rotate method all-gather, round-robin load balance) that
runs one SDPA launch per ring step on a part of the rank's work, merges the step outputs in fp32, and in the backward
accumulates dQ / dK / dV in fp32 and passes the dK/dV partials around the ring by all-to-all.

Per CP rank, one attention layer (batch b, heads h, head dim d, local sequence s/cp), forward + backward, timed three
ways on `cp` GPUs (torchrun --nproc_per_node cp):
  full_s:    SDPA (flash backend, causal) over the whole sequence s on one GPU, divided by cp: the rank's share of the
             attention as one launch (what the cost model charges for it);
  ring_s:    the ring attention under context_parallel, device time per iteration (CUDA events over N iterations
             issued back to back; bounded below by the host's issue time);
  host_s:    the host time to issue one iteration while the GPU is kept busy (torch.cuda._sleep ahead), i.e. the
             Python + dispatch cost of the ring attention's ops.
Prints one JSON line per shape on rank 0 and writes them to --out.

    torchrun --standalone --nproc_per_node 2 benchmarks/real/cp_ring_overhead.py --out cp_ring_h100x2.json
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial

import torch
import torch.distributed as dist
import torch.nn.functional as F
from gpu_timing import emit, events_s, write_rows


def _fwd_bwd(q, k, v, g):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.backward(g)


def _tensors(b: int, h: int, seq: int, d: int, dt) -> tuple:
    q, k, v = (torch.randn(b, h, seq, d, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
    return q, k, v, torch.randn(b, h, seq, d, device="cuda", dtype=dt)


def _kernels(fn) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(e.count for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA)


def _host_s(fn, iters: int) -> float:
    torch.cuda.synchronize()
    torch.cuda._sleep(int(2e9))          # a few hundred ms of GPU work ahead: the host issues without waiting
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    host = (time.perf_counter() - t) / iters
    torch.cuda.synchronize()
    return host


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="cp_ring.json")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head-dim", type=int, default=128)
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, cp = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    try:
        from torch.distributed.tensor.experimental._context_parallel._attention import set_rotate_method
    except ImportError:
        from torch.distributed.tensor.experimental._attention import set_rotate_method
    from torch.nn.attention import SDPBackend, sdpa_kernel
    set_rotate_method("allgather")      # torchtitan's default (parallelisms: context_parallel_rotate_method)
    mesh = init_device_mesh("cuda", (cp,), mesh_dim_names=("cp",))
    h, d, dt = args.heads, args.head_dim, torch.bfloat16
    rows = []
    for b, s_local in ((1, 1024), (1, 2048), (1, 4096), (1, 8192), (4, 2048)):
        s = s_local * cp
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            full_step = partial(_fwd_bwd, *_tensors(b, h, s, d, dt))
            for _ in range(3):
                full_step()
            full = events_s(full_step, args.iters) / cp
            del full_step
            step = partial(_fwd_bwd, *_tensors(b, h, s_local, d, dt))
            # the inputs are already the rank's shard; context_parallel needs one buffer to shard (torchtitan passes
            # the token ids, labels and RoPE table): a dummy one
            dummy = torch.zeros(2 * cp * 8, device="cuda")
            with context_parallel(mesh, buffers=[dummy], buffer_seq_dims=[0], no_restore_buffers={dummy}):
                for _ in range(3):
                    step()
                ring = events_s(step, args.iters)
                host = _host_s(step, args.iters)
                kernels = _kernels(step)
            kernels_local = _kernels(step)
        row = {"cp": cp, "b": b, "s_local": s_local, "heads": h, "head_dim": d, "full_share_s": round(full, 7),
               "ring_s": round(ring, 7), "host_s": round(host, 7), "kernels_ring": kernels,
               "kernels_local_sdpa": kernels_local, "q_elems": b * h * s_local * d,
               "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
        t = torch.tensor([ring, host], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        row["ring_s_max_rank"], row["host_s_max_rank"] = round(t[0].item(), 7), round(t[1].item(), 7)
        emit(row)
        rows.append(row)
    write_rows(rows, args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
