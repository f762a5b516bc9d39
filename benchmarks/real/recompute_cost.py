"""What full activation recomputation costs in eager PyTorch, against the forward it repeats (1 GPU).

The cost model charges full recomputation one more forward of each layer (cost/estimate.py). This measures it on
the layer shapes of the FSDP corpus rows (LLM Foundry MPT 7-30B: LayerNorm + GeLU MLP 4h; Llama 2 70B: RMSNorm +
SwiGLU, GQA 8), written as those runtimes run them: bf16 parameters (FSDP mixed precision param_dtype bf16),
PyTorch SDPA (flash) causal attention, eager ops, torch.utils.checkpoint non-reentrant around each layer.

Per (shape, micro-batch) it times, with CUDA events, median of REPS after WARMUP:
  fwd        forward of L layers with autograd recording (what training's forward runs)
  fwd_bwd    forward + backward, no checkpointing
  ckpt       forward + backward, each layer checkpointed (its forward runs again in the backward)
and reports recompute = ckpt - fwd_bwd, recompute / fwd, bwd / fwd with bwd = fwd_bwd - fwd.

    python benchmarks/real/recompute_cost.py --out recompute_cost.raw.json
    python benchmarks/real/recompute_cost.py --trace-out recompute_kernels.raw.json   # device time by kernel kind
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SHAPES = {   # name: hidden, ffn, heads, kv_heads, mlp ("gelu": fc1/fc2 4h, "swiglu": gate/up/down), norm
    "mpt-7b": (4096, 16384, 32, 32, "gelu", "layernorm"),
    "mpt-13b": (5120, 20480, 40, 40, "gelu", "layernorm"),
    "mpt-30b": (7168, 28672, 56, 56, "gelu", "layernorm"),
    "llama2-70b": (8192, 28672, 64, 8, "swiglu", "rmsnorm"),
}


class Layer(torch.nn.Module):
    def __init__(self, h: int, ffn: int, heads: int, kv: int, mlp: str, norm: str):
        super().__init__()
        self.h, self.heads, self.kv, self.hd = h, heads, kv, h // heads
        self.mlp, self.norm = mlp, norm
        self.n1 = torch.nn.LayerNorm(h) if norm == "layernorm" else torch.nn.RMSNorm(h)
        self.n2 = torch.nn.LayerNorm(h) if norm == "layernorm" else torch.nn.RMSNorm(h)
        self.qkv = torch.nn.Linear(h, h + 2 * kv * self.hd, bias=False)
        self.o = torch.nn.Linear(h, h, bias=False)
        if mlp == "gelu":
            self.fc1 = torch.nn.Linear(h, ffn, bias=False)
        else:
            self.fc1 = torch.nn.Linear(h, 2 * ffn, bias=False)
        self.fc2 = torch.nn.Linear(ffn, h, bias=False)

    def forward(self, x):   # x: [b, s, h]
        b, s, _ = x.shape
        y = self.qkv(self.n1(x))
        q, k, v = y.split([self.h, self.kv * self.hd, self.kv * self.hd], dim=-1)
        q = q.view(b, s, self.heads, self.hd).transpose(1, 2)
        k = k.view(b, s, self.kv, self.hd).transpose(1, 2)
        v = v.view(b, s, self.kv, self.hd).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.heads)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, self.h))
        z = self.fc1(self.n2(x))
        if self.mlp == "gelu":
            z = F.gelu(z)
        else:
            g, u = z.chunk(2, dim=-1)
            z = F.silu(g) * u
        return x + self.fc2(z)


def _time(fn, warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts)


def _runner(name: str, mb: int, seq: int, layers: int):
    """run(ckpt, backward): one forward (each layer checkpointed when ckpt) of `layers` bf16 layers of shape `name`
    on a [mb, seq, h] input, and its backward when asked (gradients dropped after it)."""
    h, ffn, heads, kv, mlp, norm = SHAPES[name]
    torch.manual_seed(0)
    mods = torch.nn.ModuleList([Layer(h, ffn, heads, kv, mlp, norm) for _ in range(layers)]).cuda().bfloat16()
    x0 = torch.randn(mb, seq, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def run(ckpt: bool, backward: bool):
        x = x0
        for m in mods:
            x = checkpoint(m, x, use_reentrant=False) if ckpt else m(x)
        if backward:
            x.float().sum().backward()
            for p in mods.parameters():
                p.grad = None
            x0.grad = None

    return run


def measure(name: str, mb: int, seq: int, layers: int, warmup: int, reps: int) -> dict:
    run = _runner(name, mb, seq, layers)
    fwd = _time(lambda: run(False, False), warmup, reps)
    fb = _time(lambda: run(False, True), warmup, reps)
    ck = _time(lambda: run(True, True), warmup, reps)
    bwd = fb - fwd
    return {"shape": name, "micro_batch": mb, "seq": seq, "layers": layers, "fwd_s": fwd, "fwd_bwd_s": fb,
            "ckpt_s": ck, "recompute_s": ck - fb, "recompute_over_fwd": (ck - fb) / fwd, "bwd_over_fwd": bwd / fwd}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="recompute_cost.raw.json")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=8)
    a = ap.parse_args()
    rows = []
    for name, mbs in (("mpt-7b", (2, 8)), ("mpt-13b", (2, 8)), ("mpt-30b", (2, 6)), ("llama2-70b", (1, 4))):
        for mb in mbs:
            r = measure(name, mb, a.seq, a.layers, a.warmup, a.reps)
            print(json.dumps({k: round(v, 5) if isinstance(v, float) else v for k, v in r.items()}), flush=True)
            rows.append(r)
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)




def kernel_split(name: str, mb: int, seq: int, layers: int) -> dict:
    """Device seconds of one forward + backward (no checkpointing) by kernel kind, from torch.profiler:
    GEMM (cuBLAS/CUTLASS/nvjet), attention (flash/SDPA), other (every elementwise, norm, reduction, copy)."""
    from torch.profiler import ProfilerActivity, profile
    run = _runner(name, mb, seq, layers)
    for _ in range(3):
        run(False, True)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            run(False, True)
        torch.cuda.synchronize()
    kinds = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
        if not t or e.key.startswith("ProfilerStep"):
            continue
        k = e.key.lower()
        if any(w in k for w in ("flash", "fmha", "attention", "sdpa", "softmax_bwd")):
            kinds["attention"] += t
        elif any(w in k for w in ("gemm", "cutlass", "xmma", "nvjet", "sm90_", "sm80_", "cublas")):
            kinds["gemm"] += t
        else:
            kinds["other"] += t
    # microseconds over 3 steps -> seconds per step; the (tokens x layers x hidden) the other kernels act on
    out = {k: v / 3 / 1e6 for k, v in kinds.items()}
    out.update(shape=name, micro_batch=mb, seq=seq, layers=layers, token_layer_hidden=mb * seq * layers * SHAPES[name][0])
    return out


def main_trace() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace-out", required=True)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=2)
    a, _ = ap.parse_known_args()
    rows = []
    for name, mbs in (("mpt-7b", (2, 8)), ("mpt-13b", (2, 8)), ("mpt-30b", (2, 6)), ("llama2-70b", (1, 4))):
        for mb in mbs:
            r = kernel_split(name, mb, a.seq, a.layers)
            print(json.dumps({k: round(v, 6) if isinstance(v, float) else v for k, v in r.items()}), flush=True)
            rows.append(r)
    with open(a.trace_out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    import sys
    main_trace() if "--trace-out" in sys.argv else main()
