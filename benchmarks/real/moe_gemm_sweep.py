"""Expert GEMMs at small per-expert sizes, token permutation and routing on one GPU (bf16).

What it measures, per expert shape (hidden h, fc1 width n1 = up*ffn, fc2 input width f) and tokens per
expert m (the per-expert GEMM M dimension: tokens routed to that expert), with E local experts:
  dense   : one torch.mm over all E*m tokens (the same FLOPs as one GEMM: what a dense MLP would get)
  loop    : E torch.mm calls, one per expert (Megatron SequentialMLP; the baige-plan harness's loop)
  grouped : one torch._grouped_mm over the E experts (CUTLASS grouped GEMM, PyTorch >= 2.8, sm90)
for the forward fc1 (m x h -> n1) and fc2 (m x f -> h) GEMMs and the weight-gradient GEMM of fc1
(h x m @ m x n1: the reduction runs over the expert's m tokens). GPU time by CUDA events (median);
the host time to issue one launch (wall clock of a loop of tiny launches, GPU idle).
Token permutation (Megatron moe_utils.permute: index_select of the N*k (token, choice) rows) and
unpermutation (index_add back to N rows) as effective bytes/s against a device-to-device copy;
router softmax + top-k over N x E fp32 logits.

Run (torch + CUDA only; no baige-plan import, so it runs on a bare GPU machine):
    python benchmarks/real/moe_gemm_sweep.py --out $OUT/moe_gemm_sweep.raw.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repo root: baige_plan (stdlib + numpy here)
from baige_plan.profile.measure import _time_cuda  # noqa: E402  one CUDA-event timing loop for all measurements

SHAPES = {   # name: (hidden, fc1 out width = up * expert_ffn, fc2 in width = expert_ffn, experts local)
    "harness-moe-350m-8e": (1024, 2048, 2048, 8),   # GeLU, 8 experts of 2048
    "qwen3-30b-a3b": (2048, 1536, 768, 16),        # SwiGLU 768, 128 experts (16 local at ep 8)
    "gpt-oss-120b": (2880, 5760, 2880, 16),        # SwiGLU 2880, 128 experts (16 local at ep 8)
    "mixtral-8x7b": (4096, 28672, 14336, 8),       # SwiGLU 14336, 8 experts
}
MS = [64, 128, 256, 512, 1024, 2048, 4096, 8192]


def _time(torch, fn) -> float:
    """Median seconds per call: 7 repeats of a ~10 ms loop (at most 200 calls)."""
    return _time_cuda(torch, fn, target_s=0.01, repeats=7, max_reps=200)

def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-flops", type=float, default=4e12, help="skip a point whose E-expert GEMM exceeds this")
    a = ap.parse_args()
    import torch
    torch.manual_seed(0)
    dev = "cuda"
    bf = torch.bfloat16
    props = torch.cuda.get_device_properties(0)
    rows, errors = [], []

    def grouped(x, w, offs):
        return torch._grouped_mm(x, w, offs=offs)

    for name, (h, n1, f, E) in SHAPES.items():
        w1 = torch.randn(E, n1, h, device=dev, dtype=bf).transpose(-2, -1)    # (E, h, n1), column-major
        w2 = torch.randn(E, h, f, device=dev, dtype=bf).transpose(-2, -1)     # (E, f, h)
        for m in MS:
            if 2.0 * E * m * n1 * h > a.max_flops:
                continue
            x1 = torch.randn(E * m, h, device=dev, dtype=bf)
            x2 = torch.randn(E * m, f, device=dev, dtype=bf)
            dy = torch.randn(E * m, n1, device=dev, dtype=bf)
            offs = torch.arange(1, E + 1, device=dev, dtype=torch.int32) * m
            for gemm, x, w, k, n in (("fc1", x1, w1, h, n1), ("fc2", x2, w2, f, h)):
                xs = list(x.split(m))
                ws = [w[i] for i in range(E)]
                wd = w[0]
                flops = 2.0 * E * m * n * k
                r = {"shape": name, "gemm": gemm, "m": m, "k": k, "n": n, "experts": E, "flops": flops}
                r["dense_s"] = _time(torch, lambda x=x, wd=wd: torch.mm(x, wd))
                r["loop_s"] = _time(torch, lambda xs=xs, ws=ws: [torch.mm(xi, wi) for xi, wi in zip(xs, ws, strict=True)])
                try:
                    r["grouped_s"] = _time(torch, lambda x=x, w=w, o=offs: grouped(x, w, o))
                except Exception as ex:   # noqa: BLE001 - record and go on
                    errors.append(f"{name} {gemm} m={m} grouped: {type(ex).__name__}: {str(ex)[:200]}")
                rows.append(r)
            # weight gradient of fc1: dW_e = x_e^T (h x m) @ dy_e (m x n1), reduction over m
            xs, dys = list(x1.split(m)), list(dy.split(m))
            flops = 2.0 * E * m * n1 * h
            r = {"shape": name, "gemm": "fc1_wgrad", "m": m, "k": m, "n": n1, "experts": E, "flops": flops}
            xt = x1.t()
            r["dense_s"] = _time(torch, lambda xt=xt, dy=dy: torch.mm(xt, dy))
            r["loop_s"] = _time(torch, lambda xs=xs, dys=dys: [torch.mm(xi.t(), di)
                                                                     for xi, di in zip(xs, dys, strict=True)])
            try:
                r["grouped_s"] = _time(torch, lambda xt=xt, dy=dy, o=offs: grouped(xt, dy.t().contiguous().t(), o))
            except Exception as ex:   # noqa: BLE001
                errors.append(f"{name} wgrad m={m} grouped: {type(ex).__name__}: {str(ex)[:200]}")
            rows.append(r)
            del x1, x2, dy
        del w1, w2
        torch.cuda.empty_cache()

    # host time of one launch: a loop of tiny GEMMs, wall clock / launches (GPU never the bottleneck)
    t = torch.randn(16, 16, device=dev, dtype=bf)
    for _ in range(100):
        torch.mm(t, t)
    torch.cuda.synchronize()
    n_l = 5000
    t0 = time.perf_counter()
    for _ in range(n_l):
        torch.mm(t, t)
    host_mm = (time.perf_counter() - t0) / n_l
    torch.cuda.synchronize()

    # device-to-device copy (bytes read + written) and permutation traffic
    big = torch.empty(2**28, device=dev, dtype=torch.uint8)
    big2 = torch.empty_like(big)
    copy_s = _time(torch, lambda a=big, b=big2: b.copy_(a))
    copy_Bps = 2 * big.numel() / copy_s
    del big, big2
    perm = []
    for N, k, h, E in ((16384, 8, 2048, 128), (8192, 2, 1024, 8), (16384, 4, 2880, 128)):
        x = torch.randn(N, h, device=dev, dtype=bf)
        idx = torch.randint(0, E, (N, k), device=dev)
        order = torch.argsort(idx.reshape(-1), stable=True)
        rows_idx = order // k
        gather_s = _time(torch, lambda x=x, i=rows_idx: x.index_select(0, i))
        y = torch.randn(N * k, h, device=dev, dtype=bf)
        out = torch.zeros(N, h, device=dev, dtype=bf)
        scatter_s = _time(torch, lambda o=out, i=rows_idx, y=y: o.index_add_(0, i, y))
        logits = torch.randn(N, E, device=dev, dtype=torch.float32)
        router_s = _time(torch, lambda lg=logits, k=k: torch.softmax(lg, -1).topk(k, -1))
        gb = 2 * N * k * h * 2       # read + write N*k rows of h bf16
        sb = N * k * h * 2 + 2 * N * h * 2
        perm.append({"tokens": N, "top_k": k, "hidden": h, "experts": E, "gather_s": gather_s, "gather_bytes": gb,
                     "gather_Bps": gb / gather_s, "index_add_s": scatter_s, "index_add_bytes": sb,
                     "index_add_Bps": sb / scatter_s, "router_softmax_topk_s": router_s,
                     "router_bytes": N * E * 4 * 3})
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:   # noqa: BLE001
        smi = ""
    doc = {"schema": "baige-plan/moe-gemm-sweep/v1", "device": props.name, "nvidia_smi": smi,
           "torch": torch.__version__, "sms": props.multi_processor_count,
           "date": time.strftime("%Y-%m-%d"), "host_launch_s_per_mm": host_mm, "copy_Bps": copy_Bps,
           "gemm": rows, "permute": perm, "errors": errors}
    with open(a.out, "w") as fh:
        json.dump(doc, fh, indent=1)
    print(f"{props.name} torch {torch.__version__} host launch {host_mm * 1e6:.1f} us/mm, copy {copy_Bps / 1e9:.0f} GB/s")
    print(f"{'shape':22s} {'gemm':9s} {'m':>5s} {'dense TF':>9s} {'loop TF':>8s} {'grp TF':>8s}")
    for r in rows:
        def tf(key, r=r):
            return r["flops"] / r[key] / 1e12 if key in r else float("nan")
        print(f"{r['shape']:22s} {r['gemm']:9s} {r['m']:5d} {tf('dense_s'):9.0f} {tf('loop_s'):8.0f} {tf('grouped_s'):8.0f}")
    for p in perm:
        print(p)
    for e in errors[:10]:
        print("ERR", e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
