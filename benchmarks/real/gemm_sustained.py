"""Does a GEMM's rate hold under sustained load? (issue 16: the catalog's Hopper GEMM figure, fitted on production
runs, is 0.86 of the rate torch.matmul reaches in a short benchmark and in our 4-GPU torchtitan steps; one
hypothesis is that sustained training at the power limit lowers clocks, which short benchmarks never reach.)

Every visible GPU (one process each, started together so the node draws full power) runs bf16 matmuls of a Llama 3
8B MLP shape (8192 x 28672 x 4096) back to back for --seconds, and reports TFLOP/s per window of --window seconds
with the SM clock and power read through NVML (pynvml from the image's nvidia-ml-py, else nvidia-smi) at each
window's end.

    python benchmarks/real/gemm_sustained.py --seconds 90 --window 5 --out gemm_sustained_h200x4.raw.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch.multiprocessing as mp


def smi(dev: int) -> dict:
    q = "clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"
    try:
        out = subprocess.run(["nvidia-smi", f"--id={dev}", f"--query-gpu={q}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        sm, pw, tc, thr = [x.strip() for x in out.split(",")]
        return {"sm_MHz": float(sm), "power_W": float(pw), "temp_C": float(tc), "throttle": thr}
    except Exception as e:  # noqa: BLE001 -- a reading, not the measurement
        return {"error": str(e)[:80]}


def worker(dev: int, seconds: float, window: float, q) -> None:
    torch.cuda.set_device(dev)
    m, n, k = 8192, 28672, 4096
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(10):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    flops = 2 * m * n * k
    rows = []
    t_end = time.time() + seconds
    while time.time() < t_end:
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.time()
        ev0.record()
        iters = 0
        while time.time() - t0 < window:
            for _ in range(20):
                torch.matmul(a, b, out=c)
            iters += 20
            torch.cuda.synchronize()
        ev1.record()
        ev1.synchronize()
        s = ev0.elapsed_time(ev1) / 1e3
        rows.append({"t_s": round(time.time() - (t_end - seconds), 1), "tflops": round(flops * iters / s / 1e12, 1),
                     **smi(dev)})
    q.put((dev, rows))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--window", type=float, default=5)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    n = torch.cuda.device_count()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=worker, args=(d, args.seconds, args.window, q)) for d in range(n)]
    for p in ps:
        p.start()
    res = dict(q.get() for _ in ps)
    for p in ps:
        p.join()
    out = {"device": torch.cuda.get_device_name(0), "gpus": n, "shape": [8192, 28672, 4096], "per_gpu": res}
    for d in sorted(res):
        r = res[d]
        print(d, " ".join(f"{x['tflops']:.0f}" for x in r), "| sm MHz", " ".join(str(x.get('sm_MHz')) for x in r[::3]),
              "| W", " ".join(str(x.get('power_W')) for x in r[::3]), flush=True)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
