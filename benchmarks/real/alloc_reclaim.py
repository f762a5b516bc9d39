"""How much of the caching allocator's reserved-over-allocated memory a training step really needs
(docs/COST_MODEL.md "Memory model", fit decision).

PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::malloc) answers a
failed reservation -- cudaMalloc out of memory, or the cap of torch.cuda.set_per_process_memory_fraction --
by freeing cached blocks (release_available_cached_blocks, then release_cached_blocks: every segment with
no live block) and retrying; only free space inside segments that still hold live blocks cannot be given
back. So the memory a step needs is less than its reserved peak. This script measures it: each trial is a
fresh process that runs the same steps with its reserved memory capped at allocated_peak x (1 + x), x from
--fractions; the smallest passing x bounds the unreclaimable fragmentation.

Patterns (one GPU, the harness's GPT blocks, bf16 autocast over fp32 parameters, fused AdamW):
  single:      a whole model, grad-accumulation micro-batches (as harness --strategy single)
  pipe:        pipeline rank 0 of --pp stages, 1F1B order (Megatron schedules.py: pp - 1 warm-up forwards,
               then one forward / one backward, then the cool-down), its --layers / --pp layers; each
               later stage's input is a received buffer (a new tensor), each backward's output gradient too
  recompute:   `single` with every block checkpointed (torch.utils.checkpoint, non-reentrant)
  interleaved: the same rank with --vpp model chunks (Megatron interleaved order: warm-up
               2 (pp - 1) + (vpp - 1) pp chunk-micro-batches, chunk id (k // pp) % vpp forward,
               vpp - 1 - (k // pp) % vpp backward)

Run (one GPU):  python3 benchmarks/real/alloc_reclaim.py --out OUT.yaml
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

GIB = float(1 << 30)

PATTERNS = {
    # name: (pattern, layers on the rank's model, pp, vpp, micro-batch, micro-batches, hidden, heads)
    "single_h2048_l24_mb1_ga4": ("single", 24, 1, 1, 1, 4, 2048, 16),
    "pipe_pp4_h2048_l24_mb2_m8": ("pipe", 24, 4, 1, 2, 8, 2048, 16),
    "interleaved_pp4_v3_h2048_l24_mb2_m8": ("interleaved", 24, 4, 3, 2, 8, 2048, 16),
    # full recompute (every block checkpointed), the harness's h100_gpt350m_single_mb4_ac shape (20.6 % slack there)
    "recompute_h1024_l24_mb4_ga1": ("recompute", 24, 1, 1, 4, 1, 1024, 16),
    # ... and h100_gpt1p3b_single_mb4_ac's (18.6 % slack there)
    "recompute_h2048_l24_mb4_ga1": ("recompute", 24, 1, 1, 4, 1, 2048, 16),
}


def schedule(pp: int, vpp: int, m: int) -> list[tuple[str, int, int]]:
    """Rank 0's (kind, chunk, micro-batch) order, Megatron's rule (pipeline_parallel/schedules.py)."""
    total = m * vpp
    if pp == 1:
        return [op for i in range(m) for op in (("F", 0, i), ("B", 0, i))]
    warm = min(total, (pp - 1) if vpp == 1 else 2 * (pp - 1) + (vpp - 1) * pp)

    def mb(k):
        return (k // (pp * vpp)) * pp + k % pp

    def fchunk(k):
        return (k // pp) % vpp

    def bchunk(k):
        return vpp - 1 - (k // pp) % vpp

    ops = [("F", fchunk(k), mb(k)) for k in range(warm)]
    f, b = warm, 0
    while f < total:
        ops.append(("F", fchunk(f), mb(f)))
        f += 1
        ops.append(("B", bchunk(b), mb(b)))
        b += 1
    while b < total:
        ops.append(("B", bchunk(b), mb(b)))
        b += 1
    return ops


def trial(name: str, cap_gib: float | None, steps: int, device: str = "cuda:0") -> dict:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import config as C
    import harness as H

    pat, layers, pp, vpp, mbs, m, h, heads = PATTERNS[name]
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.set_device(dev)
        torch.empty(1, device=dev)
        if cap_gib is not None:
            torch.cuda.set_per_process_memory_fraction(cap_gib * GIB / torch.cuda.mem_get_info()[1], dev)
    cfg = C.ModelConfig(name=name, layers=layers, hidden=h, heads=heads, ffn_hidden=4 * h, vocab=50304, seq_len=2048)
    GPT = H._build_modules(torch, nn, F, None)
    per = layers // pp // vpp
    with dev:
        whole = pat in ("single", "recompute")
        chunks = [GPT(cfg, layers if whole else per, first=(c == 0), last=whole, tie=False,
                      recompute=pat == "recompute") for c in range(vpp)]
    params = [p for c in chunks for p in c.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-4, fused=cuda)
    g = torch.Generator(device=dev)
    g.manual_seed(0)
    x = torch.randint(0, cfg.vocab, (m, mbs, cfg.seq_len), device=dev, generator=g)
    y = torch.randint(0, cfg.vocab, (m, mbs, cfg.seq_len), device=dev, generator=g)

    def step():
        if pat in ("single", "recompute"):
            for i in range(m):
                loss = chunks[0].loss(chunks[0](x[i]), y[i]) / m
                loss.backward()
        else:
            outs = {}
            for kind, c, i in schedule(pp, vpp, m):
                if kind == "F":
                    if c == 0:
                        inp = x[i]
                    else:            # received from the previous stage: a fresh buffer
                        inp = torch.randn(mbs, cfg.seq_len, h, device=dev, dtype=torch.float32, requires_grad=True)
                    outs[(c, i)] = chunks[c](inp)
                else:
                    out = outs.pop((c, i))
                    out.backward(torch.randn_like(out))   # the received output gradient
                    del out
        opt.step()
        opt.zero_grad(set_to_none=True)

    res = {"name": name, "cap_gib": cap_gib, "ok": True}
    try:
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize()
    except torch.OutOfMemoryError as e:
        res["ok"] = False
        res["error"] = str(e).splitlines()[0][:200]
    if cuda:
        st = torch.cuda.memory_stats(dev)
        res.update(allocated_peak_gib=st["allocated_bytes.all.peak"] / GIB,
                   reserved_peak_gib=st["reserved_bytes.all.peak"] / GIB,
                   num_alloc_retries=st.get("num_alloc_retries", 0), num_ooms=st.get("num_ooms", 0),
                   expandable_segments="expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--trial")
    ap.add_argument("--cap-gib", type=float)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--fractions", default="0.01,0.03")
    ap.add_argument("--patterns", default=",".join(PATTERNS))
    ap.add_argument("--expandable", action="store_true", help="also run each pattern under expandable_segments:True")
    a = ap.parse_args()
    if a.trial:
        print(json.dumps(trial(a.trial, a.cap_gib, a.steps)), flush=True)
        return 0
    rows = []
    envs = [dict(os.environ)]
    if a.expandable:
        envs.append({**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})

    def run(name, cap, env):
        t0 = time.time()
        p = subprocess.run([sys.executable, __file__, "--trial", name, "--steps", str(a.steps)]
                           + (["--cap-gib", f"{cap:.4f}"] if cap else []), capture_output=True, text=True, env=env)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        r = json.loads(lines[-1]) if lines else {"name": name, "cap_gib": cap, "ok": False,
                                                 "error": (p.stderr.strip().splitlines() or ["?"])[-1][:200]}
        r["wall_s"] = round(time.time() - t0, 1)
        print(json.dumps(r), flush=True)
        return r

    for env in envs:
        for name in a.patterns.split(","):
            base = run(name, None, env)
            rows.append(base)
            if not base.get("ok"):
                continue
            for fr in (float(v) for v in a.fractions.split(",")):
                r = run(name, base["allocated_peak_gib"] * (1 + fr), env)
                r["cap_over_uncapped_allocated"] = fr
                rows.append(r)
    if a.out:
        import yaml
        with open(a.out, "w") as f:
            yaml.safe_dump({"script": "benchmarks/real/alloc_reclaim.py", "rows": rows}, f, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
