"""Host seconds per kernel launch with several training-like processes on one host (docs/COST_MODEL.md §2c
"Host-bound MoE layers"; cost/execution.py host_contention).

N processes (1, 2, 4, 8), each pinned to its own CPU core with one intra-op thread, issue the same stream of
small eager launches on the GPU, started together behind a barrier: per burst, B launches are timed on the host
(perf_counter around the Python loop only) and then synchronised untimed, so the device never holds the host back
(B < the ~1,021-launch queue measured in host_launch.py `queue`). Two streams:
  - `aten`: add_, mul, mm 64x64, index_select, sum, copy_: plain aten launches from Python;
  - `autograd`: a 2-layer Linear(256) block forward + backward with autograd (the eager_kernel_s kind).
Reports per process the median host microseconds per launch over the bursts; the step of N ranks waits for the
slowest, so the max over processes over the N = 1 value is the contention factor.

On the lent device machine the N processes share one GPU (one context each): the launches are asynchronous and
timed on the host only, so what differs between N is the host (cores, caches, memory, the driver).

Run: python benchmarks/real/host_contention.py OUT.json
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time


def _worker(rank: int, n: int, barrier, q, bursts: int, burst_len: int) -> None:
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[(2 * rank) % len(cores)]})
    import torch
    torch.set_num_threads(1)
    dev = torch.device("cuda", 0)
    x = torch.randn(64, 64, device=dev)
    y = torch.randn(64, 64, device=dev)
    idx = torch.randint(0, 64, (64,), device=dev)
    out = torch.empty(64, 64, device=dev)
    lin = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 256)).to(dev)
    inp = torch.randn(32, 256, device=dev)

    def aten_burst(k: int) -> int:
        done = 0
        while done < k:
            x.add_(y)
            torch.mul(x, 0.5, out=out)
            torch.mm(x, y, out=out)
            torch.index_select(x, 0, idx)
            x.sum()
            out.copy_(x)
            done += 6
        return done

    def autograd_burst(k: int) -> int:
        # Linear(+bias) fwd 1, GELU 1, Linear 1, sum 1; backward ~ 9 kernels (+ grad accumulation): count with
        # the profiler once below
        done = 0
        while done < k:
            lin(inp).sum().backward()
            done += per_iter
        return done

    # kernels per autograd iteration, counted once with the profiler
    from torch.profiler import ProfilerActivity, profile
    lin(inp).sum().backward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        lin(inp).sum().backward()
        torch.cuda.synchronize()
    per_iter = max(1, sum(1 for e in prof.events() if e.device_type.name == "CUDA"))
    res = {}
    for name, fn in (("aten", aten_burst), ("autograd", autograd_burst)):
        for _ in range(5):   # warm-up
            fn(burst_len)
        torch.cuda.synchronize()
        per = []
        for _ in range(bursts):
            barrier.wait()
            t0 = time.perf_counter()
            k = fn(burst_len)
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            per.append((t1 - t0) / k * 1e6)
        res[name] = statistics.median(per)
    res["autograd_kernels_per_iter"] = per_iter
    q.put((rank, res))


def main() -> None:
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    doc = {"cpus": len(os.sched_getaffinity(0)), "runs": []}
    try:
        import subprocess
        doc["lscpu"] = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        pass
    for n in (1, 2, 4, 8, 1):
        barrier = ctx.Barrier(n)
        q = ctx.Queue()
        ps = [ctx.Process(target=_worker, args=(r, n, barrier, q, 40, 600)) for r in range(n)]
        for p in ps:
            p.start()
        out = dict(q.get() for _ in ps)
        for p in ps:
            p.join()
        row = {"procs": n, "per_rank": [out[r] for r in range(n)]}
        for k in ("aten", "autograd"):
            v = [out[r][k] for r in range(n)]
            row[k + "_us_median"] = statistics.median(v)
            row[k + "_us_max"] = max(v)
        doc["runs"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "per_rank"}), flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
