"""Measure a model's per-layer profile on the local GPU with torch (imported lazily), or write the
analytical model's own numbers as one (no torch): schema baige-plan/profile/v1 (specs/profile.py).

    python -m baige_plan.profile.layers --model llama3-8b --tp 1,2 --micro-batch 1,2 --out l8.yaml
    python -m baige_plan.profile.layers --model opt-350m --analytical --chip a100-sxm4-40g --out a.yaml

Method (as the profilers of Metis, Sailor and AMP): one transformer layer of the model's shape in
plain PyTorch -- pre-norm (RMSNorm for SwiGLU models, LayerNorm with biases otherwise), a fused QKV
projection, causal scaled-dot-product attention (GQA; PyTorch's flash kernel), output projection,
dropout on the two residual branches when the model has dropout, the MLP (SwiGLU or GeLU) -- in the
job's precision (bf16/fp16 parameters and activations; fp32 with IEEE fp32 matmuls, tf32 with
TF32 tensor-core matmuls, as the cost model means them). Tensor parallelism is emulated on one device by dividing heads, kv_heads
and ffn_hidden by tp: the tp all-reduces are NOT measured and stay in the cost model. Each
(tp, micro-batch, recompute) is timed with CUDA events after warm-up, forward and backward
separately, the median of several iterations; gradients accumulate (as over micro-batches).
Recompute: none; selective = the attention core under torch.utils.checkpoint; full = the whole
layer checkpointed (backward_s is taken from the no-recompute run, recompute_s is the difference).
Activation bytes = memory allocated by the forward and held for the backward (incl. the layer's
output, which is the next layer's input); working bytes = that without recomputation. The
embedding (vocab/tp rows) and the output layer (final norm, logits GEMM over vocab/tp, fp32
cross-entropy) are measured the same way; the optimizer step is a fused Adam over fp32 master copies
of one layer's parameters (+ the copy back to 16-bit), per parameter.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import re
import statistics
import sys
from pathlib import Path

NOTE_TP = ("tp emulated on one device by dividing heads, kv_heads and ffn_hidden by tp (as the Metis/Sailor "
           "profilers do): TP communication is not measured and stays in the cost model")

# torch.cuda.get_device_name() fragments -> catalog chip id (the profile names the chip it was measured on)
DEVICE_CHIPS = (("H200", "h200-sxm-141g"), ("H100 PCIe", "h100-pcie-80g"), ("H100", "h100-sxm5-80g"),
                ("H800", "h800-sxm5-80g"), ("A100-SXM4-40GB", "a100-sxm4-40g"), ("A100-SXM4-80GB", "a100-sxm4-80g"),
                ("A100 80GB PCIe", "a100-pcie-80g"), ("V100-SXM2-16GB", "v100-sxm2-16g"),
                ("V100-SXM2-32GB", "v100-sxm2-32g"), ("B200", "b200"))


def chip_for_device(name: str) -> str | None:
    for frag, chip in DEVICE_CHIPS:
        if frag in name:
            return chip
    return None


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _dtype(torch, precision: str):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "tf32": torch.float32}[precision]


class _Timer:
    def __init__(self, torch):
        self.torch = torch

    def fwd_bwd(self, fwd, bwd, reps: int, warmup: int = 3) -> tuple[float, float]:
        """Median seconds of fwd() and of bwd(out) over `reps` iterations after `warmup`."""
        torch = self.torch
        for _ in range(warmup):
            bwd(fwd())
        torch.cuda.synchronize()
        f_s, b_s = [], []
        for _ in range(reps):
            e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            e0.record()
            out = fwd()
            e1.record()
            bwd(out)
            e2.record()
            e2.synchronize()
            f_s.append(e0.elapsed_time(e1) / 1e3)
            b_s.append(e1.elapsed_time(e2) / 1e3)
            del out
        return statistics.median(f_s), statistics.median(b_s)

    def once(self, fn, reps: int, warmup: int = 3) -> float:
        torch = self.torch
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1) / 1e3)
        return statistics.median(ts)


def _layer_module(torch, model, tp: int, dtype, selective: bool):
    nn, F = torch.nn, torch.nn.functional
    h, hd = model.hidden, model.head_dim
    nq, nkv, f = model.heads // tp, model.kv_heads // tp, model.ffn_hidden // tp
    swiglu = model.activation == "swiglu"
    bias = not swiglu          # GPT/OPT-style layers carry biases, Llama-style ones do not
    p_drop = float(model.dropout)

    def norm():
        return nn.RMSNorm(h, eps=1e-5) if swiglu and hasattr(nn, "RMSNorm") else nn.LayerNorm(h)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = norm(), norm()
            self.qkv = nn.Linear(h, (nq + 2 * nkv) * hd, bias=bias)
            self.proj = nn.Linear(nq * hd, h, bias=bias)
            self.up = nn.Linear(h, (2 if swiglu else 1) * f, bias=bias)
            self.down = nn.Linear(f, h, bias=bias)

        @staticmethod
        def _core(q, k, v):
            if nkv != nq:
                try:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                except TypeError:   # torch < 2.5: expand the kv heads
                    k = k.repeat_interleave(nq // nkv, dim=1)
                    v = v.repeat_interleave(nq // nkv, dim=1)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def forward(self, x):
            b, s, _ = x.shape
            y = self.qkv(self.ln1(x))
            q, k, v = y.split((nq * hd, nkv * hd, nkv * hd), dim=-1)
            q = q.view(b, s, nq, hd).transpose(1, 2)
            k = k.view(b, s, nkv, hd).transpose(1, 2)
            v = v.view(b, s, nkv, hd).transpose(1, 2)
            if selective:
                o = torch.utils.checkpoint.checkpoint(self._core, q, k, v, use_reentrant=False)
            else:
                o = self._core(q, k, v)
            o = self.proj(o.transpose(1, 2).reshape(b, s, nq * hd))
            x = x + (F.dropout(o, p_drop) if p_drop else o)
            u = self.up(self.ln2(x))
            if swiglu:
                g, u = u.chunk(2, dim=-1)
                a = F.silu(g) * u
            else:
                a = F.gelu(u)
            d = self.down(a)
            return x + (F.dropout(d, p_drop) if p_drop else d)

    return Layer()


def _bytes_of(params) -> int:
    return sum(p.numel() * p.element_size() for p in params)


def _held_bytes(torch, fn) -> tuple[int, object]:
    """Bytes a forward allocates and keeps (saved for backward + its output), and the output."""
    torch.cuda.synchronize()
    m0 = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated() - m0, out


def _measure_layer(torch, timer: _Timer, model, seq: int, dtype, tp: int, mb: int, recompute: str, reps: int,
                   dev) -> tuple[dict, list]:
    from torch.utils.checkpoint import checkpoint
    layer = _layer_module(torch, model, tp, dtype, selective=recompute == "selective").to(dev, dtype)
    layer.train()
    x = torch.randn(mb, seq, model.hidden, device=dev, dtype=dtype, requires_grad=True)
    g = torch.randn_like(x)

    def fwd():
        return checkpoint(layer, x, use_reentrant=False) if recompute == "full" else layer(x)

    def bwd(y):
        y.backward(g)

    f_s, b_s = timer.fwd_bwd(fwd, bwd, reps)
    rec_s = 0.0
    working = None
    if recompute in ("full", "selective"):
        # backward without recomputation (plain layer, no checkpointed core) -> what recomputation adds
        base = _layer_module(torch, model, tp, dtype, selective=False).to(dev, dtype)
        base.load_state_dict(layer.state_dict())
        _, b0 = timer.fwd_bwd(lambda: base(x), bwd, reps)
        rec_s = max(0.0, b_s - b0)
        b_s = min(b_s, b0)
        if recompute == "full":
            working = float(_held_bytes(torch, lambda: base(x))[0])
    held, y = _held_bytes(torch, fwd)
    d = {"forward_s": f_s, "backward_s": b_s, "recompute_s": rec_s, "activation_bytes": float(held)}
    if working is not None:
        d["working_bytes"] = working
    d["output_bytes"] = float(y.numel() * y.element_size())
    params = [p.detach() for p in layer.parameters()]
    d["parameter_bytes"] = float(_bytes_of(params))
    return d, params


def _measure_optimizer(torch, timer: _Timer, params: list, precision: str, reps: int) -> float:
    """Seconds of a fused Adam step over fp32 master copies of `params` (+ the copy back to 16-bit)."""
    full = precision in ("fp32", "tf32")
    master = [p.clone() if full else p.float() for p in params]
    for mp in master:
        mp.grad = torch.randn_like(mp)
    try:
        opt = torch.optim.Adam(master, lr=1e-4, fused=True)
    except (TypeError, RuntimeError):
        opt = torch.optim.Adam(master, lr=1e-4)

    def step():
        opt.step()
        if not full:   # the updated fp32 master weights back into the 16-bit parameters
            with torch.no_grad():
                for p, mp in zip(params, master, strict=True):
                    p.copy_(mp)

    return timer.once(step, reps)


def _measure_embedding(torch, timer: _Timer, model, seq: int, dtype, tp: int, mb: int, reps: int, dev) -> dict:
    v_loc = -(-model.vocab // tp)          # vocab-parallel shard
    emb = torch.nn.Embedding(v_loc, model.hidden).to(dev, dtype)
    ids = torch.randint(0, v_loc, (mb, seq), device=dev)
    ge = torch.randn(mb, seq, model.hidden, device=dev, dtype=dtype)
    ef, eb = timer.fwd_bwd(lambda: emb(ids), lambda y: y.backward(ge), reps)
    held, _ = _held_bytes(torch, lambda: emb(ids))
    return {"forward_s": ef, "backward_s": eb, "activation_bytes": float(held),
            "parameter_bytes": float(_bytes_of(emb.parameters()))}


def _measure_head(torch, timer: _Timer, model, seq: int, dtype, tp: int, mb: int, reps: int, dev) -> dict:
    """Final norm + logits GEMM over vocab/tp + fp32 cross-entropy."""
    F = torch.nn.functional
    v_loc = -(-model.vocab // tp)
    norm = (torch.nn.RMSNorm(model.hidden) if model.activation == "swiglu" and hasattr(torch.nn, "RMSNorm")
            else torch.nn.LayerNorm(model.hidden)).to(dev, dtype)
    head = torch.nn.Linear(model.hidden, v_loc, bias=False).to(dev, dtype)
    xh = torch.randn(mb, seq, model.hidden, device=dev, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, v_loc, (mb * seq,), device=dev)

    def fwd():
        return F.cross_entropy(head(norm(xh)).float().view(-1, v_loc), labels)

    lf, lb = timer.fwd_bwd(fwd, lambda loss: loss.backward(), reps)
    held, _ = _held_bytes(torch, fwd)
    return {"forward_s": lf, "backward_s": lb, "activation_bytes": float(held),
            "parameter_bytes": float(_bytes_of(list(head.parameters()) + list(norm.parameters())))}


def measure_entry(torch, model, seq: int, precision: str, tp: int, mb: int, recompute: str, reps: int,
                  dev) -> dict:
    """One profile entry (a dict in the file form) for (tp, micro-batch, recompute)."""
    dtype = _dtype(torch, precision)
    timer = _Timer(torch)
    layer, params = _measure_layer(torch, timer, model, seq, dtype, tp, mb, recompute, reps, dev)
    torch.cuda.empty_cache()
    opt_s = _measure_optimizer(torch, timer, params, precision, reps)
    layer["optimizer_s"] = opt_s
    n_params = sum(p.numel() for p in params)
    del params
    torch.cuda.empty_cache()
    emb = _measure_embedding(torch, timer, model, seq, dtype, tp, mb, reps, dev)
    torch.cuda.empty_cache()
    head = _measure_head(torch, timer, model, seq, dtype, tp, mb, reps, dev)
    torch.cuda.empty_cache()
    return {"tp": tp, "micro_batch": mb, "recompute": recompute, "sequence_parallel": False, "layer": layer,
            "embedding": emb, "logits": head, "optimizer_s_per_param": opt_s / n_params}


def measure_profile(model, chip: str, seq: int, precision: str, tps: tuple[int, ...], mbs: tuple[int, ...],
                    recomputes: tuple[str, ...], reps: int, command: str, name: str | None = None) -> dict:
    """Measure every (tp, micro-batch, recompute) on cuda:0; returns the profile document."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: baige-plan profile --model measures on a local GPU")
    dev = torch.device("cuda:0")
    if precision not in ("bf16", "fp16", "fp32", "tf32"):
        raise RuntimeError(f"precision {precision} is not measured by this profiler (bf16, fp16, fp32, tf32)")
    # fp32: IEEE fp32 matmuls (PyTorch's default); tf32: fp32 storage, TF32 tensor-core matmuls
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.manual_seed(0)
    entries = []
    for tp in tps:
        for mb in mbs:
            for rec in recomputes:
                print(f"[profile] {model.name} tp={tp} micro_batch={mb} recompute={rec} {precision}",
                      file=sys.stderr, flush=True)
                entries.append(measure_entry(torch, model, seq, precision, tp, mb, rec, reps, dev))
    props = torch.cuda.get_device_properties(0)
    prov = {"method": "measured", "device": f"{torch.cuda.get_device_name(0)} ({props.total_memory / 2**30:.0f} GiB)",
            "torch": torch.__version__, "cuda": str(torch.version.cuda),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"), "command": command,
            "notes": (f"{NOTE_TP}; plain PyTorch eager layer (no fused kernels), flash SDPA, median of {reps} "
                      "iterations after 3 warm-ups, CUDA events; activation bytes = torch.cuda.memory_allocated "
                      "delta over the forward; optimizer = fused torch.optim.Adam on fp32 master copies"
                      + {"tf32": "; fp32 storage, TF32 matmuls (allow_tf32)",
                         "fp32": "; IEEE fp32 matmuls (allow_tf32 off)"}.get(precision, ""))}
    from baige_plan.cost.measured import profiled_model
    from baige_plan.io.profiles import profile_from_dict, profile_to_dict
    pm = profiled_model(model)
    doc = {"schema": "baige-plan/profile/v1", "name": name or f"{model.name}@{chip}-{precision}", "model": {
        k: getattr(pm, k) for k in ("name", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab",
                                    "activation", "head_dim")}, "chip": chip, "seq_len": seq, "precision": precision,
        "attention": "flash", "provenance": prov, "entries": entries}
    return profile_to_dict(profile_from_dict(doc, "<measured>"))   # validated, canonical order


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m baige_plan.profile.layers", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--seq-len", type=int)
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--tp", default="1,2")
    ap.add_argument("--micro-batch", default="1,2")
    ap.add_argument("--recompute", default="none,selective,full")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--chip", help="catalog chip id the profile names (default: from the GPU's name)")
    ap.add_argument("--name", help="profile name (default MODEL@CHIP-PRECISION)")
    ap.add_argument("--analytical", action="store_true", help="write the cost model's own numbers (no torch)")
    ap.add_argument("--catalog", action="append", default=[])
    a = ap.parse_args(argv)
    from baige_plan.io.catalog import Catalog
    from baige_plan.io.profiles import dump_profile, profile_from_dict
    from baige_plan.specs.profile import RECOMPUTE

    cat = Catalog.create(a.catalog)
    from baige_plan.errors import InputError
    try:
        model = cat.model(a.model)
    except InputError as e:         # the catalog names a plan's MODEL argument; here it is --model
        raise InputError("--model", e.field, e.reason) if e.source == "MODEL" else e from None
    seq = a.seq_len or model.seq_len
    tps, mbs = _ints(a.tp), _ints(a.micro_batch)
    recs = tuple(r.strip() for r in a.recompute.split(",") if r.strip())
    for r in recs:
        if r not in RECOMPUTE:
            raise ValueError(f"--recompute: unknown mode {r!r} (none, selective, full)")
    for tp in tps:
        if model.heads % tp or model.kv_heads % tp or model.ffn_hidden % tp:
            raise ValueError(f"--tp {tp} does not divide heads={model.heads}, kv_heads={model.kv_heads}, "
                             f"ffn_hidden={model.ffn_hidden}")
    command = "baige-plan profile " + " ".join(argv if argv is not None else sys.argv[1:])
    if a.analytical:
        if not a.chip:
            raise ValueError("--analytical needs --chip CHIP (whose cost-model numbers to write)")
        from baige_plan.cost.measured import analytical_profile
        p = analytical_profile(model, cat.chip(a.chip, "--chip", ""), seq, a.precision, tps, mbs, recs, name=a.name,
                               command=command)
        header = "# The cost model's own per-layer numbers (not a measurement), written by baige-plan profile --analytical"
    else:
        chip = a.chip
        if chip is None:
            import torch
            if not torch.cuda.is_available():
                raise RuntimeError("no CUDA device: baige-plan profile --model measures on a local GPU")
            chip = chip_for_device(torch.cuda.get_device_name(0))
            if chip is None:
                raise RuntimeError(f"cannot tell the catalog chip of {torch.cuda.get_device_name(0)!r}: pass --chip")
        doc = measure_profile(model, chip, seq, a.precision, tps, mbs, recs, a.reps, command, a.name)
        p = profile_from_dict(doc, "<measured>")
        header = f"# Measured per-layer profile written by baige-plan profile --model ({NOTE_TP})"
    text = dump_profile(p, header)
    from baige_plan.io.outfile import write_atomic
    if a.out is None:       # a name from --name or the model: safe characters only, a length any file system takes
        stem = re.sub(r"[^\w.@+=-]", "_", p.name, flags=re.ASCII)[:200]
        out = Path(f"{stem}.profile.yaml")
    else:
        out = a.out
    write_atomic(out, text)     # atomic; refuses a folder, pipe or device; an OS error names the file
    from baige_plan.safe_text import printable
    print(f"wrote {printable(str(out))} ({len(p.entries)} entries)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
