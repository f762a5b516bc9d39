"""Measure the local accelerator with torch (imported lazily): GEMMs, HBM, NCCL collectives.

    python -m baige_plan.profile.measure --out chip.yaml [--devices 2] [--quick] [--base h100-sxm5-80g]
    python -m baige_plan.profile.measure --refit chip.raw.json --out chip.yaml --base h100-sxm5-80g
    python -m baige_plan.profile.measure --devices 4 --collectives-only --out links.yaml

Method: each kernel is warmed up, then timed with CUDA events around a loop sized to about
20 ms, repeated (5x) and the median taken. GEMMs: square m=n=k from 256 to 16384 and LLM-like
(tokens x out x in) shapes for bf16 and fp16, fp8 (e4m3, torch._scaled_mm) where available.
HBM: device-to-device copies, bytes read + written. Collectives (--devices N > 1): for each group
size w in 2, 4, 8, ... up to N (and N), one process per GPU on GPUs 0..w-1 (torch.multiprocessing),
NCCL, float32 buffers from 1 KiB to 1 GiB (every 2x; --quick every 4x): all-reduce, all-gather,
reduce-scatter, all-to-all and a ring send/recv (each rank sends to the next and receives from the
previous); each size's time is the maximum over ranks of the per-rank median. The writer turns
them into the chip file's measured bus-bandwidth curves (`measured.links.scaleup`, specs/link.py).
NVLink multicast (NVLS) stays off.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from baige_plan.profile.fit import RAW_SCHEMA  # numpy only; torch is imported lazily

MiB = 1 << 20

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)


class _Progress:
    """rich progress on stderr when rich is there; plain lines otherwise."""

    def __init__(self, total: int, label: str):
        self.label, self.total, self.done = label, total, 0
        try:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                               TimeElapsedColumn(), console=Console(stderr=True), transient=False)
            self._p.start()
            self._t = self._p.add_task(label, total=total)
        except ImportError:
            self._p = None

    def step(self, what: str) -> None:
        self.done += 1
        if self._p is not None:
            self._p.update(self._t, advance=1, description=f"{self.label}: {what}")
        else:
            print(f"[{self.done}/{self.total}] {self.label}: {what}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._p is not None:
            self._p.stop()


def _time_cuda(torch, fn: Callable[[], Any], target_s: float = 0.02, repeats: int = 5, warmup: int = 3,
               agree: Callable[[int], int] | None = None, max_reps: int = 500) -> float:
    """Median seconds per call of `fn` (CUDA events; loop sized to ~target_s, at most max_reps calls).

    `agree` makes every rank of a collective use the same repetition count (else they deadlock)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    one = max(start.elapsed_time(end) / 1e3, 1e-6)
    reps = max(1, min(max_reps, int(target_s / one)))
    if agree is not None:
        reps = agree(reps)
    times = []
    for _ in range(repeats):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    return statistics.median(times)


def gemm_shapes(quick: bool) -> list[tuple[int, int, int]]:
    """(m, n, k): squares, then LLM-like (tokens, out, in) for attention-out, fc1, fc2, qkv."""
    sq = [256, 512, 1024, 2048, 4096, 8192, 16384]
    tokens = [512, 2048, 8192] if quick else [512, 2048, 8192, 16384]
    hidden = [1024, 2048, 4096, 8192] if quick else [768, 1024, 2048, 4096, 8192]
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


def measure_gemm(torch, quick: bool) -> list[dict]:
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    shapes = gemm_shapes(quick)
    has_fp8 = hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn") and \
        torch.cuda.get_device_capability() >= (8, 9)
    fp8_shapes = [s for s in shapes if s[0] == s[1] == s[2]] + [s for s in shapes if s[0] == 8192]
    prog = _Progress(len(shapes) * len(dtypes) + (len(fp8_shapes) if has_fp8 else 0), "GEMM")
    out: list[dict] = []
    dev = torch.device("cuda")
    for name, dt in dtypes.items():
        for m, n, k in shapes:
            a = torch.randn(m, k, device=dev, dtype=dt)
            b = torch.randn(k, n, device=dev, dtype=dt)
            c = torch.empty(m, n, device=dev, dtype=dt)
            t = _time_cuda(torch, lambda a=a, b=b, c=c: torch.mm(a, b, out=c))
            flops = 2.0 * m * n * k
            out.append({"dtype": name, "m": m, "n": n, "k": k, "flops": flops, "time_s": t,
                        "tflops": flops / t / 1e12})
            prog.step(f"{name} {m}x{n}x{k} {flops / t / 1e12:.0f} TFLOP/s")
            del a, b, c
    if has_fp8:
        one = torch.tensor(1.0, device=dev)
        for m, n, k in fp8_shapes:
            try:
                a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
                b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()    # column-major
                t = _time_cuda(torch, lambda a=a, b=b: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                                                         out_dtype=torch.bfloat16))
            except (RuntimeError, TypeError) as e:
                print(f"fp8 GEMM unavailable ({type(e).__name__}: {str(e).splitlines()[0][:120]}); skipped",
                      file=sys.stderr)
                break
            flops = 2.0 * m * n * k
            out.append({"dtype": "fp8", "m": m, "n": n, "k": k, "flops": flops, "time_s": t,
                        "tflops": flops / t / 1e12})
            prog.step(f"fp8 {m}x{n}x{k} {flops / t / 1e12:.0f} TFLOP/s")
            del a, b
    prog.close()
    torch.cuda.empty_cache()
    return out


