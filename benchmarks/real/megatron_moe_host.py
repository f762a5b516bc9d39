"""Host time of Megatron-core's MoE plumbing per layer, on the GPUs of one host (one process per GPU).

What cost/moe.py `moe_layer_launches` prices as launch counts x execution.LaunchHost rates -- the router (gating
GEMM, softmax / top-k, force-balance random logits, aux loss and its tracker), the dispatcher's preprocess (count
sums, the count all-gather, the device->host copies and the sync), the permutation, the token and probability
all-to-alls, the sort by local expert, their inverses and the combine -- is run here by Megatron-core itself
(MoELayer, MoEAlltoAllTokenDispatcher, TopKRouter), so the Python around the kernels is Megatron's own. The experts
are replaced by a stub that applies the routing probabilities (one multiply: the probabilities keep their gradient,
so the router's backward runs as in training); expert GEMMs are priced separately (LaunchHost.gemm_s, measured).

No Transformer Engine on the device machine: the permutation and router run unfused (moe_permute_fusion and
moe_router_fusion need TE), so the kernel counts differ from a TE run; what transfers is host seconds per launched
kernel, which the profiler's kernel count gives. The same processes also time a plain eager autograd chain
(elementwise ops, 64 tokens: host-bound) so the host's speed is known: the ratio of the two rates is what does not
depend on the machine.

  torchrun --nproc-per-node 4 benchmarks/real/megatron_moe_host.py --out $OUT/megatron_moe_host.raw.json
(PYTHONPATH must hold megatron-core 0.19.2's `megatron/`: benchmarks/real/run_megatron_local.sh says where it comes
from.)
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

HIDDEN = 2048             # Qwen3-30B-A3B (HF config): hidden 2048, 128 experts top-8, expert ffn 768
EXPERTS = 128
TOP_K = 8
MOE_FFN = 768


class ProbStub(torch.nn.Module):
    """Experts replaced by the probability multiply the real experts do (SequentialMLP / TEGroupedMLP apply
    permuted_probs): the dispatcher's and router's autograd stay whole, the expert GEMMs are left out."""

    def forward(self, x, tokens_per_expert, probs, **_):
        return x * probs.unsqueeze(-1).to(x.dtype), None


def build(layers: int, ep: int, force: bool):
    from megatron.core.models.gpt.moe_module_specs import get_moe_module_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    cfg = TransformerConfig(num_layers=layers, hidden_size=HIDDEN, num_attention_heads=32, ffn_hidden_size=6144,
                            num_moe_experts=EXPERTS, moe_router_topk=TOP_K, moe_ffn_hidden_size=MOE_FFN,
                            moe_token_dispatcher_type="alltoall", moe_router_load_balancing_type="aux_loss",
                            moe_aux_loss_coeff=1e-3, moe_router_force_load_balancing=force, add_bias_linear=False,
                            gated_linear_unit=True, activation_func=F.silu, bf16=True, params_dtype=torch.bfloat16,
                            expert_model_parallel_size=ep, moe_grouped_gemm=False)
    spec = get_moe_module_spec(use_te=False, num_experts=EXPERTS, moe_grouped_gemm=False)
    mods = []
    for i in range(layers):
        m = spec(config=cfg, layer_number=i + 1).cuda()
        m.experts = ProbStub()
        mods.append(m)
    return mods


def run_layers(mods, x):
    h = x
    for m in mods:
        h, _ = m(h)
    return h


def kernels_of(fn) -> dict:
    """Device activities launched by fn(): kernels (NCCL ones apart), memcpy and memset, from the profiler."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    n = {"kernels": 0, "nccl": 0, "memcpy": 0, "memset": 0}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        name = e.name.lower()
        if "nccl" in name:
            n["nccl"] += 1
        elif "memcpy" in name:
            n["memcpy"] += 1
        elif "memset" in name:
            n["memset"] += 1
        else:
            n["kernels"] += 1
    return n


def time_moe(mods, tokens: int, iters: int) -> dict:
    x0 = torch.randn(tokens, 1, HIDDEN, device="cuda", dtype=torch.bfloat16)
    fwd, bwd = [], []
    for it in range(iters + 3):
        x = x0.clone().requires_grad_(True)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        y = run_layers(mods, x)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        y.float().sum().backward()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if it >= 3:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    # device time of one pass: CUDA events around the same work, device busy only (host far ahead is not possible
    # here: the dispatcher syncs), so this is wall on the device clock, reported for the host-bound check
    x = x0.clone().requires_grad_(True)
    k_f = kernels_of(lambda: run_layers(mods, x))
    x = x0.clone().requires_grad_(True)
    y = run_layers(mods, x)
    torch.cuda.synchronize()
    k_b = kernels_of(lambda: y.float().sum().backward())
    fwd.sort()
    bwd.sort()
    return {"tokens": tokens, "layers": len(mods), "fwd_s_median": fwd[len(fwd) // 2], "bwd_s_median": bwd[len(bwd) // 2],
            "fwd_s": fwd, "bwd_s": bwd, "launches_fwd": k_f, "launches_bwd": k_b}


def time_eager_chain(ops: int, iters: int) -> dict:
    """A plain autograd chain of elementwise ops at 64 x 2048 bf16 (device work negligible): host seconds per
    launched kernel, forward + backward."""
    x0 = torch.randn(64, HIDDEN, device="cuda", dtype=torch.bfloat16)

    def step():
        x = x0.clone().requires_grad_(True)
        h = x
        for _ in range(ops):
            h = F.silu(h) * 1.001 + 0.01
        h.float().sum().backward()

    ts = []
    for it in range(iters + 3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        if it >= 3:
            ts.append(time.perf_counter() - t0)
    k = kernels_of(step)
    ts.sort()
    n = k["kernels"] + k["memcpy"] + k["memset"]
    return {"ops": ops, "step_s_median": ts[len(ts) // 2], "launches": k, "s_per_launch": ts[len(ts) // 2] / n}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--tokens", default="512,4096")
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    res: dict = {"world": world, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                 "cpu_count": os.cpu_count(), "runs": []}
    for ep in sorted({world, max(1, world // 2)}, reverse=True):
        ps.destroy_model_parallel()
        ps.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                                     expert_model_parallel_size=ep)
        model_parallel_cuda_manual_seed(1234)
        mods = build(args.layers, ep, force=True)
        for t in [int(x) for x in args.tokens.split(",")]:
            r = time_moe(mods, t, args.iters)
            r["ep"] = ep
            r["local_experts"] = EXPERTS // ep
            res["runs"].append(r)
        del mods
    res["eager_chain"] = time_eager_chain(100, args.iters)
    got = [None] * world
    dist.all_gather_object(got, res)
    if rank == 0:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"ranks": got}, f, indent=1)
        for r in got[0]["runs"]:
            slow_f = max(g["runs"][got[0]["runs"].index(r)]["fwd_s_median"] for g in got)
            slow_b = max(g["runs"][got[0]["runs"].index(r)]["bwd_s_median"] for g in got)
            lf, lb = r["launches_fwd"], r["launches_bwd"]
            print(f"ep {r['ep']} tokens {r['tokens']}: per layer fwd {slow_f / r['layers'] * 1e6:.0f} us "
                  f"bwd {slow_b / r['layers'] * 1e6:.0f} us (slowest rank); launches per layer fwd "
                  f"{ {k: v / r['layers'] for k, v in lf.items()} } bwd { {k: v / r['layers'] for k, v in lb.items()} }")
        ec = [g["eager_chain"]["s_per_launch"] for g in got]
        print(f"eager chain: {[round(x * 1e6, 2) for x in ec]} us per launch (per rank)")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
