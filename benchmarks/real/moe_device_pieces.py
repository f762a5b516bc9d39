"""Device time of the pieces of a fine-grained MoE layer at Qwen3 expert-parallel sizes (one GPU, torch only).

What Megatron-core + Transformer Engine run per MoE layer on one rank, emulated with plain PyTorch (no TE on the
device machine), each timed on the device (CUDA graph replays between CUDA events: no host launch cost):
  gemm     : the local experts' GEMMs as TE GroupedLinear issues them on Hopper -- one cuBLAS GEMM per expert over
             4 streams (te_general_grouped_gemm -> nvte_multi_stream_cublas_gemm), fc1 (m x h -> 2f) and fc2
             (m x f -> h), forward, dgrad and wgrad, in bf16 (torch.mm) and fp8 (torch._scaled_mm, per-tensor
             scales, e4m3; fast accumulation in the forward, split accumulation in dgrad/wgrad as TE's
             Float8CurrentScaling recipe sets; wgrad written in fp32 as into Megatron's main_grad); fp8 also as a
             serial loop on one stream;
  quant    : TE Float8CurrentScaling quantisation of every expert's GEMM input (forward: fc1 and fc2 inputs;
             backward: the fc2 and fc1 output gradients), per expert amax (one reduction), scale (one tiny kernel)
             and a fused cast + transpose (a Triton kernel writing the row-wise and column-wise fp8 copies, as
             TE's cast_transpose does); also the eager (unfused) emulation;
  grouped  : torch._grouped_mm (bf16) forward and forward + backward; torch._scaled_grouped_mm (fp8, row-wise
             scales) forward where this torch has it;
  permute  : token permutation at top-8: index_select gather of the A = N k routed rows (TE fused permute),
             a row permutation of A rows (sort_chunks_by_idxs), the fused-style unpermute (gather + probability
             weighted k-sum) and the unfused scatter-add (index_add_) one;
  router   : gating GEMM (bf16 and fp32) forward + backward, softmax/top-k/scatter + switch aux-loss in fp32
             (unfused torch ops: an upper bound of TE's fused router kernels), forward + backward;
  floor    : device time of one tiny kernel in a stream of them (graph replay).

    python benchmarks/real/moe_device_pieces.py --out $OUT/moe_device_pieces.raw.json
The JSON is rewritten after every section, so a run cut short still returns what it measured.
Compared with the cost model by benchmarks/real/moe_device_pieces_compare.py (no GPU).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repo root: baige_plan
from baige_plan.profile.measure import _time_cuda  # noqa: E402  one CUDA-event timing loop for all measurements

SHAPES = {"qwen3-30b-a3b": (2048, 768), "qwen3-235b-a22b": (4096, 1536)}   # hidden h, expert ffn f (SwiGLU: fc1 2f)
POINTS = [   # (shape, local experts L, tokens per expert m, layout it stands for)
    ("qwen3-30b-a3b", 16, 1024, "ep8 N=2048"),
    ("qwen3-30b-a3b", 16, 2048, "ep8 mb1 (N=4096)"),
    ("qwen3-30b-a3b", 16, 4096, "ep8 mb2 (N=8192)"),
    ("qwen3-30b-a3b", 8, 4096, "ep16 mb1"),
    ("qwen3-30b-a3b", 4, 8192, "ep32 mb1"),
    ("qwen3-235b-a22b", 4, 4096, "tp2 ep32 mb1"),
    ("qwen3-235b-a22b", 16, 512, "tp4 ep8 mb1"),
    ("qwen3-235b-a22b", 16, 1024, "tp2 ep8 mb1"),
    ("qwen3-235b-a22b", 16, 2048, "tp1 ep8 mb1"),
    ("qwen3-235b-a22b", 16, 4096, "tp2 ep8 mb4"),
]
STREAMS = 4
FP8_MAX = 448.0



def _time(torch, fn) -> float:
    """Median seconds of fn() on the device: profile/measure.py's CUDA-event loop, sized to ~3 ms."""
    return _time_cuda(torch, fn, target_s=0.003, repeats=5, warmup=2, max_reps=200)