def measure_hbm(torch, quick: bool) -> list[dict]:
    sizes = [256 * MiB, 1024 * MiB] if quick else [256 * MiB, 1024 * MiB, 4096 * MiB]
    prog = _Progress(len(sizes), "HBM copy")
    out = []
    for nbytes in sizes:
        src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 255)
        dst = torch.empty_like(src)
        t = _time_cuda(torch, lambda s=src, d=dst: d.copy_(s), target_s=0.05)
        out.append({"bytes": nbytes, "moved_bytes": 2 * nbytes, "time_s": t, "GBps": 2 * nbytes / t / 1e9})
        prog.step(f"{nbytes // MiB} MiB {2 * nbytes / t / 1e9:.0f} GB/s")
        del src, dst
    prog.close()
    torch.cuda.empty_cache()
    return out


def coll_sizes(quick: bool) -> list[int]:
    """Message sizes: 1 KiB .. 1 GiB, every 2x (quick: every 4x)."""
    return [1024 << i for i in range(0, 21, 2 if quick else 1)]


def collective_worlds(devices: int) -> list[int]:
    """Group sizes measured on `devices` GPUs: 2, 4, 8, ... up to devices, and devices itself."""
    out, w = set(), 2
    while w <= devices:
        out.add(w)
        w *= 2
    if devices >= 2:
        out.add(devices)
    return sorted(out)


def _coll_worker(rank: int, world: int, sizes: list[int], port: int, result_path: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    ops = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv")
    prog = _Progress(len(ops) * len(sizes), f"collectives x{world}") if rank == 0 else None
    results = []
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for op in ops:
        for nbytes in sizes:
            count = nbytes // 4
            count -= count % world
            buf = torch.ones(count, device=dev, dtype=torch.float32)
            part = torch.empty(count // world, device=dev, dtype=torch.float32)
            out = torch.empty_like(buf)
            if op == "all_reduce":
                def fn(buf=buf):
                    dist.all_reduce(buf)
            elif op == "all_gather":
                def fn(buf=buf, part=part):
                    dist.all_gather_into_tensor(buf, part)
            elif op == "reduce_scatter":
                def fn(buf=buf, part=part):
                    dist.reduce_scatter_tensor(part, buf)
            elif op == "all_to_all":
                def fn(buf=buf, out=out):
                    dist.all_to_all_single(out, buf)
            else:
                def fn(buf=buf, out=out):
                    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, buf, nxt), dist.P2POp(dist.irecv, out, prv)])
                    for r in reqs:
                        r.wait()
            def agree(reps: int) -> int:
                r = torch.tensor([reps], device=dev, dtype=torch.int64)
                dist.all_reduce(r, op=dist.ReduceOp.MIN)
                return int(r.item())

            dist.barrier()
            t = _time_cuda(torch, fn, target_s=0.02, repeats=5, warmup=5, agree=agree)
            tt = torch.tensor([t], device=dev, dtype=torch.float64)
            dist.all_reduce(tt, op=dist.ReduceOp.MAX)
            results.append({"op": op, "bytes": count * 4, "time_s": tt.item()})
            if prog is not None:
                alg = count * 4 / tt.item() / 1e9
                prog.step(f"{op} {count * 4 // 1024} KiB algbw {alg:.0f} GB/s")
                print(f"{op} {count * 4} B {tt.item() * 1e6:.1f} us algbw {alg:.1f} GB/s", file=sys.stderr, flush=True)
            del buf, part, out
    if prog is not None:
        prog.close()
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure_collectives(torch, devices: int, quick: bool) -> dict:
    """One group size (`devices` ranks on GPUs 0..devices-1)."""
    import torch.multiprocessing as mp

    sizes = coll_sizes(quick)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "coll.json")
        mp.spawn(_coll_worker, args=(devices, sizes, _free_port(), path), nprocs=devices, join=True)
        with open(path) as f:
            results = json.load(f)
    return {"world": devices, "dtype": "float32", "backend": "nccl", "results": results}


