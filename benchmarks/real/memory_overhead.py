"""Device memory a training process uses outside PyTorch's caching allocator (docs/COST_MODEL.md "Memory
model"): the CUDA context with the kernel libraries loaded, and NCCL's communicator buffers.

Run on the device machine (2 GPUs for the NCCL part):
    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node 2 benchmarks/real/memory_overhead.py --out OUT.yaml
    python3 benchmarks/real/memory_overhead.py --out OUT.yaml            # one GPU: context and kernels only

Every figure is device-wide used memory (nvidia-smi before the process touches the GPU, then
torch.cuda.mem_get_info) minus torch.cuda.memory_reserved(): what the allocator does not hold.
"""

from __future__ import annotations

import argparse
import os
import subprocess

import torch
import torch.nn.functional as F

GIB = float(1 << 30)


def smi_used_gib(index: int) -> float:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", str(index)],
                         capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[0]) / 1024.0


def used_gib() -> float:
    free, total = torch.cuda.mem_get_info()
    return (total - free) / GIB


def outside(idle: float) -> float:
    torch.cuda.synchronize()
    return used_gib() - idle - torch.cuda.memory_reserved() / GIB


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    vis = [v for v in (os.environ.get("CUDA_VISIBLE_DEVICES") or "").split(",") if v.strip().isdigit()]
    phys = int(vis[local]) if local < len(vis) else local
    idle = smi_used_gib(phys)           # before this process creates its context
    torch.cuda.set_device(local)
    torch.empty(1, device="cuda")
    r: dict = {"device": torch.cuda.get_device_name(), "torch": str(torch.__version__), "cuda": str(torch.version.cuda),
               "idle_used_gib": round(idle, 4), "total_gib": round(torch.cuda.mem_get_info()[1] / GIB, 4)}
    r["context_gib"] = round(outside(idle), 4)
    # kernel libraries: cuBLAS(Lt) GEMM forward/backward, flash SDPA forward/backward, fp32 cross-entropy
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    lin = torch.nn.Linear(4096, 4096, bias=False, device="cuda", dtype=torch.bfloat16)
    lin(x).sum().backward()
    q = torch.randn(2, 32, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    logits = torch.randn(4096, 32000, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    F.cross_entropy(logits.float(), torch.randint(0, 32000, (4096,), device="cuda")).backward()
    r["after_kernels_gib"] = round(outside(idle), 4)
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        n = 64 << 20   # 128 MiB of bf16 per collective
        t = torch.ones(n, device="cuda", dtype=torch.bfloat16)
        steps = {}
        dist.all_reduce(t)
        steps["all_reduce"] = outside(idle)
        out = torch.empty(n // world, device="cuda", dtype=torch.bfloat16)
        dist.reduce_scatter_tensor(out, t)
        steps["reduce_scatter"] = outside(idle)
        dist.all_gather_into_tensor(t, out)
        steps["all_gather"] = outside(idle)
        peer = (rank + 1) % world
        ops = [dist.P2POp(dist.isend, out, peer), dist.P2POp(dist.irecv, torch.empty_like(out), (rank - 1) % world)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        steps["send_recv"] = outside(idle)
        dist.all_to_all_single(torch.empty_like(t), t)
        steps["all_to_all"] = outside(idle)
        g2 = dist.new_group(list(range(world)))
        dist.all_reduce(t, group=g2)
        dist.reduce_scatter_tensor(out, t, group=g2)
        dist.all_gather_into_tensor(t, out, group=g2)
        steps["second_communicator_ar_rs_ag"] = outside(idle)
        r["nccl_cumulative_gib"] = {k: round(v, 4) for k, v in steps.items()}
        r["nccl_env"] = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
        r["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
        r["world"] = world
        dist.destroy_process_group()
    import yaml
    path = a.out if world == 1 else a.out.replace(".yaml", f".rank{rank}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(r, f, sort_keys=False)
    print(r, flush=True)


if __name__ == "__main__":
    main()
