"""torchtitan 0.2.2's own MoE module (torchtitan.models.moe.MoE: router, reorderer, torch._grouped_mm experts,
scatter-add combine) timed alone on one GPU, forward + backward, bf16, expert parallelism 1 -- what an MoE layer
of the torchtitan runtime costs on the device beside its attention. Run on the device machine:

  python3 benchmarks/real/tt_moe_layer.py > out.json     (torchtitan 0.2.2 importable; run_torchtitan.sh installs it)

For each shape (OLMoE-1B-7B: dim 2048, 64 experts of 1024, top-8; Qwen3-30B-A3B: 128 of 768, top-8;
Qwen3-235B-A22B's layer: dim 4096, 128 of 1536, top-8) and token
count: `layer_ms` = the module's forward + backward as a first micro-batch (gradients set, not
accumulated), `fwd_ms` its forward alone (CUDA events, median of 20 after 5 warm-up), `gemm_ms` = the
three torch._grouped_mm expert GEMMs forward + backward alone on the same per-expert counts, the router gate GEMM
forward + backward, and the per-kernel split of one profiled iteration (summed ms by kernel name, every kernel;
`fwd_kernels` the forward's).
The router's load is what the untrained router gives on random inputs (as in the real runs), recorded as
max/mean tokens per expert."""

from __future__ import annotations

import json
import statistics
import sys

import torch
from torchtitan.models.moe import MoE, MoEArgs

SHAPES = {"olmoe-1b-7b": (2048, 1024, 64, 8), "qwen3-30b-a3b": (2048, 768, 128, 8),
          "qwen3-235b-a22b": (4096, 1536, 128, 8)}
TOKENS = (4096, 8192, 16384, 32768)


def timed(fn, warm=5, reps=20) -> float:
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def main() -> None:
    dev = torch.device("cuda")
    out = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "rows": []}
    for name, (dim, hid, e, k) in SHAPES.items():
        for t in TOKENS:
            torch.manual_seed(0)
            args = MoEArgs(num_experts=e, num_shared_experts=0, top_k=k, score_func="softmax", route_norm=True,
                           route_scale=1.0, score_before_experts=False)
            moe = MoE(args, dim=dim, hidden_dim=hid).to(dev)
            with torch.no_grad():          # torchtitan calls it under no_grad (train.py init_weights)
                moe.init_weights(0.02, dev)
            moe = moe.to(torch.bfloat16)
            x = torch.randn(1, t, dim, device=dev, dtype=torch.bfloat16, requires_grad=True)
            g = torch.randn(1, t, dim, device=dev, dtype=torch.bfloat16)

            def step():
                moe.zero_grad(set_to_none=True)    # a first micro-batch: gradients written, not accumulated
                x.grad = None
                y = moe(x)
                y.backward(g)

            def fwd():
                moe(x)

            layer_ms = timed(step)
            fwd_ms = timed(fwd)
            with torch.no_grad():
                _, sel, counts = moe.router(x.view(-1, dim), moe.expert_bias)
            counts = counts.float()
            # the grouped GEMMs alone on the same counts (torchtitan's _run_experts_grouped_mm layout)
            offs = torch.cumsum(counts.to(torch.int32), dim=0, dtype=torch.int32)
            rows = int(counts.sum().item())
            xe = torch.randn(rows, dim, device=dev, dtype=torch.bfloat16, requires_grad=True)
            w1 = moe.experts.w1.detach().clone().requires_grad_(True)
            w2 = moe.experts.w2.detach().clone().requires_grad_(True)
            w3 = moe.experts.w3.detach().clone().requires_grad_(True)

            def gemms():
                h = torch.nn.functional.silu(torch._grouped_mm(xe, w1.transpose(-2, -1), offs=offs))
                h = h * torch._grouped_mm(xe, w3.transpose(-2, -1), offs=offs)
                o = torch._grouped_mm(h, w2.transpose(-2, -1), offs=offs)
                o.backward(torch.ones_like(o))

            gemm_ms = timed(gemms)
            gate = moe.router.gate

            def router():
                s = gate(x.view(-1, dim))
                s.backward(torch.ones_like(s))

            router_ms = timed(router)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                step()
                torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof_f:
                fwd()
                torch.cuda.synchronize()
            kf = sorted(((ev.key[:80], ev.count, ev.device_time_total / 1e3) for ev in prof_f.key_averages()
                         if ev.device_time_total > 0), key=lambda r: -r[2])
            ka = sorted(((ev.key[:80], ev.count, ev.device_time_total / 1e3) for ev in prof.key_averages()
                         if ev.device_time_total > 0), key=lambda r: -r[2])
            row = {"model": name, "tokens": t, "layer_ms": round(layer_ms, 3), "gemm_ms": round(gemm_ms, 3),
                   "router_gemm_ms": round(router_ms, 3), "load_max_over_mean": round(float(counts.max() / counts.mean()), 3),
                   "fwd_ms": round(fwd_ms, 3),
                   "kernels": [(n, c, round(ms, 4)) for n, c, ms in ka],
                   "fwd_kernels": [(n, c, round(ms, 4)) for n, c, ms in kf]}
            out["rows"].append(row)
            print(json.dumps({kk: row[kk] for kk in row if "kernels" not in kk}), file=sys.stderr)
            del moe, x, g, xe, w1, w2, w3
            torch.cuda.empty_cache()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