def measure_collective_runs(torch, devices: int, quick: bool) -> list[dict]:
    """Every group size of `collective_worlds(devices)`, smallest first."""
    return [measure_collectives(torch, w, quick) for w in collective_worlds(devices)]


def device_info(torch, devices: int) -> dict:
    def smi(*q: str) -> str | None:
        try:
            return subprocess.run(["nvidia-smi", *q], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    props = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info(0)
    nccl = None
    try:
        v = torch.cuda.nccl.version()
        nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001 - informational
        pass
    drv = smi("--query-gpu=driver_version", "--format=csv,noheader")
    return {"name": torch.cuda.get_device_name(0), "count": devices, "visible": torch.cuda.device_count(),
            "sm_count": props.multi_processor_count, "capability": list(torch.cuda.get_device_capability(0)),
            "mem_total_bytes": int(total), "mem_free_bytes_at_start": int(free),
            "driver": drv.splitlines()[0] if drv else None, "torch": str(torch.__version__),
            "cuda": str(torch.version.cuda), "nccl": nccl,
            "topology": smi("topo", "-m") if devices > 1 else None}


def measure_all(devices: int = 1, quick: bool = False, command: str = "", collectives_only: bool = False) -> dict:
    """Run every measurement; returns the raw document (schema baige-plan/profile-raw/v1).

    `collectives`: a list of runs, one per group size (fit.collective_runs reads it; older raw
    files hold one run as a mapping)."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    if devices > torch.cuda.device_count():
        raise RuntimeError(f"--devices {devices} but torch sees {torch.cuda.device_count()} GPU(s)")
    if collectives_only and devices < 2:
        raise RuntimeError("--collectives-only needs --devices 2 or more")
    torch.cuda.set_device(0)
    raw: dict[str, Any] = {"schema": RAW_SCHEMA, "date": _dt.date.today().isoformat(), "command": command,
                           "quick": quick, "device": device_info(torch, devices)}
    if not collectives_only:
        raw["gemm"] = measure_gemm(torch, quick)
        raw["hbm"] = measure_hbm(torch, quick)
    if devices > 1:
        raw["collectives"] = measure_collective_runs(torch, devices, quick)
    return raw


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m baige_plan.profile.measure", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("chip-profiled.yaml"))
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--collectives-only", action="store_true", help="measure only the collectives (no GEMM/HBM)")
    ap.add_argument("--base", default="h100-sxm5-80g", help="datasheet chip id or file for unmeasured figures")
    ap.add_argument("--catalog", action="append", default=[])
    ap.add_argument("--id", dest="chip_id")
    ap.add_argument("--refit", type=Path, help="fit and write from an existing raw JSON (no torch)")
    ns = ap.parse_args(argv)
    from baige_plan.errors import InputError
    from baige_plan.profile.writer import raw_path_for, write_atomic, write_profile

    if ns.refit:
        from baige_plan.io.yamlio import read_json
        try:       # strict JSON within the size limit (io/yamlio.py), then every value the fit reads (check_raw)
            raw = read_json(ns.refit)
            write_profile(ns.out, raw, ns.base, ns.catalog, ns.chip_id, write_raw=False, src=str(ns.refit))
        except InputError as e:
            from baige_plan.safe_text import one_line
            print(f"baige-plan: {one_line(str(e))}", file=sys.stderr)
            return 2
        print(f"wrote {ns.out}", file=sys.stderr)
        return 0
    cmd = "baige-plan profile " + " ".join(argv if argv is not None else sys.argv[1:])
    raw = measure_all(ns.devices, ns.quick, cmd.strip(), ns.collectives_only)
    write_atomic(raw_path_for(ns.out), json.dumps(raw, indent=1, sort_keys=True) + "\n")
    print(f"wrote {raw_path_for(ns.out)}", file=sys.stderr)
    try:
        write_profile(ns.out, raw, ns.base, ns.catalog, ns.chip_id)
    except InputError as e:
        print(f"baige-plan: {e} (raw measurements kept in {raw_path_for(ns.out)}; chip file not written)",
              file=sys.stderr)
        return 2
    print(f"wrote {ns.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
