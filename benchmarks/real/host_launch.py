"""Host (CPU) cost of launching GPU work, and what it does to a step, on one GPU (plain PyTorch, no Megatron/TE).

Measures, for docs/COST_MODEL.md §2c ("Host-bound MoE layers") and cost/execution.py:
  gemm    : Qwen3-30B-A3B expert GEMMs (fc1 m x 2048 @ 2048 x 1536, fc2 m x 768 @ 768 x 2048) for L local experts,
            launched as a Python loop on the current stream, as Transformer Engine's GroupedLinear does on Hopper
            (one cuBLAS GEMM per expert over 4 side streams joined by events), and from a TorchScript loop (the
            launches issued from C++ as TE's nvte_multi_stream_cublas_gemm does, without Python per GEMM):
            host seconds per GEMM (perf_counter around the launches, device idle at the start, fewer launches than
            the queue holds) against the device seconds of the same GEMMs (CUDA events around a graph replay);
  queue   : the launch queue depth: behind one long kernel (torch.cuda._sleep), launch tiny kernels and time each
            launch; the first one that blocks is the depth (CUDA's pushbuffer; PyTorch adds none);
  sync    : 24 synthetic MoE-like layers (host-heavy launches + one device-heavy GEMM + router-like tiny launches),
            with and without one `.tolist()` device->host read per layer (Megatron's dropless alltoall dispatcher
            reads the split sizes before its all-to-all); measured step against sum_layers max(H, D) (the host
            cannot run ahead of a sync), max(sum H, sum D) (it can) and sum (H + D);
  eager   : the harness's own blocks (benchmarks/real/harness.py, bf16 autocast): host seconds per dense GPT layer
            and per MoE layer (8 GeLU experts, top-2, balanced router), forward + backward, from the difference of
            a 6- and a 2-layer model (embedding and loss cancel), at 64 and 4096 tokens, with aten op and kernel
            counts per layer from one profiled step each: per-op host cost by layer kind on one host.

    python benchmarks/real/host_launch.py --out $OUT/host_launch.raw.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

STREAMS = 4


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def main() -> int:  # noqa: C901 - one measurement script
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="gemm,queue,sync,eager,moe_sync",
                    help="comma-separated parts to run (default: all)")
    args = ap.parse_args()
    parts = set(args.only.split(","))
    import torch
    torch.manual_seed(0)
    dev, bf = "cuda", torch.bfloat16
    pc = time.perf_counter
    sync_all = torch.cuda.synchronize
    errors: list[str] = []
    doc: dict = {"schema": "baige-plan/host-launch/v1", "device": torch.cuda.get_device_properties(0).name,
                 "cpu": _cpu_model(), "cpus": os.cpu_count(), "torch": torch.__version__,
                 "date": time.strftime("%Y-%m-%d")}
    side = [torch.cuda.Stream() for _ in range(STREAMS)]

    def dev_time(fn, reps=20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fn()
        sync_all()
        out = []
        for _ in range(5):
            a.record()
            for _ in range(reps):
                fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3 / reps)
        return statistics.median(out)

    def host_time(fn, reps=25):
        """Median host seconds to issue fn's launches, the device idle when it starts."""
        fn()
        sync_all()
        out = []
        for _ in range(reps):
            sync_all()
            t0 = pc()
            fn()
            out.append(pc() - t0)
        sync_all()
        return statistics.median(out)

    def graphed(fn):
        fn()
        sync_all()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        return g

    # ---- gemm: expert GEMM launch cost ------------------------------------------------------------------
    def streams4(pairs):
        cur = torch.cuda.current_stream()
        ev = cur.record_event()
        for s in side:
            s.wait_event(ev)
        for i, (a_, b_) in enumerate(pairs):
            with torch.cuda.stream(side[i % STREAMS]):
                torch.mm(a_, b_)
        for s in side:
            cur.wait_stream(s)

    ts_loop = None
    try:
        @torch.jit.script
        def _ts_loop(xs: list[torch.Tensor], ws: list[torch.Tensor]) -> list[torch.Tensor]:
            out: list[torch.Tensor] = []
            for i in range(len(xs)):
                out.append(torch.mm(xs[i], ws[i]))    # kept: TorchScript drops unused results
            return out
        ts_loop = _ts_loop
    except Exception as ex:   # noqa: BLE001
        errors.append(f"torchscript: {type(ex).__name__}: {str(ex)[:200]}")

    gemm = []
    for L in ((4, 8, 16) if "gemm" in parts else ()):
        for m in (256, 1024, 4096):
            for lin, (k, n) in (("fc1", (2048, 1536)), ("fc2", (768, 2048))):
                x = torch.randn(L * m, k, device=dev, dtype=bf)
                w = torch.randn(L, k, n, device=dev, dtype=bf)
                xs, ws = list(x.split(m)), [w[i] for i in range(L)]
                pairs = list(zip(xs, ws, strict=True))
                r = {"experts": L, "m": m, "linear": lin, "k": k, "n": n}
                r["host_py_loop_s"] = host_time(lambda p=pairs: [torch.mm(a_, b_) for a_, b_ in p])
                r["host_py_streams4_s"] = host_time(lambda p=pairs: streams4(p))
                if ts_loop is not None:
                    r["host_ts_loop_s"] = host_time(lambda xs=xs, ws=ws: ts_loop(xs, ws))
                try:
                    g = graphed(lambda p=pairs: streams4(p))
                    r["device_streams4_s"] = dev_time(g.replay)
                    del g
                except Exception as ex:   # noqa: BLE001
                    errors.append(f"graph L={L} m={m}: {type(ex).__name__}: {str(ex)[:160]}")
                gemm.append(r)
                del x, w, xs, ws, pairs
    doc["gemm"] = gemm
    torch.cuda.empty_cache()

    # ---- queue: launch queue depth ---------------------------------------------------------------------
    queue = {}
    for kind in (("add_", "mm") if "queue" in parts else ()):
        t = torch.zeros(16, 16, device=dev, dtype=torch.float32)
        o = torch.empty_like(t)
        fn = (lambda t=t: t.add_(1.0)) if kind == "add_" else (lambda t=t, o=o: torch.mm(t, t, out=o))
        for _ in range(50):
            fn()
        sync_all()
        torch.cuda._sleep(int(6e8))            # ~0.3 s of device time ahead of the launches
        lat = []
        for _ in range(6000):
            t0 = pc()
            fn()
            lat.append(pc() - t0)
        sync_all()
        first_block = next((i for i, v in enumerate(lat) if v > 2e-3), None)
        queue[kind] = {"launches": len(lat), "first_blocking_launch": first_block,
                       "median_launch_s_before": statistics.median(lat[: first_block or len(lat)]),
                       "median_launch_s_after": statistics.median(lat[first_block + 1:]) if first_block else None,
                       "max_launch_s": max(lat)}
    doc["queue"] = queue

    # ---- sync: host-device synchronisation per layer ----------------------------------------------------
    tiny = torch.zeros(64, device=dev)
    small = torch.randn(256, 256, device=dev, dtype=bf)
    cnt = torch.ones(128, device=dev, dtype=torch.int64)
    sync_rows = []
    for big_n in ((2048, 4096, 8192) if "sync" in parts else ()):
        A = torch.randn(big_n, big_n, device=dev, dtype=bf)
        for k1, k2 in ((48, 40), (144, 40)):
            def p1(k1=k1):                           # dispatch + expert launches: host-heavy
                for _ in range(k1):
                    torch.mm(small, small)

            def p2(A=A):                             # attention-like device-heavy work
                torch.mm(A, A)

            def p3(k2=k2):                           # router / preprocess: tiny kernels
                for _ in range(k2):
                    tiny.add_(1.0)
            phases = (p1, p2, p3)

            def layer(do_sync, phases=phases):
                for f in phases:
                    f()
                if do_sync:
                    cnt.tolist()                     # the split sizes read back: host waits for the device

            def step(do_sync, layer=layer):
                for _ in range(24):
                    layer(do_sync)
            ph = [{"host_s": host_time(f), "device_s": dev_time(f, reps=5)} for f in phases]
            meas = {}
            for label, s in (("no_sync", False), ("sync", True)):
                step(s)
                sync_all()
                vals = []
                for _ in range(5):
                    sync_all()
                    t0 = pc()
                    step(s)
                    sync_all()
                    vals.append(pc() - t0)
                meas[label + "_step_s"] = statistics.median(vals)
            H = sum(p["host_s"] for p in ph)
            D = sum(p["device_s"] for p in ph)
            # a sync'd layer: each phase's device work starts only once the host has issued everything before it
            seg = max(sum(p["host_s"] for p in ph[:i]) + max(ph[i]["host_s"] + sum(q["device_s"] for q in ph[i + 1:]),
                                                               sum(q["device_s"] for q in ph[i:])) for i in range(3))
            sync_rows.append({"big_n": big_n, "k1": k1, "k2": k2, "phases": ph, **meas,
                              "model_free_run_s": 24 * max(H, D), "model_sync_phases_s": 24 * seg,
                              "model_sum_add_s": 24 * (H + D)})
        del A
    doc["sync"] = sync_rows
    torch.cuda.empty_cache()

    # ---- eager: the harness's layers -------------------------------------------------------------------
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        import config as C  # benchmarks/real/config.py
        import harness as Hn
        import torch.nn as nn
        import torch.nn.functional as F
        GPT = Hn._build_modules(torch, nn, F, None)
        eager = []
        for kind in (("dense", "moe") if "eager" in parts else ()):
            moe = C.MoEConfig(experts=8, top_k=2, expert_ffn_hidden=2048) if kind == "moe" else None
            for tokens in (64, 4096):
                seq = min(tokens, 2048)
                mb = tokens // seq
                res = {"kind": kind, "tokens": tokens}
                per = {}
                for layers in (2, 6):
                    mc = C.ModelConfig(name=kind, layers=layers, hidden=1024, heads=16, ffn_hidden=4096,
                                       seq_len=seq, moe=moe)
                    model = GPT(mc, layers).to(dev)
                    xin = torch.randint(0, mc.vocab, (mb, seq), device=dev)

                    def fb(model=model, xin=xin):
                        loss = model.loss(model(xin), xin)
                        loss.backward()
                    h = host_time(fb, reps=15)
                    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
                        fb()
                        sync_all()
                    ev = prof.events()
                    ops = sum(1 for e in ev if e.name.startswith("aten::"))
                    kev = [e for e in ev if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
                    kern = len(kev)
                    d = sum(e.time_range.elapsed_us() for e in kev) * 1e-6   # kernel time (streams summed)
                    # natural step (host free to run ahead, queue may fill): wall time
                    vals = []
                    for _ in range(5):
                        sync_all()
                        t0 = pc()
                        fb()
                        sync_all()
                        vals.append(pc() - t0)
                    per[layers] = {"host_s": h, "device_s": d, "aten_ops": ops, "kernels": kern,
                                   "step_s": statistics.median(vals)}
                    del model
                    torch.cuda.empty_cache()
                a, b = per[2], per[6]
                res.update({"by_layers": per,
                            "host_per_layer_s": (b["host_s"] - a["host_s"]) / 4,
                            "kernel_s_per_layer": (b["device_s"] - a["device_s"]) / 4,
                            "ops_per_layer": (b["aten_ops"] - a["aten_ops"]) / 4,
                            "kernels_per_layer": (b["kernels"] - a["kernels"]) / 4})
                res["host_per_op_s"] = res["host_per_layer_s"] / max(res["ops_per_layer"], 1)
                res["host_per_kernel_s"] = res["host_per_layer_s"] / max(res["kernels_per_layer"], 1)
                eager.append(res)
        doc["eager"] = eager
    except Exception as ex:   # noqa: BLE001
        import traceback
        errors.append(f"eager: {type(ex).__name__}: {str(ex)[:300]} {traceback.format_exc()[-600:]}")

    # ---- moe_sync: where the harness's MoE layer waits for the device ---------------------------------------
    if "moe_sync" in parts:
        try:
            import config as C
            import harness as Hn
            import torch.nn as nn
            import torch.nn.functional as F
            GPT = Hn._build_modules(torch, nn, F, None)
            waits = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpyAsync",
                     "cudaMemcpy", "cudaMalloc", "cudaFree", "cudaHostAlloc", "cudaStreamWaitEvent")
            moe_sync = []
            for tokens in (64, 4096):
                seq = min(tokens, 2048)
                mc = C.ModelConfig(name="moe", layers=4, hidden=1024, heads=16, ffn_hidden=4096, seq_len=seq,
                                   moe=C.MoEConfig(experts=8, top_k=2, expert_ffn_hidden=2048))
                model = GPT(mc, 4).to(dev)
                xin = torch.randint(0, mc.vocab, (tokens // seq, seq), device=dev)

                def fwd(model=model, xin=xin):
                    return model.loss(model(xin), xin)

                def fb(fwd=fwd):
                    fwd().backward()
                h_fb = host_time(fb, reps=10)
                # forward alone (no graph kept)
                with torch.no_grad():
                    h_f = host_time(fwd, reps=10)
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                        torch.profiler.ProfilerActivity.CUDA]) as prof:
                    fb()
                    sync_all()
                rows = {}
                for e in prof.events():
                    if e.name in waits:
                        par = e.cpu_parent
                        chain = []
                        while par is not None and len(chain) < 4:
                            chain.append(par.name)
                            par = par.cpu_parent
                        key = e.name + " <- " + " <- ".join(chain)
                        r = rows.setdefault(key, {"count": 0, "cpu_us": 0.0})
                        r["count"] += 1
                        r["cpu_us"] += e.cpu_time_total
                moe_sync.append({"tokens": tokens, "layers": 4, "host_fwd_bwd_s": h_fb, "host_fwd_nograd_s": h_f,
                                 "runtime_calls": dict(sorted(rows.items(), key=lambda kv: -kv[1]["cpu_us"])[:25])})
                del model
                torch.cuda.empty_cache()
            doc["moe_sync"] = moe_sync
        except Exception as ex:   # noqa: BLE001
            import traceback
            errors.append(f"moe_sync: {type(ex).__name__}: {str(ex)[:300]} {traceback.format_exc()[-600:]}")

    try:
        doc["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm",
                                            "--format=csv,noheader"], capture_output=True, text=True,
                                           timeout=20).stdout.strip()
    except Exception:   # noqa: BLE001
        pass
    doc["errors"] = errors
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps({k: doc.get(k) for k in ("device", "cpu", "queue", "errors")}, indent=1))
    for r in doc.get("gemm", []):
        print(json.dumps(r))
    for r in doc.get("moe_sync", []):
        print(json.dumps(r))
    for r in doc.get("sync", []):
        print(json.dumps(r))
    for r in doc.get("eager", []):
        print(json.dumps({k: v for k, v in r.items() if k != "by_layers"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
