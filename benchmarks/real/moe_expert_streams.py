"""Expert GEMMs as the MoE runtimes launch them, forward and backward, at small per-expert sizes (one GPU, bf16).

moe_gemm_sweep.py measured the forward of one serial torch.mm per expert and of torch._grouped_mm. This adds
what the training runtimes actually run, forward AND backward:
  loop     : one torch.mm per expert on the current stream (Megatron SequentialMLP, eager loops);
  streams4 : one torch.mm per expert spread over 4 side streams (expert i on stream i % 4), joined by events:
             Transformer Engine's GroupedLinear on Hopper (TE 2.x: te_general_grouped_gemm ->
             nvte_multi_stream_cublas_gemm, "for now, we only have multi-stream cublas backend";
             nvte_get_num_compute_streams() = 4), i.e. Megatron --moe-grouped-gemm with TEGroupedMLP;
  grouped  : torch._grouped_mm (CUTLASS grouped GEMM; torchtitan, PyTorch >= 2.8), its backward through autograd
             (dgrad: grouped over M; wgrad: grouped over K = the expert's tokens).
for fc1 (m x h -> n1) of E local experts with m tokens each: forward, dgrad (m x n1 @ n1 x h) and wgrad
(h x m @ m x n1). GPU time by CUDA events (median of repeats).
Also: unpermutation as an atomic index_add (scatter of N*k rows into N) against the gather + weighted k-sum that
Megatron/TE's fused unpermute runs, and the device idle time one host<->device synchronisation (`.tolist()` of a
device tensor, as Megatron's dropless alltoall dispatcher does once per MoE layer) costs a queue of small kernels.

    python benchmarks/real/moe_expert_streams.py --out $OUT/moe_expert_streams.raw.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repo root: baige_plan
from baige_plan.profile.measure import _time_cuda  # noqa: E402  one CUDA-event timing loop for all measurements

SHAPES = {   # name: (hidden h, fc1 out width n1 = up * expert_ffn)
    "qwen3-30b-a3b": (2048, 1536),
    "gpt-oss-120b": (2880, 5760),
    "harness-moe-350m-8e": (1024, 2048),
}
POINTS = {   # name: [(E local experts, m tokens per expert)]
    "qwen3-30b-a3b": [(16, m) for m in (128, 256, 512, 1024, 2048, 4096, 8192)] + [(128, m) for m in (64, 128, 256, 512, 1024)],
    "gpt-oss-120b": [(16, m) for m in (256, 1024, 4096)],
    "harness-moe-350m-8e": [(8, m) for m in (512, 2048, 8192)],
}
STREAMS = 4


def _time(torch, fn) -> float:
    """Median seconds of fn() on the device: profile/measure.py's CUDA-event loop, sized to ~4 ms."""
    return _time_cuda(torch, fn, target_s=0.004, repeats=5, warmup=2, max_reps=100)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    torch.manual_seed(0)
    dev, bf = "cuda", torch.bfloat16
    side = [torch.cuda.Stream() for _ in range(STREAMS)]
    rows, errors = [], []

    def streams4(pairs):
        """TE-style multi-stream: side streams wait for the current one, expert i runs on side[i % 4], then
        the current stream waits for every side stream (nvte_multi_stream_cublas_gemm)."""
        cur = torch.cuda.current_stream()
        ev = cur.record_event()
        for s in side:
            s.wait_event(ev)
        for i, (a_, b_) in enumerate(pairs):
            with torch.cuda.stream(side[i % STREAMS]):
                torch.mm(a_, b_)
        for s in side:
            cur.wait_stream(s)

    for name, (h, n1) in SHAPES.items():
        for E, m in POINTS[name]:
            x = torch.randn(E * m, h, device=dev, dtype=bf)
            dy = torch.randn(E * m, n1, device=dev, dtype=bf)
            w = torch.randn(E, n1, h, device=dev, dtype=bf).transpose(-2, -1)   # (E, h, n1) as grouped_mm wants
            offs = torch.arange(1, E + 1, device=dev, dtype=torch.int32) * m
            xs, dys = list(x.split(m)), list(dy.split(m))
            ws = [w[i] for i in range(E)]
            wts = [wi.t() for wi in ws]
            fwd = list(zip(xs, ws, strict=True))
            dgr = list(zip(dys, wts, strict=True))
            wgr = [(xi.t(), di) for xi, di in zip(xs, dys, strict=True)]
            r = {"shape": name, "h": h, "n1": n1, "experts": E, "m": m, "flops_per_gemm_set": 2.0 * E * m * n1 * h}
            for tag, pairs in (("fwd", fwd), ("dgrad", dgr), ("wgrad", wgr)):
                r[f"loop_{tag}_s"] = _time(torch, lambda p=pairs: [torch.mm(a_, b_) for a_, b_ in p])
                r[f"streams4_{tag}_s"] = _time(torch, lambda p=pairs: streams4(p))
                # the same launches captured in a CUDA graph and replayed: device time without the Python
                # launch cost (TE issues its per-expert cuBLAS calls from C++, not from a Python loop)
                for kind, fn in (("loop", lambda p=pairs: [torch.mm(a_, b_) for a_, b_ in p]),
                                 ("streams4", lambda p=pairs: streams4(p))):
                    try:
                        fn()
                        torch.cuda.synchronize()
                        g = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(g):
                            fn()
                        r[f"{kind}_graph_{tag}_s"] = _time(torch, g.replay)
                        del g
                    except Exception as ex:   # noqa: BLE001 - record and go on
                        errors.append(f"{name} E={E} m={m} {kind} graph {tag}: {type(ex).__name__}: {str(ex)[:160]}")
            try:
                r["grouped_fwd_s"] = _time(torch, lambda x=x, w=w, o=offs: torch._grouped_mm(x, w, offs=o))
                xg = x.detach().requires_grad_(True)
                wg = w.detach().requires_grad_(True)

                def fb(xg=xg, wg=wg, o=offs, dy=dy):
                    # gradients written, not accumulated, as a first micro-batch does: the raw files of
                    # 2026-11-25 were timed without this reset, so each repetition also added the weight gradient's
                    # accumulation (their grouped_fwd_bwd_s is high where weight-bound; cost/moe.py
                    # GROUPED_MM_BWD_OVER_FWD now comes from tt_moe_layer.py)
                    xg.grad = wg.grad = None
                    y = torch._grouped_mm(xg, wg, offs=o)
                    y.backward(dy)
                r["grouped_fwd_bwd_s"] = _time(torch, fb)
                xg.grad = wg.grad = None
            except Exception as ex:   # noqa: BLE001 - record and go on
                errors.append(f"{name} E={E} m={m} grouped: {type(ex).__name__}: {str(ex)[:200]}")
            rows.append(r)
            del x, dy, w, xs, dys, ws, wts, fwd, dgr, wgr
        torch.cuda.empty_cache()

    # unpermutation: atomic scatter vs gather + weighted sum over the k choices (Megatron/TE fused unpermute)
    unperm = []
    for N, k, h, E in ((16384, 8, 2048, 128), (8192, 2, 1024, 8)):
        idx = torch.stack([torch.randperm(E, device=dev)[:k] for _ in range(64)]).repeat(N // 64, 1)
        order = torch.argsort(idx.reshape(-1), stable=True)
        src = order // k
        y = torch.randn(N * k, h, device=dev, dtype=bf)
        probs = torch.rand(N, k, device=dev, dtype=torch.float32)
        out = torch.zeros(N, h, device=dev, dtype=bf)
        inv = torch.empty_like(order)
        inv[order] = torch.arange(order.numel(), device=dev)
        scatter_s = _time(torch, lambda out=out, src=src, y=y: out.index_add_(0, src, y))
        gather_sum_s = _time(torch, lambda y=y, inv=inv, s=(N, k, h), p=probs: (y.index_select(0, inv).view(*s)
                                                                              * p.unsqueeze(-1).to(bf)).sum(1))
        unperm.append({"tokens": N, "top_k": k, "hidden": h, "index_add_s": scatter_s, "gather_weighted_sum_s": gather_sum_s,
                       "rows_bytes": N * k * h * 2, "out_bytes": N * h * 2})

    # one host<->device synchronisation in a stream of small kernels: device idle it costs
    t = torch.randn(256, 256, device=dev, dtype=bf)
    cnt = torch.ones(128, device=dev, dtype=torch.int64)

    def burst(n=200, sync=False):
        for i in range(n):
            torch.mm(t, t)
            if sync and i % 50 == 49:
                cnt.tolist()
    sync = {}
    for label, s in (("no_sync", False), ("sync_every_50", True)):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            burst(sync=s)
        torch.cuda.synchronize()
        sync[label + "_s_per_200_kernels"] = (time.perf_counter() - t0) / 20
    k_s = _time(torch, lambda: torch.mm(t, t))
    smi = ""
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:   # noqa: BLE001
        pass
    doc = {"schema": "baige-plan/moe-expert-streams/v1", "device": torch.cuda.get_device_properties(0).name,
           "nvidia_smi": smi, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "streams": STREAMS,
           "gemm": rows, "unpermute": unperm, "sync": sync, "small_mm_device_s": k_s, "errors": errors}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps({"points": len(rows), "errors": errors, "sync": sync}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
