"""A small GPT-style decoder training harness for measuring step time and memory on real GPUs.

Run one configuration::

    torchrun --nproc_per_node 2 benchmarks/real/harness.py --preset gpt-350m --strategy ddp \
        --micro-batch 8 --grad-accum 2 --recompute none --out benchmarks/real/runs_h100.yaml

or a list of them in one process group (amortises start-up)::

    torchrun --nproc_per_node 2 benchmarks/real/harness.py --plan benchmarks/real/plans/h100x2.yaml --out runs.yaml

Precision: fp32 master weights, gradients and AdamW states with bf16 autocast (single/DDP/TP/PP);
FSDP2 keeps fp32 sharded params and states and all-gathers bf16 params for compute
(MixedPrecisionPolicy param_dtype=bf16, reduce_dtype=fp32). Attention is
F.scaled_dot_product_attention (causal; flash kernel for bf16 on Hopper). Synthetic tokens.

Configuration parsing lives in config.py (no torch); torch is imported in `main` only.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import config as C  # noqa: E402  (benchmarks/real/config.py, torch-free)

# Keep NVLink multicast off (device README): set before torch.distributed initialises NCCL.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")


def cli_command(cfg: C.RunConfig) -> str:
    """The single-run command line equivalent to `cfg` (recorded in each row's citation)."""
    launch = f"torchrun --nproc_per_node {cfg.world}" if cfg.world > 1 else "python"
    parts = [launch, "benchmarks/real/harness.py", "--preset", cfg.model.name, "--strategy", cfg.strategy,
             "--micro-batch", str(cfg.micro_batch), "--grad-accum", str(cfg.grad_accum),
             "--recompute", cfg.recompute, "--warmup", str(cfg.warmup), "--steps", str(cfg.steps)]
    if cfg.strategy == "tp":
        parts += ["--tp", str(cfg.tp)]
    if cfg.strategy == "pp":
        parts += ["--pp", str(cfg.pp), "--pp-schedule", cfg.pp_schedule]
    return " ".join(parts)


# ----------------------------------------------------------------------------------------------
# torch part


def _build_modules(torch, nn, F):
    from torch.utils.checkpoint import checkpoint

    class Block(nn.Module):
        """Pre-LN transformer block. q/k/v are separate Linears so that column-parallel
        sharding of each splits whole heads (Megatron interleaves a fused QKV instead)."""

        def __init__(self, h: int, heads: int, f: int):
            super().__init__()
            self.head_dim = h // heads
            self.ln1 = nn.LayerNorm(h)
            self.q = nn.Linear(h, h)
            self.k = nn.Linear(h, h)
            self.v = nn.Linear(h, h)
            self.out = nn.Linear(h, h)
            self.ln2 = nn.LayerNorm(h)
            self.fc1 = nn.Linear(h, f)
            self.fc2 = nn.Linear(f, h)

        def forward(self, x):
            b, t, _ = x.shape
            y = self.ln1(x)
            q, k, v = self.q(y), self.k(y), self.v(y)
            nh = q.shape[-1] // self.head_dim          # local heads under tensor parallelism
            q, k, v = (z.view(b, t, nh, self.head_dim).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            a = a.transpose(1, 2).reshape(b, t, nh * self.head_dim)
            x = x + self.out(a)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        """Whole model (first=last=True) or one pipeline stage of it."""

        def __init__(self, m: C.ModelConfig, layers: int, first: bool = True, last: bool = True,
                     tie: bool = True, recompute: bool = False):
            super().__init__()
            self.first, self.last, self.recompute = first, last, recompute
            self.vocab = m.vocab
            if first:
                self.wte = nn.Embedding(m.vocab, m.hidden)
                self.wpe = nn.Embedding(m.seq_len, m.hidden)
            self.blocks = nn.ModuleList(Block(m.hidden, m.heads, m.ffn_hidden) for _ in range(layers))
            if last:
                self.ln_f = nn.LayerNorm(m.hidden)
                self.head = nn.Linear(m.hidden, m.vocab, bias=False)
                if tie and first:
                    self.head.weight = self.wte.weight

        def forward(self, x):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                if self.first:
                    pos = torch.arange(x.shape[1], device=x.device)
                    x = self.wte(x) + self.wpe(pos)
                for blk in self.blocks:
                    x = checkpoint(blk, x, use_reentrant=False) if self.recompute else blk(x)
                if self.last:
                    x = self.head(self.ln_f(x))
                return x

    return GPT


def _env_info(torch) -> dict:
    try:
        drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.split("\n")[0].strip()
    except (OSError, subprocess.SubprocessError):
        drv = None
    nccl = None
    try:
        v = torch.cuda.nccl.version()
        nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001 - informational only
        pass
    return {"gpu_model": torch.cuda.get_device_name(0), "driver": drv, "torch": str(torch.__version__),
            "cuda": str(torch.version.cuda), "nccl": nccl, "gpus_per_node": torch.cuda.device_count()}


def run_one(cfg: C.RunConfig, torch, dist, rank: int, local_rank: int, log) -> dict:
    """Build, train warmup+steps steps, return {step_time_samples_s, peak/reserved memory}."""
    import torch.nn as nn
    import torch.nn.functional as F

    GPT = _build_modules(torch, nn, F)
    m = cfg.model
    dev = torch.device("cuda", local_rank)
    torch.manual_seed(cfg.seed)                         # same weights and data on every rank
    g = torch.Generator(device=dev)
    g.manual_seed(cfg.seed + (rank if cfg.strategy in ("ddp", "fsdp") else 0))
    recompute = cfg.recompute == "full"
    mb, ga = cfg.micro_batch, cfg.grad_accum
    x = torch.randint(0, m.vocab, (ga, mb, m.seq_len), device=dev, generator=g)
    y = torch.randint(0, m.vocab, (ga, mb, m.seq_len), device=dev, generator=g)

    def loss_of(logits, target):
        return F.cross_entropy(logits.float().view(-1, m.vocab), target.reshape(-1))

    optims = []
    if cfg.strategy == "pp":
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        per = m.layers // cfg.pp
        stage_mod = GPT(m, per, first=rank == 0, last=rank == cfg.pp - 1, tie=False, recompute=recompute).to(dev)
        stage = PipelineStage(stage_mod, stage_index=rank, num_stages=cfg.pp, device=dev)
        sched_cls = Schedule1F1B if cfg.pp_schedule == "1f1b" else ScheduleGPipe
        schedule = sched_cls(stage, n_microbatches=ga, loss_fn=loss_of)
        optims.append(torch.optim.AdamW(stage_mod.parameters(), lr=1e-4, fused=True))
        xb, yb = x.view(ga * mb, m.seq_len), y.view(ga * mb, m.seq_len)

        def step():
            if rank == 0:
                schedule.step(xb)
            elif rank == cfg.pp - 1:
                schedule.step(target=yb, losses=[])
            else:
                schedule.step()
            for o in optims:
                o.step()
                o.zero_grad(set_to_none=True)
    else:
        model = GPT(m, m.layers, tie=cfg.tie_embeddings, recompute=recompute).to(dev)
        no_sync = None
        if cfg.strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model, device_ids=[local_rank])
            no_sync = model.no_sync
            optims.append(torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True))
        elif cfg.strategy == "fsdp":
            try:
                from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
            except ImportError:  # torch < 2.6
                from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for blk in model.blocks:
                fully_shard(blk, mp_policy=mp)
            fully_shard(model, mp_policy=mp)
            optims.append(torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True))
        elif cfg.strategy == "tp":
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.tensor import DTensor
            from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

            mesh = init_device_mesh("cuda", (cfg.tp,))
            plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
                    "out": RowwiseParallel(), "fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
            for blk in model.blocks:
                parallelize_module(blk, mesh, plan)
            dt = [p for p in model.parameters() if isinstance(p, DTensor)]
            plain = [p for p in model.parameters() if not isinstance(p, DTensor)]
            optims.append(torch.optim.AdamW(dt, lr=1e-4, foreach=True))
            optims.append(torch.optim.AdamW(plain, lr=1e-4, foreach=True))
        else:
            optims.append(torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True))

        import contextlib

        def step():
            for i in range(ga):
                ctx = no_sync() if (no_sync is not None and i < ga - 1) else contextlib.nullcontext()
                with ctx:
                    loss = loss_of(model(x[i]), y[i]) / ga
                    loss.backward()
            for o in optims:
                o.step()
                o.zero_grad(set_to_none=True)

    times = []
    for i in range(cfg.warmup + cfg.steps):
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize(dev)
        if i >= cfg.warmup:
            times.append(time.perf_counter() - t0)
    gib = 1024 ** 3
    t = torch.tensor(times, device=dev, dtype=torch.float64)
    mem = torch.tensor([torch.cuda.max_memory_allocated(dev) / gib, torch.cuda.max_memory_reserved(dev) / gib],
                       device=dev, dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        dist.all_reduce(mem, op=dist.ReduceOp.MAX)
    return {"step_time_samples_s": t.tolist(), "peak_memory_gib": mem[0].item(),
            "reserved_memory_gib": mem[1].item()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_arguments(ap)
    ap.add_argument("--plan", type=Path, help="YAML list of configurations to run in turn (one process group)")
    ap.add_argument("--only-world", type=int, help="with --plan: run only entries of this world size")
    ap.add_argument("--part", default="0/1", help="with --plan: run entries i with i %% N == K (K/N)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/real/runs_h100.yaml"))
    ap.add_argument("--log", type=Path, help="append one JSON line per run here")
    ns = ap.parse_args(argv)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    try:
        if ns.plan:
            entries = C.yaml.safe_load(ns.plan.read_text(encoding="utf-8"))
            k, n = (int(v) for v in ns.part.split("/"))
            if ns.only_world:
                entries = [e for e in entries if int(e.get("world", 1)) == ns.only_world]
            cfgs = [C.from_mapping(e) for i, e in enumerate(entries) if i % n == k]
            bad = [c.id for c in cfgs if c.world != world]
            if bad:
                raise C.ConfigError(f"entries {bad} need another world size than WORLD_SIZE={world}")
        else:
            cfgs = [C.from_args(ns, world)]
    except (C.ConfigError, OSError, ValueError) as e:
        print(f"harness: error: {e}", file=sys.stderr)
        return 2

    import torch
    import torch.distributed as dist

    torch.cuda.set_device(local_rank)
    if world > 1:
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    env = _env_info(torch)
    date = _dt.date.today().isoformat()
    failures = 0

    def log(msg: str) -> None:
        if rank == 0:
            print(msg, file=sys.stderr, flush=True)

    for cfg in cfgs:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.time()
        try:
            res = run_one(cfg, torch, dist, rank, local_rank, log)
        except Exception as e:  # noqa: BLE001 - record and continue with the next configuration
            failures += 1
            msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            log(f"FAILED {cfg.id}: {msg}")
            if rank == 0:
                traceback.print_exc()
                if ns.log:
                    with ns.log.open("a") as f:
                        f.write(json.dumps({"id": cfg.id, "error": msg}) + "\n")
            continue                       # rows are written per run; the caller's timeout guards a hang
        if rank == 0:
            row = C.make_row(cfg, res, env, cli_command(cfg), date)
            C.append_row(ns.out, row)
            r = row["results"]
            summary = {"id": row["id"], "step_time_s": r["step_time_s"], "peak_memory_gib": r["peak_memory_gib"],
                       "reserved_memory_gib": r["reserved_memory_gib"],
                       "tokens_per_s_per_gpu": r["tokens_per_s_per_gpu"],
                       "spread": round(statistics.pstdev(r["step_time_samples_s"]) / r["step_time_s"], 4),
                       "wall_s": round(time.time() - t0, 1)}
            print(json.dumps(summary), flush=True)
            if ns.log:
                with ns.log.open("a") as f:
                    f.write(json.dumps(summary) + "\n")
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        print(f"harness: {len(cfgs) - failures}/{len(cfgs)} runs ok; command: "
              f"{shlex.join(sys.argv)}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
