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

Tensor parallelism is Megatron-style on plain tensors (`_tp_layers`: torch.autograd.Function +
torch.distributed.all_reduce, no DTensor), with a vocab-parallel embedding, output layer and
cross-entropy. Mixture-of-experts models (`_moe_layers`) replace every MLP by routed experts;
expert parallelism dispatches tokens with all_to_all_single (Megatron-core's "alltoall" token
dispatcher) and keeps the dense parameters data parallel (DDP, expert parameters ignored by it).
After the timed steps one extra step runs under torch.profiler (instrumentation:
GPU busy time, kernel and aten-op counts; see steptrace.py); it is not in the median.

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
from steptrace import OPTIMIZER_RANGE  # noqa: E402  (torch-free)

# Keep NVLink multicast off (device README): set before torch.distributed initialises NCCL.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")


def cli_command(cfg: C.RunConfig) -> str:
    """The single-run command line equivalent to `cfg` (recorded in each row's citation)."""
    launch = f"torchrun --nproc_per_node {cfg.world}" if cfg.world > 1 else "python"
    m = cfg.model
    if m.name in C.PRESETS:
        model = ["--preset", m.name]
    else:     # a shape of its own (plans/h100x4_mb.yaml's gpt-2.7b): every size (the name is the plan's)
        model = ["--layers", str(m.layers), "--hidden", str(m.hidden), "--heads", str(m.heads),
                  "--ffn-hidden", str(m.ffn_hidden), "--vocab", str(m.vocab), "--seq-len", str(m.seq_len)]
    parts = [launch, "benchmarks/real/harness.py", *model, "--strategy", cfg.strategy,
             "--micro-batch", str(cfg.micro_batch), "--grad-accum", str(cfg.grad_accum),
             "--recompute", cfg.recompute, "--warmup", str(cfg.warmup), "--steps", str(cfg.steps)]
    if cfg.strategy == "tp":
        parts += ["--tp", str(cfg.tp)]
    if cfg.strategy == "pp":
        parts += ["--pp", str(cfg.pp), "--pp-schedule", cfg.pp_schedule] + (["--tp", str(cfg.tp)] if cfg.tp > 1 else [])
    if cfg.strategy in ("tp", "pp") and (cfg.dp > 1 or (cfg.strategy == "pp" and cfg.tp > 1)):
        parts += ["--dp", str(cfg.dp)]
    if cfg.model.moe is not None:
        parts += ["--ep", str(cfg.ep), "--router", cfg.router]
    return " ".join(parts)


# ----------------------------------------------------------------------------------------------
# torch part


