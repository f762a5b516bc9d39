"""Device time by kernel kind in a PyTorch profiler (Chrome) trace: GEMM, attention (flash/SDPA, fwd/bwd), NCCL,
other (elementwise, norms, reductions, copies), and the GPU-busy share of the profiled span (union of kernel
intervals on any stream / wall). Used on torchtitan's --profiling traces (benchmarks/real/README.md).

    python benchmarks/real/trace_kinds.py TRACE.json [TRACE.json ...] > kinds.jsonl
"""

from __future__ import annotations

import gzip
import json
import sys


def kind(name: str) -> str:
    n = name.lower()
    if "nccl" in n:
        return "nccl"
    if any(w in n for w in ("flash", "fmha", "attention", "sdpa", "cudnn")):
        return "attention_bwd" if ("bwd" in n or "backward" in n) else "attention_fwd"
    if any(w in n for w in ("gemm", "cutlass", "xmma", "nvjet", "sm90_", "sm80_", "cublas")):
        return "gemm"
    if n.startswith("memcpy") or n.startswith("memset"):
        return "memcpy"
    return "other"


def summarize(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    ev = [e for e in doc.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy",
                                                                                           "gpu_memset")]
    out: dict = {"trace": path, "kernels": len(ev)}
    if not ev:
        return out
    tot: dict[str, float] = {}
    for e in ev:
        k = kind(e.get("name", ""))
        tot[k] = tot.get(k, 0.0) + e["dur"] / 1e6
    iv = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev)
    busy, cur_s, cur_e = 0.0, iv[0][0], iv[0][1]
    for s, t in iv[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            cur_s, cur_e = s, t
        else:
            cur_e = max(cur_e, t)
    busy += cur_e - cur_s
    span = iv[-1][1] - iv[0][0]
    # busy without NCCL: how much of the span the compute streams keep the GPU working
    iv2 = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if kind(e.get("name", "")) != "nccl")
    busy2, cs, ce = 0.0, iv2[0][0], iv2[0][1]
    for s, t in iv2[1:]:
        if s > ce:
            busy2 += ce - cs
            cs, ce = s, t
        else:
            ce = max(ce, t)
    busy2 += ce - cs
    out.update({k: round(v, 4) for k, v in sorted(tot.items())})
    out.update(span_s=round(span / 1e6, 4), busy_s=round(busy / 1e6, 4), compute_busy_s=round(busy2 / 1e6, 4))
    return out


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(json.dumps(summarize(p)), flush=True)
