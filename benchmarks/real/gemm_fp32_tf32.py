"""Measure fp32 (CUDA-core SGEMM) and tf32 (tensor-core) GEMM and attention throughput on one GPU.

What it writes (schema baige-plan/profile-raw/v1, the same GEMM rows as `baige-plan profile`):
  gemm: torch.mm on the shapes of `baige-plan profile` (squares 256..16384 and LLM-like
        (tokens, out, in) shapes), dtypes
          fp32 : float32 with torch.backends.cuda.matmul.allow_tf32 = False (PyTorch's default)
          tf32 : float32 with allow_tf32 = True (TF32 tensor cores)
          bf16 : bfloat16 (reference: puts fp32/tf32 on the basis of the chip file's bf16 curve)
  attention: torch.nn.functional.scaled_dot_product_attention, causal, head dim 128,
        fp32 on the memory-efficient backend (FlashAttention has no fp32 kernel) with
        allow_tf32 False and True, and bf16 on the flash backend (reference). FLOPs counted as the
        cost model does: causal forward 2 * 2*b*h*s*s*d / 2, backward twice that.

Run (torch + CUDA only; no baige-plan import, so it runs on a bare GPU machine):
    python benchmarks/real/gemm_fp32_tf32.py --out gemm_fp32_tf32.raw.json
What was run (2026-11-26; the device tool's $OUT is the output folder):
    python benchmarks/real/gemm_fp32_tf32.py --out $OUT/gemm_fp32_tf32.raw.json
on 1x H100 80GB HBM3 SXM -> gemm_fp32_tf32_h100.raw.json and 1x H200 -> gemm_fp32_tf32_h200.raw.json
(torch 2.11.0+cu130, driver 580.159.04). The chip-file curves are derived from them offline by
gemm_fp32_tf32_curves.py (numpy + baige_plan, no GPU).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repo root: baige_plan (stdlib + numpy here)
from baige_plan.profile.measure import _time_cuda  # noqa: E402  one CUDA-event timing loop for all measurements


def gemm_shapes() -> list[tuple[int, int, int]]:
    """Same list as baige_plan.profile.measure.gemm_shapes(quick=False)."""
    sq = [256, 512, 1024, 2048, 4096, 8192, 16384]
    tokens = [512, 2048, 8192, 16384]
    hidden = [768, 1024, 2048, 4096, 8192]
    shapes = [(m, m, m) for m in sq]
    for t in tokens:
        for h in hidden:
            shapes += [(t, h, h), (t, 4 * h, h), (t, h, 4 * h), (t, 3 * h, h)]
    seen, out = set(), []
    for s in shapes:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def measure_gemm(torch) -> list[dict]:
    out = []
    dev = torch.device("cuda")
    for name, dt, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                           ("bf16", torch.bfloat16, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for m, n, k in gemm_shapes():
            a = torch.randn(m, k, device=dev, dtype=dt)
            b = torch.randn(k, n, device=dev, dtype=dt)
            c = torch.empty(m, n, device=dev, dtype=dt)
            t = _time_cuda(torch, lambda a=a, b=b, c=c: torch.mm(a, b, out=c))
            flops = 2.0 * m * n * k
            out.append({"dtype": name, "m": m, "n": n, "k": k, "flops": flops, "time_s": t,
                        "tflops": flops / t / 1e12})
            print(f"{name} {m}x{n}x{k} {flops / t / 1e12:.1f} TFLOP/s", file=sys.stderr, flush=True)
            del a, b, c
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.cuda.empty_cache()
    return out


def measure_attention(torch) -> list[dict]:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = []
    dev = torch.device("cuda")
    cases = [("fp32", torch.float32, False, SDPBackend.EFFICIENT_ATTENTION),
             ("tf32", torch.float32, True, SDPBackend.EFFICIENT_ATTENTION),
             ("bf16", torch.bfloat16, False, SDPBackend.FLASH_ATTENTION)]
    shapes = [(8, 16, 1024, 128), (4, 32, 2048, 128), (2, 32, 4096, 128), (1, 32, 8192, 128), (4, 16, 2048, 64)]
    for name, dt, tf32, backend in cases:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for b, h, s, d in shapes:
            q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
            go = torch.randn(b, h, s, d, device=dev, dtype=dt)
            try:
                with sdpa_kernel(backend):
                    def fwd(q=q, k=k, v=v):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

                    def fwd_bwd(q=q, k=k, v=v, go=go):
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        torch.autograd.grad(o, (q, k, v), go)

                    t_f = _time_cuda(torch, fwd)
                    t_fb = _time_cuda(torch, fwd_bwd)
            except RuntimeError as e:
                print(f"attention {name} {backend} unavailable: {str(e).splitlines()[0][:160]}", file=sys.stderr)
                break
            flops_f = 2 * 2.0 * b * h * s * s * d / 2   # QK^T and PV, causal half
            t_b = max(t_fb - t_f, 1e-9)
            out.append({"dtype": name, "backend": backend.name, "batch": b, "heads": h, "seq": s, "head_dim": d,
                        "fwd_flops": flops_f, "fwd_s": t_f, "fwd_bwd_s": t_fb,
                        "fwd_tflops": flops_f / t_f / 1e12, "bwd_tflops": 2 * flops_f / t_b / 1e12})
            print(f"attn {name} {backend.name} b{b} h{h} s{s} d{d}: fwd {flops_f / t_f / 1e12:.1f} "
                  f"bwd {2 * flops_f / t_b / 1e12:.1f} TFLOP/s", file=sys.stderr, flush=True)
            del q, k, v, go
    torch.backends.cuda.matmul.allow_tf32 = False
    return out


def device_info(torch) -> dict:
    def smi(q: str) -> str | None:
        try:
            return subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True,
                                  text=True, timeout=30).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return None
    return {"name": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
            "torch": torch.__version__, "cuda": torch.version.cuda, "driver": smi("driver_version"),
            "clocks_max_sm_MHz": smi("clocks.max.sm"), "power_limit": smi("power.limit")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    import torch

    raw = {"schema": "baige-plan/profile-raw/v1",
           "date": _dt.date.today().isoformat(),
           "command": "python " + " ".join(sys.argv),
           "device": device_info(torch)}
    raw["gemm"] = measure_gemm(torch)
    raw["attention"] = measure_attention(torch)
    with open(args.out, "w") as f:
        json.dump(raw, f, indent=1)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