def _tp_layers(torch, nn, F, dist):
    """Megatron-style tensor parallelism on plain tensors (Shoeybi et al. 2019, sec. 3):
    `copy_to_tp` is Megatron's `f` (forward identity, backward all-reduce of the input gradient),
    `reduce_from_tp` its `g` (forward all-reduce of the output, backward identity). A column-parallel
    Linear shards the output dimension and starts with `f`; a row-parallel Linear shards the input
    dimension and ends with `g` (bias added once, after the reduction). The vocabulary is split
    over the ranks for the embedding, the tied output layer and the cross-entropy. No DTensor."""
    import math
    from types import SimpleNamespace

    class _Copy(torch.autograd.Function):             # f
        @staticmethod
        def forward(ctx, x, group):
            ctx.group = group
            return x

        @staticmethod
        def backward(ctx, g):
            g = g.contiguous()
            dist.all_reduce(g, group=ctx.group)
            return g, None

    class _Reduce(torch.autograd.Function):           # g
        @staticmethod
        def forward(ctx, x, group):
            x = x.contiguous()
            dist.all_reduce(x, group=group)
            return x

        @staticmethod
        def backward(ctx, g):
            return g, None

    def _compute_dtype(x):
        """The autocast dtype when autocast is on: cast before `f` so that its backward
        all-reduce moves 16-bit gradients, as Megatron's bf16 activations do."""
        dt = x.device.type
        if torch.is_autocast_enabled(dt):
            return x.to(torch.get_autocast_dtype(dt))
        return x

    def copy_to_tp(x, tp):
        return _Copy.apply(_compute_dtype(x), tp.group)

    def reduce_from_tp(x, tp):
        return _Reduce.apply(x, tp.group)

    def _uniform(t, fan_in):
        b = 1.0 / math.sqrt(fan_in)                   # nn.Linear's default bound, of the full layer
        with torch.no_grad():
            t.uniform_(-b, b)
        return t

    class ColumnParallelLinear(nn.Module):
        def __init__(self, in_f: int, out_f: int, tp, bias: bool = True):
            super().__init__()
            assert out_f % tp.size == 0, (out_f, tp.size)
            self.tp = tp
            self.weight = nn.Parameter(_uniform(torch.empty(out_f // tp.size, in_f), in_f))
            self.bias = nn.Parameter(_uniform(torch.empty(out_f // tp.size), in_f)) if bias else None

        def forward(self, x):
            return F.linear(copy_to_tp(x, self.tp), self.weight, self.bias)

    class RowParallelLinear(nn.Module):
        def __init__(self, in_f: int, out_f: int, tp, bias: bool = True):
            super().__init__()
            assert in_f % tp.size == 0, (in_f, tp.size)
            self.tp = tp
            self.weight = nn.Parameter(_uniform(torch.empty(out_f, in_f // tp.size), in_f))
            self.bias = nn.Parameter(_uniform(torch.empty(out_f), in_f)) if bias else None

        def forward(self, x):                         # x: this rank's slice of the features
            y = reduce_from_tp(F.linear(x, self.weight), self.tp)
            return y if self.bias is None else y + self.bias.to(y.dtype)

    class VocabParallelEmbedding(nn.Module):
        """Rows [rank*V/tp, (rank+1)*V/tp) of the token embedding; other tokens look up zeros
        here and the all-reduce (`g`) assembles the full embedding (output fp32, as nn.Embedding's
        under autocast in the unsharded model)."""

        def __init__(self, vocab: int, h: int, tp):
            super().__init__()
            assert vocab % tp.size == 0, (vocab, tp.size)
            self.tp = tp
            self.per = vocab // tp.size
            self.start = tp.rank * self.per
            self.weight = nn.Parameter(torch.empty(self.per, h))
            with torch.no_grad():
                self.weight.normal_()                 # nn.Embedding's default
            self.weight_is_vocab_parallel = True

        def forward(self, ids):
            local = ids - self.start
            outside = (local < 0) | (local >= self.per)
            e = F.embedding(local.masked_fill(outside, 0), self.weight)
            return reduce_from_tp(e.masked_fill(outside.unsqueeze(-1), 0.0), self.tp)

    class _VocabParallelCE(torch.autograd.Function):
        """Megatron's vocab-parallel cross-entropy: three all-reduces (max, target logit,
        sum of exp) over fp32 logits of this rank's vocabulary slice; per-token loss."""

        @staticmethod
        def forward(ctx, logits, target, start, group):
            ctx.in_dtype = logits.dtype
            x = logits.float()
            if x.data_ptr() == logits.data_ptr():
                x = x.clone()
            lmax = x.max(dim=-1)[0]
            dist.all_reduce(lmax, op=dist.ReduceOp.MAX, group=group)
            x.sub_(lmax.unsqueeze(-1))
            local = target - start
            outside = (local < 0) | (local >= x.shape[-1])
            local = local.masked_fill(outside, 0)
            pred = x.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
            dist.all_reduce(pred, group=group)
            x.exp_()
            sum_exp = x.sum(dim=-1)
            dist.all_reduce(sum_exp, group=group)
            x.div_(sum_exp.unsqueeze(-1))
            ctx.save_for_backward(x, outside, local)
            return torch.log(sum_exp) - pred

        @staticmethod
        def backward(ctx, g):
            softmax, outside, local = ctx.saved_tensors
            grad = softmax                            # in place, as Megatron (backward runs once)
            grad.scatter_add_(-1, local.unsqueeze(-1), (outside.to(grad.dtype) - 1.0).unsqueeze(-1))
            grad.mul_(g.unsqueeze(-1))
            return grad.to(ctx.in_dtype), None, None, None

    def vocab_parallel_cross_entropy(logits, target, start, tp):
        """Mean loss over tokens; logits (N, V/tp) of this rank's slice starting at `start`."""
        return _VocabParallelCE.apply(logits, target, start, tp.group).mean()

    return SimpleNamespace(copy_to_tp=copy_to_tp, reduce_from_tp=reduce_from_tp,
                           ColumnParallelLinear=ColumnParallelLinear, RowParallelLinear=RowParallelLinear,
                           VocabParallelEmbedding=VocabParallelEmbedding,
                           vocab_parallel_cross_entropy=vocab_parallel_cross_entropy)


def _moe_layers(torch, nn, F, dist):
    """Mixture-of-experts MLP with Megatron-core's "alltoall" token dispatcher semantics.

    Router: bias-free Linear(h, E); `learned` takes the top-k logits per token, `balanced` assigns
    token i to experts (i*k + j) % E (every expert gets exactly N*k/E of the N tokens); in both the
    combine weights are the softmax over the k chosen logits (so the router gets gradients).
    Dispatch: the N*k (token, expert) pairs are permuted so that each expert's tokens are
    contiguous; under expert parallelism (`ep`: SimpleNamespace(group, size, rank), rank r holding
    experts [r*E/ep, (r+1)*E/ep)) `all_to_all_single` with per-rank split sizes sends each rank the
    tokens of its experts, the received chunks (source rank, local expert) are regrouped by local
    expert, the local experts run one after the other (Megatron's SequentialMLP: fc1, GeLU, fc2 with
    biases), and the same steps run backwards (regroup, all-to-all back = combine, unpermute, weight
    by the router probabilities, sum over the k choices). Tokens move in the autocast dtype (bf16).
    The split sizes are known on the host without a sync under the balanced router; the learned
    router reads the per-expert counts from the device (one sync per layer, as Megatron's)."""

    class _AllToAll(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, out_splits, in_splits, group):
            ctx.splits, ctx.group = (out_splits, in_splits), group
            out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
            dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
            return out

        @staticmethod
        def backward(ctx, g):
            out_splits, in_splits = ctx.splits
            gin = g.new_empty((sum(in_splits),) + tuple(g.shape[1:]))
            dist.all_to_all_single(gin, g.contiguous(), in_splits, out_splits, group=ctx.group)
            return gin, None, None, None

    def _regroup(x, sizes, n_rows, n_cols):
        """Chunks laid out row-major over an (n_rows, n_cols) grid -> column-major."""
        if n_rows == 1 or n_cols == 1:
            return x
        chunks = torch.split(x, sizes)
        return torch.cat([chunks[r * n_cols + c] for c in range(n_cols) for r in range(n_rows)])

    class Expert(nn.Module):
        def __init__(self, h: int, f: int):
            super().__init__()
            self.fc1 = nn.Linear(h, f)
            self.fc2 = nn.Linear(f, h)

        def forward(self, x):
            return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))

    class MoEMLP(nn.Module):
        def __init__(self, h: int, moe, router: str = "balanced", ep=None):
            super().__init__()
            self.E, self.k, self.router_mode = moe.experts, moe.top_k, router
            self.ep = ep
            size = 1 if ep is None else ep.size
            assert self.E % size == 0, (self.E, size)
            self.local = self.E // size
            self.first = 0 if ep is None else ep.rank * self.local
            self.router = nn.Linear(h, self.E, bias=False)
            self.experts = nn.ModuleList(Expert(h, moe.expert_ffn_hidden) for _ in range(self.local))

        def forward(self, x):
            shape = x.shape
            dev = x.device.type
            xf = x.reshape(-1, shape[-1])
            n, E, k = xf.shape[0], self.E, self.k
            logits = self.router(xf)
            if self.router_mode == "balanced":
                idx = (torch.arange(n, device=x.device).unsqueeze(1) * k
                       + torch.arange(k, device=x.device).unsqueeze(0)) % E
                assert (n * k) % E == 0, (n, k, E)
                counts = [n * k // E] * E                 # host-known: no device sync
                chosen = logits.gather(1, idx)
            else:
                chosen, idx = logits.topk(k, dim=-1)
                counts = None
            probs = torch.softmax(chosen.float(), dim=-1)  # (n, k) combine weights
            if torch.is_autocast_enabled(dev):
                xf = xf.to(torch.get_autocast_dtype(dev))
            flat = idx.reshape(-1)
            order = torch.argsort(flat, stable=True)       # (token, choice) pairs grouped by expert
            xs = xf[order // k]
            size = 1 if self.ep is None else self.ep.size
            if counts is None:
                cnt = torch.bincount(flat, minlength=E)
            if size > 1:
                L = self.local
                if counts is None:
                    recv = torch.empty_like(cnt)
                    dist.all_to_all_single(recv, cnt, group=self.ep.group)
                    both = torch.cat([cnt, recv]).tolist()    # one device -> host sync
                    counts, rcounts = both[:E], both[E:]
                else:
                    rcounts = [counts[self.first + j] for _ in range(size) for j in range(L)]  # same n on every rank
                in_splits = [sum(counts[r * L:(r + 1) * L]) for r in range(size)]
                out_splits = [sum(rcounts[r * L:(r + 1) * L]) for r in range(size)]
                recv_x = _AllToAll.apply(xs, out_splits, in_splits, self.ep.group)
                # received chunks (source rank r, local expert j), r-major -> j-major
                xs = _regroup(recv_x, rcounts, size, L)
                per_expert = [sum(rcounts[r * L + j] for r in range(size)) for j in range(L)]
            else:
                if counts is None:
                    counts = cnt.tolist()
                per_expert = counts
            outs = [exp(chunk) for exp, chunk in zip(self.experts, torch.split(xs, per_expert), strict=True)]
            ys = torch.cat(outs) if len(outs) > 1 else outs[0]
            if size > 1:
                ys = _regroup(ys, [rcounts[r * L + j] for j in range(L) for r in range(size)], L, size)
                ys = _AllToAll.apply(ys, in_splits, out_splits, self.ep.group)
            inv = torch.empty_like(order)
            inv[order] = torch.arange(order.numel(), device=order.device)
            y = ys[inv].view(n, k, -1)                     # unpermute
            out = (y * probs.unsqueeze(-1).to(y.dtype)).sum(1)
            return out.view(*shape[:-1], out.shape[-1])

    return MoEMLP


def shard_experts(full: dict, rank: int, size: int, experts: int) -> dict:
    """Rank `rank`'s parameters under ep=`size` cut from an ep=1 MoE model's state dict (tests)."""
    local = experts // size
    out = {}
    for k, v in full.items():
        parts = k.split(".")
        if "experts" in parts:
            i = parts.index("experts")
            e = int(parts[i + 1])
            if not rank * local <= e < (rank + 1) * local:
                continue
            parts[i + 1] = str(e - rank * local)
            out[".".join(parts)] = v.clone()
        else:
            out[k] = v.clone()
    return out


def _build_modules(torch, nn, F, dist=None):
    """(GPT, tp layers or None). `GPT(..., tp=SimpleNamespace(group, size, rank))` builds the
    Megatron-style tensor-parallel model on plain tensors; tp=None the unsharded one."""
    from torch.utils.checkpoint import checkpoint

    L = _tp_layers(torch, nn, F, dist) if dist is not None else None
    MoEMLP = _moe_layers(torch, nn, F, dist)

    class Block(nn.Module):
        """Pre-LN transformer block with one fused QKV GEMM. Its output features are laid out
        [q | k | v], each over this rank's heads: under tensor parallelism every rank's column
        shard holds whole heads (the per-partition layout of Megatron's fused QKV)."""

        def __init__(self, h: int, heads: int, f: int, tp=None, moe=None, router: str = "balanced", ep=None):
            super().__init__()
            self.head_dim = h // heads
            self.ln1 = nn.LayerNorm(h)
            self.ln2 = nn.LayerNorm(h)
            self.moe = None
            if moe is not None:
                assert tp is None, "MoE runs without tensor parallelism"
                self.qkv = nn.Linear(h, 3 * h)
                self.out = nn.Linear(h, h)
                self.moe = MoEMLP(h, moe, router, ep)
            elif tp is None:
                self.qkv = nn.Linear(h, 3 * h)
                self.out = nn.Linear(h, h)
                self.fc1 = nn.Linear(h, f)
                self.fc2 = nn.Linear(f, h)
            else:
                self.qkv = L.ColumnParallelLinear(h, 3 * h, tp)
                self.out = L.RowParallelLinear(h, h, tp)
                self.fc1 = L.ColumnParallelLinear(h, f, tp)
                self.fc2 = L.RowParallelLinear(f, h, tp)

        def forward(self, x):
            b, t, _ = x.shape
            qkv = self.qkv(self.ln1(x))
            nh = qkv.shape[-1] // (3 * self.head_dim)     # local heads under tensor parallelism
            q, k, v = qkv.view(b, t, 3, nh, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            a = a.transpose(1, 2).reshape(b, t, nh * self.head_dim)
            x = x + self.out(a)
            if self.moe is not None:
                return x + self.moe(self.ln2(x))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        """Whole model (first=last=True) or one pipeline stage of it. With `tp`, forward returns
        this rank's vocabulary slice of the logits (use `loss`, which knows)."""

        def __init__(self, m: C.ModelConfig, layers: int, first: bool = True, last: bool = True,
                     tie: bool = True, recompute: bool = False, tp=None, amp: bool = True,
                     router: str = "balanced", ep=None):
            super().__init__()
            self.first, self.last, self.recompute, self.tp, self.amp = first, last, recompute, tp, amp
            self.vocab = m.vocab
            if tp is not None and tie and not (first and last):
                raise ValueError("a tied tensor-parallel model is whole (pipeline stages untie)")
            if first:
                self.wte = nn.Embedding(m.vocab, m.hidden) if tp is None else L.VocabParallelEmbedding(m.vocab, m.hidden, tp)
                self.wpe = nn.Embedding(m.seq_len, m.hidden)
            self.blocks = nn.ModuleList(Block(m.hidden, m.heads, m.ffn_hidden, tp, m.moe, router, ep)
                                        for _ in range(layers))
            if last:
                self.ln_f = nn.LayerNorm(m.hidden)
                if tp is None:
                    self.head = nn.Linear(m.hidden, m.vocab, bias=False)
                    if tie and first:
                        self.head.weight = self.wte.weight
                elif not (tie and first):               # last pipeline stage: own vocab-parallel output layer
                    self.head = L.VocabParallelEmbedding(m.vocab, m.hidden, tp)

        def forward(self, x):
            with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.amp):
                if self.first:
                    pos = torch.arange(x.shape[1], device=x.device)
                    x = self.wte(x) + self.wpe(pos)
                for blk in self.blocks:
                    x = checkpoint(blk, x, use_reentrant=False) if self.recompute else blk(x)
                if self.last:
                    y = self.ln_f(x)
                    if self.tp is None:
                        return self.head(y)
                    return F.linear(L.copy_to_tp(y, self.tp), self._out_w().weight)   # column-parallel
                return x

        def loss(self, logits, target):
            """Mean cross-entropy on fp32 logits (vocab-parallel under tp)."""
            if self.tp is None:
                return F.cross_entropy(logits.float().view(-1, self.vocab), target.reshape(-1))
            return L.vocab_parallel_cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                                                  self._out_w().start, self.tp)

        def _out_w(self):
            """The (vocab-parallel) output layer: the tied embedding, or the last stage's own."""
            return self.head if hasattr(self, "head") else self.wte

    return GPT


def shard_state_dict(full: dict, rank: int, size: int) -> dict:
    """The tensor-parallel rank's parameters cut from an unsharded model's state dict (for
    tests: the sharded model then computes the unsharded one's loss and gradients)."""
    import torch

    out = {}
    for k, v in full.items():
        mod, _, leaf = k.rpartition(".")
        if mod.endswith(".qkv"):                      # [q | k | v] of all heads -> of this rank's heads
            n = v.shape[0] // 3
            per = n // size
            out[k] = torch.cat([v[i * n + rank * per: i * n + (rank + 1) * per] for i in range(3)], dim=0)
        elif mod.endswith(".fc1") or k == "wte.weight":
            per = v.shape[0] // size
            out[k] = v[rank * per:(rank + 1) * per]
        elif mod.endswith((".out", ".fc2")) and leaf == "weight":
            per = v.shape[1] // size
            out[k] = v[:, rank * per:(rank + 1) * per]
        elif k == "head.weight":
            continue                                  # tied to wte.weight
        else:
            out[k] = v
    return {k: v.clone() for k, v in out.items()}


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


#: id of the run being profiled (set by main), for _keep_trace
_TRACE_TAG = ""


def _keep_trace(path: Path) -> None:
    """Opt-in: keep the profiled step's Chrome trace, gzipped, as
    $BAIGE_TRACE_DIR/<run id>_r<rank>.json.gz when the run id matches the regular expression
    $BAIGE_TRACE_MATCH (default: every run) and the rank is in $BAIGE_TRACE_RANKS (default "0")."""
    d = os.environ.get("BAIGE_TRACE_DIR")
    rank = os.environ.get("RANK", "0")
    if not d or not path.exists() or rank not in os.environ.get("BAIGE_TRACE_RANKS", "0").split(","):
        return
    import gzip
    import re
    import shutil

    if not re.search(os.environ.get("BAIGE_TRACE_MATCH", ""), _TRACE_TAG):
        return
    try:
        Path(d).mkdir(parents=True, exist_ok=True)
        with path.open("rb") as src, gzip.open(Path(d) / f"{_TRACE_TAG or 'run'}_r{rank}.json.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
    except OSError as e:
        print(f"harness: trace not kept ({e})", file=sys.stderr)


def _profile_step(torch, step, sync) -> dict:
    """One extra step under torch.profiler (after the timed steps; not in the median): the
    figures of steptrace.analyze_trace, plus the profiled step's own wall and host times."""
    import steptrace
    from torch.profiler import ProfilerActivity, profile

    path = Path(f"/tmp/baige_trace_{os.getpid()}.json")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    sync()
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        step()
        th = time.perf_counter()
        sync()
        t1 = time.perf_counter()
    out = None
    try:
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text(encoding="utf-8")).get("traceEvents", [])
        out = steptrace.analyze_trace(events)   # one GPU per process: every device event is ours
    except Exception as e:  # noqa: BLE001 - fall back on the profiler's own event list
        print(f"harness: chrome trace unreadable ({type(e).__name__}: {e}); using prof.events()", file=sys.stderr)
    finally:
        _keep_trace(path)
        path.unlink(missing_ok=True)
    if out is None or (torch.cuda.is_available() and out["kernels_per_step"] == 0):
        from torch.autograd import DeviceType

        evs = []
        for e in prof.events():
            rec = {"ph": "X", "name": e.name, "ts": e.time_range.start, "dur": e.time_range.elapsed_us(),
                   "pid": 0, "tid": e.thread}
            if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False):
                rec["cat"] = ("gpu_memcpy" if e.name.startswith("Memcpy") else
                              "gpu_memset" if e.name.startswith("Memset") else "kernel")
            elif e.device_type == DeviceType.CPU:
                rec["cat"] = "cpu_op"
            else:
                continue
            evs.append(rec)
        out = steptrace.analyze_trace(evs)
        out.pop("optimizer_kernels_s", None)
        print("harness: profiled-step figures from prof.events()", file=sys.stderr, flush=True)
    out["profiled_step_s"] = t1 - t0
    out["profiled_host_step_s"] = th - t0
    return out


#: figures gathered from every rank (rank 0's go into the row; all ranks' into per_rank)
_RANK_KEYS = ("host_step_s", "gpu_busy_s", "compute_busy_s", "nccl_busy_s", "gpu_kernel_sum_s", "gpu_span_s",
              "kernels_per_step", "cpu_ops_per_step", "cpu_top_ops_per_step", "optimizer_s",
              "optimizer_kernels_s", "profiled_step_s", "profiled_host_step_s")


def run_one(cfg: C.RunConfig, torch, dist, rank: int, local_rank: int, log, profile: bool = True,
            device=None) -> dict:
    """Build, train warmup+steps timed steps (+1 profiled step), return
    {step_time_samples_s, peak/reserved memory, instrumentation figures}. `device` defaults to
    cuda:local_rank; a CPU device (with gloo) serves the tests."""
    import contextlib
    from types import SimpleNamespace

    import torch.nn as nn
    import torch.nn.functional as F

    GPT = _build_modules(torch, nn, F, dist)
    m = cfg.model
    dev = device if device is not None else torch.device("cuda", local_rank)
    cuda = dev.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    # Megatron rank order: tp fastest, then dp, then pp. Every rank creates every group, in order.
    world_n = dist.get_world_size() if dist.is_initialized() else 1
    tp_rank, dp_rank, pp_rank = rank % cfg.tp, (rank // cfg.tp) % cfg.dp, rank // (cfg.tp * cfg.dp)

    def _group(size, members):
        """This rank's group among `members` (a list of rank lists); WORLD when one spans all."""
        if size == world_n:
            return dist.group.WORLD
        mine = None
        for ranks in members:
            grp = dist.new_group(ranks)
            if rank in ranks:
                mine = grp
        return mine

    hybrid = cfg.strategy in ("tp", "pp") and cfg.dp > 1 or (cfg.strategy == "pp" and cfg.tp > 1)
    tp_group = dp_group = pp_group = None
    if hybrid:
        n_tp, n_dp, n_pp = cfg.tp, cfg.dp, cfg.pp
        idx = lambda t, d, p: (p * n_dp + d) * n_tp + t          # noqa: E731
        if n_tp > 1:
            tp_group = _group(n_tp, [[idx(t, d, p) for t in range(n_tp)] for p in range(n_pp) for d in range(n_dp)])
        if n_dp > 1:
            dp_group = _group(n_dp, [[idx(t, d, p) for d in range(n_dp)] for p in range(n_pp) for t in range(n_tp)])
        if n_pp > 1:
            pp_group = _group(n_pp, [[idx(t, d, p) for p in range(n_pp)] for d in range(n_dp) for t in range(n_tp)])
    torch.manual_seed(cfg.seed)                         # same weights and data on every rank
    g = torch.Generator(device=dev)
    g.manual_seed(cfg.seed + (rank if cfg.strategy in ("ddp", "fsdp") else dp_rank))
    recompute = cfg.recompute == "full"
    mb, ga = cfg.micro_batch, cfg.grad_accum
    x = torch.randint(0, m.vocab, (ga, mb, m.seq_len), device=dev, generator=g)
    y = torch.randint(0, m.vocab, (ga, mb, m.seq_len), device=dev, generator=g)
    ev_opt = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else None

    def optimizer_step():
        if ev_opt:
            ev_opt[0].record()
        with torch.profiler.record_function(OPTIMIZER_RANGE):
            for o in optims:
                o.step()
                o.zero_grad(set_to_none=True)
        if ev_opt:
            ev_opt[1].record()

    optims = []
    if cfg.strategy == "pp":
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        per = m.layers // cfg.pp
        srank = pp_rank if hybrid else rank             # stage index
        tp = None
        if cfg.tp > 1:
            tp = SimpleNamespace(group=tp_group, size=cfg.tp, rank=tp_rank)
        with dev:
            stage_mod = GPT(m, per, first=srank == 0, last=srank == cfg.pp - 1, tie=False, recompute=recompute, tp=tp)
        sub = stage_mod
        if dp_group is not None:                        # PP x DP: DDP per stage (pipelining drives no_sync)
            from torch.nn.parallel import DistributedDataParallel as DDP

            sub = DDP(stage_mod, device_ids=[local_rank] if cuda else None, process_group=dp_group)
        stage = PipelineStage(sub, stage_index=srank, num_stages=cfg.pp, device=dev,
                              **({"group": pp_group} if pp_group is not None else {}))
        sched_cls = Schedule1F1B if cfg.pp_schedule == "1f1b" else ScheduleGPipe
        schedule = sched_cls(stage, n_microbatches=ga, loss_fn=stage_mod.loss)
        optims.append(torch.optim.AdamW(stage_mod.parameters(), lr=1e-4, fused=cuda))
        xb, yb = x.view(ga * mb, m.seq_len), y.view(ga * mb, m.seq_len)

        def step():
            if srank == 0:
                schedule.step(xb)
            elif srank == cfg.pp - 1:
                schedule.step(target=yb, losses=[])
            else:
                schedule.step()
            optimizer_step()
    else:
        tp = ep = None
        if cfg.strategy == "tp":
            tp = SimpleNamespace(group=tp_group if hybrid else dist.group.WORLD, size=cfg.tp,
                                 rank=tp_rank if hybrid else dist.get_rank())
        if cfg.ep > 1:                                  # ep == world (config): one EP group, its own communicator
            ep = SimpleNamespace(group=dist.new_group(list(range(cfg.ep))), size=cfg.ep, rank=dist.get_rank())
        with dev:
            model = GPT(m, m.layers, tie=cfg.tie_embeddings, recompute=recompute, tp=tp, router=cfg.router, ep=ep)
        loss_of = model.loss
        no_sync = None
        if cfg.strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            if ep is not None:                          # experts sharded, not replicated: DDP syncs dense only
                DDP._set_params_and_buffers_to_ignore_for_model(
                    model, [n for n, _ in model.named_parameters() if ".experts." in n])
            model = DDP(model, device_ids=[local_rank] if cuda else None)
            no_sync = model.no_sync
            optims.append(torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda))
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
        elif dp_group is not None:                      # TP x DP: DDP over the data-parallel group
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model, device_ids=[local_rank] if cuda else None, process_group=dp_group)
            no_sync = model.no_sync
            optims.append(torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda))
        else:                                           # single, tp (plain tensors: fused AdamW)
            optims.append(torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda))

        def step():
            for i in range(ga):
                ctx = no_sync() if (no_sync is not None and i < ga - 1) else contextlib.nullcontext()
                with ctx:
                    loss = loss_of(model(x[i]), y[i]) / ga
                    loss.backward()
            optimizer_step()

    times, host, opt = [], [], []
    for i in range(cfg.warmup + cfg.steps):
        sync()
        t0 = time.perf_counter()
        step()
        th = time.perf_counter()                        # host done: every kernel of the step launched
        sync()
        if i >= cfg.warmup:
            times.append(time.perf_counter() - t0)
            host.append(th - t0)
            if ev_opt:
                opt.append(ev_opt[0].elapsed_time(ev_opt[1]) * 1e-3)
    gib = 1024 ** 3
    t = torch.tensor(times, device=dev, dtype=torch.float64)
    mem = torch.tensor([torch.cuda.max_memory_allocated(dev) / gib, torch.cuda.max_memory_reserved(dev) / gib]
                       if cuda else [0.0, 0.0], device=dev, dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        dist.all_reduce(mem, op=dist.ReduceOp.MAX)
    figs = {"host_step_s": statistics.median(host)}
    if opt:
        figs["optimizer_s"] = statistics.median(opt)
    if profile:
        try:
            figs.update(_profile_step(torch, step, sync))
        except Exception as e:  # noqa: BLE001 - the timing stands without the profile
            print(f"harness: rank {rank}: profiled step failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            sync()
    vec = torch.tensor([float(figs.get(k, float("nan"))) for k in _RANK_KEYS], device=dev, dtype=torch.float64)
    world = dist.get_world_size() if dist.is_initialized() else 1
    if world > 1:
        parts = [torch.empty_like(vec) for _ in range(world)]
        dist.all_gather(parts, vec)
        per_rank = [p.tolist() for p in parts]
    else:
        per_rank = [vec.tolist()]
    res = {"step_time_samples_s": t.tolist(), "peak_memory_gib": mem[0].item(),
           "reserved_memory_gib": mem[1].item()}
    for j, k in enumerate(_RANK_KEYS):
        v0 = per_rank[0][j]
        if v0 == v0:                                    # not NaN
            res[k] = v0
    for k in ("kernel_time_by_kind_s", "top_kernels"):  # rank 0's kernel breakdown (from the trace)
        if k in figs and rank == 0:
            res[k] = figs[k]
    if world > 1:
        res["per_rank"] = {k: [r[j] for r in per_rank] for j, k in enumerate(_RANK_KEYS)
                           if k in ("host_step_s", "gpu_busy_s", "nccl_busy_s", "kernels_per_step",
                                    "cpu_ops_per_step") and all(r[j] == r[j] for r in per_rank)}
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_arguments(ap)
    ap.add_argument("--plan", type=Path, help="YAML list of configurations to run in turn (one process group)")
    ap.add_argument("--only-world", type=int, help="with --plan: run only entries of this world size")
    ap.add_argument("--part", default="0/1", help="with --plan: run entries i with i %% N == K (K/N)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/real/runs_h100.yaml"))
    ap.add_argument("--log", type=Path, help="append one JSON line per run here")
    ap.add_argument("--no-profile", dest="profile", action="store_false",
                    help="skip the extra torch.profiler step (gpu_busy_s, kernels, cpu ops)")
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
        global _TRACE_TAG
        _TRACE_TAG = cfg.id
        try:
            res = run_one(cfg, torch, dist, rank, local_rank, log, profile=ns.profile)
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
                       **{k: r[k] for k in ("host_step_s", "gpu_busy_s", "nccl_busy_s", "kernels_per_step",
                                            "cpu_ops_per_step", "optimizer_s", "profiled_step_s") if k in r},
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