class Bench:
    def __init__(self, torch, out: str):
        self.torch, self.out = torch, out
        self.dev, self.bf, self.f8 = "cuda", torch.bfloat16, torch.float8_e4m3fn
        self.side = [torch.cuda.Stream() for _ in range(STREAMS)]
        self.cast_t = None
        smi = ""
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,power.limit",
                                  "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception:   # noqa: BLE001
            pass
        self.doc = {"schema": "baige-plan/moe-device-pieces/v1", "device": torch.cuda.get_device_properties(0).name,
                    "nvidia_smi": smi, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
                    "streams": STREAMS, "errors": [], "sections_s": {}}

    # -- helpers --
    def save(self):
        with open(self.out, "w") as f:
            json.dump(self.doc, f, indent=1)

    def err(self, tag, ex):
        self.doc["errors"].append(f"{tag}: {type(ex).__name__}: {str(ex)[:300]}")
        print("ERROR", tag, type(ex).__name__, str(ex)[:300], flush=True)

    def meas(self, r, key, thunk):
        """r[key] = thunk(), or the error recorded (the other measurements go on)."""
        try:
            r[key] = thunk()
        except Exception as ex:   # noqa: BLE001
            self.err(key, ex)

    def graphed(self, fn):
        """Device seconds of fn's launches replayed from a CUDA graph."""
        torch = self.torch
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        t = _time(torch, g.replay)
        del g
        return t

    def streams4(self, calls):
        """TE multi-stream: side streams wait for the current one, call i on side[i % 4], current waits all."""
        torch = self.torch
        cur = torch.cuda.current_stream()
        ev = cur.record_event()
        for s in self.side:
            s.wait_event(ev)
        for i, c in enumerate(calls):
            with torch.cuda.stream(self.side[i % STREAMS]):
                c()
        for s in self.side:
            cur.wait_stream(s)

    # -- fused cast + transpose (TE cast_transpose stand-in) --
    def build_cast_transpose(self):
        torch, dev, bf, f8 = self.torch, self.dev, self.bf, self.f8
        try:
            import triton
            import triton.language as tl

            @triton.jit
            def _cast_transpose(x_ptr, s_ptr, q_ptr, qt_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
                pm = tl.program_id(0)
                pn = tl.program_id(1)
                rm = pm * BM + tl.arange(0, BM)
                rn = pn * BN + tl.arange(0, BN)
                mask = (rm[:, None] < M) & (rn[None, :] < N)
                x = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0).to(tl.float32)
                s = tl.load(s_ptr)
                q = (x * s).to(tl.float8e4nv)
                tl.store(q_ptr + rm[:, None] * N + rn[None, :], q, mask=mask)
                tl.store(qt_ptr + rn[None, :] * M + rm[:, None], q, mask=mask)

            def cast_t(x, s, q, qt):
                M, N = x.shape
                _cast_transpose[(triton.cdiv(M, 64), triton.cdiv(N, 64))](x, s, q, qt, M, N, BM=64, BN=64)

            xt = torch.randn(256, 512, device=dev, dtype=bf)
            st = (FP8_MAX / xt.abs().amax().float()).reshape(1)
            qa = torch.empty(256, 512, device=dev, dtype=f8)
            qb = torch.empty(512, 256, device=dev, dtype=f8)
            cast_t(xt, st, qa, qb)
            torch.cuda.synchronize()
            ref = (xt.float() * st).to(f8).float()
            self.doc["cast_transpose_check"] = {
                "rowwise_max_abs_diff": float((qa.float() - ref).abs().max()),
                "colwise_max_abs_diff": float((qb.float() - ref.t()).abs().max())}
            self.cast_t = cast_t
        except Exception as ex:   # noqa: BLE001
            self.err("triton cast_transpose", ex)

    # -- floor: one tiny kernel in a stream of them; copy and large-GEMM references --
    def floor(self):
        torch, dev, bf, f8 = self.torch, self.dev, self.bf, self.f8
        fl = {}
        self.doc["floor"] = fl
        tiny = torch.zeros(1024, device=dev)
        mid = torch.zeros(4 * 1024 * 1024, device=dev, dtype=bf)   # 8 MiB
        self.meas(fl, "tiny_add_per_kernel_s", lambda: self.graphed(lambda: [tiny.add_(1.0) for _ in range(200)]) / 200)
        self.meas(fl, "amax_8MiB_bf16_s", lambda: self.graphed(lambda: [torch.amax(mid.abs()) for _ in range(20)]) / 20)
        self.meas(fl, "vector_norm_inf_8MiB_bf16_s", lambda: self.graphed(
            lambda: [torch.linalg.vector_norm(mid, float("inf")) for _ in range(20)]) / 20)
        self.meas(fl, "copy_8MiB_s", lambda: self.graphed(lambda: [mid.clone() for _ in range(20)]) / 20)
        big = torch.empty(1 << 29, device=dev, dtype=torch.uint8)
        self.meas(fl, "copy_512MiB_GBps", lambda: 2 * big.numel() / _time(torch, lambda: big.clone()) / 1e9)
        one = torch.ones((), device=dev)
        a = torch.randn(8192, 8192, device=dev)
        bt = torch.randn(8192, 8192, device=dev)
        a16, b16, a8, b8 = a.to(bf), bt.to(bf), a.to(f8), bt.to(f8)
        self.meas(fl, "gemm_8192_bf16_TFLOPs", lambda: 2 * 8192 ** 3 / _time(torch, lambda: torch.mm(a16, b16.t())) / 1e12)
        self.meas(fl, "gemm_8192_fp8_TFLOPs", lambda: 2 * 8192 ** 3 / _time(
            torch, lambda: torch._scaled_mm(a8, b8.t(), one, one, out_dtype=bf, use_fast_accum=True)) / 1e12)

    # -- expert GEMMs and their quantisation at one point --
    def linear(self, r, name, L, m, k, n):
        torch, dev, bf, f8 = self.torch, self.dev, self.bf, self.f8
        one = torch.ones((), device=dev)
        fp8max = torch.full((), FP8_MAX, device=dev)
        x = torch.randn(L * m, k, device=dev, dtype=bf)
        dy = torch.randn(L * m, n, device=dev, dtype=bf)
        w = torch.randn(L, n, k, device=dev, dtype=bf) * 0.02        # TE weight (out, in)
        xs, dys = list(x.split(m)), list(dy.split(m))
        r[f"{name}_flops"] = 2.0 * L * m * n * k
        # bf16, TE-style: fwd y = x W^T; dgrad dx = dy W; wgrad dW = dy^T x
        fw = [lambda i=i: torch.mm(xs[i], w[i].t()) for i in range(L)]
        dg = [lambda i=i: torch.mm(dys[i], w[i]) for i in range(L)]
        wg = [lambda i=i: torch.mm(dys[i].t(), xs[i]) for i in range(L)]
        for tag, calls in (("fwd", fw), ("dgrad", dg), ("wgrad", wg)):
            self.meas(r, f"{name}_bf16_{tag}_s", lambda c=calls: self.graphed(lambda: self.streams4(c)))
        # fp8: row-wise and column-wise copies as TE keeps them
        wq = (w * 20).to(f8)                    # (L, n, k) row-wise
        wqt = wq.transpose(1, 2).contiguous()   # (L, k, n): column-wise copy for dgrad
        xq = x.to(f8)
        xqt = [xi.to(f8).t().contiguous() for xi in xs]     # (k, m) each
        dyq = dy.to(f8)
        dyqt = [d.to(f8).t().contiguous() for d in dys]     # (n, m) each
        xqs, dyqs = list(xq.split(m)), list(dyq.split(m))
        f_fw = [lambda i=i: torch._scaled_mm(xqs[i], wq[i].t(), one, one, out_dtype=bf, use_fast_accum=True)
                for i in range(L)]
        f_dg = [lambda i=i: torch._scaled_mm(dyqs[i], wqt[i].t(), one, one, out_dtype=bf) for i in range(L)]
        f_wg = [lambda i=i: torch._scaled_mm(dyqt[i], xqt[i].t(), one, one, out_dtype=torch.float32)
                for i in range(L)]
        for tag, calls in (("fwd", f_fw), ("dgrad", f_dg), ("wgrad", f_wg)):
            self.meas(r, f"{name}_fp8_{tag}_s", lambda c=calls: self.graphed(lambda: self.streams4(c)))
        self.meas(r, f"{name}_fp8_fwd_serial_s", lambda: self.graphed(lambda: [c() for c in f_fw]))
        self.meas(r, f"{name}_bf16_fwd_serial_s", lambda: self.graphed(lambda: [c() for c in fw]))
        # quantisation of this linear's input (forward) and output gradient (backward), per expert
        for qtag, src, cols in (("x", xs, k), ("dy", dys, n)):
            self.quant(r, f"{name}_q{qtag}", src, L, m, cols, fp8max, eager=(name == "fc1" and qtag == "x"))

    def quant(self, r, key, src, L, m, cols, fp8max, eager):
        torch, dev, bf, f8 = self.torch, self.dev, self.bf, self.f8
        amax = torch.empty(L, device=dev, dtype=bf)      # abs-max of bf16 values is exact in bf16
        scale = torch.empty(L, device=dev, dtype=torch.float32)
        q = torch.empty(L * m, cols, device=dev, dtype=f8)
        qs = list(q.split(m))
        qt = [torch.empty(cols, m, device=dev, dtype=f8) for _ in range(L)]
        cast_t = self.cast_t
        r[f"{key}_elems"] = L * m * cols

        def amax_only():
            for i in range(L):
                torch.linalg.vector_norm(src[i], float("inf"), out=amax[i])

        def scale_only():
            for i in range(L):
                torch.div(fp8max, amax[i], out=scale[i])

        def cast_only():
            for i in range(L):
                cast_t(src[i], scale[i:i + 1], qs[i], qt[i])

        def te_like():
            for i in range(L):    # TE order: per tensor amax, scale, cast + transpose
                torch.linalg.vector_norm(src[i], float("inf"), out=amax[i])
                torch.div(fp8max, amax[i], out=scale[i])
                cast_t(src[i], scale[i:i + 1], qs[i], qt[i])

        def eager_q():
            for i in range(L):
                a_ = src[i].abs().amax().float()
                q_ = (src[i] * (FP8_MAX / a_)).to(f8)
                q_.t().contiguous()

        self.meas(r, f"{key}_amax_s", lambda: self.graphed(amax_only))
        self.meas(r, f"{key}_scale_s", lambda: self.graphed(scale_only))
        if cast_t is not None:
            amax_only()
            scale_only()
            self.meas(r, f"{key}_cast_transpose_s", lambda: self.graphed(cast_only))
            self.meas(r, f"{key}_te_like_s", lambda: self.graphed(te_like))
        if eager:
            self.meas(r, f"{key}_eager_s", lambda: self.graphed(eager_q))

    def grouped(self, r, L, m, k, n):
        torch, dev, bf, f8 = self.torch, self.dev, self.bf, self.f8
        x = torch.randn(L * m, k, device=dev, dtype=bf)
        wgm = (torch.randn(L, n, k, device=dev, dtype=bf) * 0.02).transpose(-2, -1)   # (L, k, n)
        offs = torch.arange(1, L + 1, device=dev, dtype=torch.int32) * m
        self.meas(r, "fc1_grouped_mm_fwd_s", lambda: _time(torch, lambda: torch._grouped_mm(x, wgm, offs=offs)))
        xg = x.detach().requires_grad_(True)
        wg_ = wgm.detach().requires_grad_(True)
        dyg = torch.randn(L * m, n, device=dev, dtype=bf)

        def fb():
            torch._grouped_mm(xg, wg_, offs=offs).backward(dyg)
        self.meas(r, "fc1_grouped_mm_fwd_bwd_s", lambda: _time(torch, fb))
        xq = x.to(f8)
        wq_ = (wgm * 20).to(f8).transpose(-2, -1).contiguous().transpose(-2, -1)   # (L, k, n) column-major
        sa = torch.ones(L * m, device=dev, dtype=torch.float32)
        sb = torch.ones(L, n, device=dev, dtype=torch.float32)
        self.meas(r, "fc1_scaled_grouped_mm_fwd_s", lambda: _time(
            torch, lambda: torch._scaled_grouped_mm(xq, wq_, sa, sb, offs=offs, out_dtype=bf)))

    def experts(self):
        rows = []
        self.doc["experts"] = rows
        t0 = time.time()
        for shape, L, m, layout in POINTS:
            h, f = SHAPES[shape]
            r = {"shape": shape, "h": h, "f": f, "experts": L, "m": m, "layout": layout}
            rows.append(r)
            try:
                self.linear(r, "fc1", L, m, h, 2 * f)
                self.linear(r, "fc2", L, m, f, h)
                self.grouped(r, L, m, h, 2 * f)
            except Exception as ex:   # noqa: BLE001
                self.err(f"{shape} L={L} m={m}", ex)
                traceback.print_exc()
            self.torch.cuda.empty_cache()
            self.doc["sections_s"]["experts"] = time.time() - t0
            self.save()
            print(shape, L, m, {k: round(v * 1e6, 1) for k, v in r.items() if k.endswith("_s")}, flush=True)

    # -- permutation --
    def permute_point(self, N, k, h, E):
        torch, dev, bf = self.torch, self.dev, self.bf
        A = N * k
        x = torch.randn(N, h, device=dev, dtype=bf)
        idx = torch.rand(N, E, device=dev).argsort(dim=1)[:, :k].contiguous()   # (N, k) distinct experts
        order = torch.argsort(idx.reshape(-1), stable=True)                      # row -> assignment
        src = order // k                                                         # token of each row
        inv = torch.empty_like(order)
        inv[order] = torch.arange(A, device=dev)
        probs = torch.rand(N, k, device=dev, dtype=torch.float32)
        y = torch.randn(A, h, device=dev, dtype=bf)
        rp = torch.randperm(A, device=dev)
        out = torch.zeros(N, h, device=dev, dtype=bf)
        g_ = y.index_select(0, inv).view(N, k, h)
        pb = probs.to(bf).view(N, 1, k)
        p = {"tokens": N, "top_k": k, "hidden": h, "rows": A, "row_bytes": A * h * 2, "token_bytes": N * h * 2}
        self.meas(p, "permute_index_select_s", lambda: self.graphed(lambda: x.index_select(0, src)))
        self.meas(p, "sort_chunks_index_select_s", lambda: self.graphed(lambda: y.index_select(0, rp)))
        self.meas(p, "unpermute_gather_s", lambda: self.graphed(lambda: y.index_select(0, inv)))
        self.meas(p, "unpermute_weighted_sum_bmm_s", lambda: self.graphed(lambda: torch.bmm(pb, g_)))
        self.meas(p, "unpermute_index_add_s", lambda: self.graphed(lambda: out.index_add_(0, src, y)))
        self.meas(p, "argsort_routing_s", lambda: self.graphed(lambda: torch.argsort(idx.reshape(-1), stable=True)))
        return p

    def permute(self):
        perm = []
        self.doc["permute"] = perm
        t0 = time.time()
        for N, k, h, E in ((4096, 8, 2048, 128), (8192, 8, 2048, 128), (2048, 8, 4096, 128), (4096, 8, 4096, 128)):
            try:
                perm.append(self.permute_point(N, k, h, E))
            except Exception as ex:   # noqa: BLE001
                self.err(f"permute N={N} h={h}", ex)
            self.doc["sections_s"]["permute"] = time.time() - t0
            self.save()
        print("permute", json.dumps(perm), flush=True)

    # -- router --
    def router_point(self, N, h, E, k):
        torch, dev, bf = self.torch, self.dev, self.bf
        rr = {"tokens": N, "hidden": h, "experts": E, "top_k": k}
        for dt, name in ((bf, "bf16"), (torch.float32, "fp32")):
            xr = torch.randn(N, h, device=dev, dtype=dt)
            wr = torch.randn(E, h, device=dev, dtype=dt)
            gl = torch.randn(N, E, device=dev, dtype=dt)
            self.meas(rr, f"gating_{name}_fwd_s", lambda xr=xr, wr=wr: self.graphed(lambda: torch.mm(xr, wr.t())))
            self.meas(rr, f"gating_{name}_bwd_s", lambda gl=gl, xr=xr, wr=wr: self.graphed(
                lambda: (torch.mm(gl, wr), torch.mm(gl.t(), xr))))
        logits = torch.randn(N, E, device=dev, dtype=torch.float32, requires_grad=True)
        gp = torch.randn(N, E, device=dev)
        one = torch.ones((), device=dev)

        def router_fwd():
            rl = torch.randn_like(logits)                     # force-balance: random logits (RandomSTE)
            lg = logits + (rl - logits).detach()
            sc = torch.softmax(lg, dim=-1)
            topv, topi = torch.topk(sc, k, dim=-1)
            topv = topv / topv.sum(-1, keepdim=True)
            rmap = torch.zeros(N, E, device=dev, dtype=torch.bool).scatter(1, topi, True)
            pmap = torch.zeros(N, E, device=dev, dtype=torch.float32).scatter(1, topi, topv)
            tpe = rmap.sum(0)
            aux = (sc.sum(0) * tpe.float()).sum() * (E / (k * N * N)) * 1e-3
            return pmap, rmap, aux

        def router_fb():
            pmap, _, aux = router_fwd()
            torch.autograd.backward([pmap, aux], [gp, one])

        def fwd_only():
            with torch.no_grad():
                router_fwd()
        self.meas(rr, "router_fwd_s", lambda: self.graphed(fwd_only))
        self.meas(rr, "router_fwd_bwd_eager_s", lambda: _time(torch, router_fb))

        def graph_fb():
            s_ = torch.cuda.Stream()
            s_.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s_):
                for _ in range(3):
                    router_fb()
            torch.cuda.current_stream().wait_stream(s_)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                router_fb()
            return _time(torch, g.replay)
        self.meas(rr, "router_fwd_bwd_graph_s", graph_fb)

        def profiled():
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    router_fb()
                torch.cuda.synchronize()
            ev = [e for e in prof.events() if e.device_type.name == "CUDA"]
            rr["router_fwd_bwd_kernels"] = len(ev) / 10
            return sum(e.device_time_total for e in ev) / 10 / 1e6
        self.meas(rr, "router_fwd_bwd_kernel_sum_s", profiled)
        return rr

    def router(self):
        rout = []
        self.doc["router"] = rout
        t0 = time.time()
        for N, h, E, k in ((4096, 2048, 128, 8), (8192, 2048, 128, 8), (2048, 4096, 128, 8), (4096, 4096, 128, 8)):
            try:
                rout.append(self.router_point(N, h, E, k))
            except Exception as ex:   # noqa: BLE001
                self.err(f"router N={N}", ex)
            self.doc["sections_s"]["router"] = time.time() - t0
            self.save()
        print("router", json.dumps(rout), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated sections: floor,experts,permute,router")
    args = ap.parse_args()
    import torch
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    b = Bench(torch, args.out)
    only = set(filter(None, args.only.split(",")))
    b.build_cast_transpose()
    for sec in ("floor", "experts", "permute", "router"):
        if only and sec not in only:
            continue
        t0 = time.time()
        try:
            getattr(b, sec)()
        except Exception as ex:   # noqa: BLE001
            b.err(sec, ex)
            traceback.print_exc()
        b.doc["sections_s"][sec] = time.time() - t0
        b.save()
        if sec == "floor":
            print("floor", json.dumps(b.doc.get("floor")), flush=True)
    print("errors", json.dumps(b.doc["errors"], indent=1))
    b.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
