"""Configuration of the real-hardware training harness (benchmarks/real/harness.py).

Pure Python (PyYAML only): parsing, validation and the runs-YAML row format live here so
that they can be tested without torch. The harness imports torch lazily in its run path.

Batch arithmetic (Megatron convention)::

    global_batch_seqs = micro_batch * grad_accum * dp,   dp = world / (tp * pp)

For pipeline parallelism the `grad_accum` micro-batches of one step are the pipeline's
micro-batches (GPipe / 1F1B schedule).

Mixture of experts (`moe-*` presets, or `experts`/`top_k`/`expert_ffn_hidden` on any model): every
layer's MLP is replaced by `experts` GeLU expert MLPs of width `expert_ffn_hidden` behind a top-k
softmax router (no shared experts). Expert parallelism `ep` (1 or world) runs under strategy
`ddp`: dense parameters are data parallel over all ranks, each rank holds experts/ep experts, and
tokens move by all-to-all (Megatron-core's "alltoall" dispatcher); dp = world as in Megatron, where
ep folds into dp.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

STRATEGIES = ("single", "ddp", "fsdp", "tp", "pp")
#: MoE routers: `balanced` assigns token i to experts (i*top_k + j) % experts, j < top_k, so every
#: expert gets exactly tokens*top_k/experts tokens (the balanced-routing cost model); the router's
#: softmax still weights the outputs (and gets gradients). `learned`: top-k of the router logits.
ROUTERS = ("balanced", "learned")
#: strategies that run an MoE model (expert parallelism needs ddp's process group)
MOE_STRATEGIES = ("single", "ddp")
RECOMPUTE = ("none", "full")
PP_SCHEDULES = ("1f1b", "gpipe")

#: GPT-2/GPT-3 shapes (Brown et al. 2020, Table 2.1); MHA, GeLU MLP with ffn = 4h,
#: vocab padded to 50304 (multiple of 128), seq 2048. The 1.3B uses 16 heads of 128
#: (GPT-3 lists 24 heads with d_head 128, which does not multiply out to 2048).
PRESETS: dict[str, dict[str, int]] = {
    "gpt-125m": {"layers": 12, "hidden": 768, "heads": 12},
    "gpt-350m": {"layers": 24, "hidden": 1024, "heads": 16},
    "gpt-760m": {"layers": 24, "hidden": 1536, "heads": 16},
    "gpt-1.3b": {"layers": 24, "hidden": 2048, "heads": 16},
    # MoE: the dense preset's shape with every MLP replaced by 8 GeLU experts of ffn 4h/top_k
    # (top-2: the active MLP FLOPs per token equal the dense model's), top-2 softmax router.
    "moe-350m-8e": {"layers": 24, "hidden": 1024, "heads": 16, "experts": 8, "top_k": 2, "expert_ffn_hidden": 2048},
    "moe-760m-8e": {"layers": 24, "hidden": 1536, "heads": 16, "experts": 8, "top_k": 2, "expert_ffn_hidden": 3072},
}
DEFAULT_VOCAB = 50304
DEFAULT_SEQ = 2048


class ConfigError(ValueError):
    """A harness configuration that cannot run; the message names the values."""


@dataclass(frozen=True)
class MoEConfig:
    """Every layer's MLP -> `experts` GeLU MLPs (h -> expert_ffn_hidden -> h, with biases) behind a
    bias-free top-k softmax router Linear(h, experts). No shared experts, no dense layers."""
    experts: int
    top_k: int
    expert_ffn_hidden: int


@dataclass(frozen=True)
class ModelConfig:
    name: str
    layers: int
    hidden: int
    heads: int
    ffn_hidden: int
    vocab: int = DEFAULT_VOCAB
    seq_len: int = DEFAULT_SEQ
    moe: MoEConfig | None = None

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def params(self, tie_embeddings: bool = True) -> int:
        """Exact parameter count of the harness's model (biases and LayerNorms included)."""
        h, f, v, s = self.hidden, self.ffn_hidden, self.vocab, self.seq_len
        attn = 4 * h * h + 4 * h              # q, k, v, out with biases
        if self.moe is None:
            mlp = 2 * h * f + f + h
        else:
            fe = self.moe.expert_ffn_hidden
            mlp = h * self.moe.experts + self.moe.experts * (2 * h * fe + fe + h)   # router + experts
        norms = 2 * 2 * h
        per_layer = attn + mlp + norms
        emb = v * h + s * h                   # token + learned position embeddings
        head = 0 if tie_embeddings else v * h
        return self.layers * per_layer + emb + head + 2 * h


@dataclass(frozen=True)
class RunConfig:
    model: ModelConfig
    strategy: str = "single"
    world: int = 1
    tp: int = 1
    pp: int = 1
    micro_batch: int = 1
    grad_accum: int = 1
    recompute: str = "none"
    pp_schedule: str = "1f1b"
    ep: int = 1
    router: str = "balanced"
    warmup: int = 3
    steps: int = 8
    seed: int = 1234
    run_id: str | None = None

    @property
    def dp(self) -> int:
        return self.world // (self.tp * self.pp)

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.grad_accum * self.dp

    @property
    def tie_embeddings(self) -> bool:
        # The two pipeline stages hold the embedding and the output layer apart.
        return self.strategy != "pp"

    @property
    def zero(self) -> int:
        return 3 if self.strategy == "fsdp" else 0

    @property
    def default_id(self) -> str:
        return self.make_id("h100")

    def make_id(self, prefix: str) -> str:
        par = {"single": "single", "ddp": f"ddp{self.dp}", "fsdp": f"fsdp{self.dp}",
               "tp": f"tp{self.tp}", "pp": f"pp{self.pp}"}[self.strategy]
        if self.strategy in ("tp", "pp"):       # hybrids: pp<p>_tp<t>_dp<d>
            par += (f"_tp{self.tp}" if self.strategy == "pp" and self.tp > 1 else "") + \
                (f"_dp{self.dp}" if self.dp > 1 else "")
        if self.ep > 1:
            par += f"_ep{self.ep}"
        ac = "ac" if self.recompute == "full" else "noac"
        ga = f"_ga{self.grad_accum}" if self.grad_accum != 1 else ""
        short = self.model.name.replace("-", "").replace(".", "p")
        router = "_learned" if self.model.moe is not None and self.router == "learned" else ""
        return f"{prefix}_{short}_{par}_mb{self.micro_batch}{ga}_{ac}{router}"

    @property
    def id(self) -> str:
        return self.run_id or self.default_id


def _pos_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"{name} must be a positive integer, got {v!r}")
    return v


def build_model(preset: str | None = None, **over: Any) -> ModelConfig:
    """A model from a preset with overrides, or from explicit sizes (name + all of layers/hidden/heads)."""
    over = {k: v for k, v in over.items() if v is not None}
    if preset is not None:
        if preset not in PRESETS:
            raise ConfigError(f"unknown preset {preset!r} (known: {', '.join(PRESETS)})")
        base: dict[str, Any] = {"name": preset, **PRESETS[preset]}
    else:
        missing = [k for k in ("layers", "hidden", "heads") if k not in over]
        if missing:
            raise ConfigError(f"without --preset, give {', '.join('--' + m for m in missing)}")
        base = {"name": "custom"}
    base.update(over)
    moe_keys = [k for k in _MOE_KEYS if base.get(k) is not None]
    moe = None
    if moe_keys:
        missing = [k for k in _MOE_KEYS if base.get(k) is None]
        if missing:
            raise ConfigError(f"an MoE model needs {', '.join(_MOE_KEYS)}; missing {', '.join(missing)}")
        for k in _MOE_KEYS:
            _pos_int(k, base[k])
        if base["top_k"] > base["experts"]:
            raise ConfigError(f"top_k={base['top_k']} exceeds experts={base['experts']}")
        moe = MoEConfig(experts=base["experts"], top_k=base["top_k"], expert_ffn_hidden=base["expert_ffn_hidden"])
    for k in ("layers", "hidden", "heads"):
        _pos_int(k, base[k])
    base.setdefault("ffn_hidden", 4 * base["hidden"])
    base.setdefault("vocab", DEFAULT_VOCAB)
    base.setdefault("seq_len", DEFAULT_SEQ)
    for k in ("ffn_hidden", "vocab", "seq_len"):
        _pos_int(k, base[k])
    if base["hidden"] % base["heads"]:
        raise ConfigError(f"hidden={base['hidden']} is not divisible by heads={base['heads']}")
    if (base["hidden"] // base["heads"]) % 8:
        raise ConfigError(f"head dim {base['hidden'] // base['heads']} must be a multiple of 8 (flash attention)")
    return ModelConfig(name=str(base["name"]), layers=base["layers"], hidden=base["hidden"],
                       heads=base["heads"], ffn_hidden=base["ffn_hidden"], vocab=base["vocab"],
                       seq_len=base["seq_len"], moe=moe)


def build_run(model: ModelConfig, strategy: str = "single", world: int = 1, tp: int | None = None,
              pp: int | None = None, micro_batch: int = 1, grad_accum: int | None = None,
              global_batch: int | None = None, recompute: str = "none", pp_schedule: str = "1f1b",
              ep: int | None = None, router: str = "balanced", dp: int | None = None,
              warmup: int = 3, steps: int = 8, seed: int = 1234, run_id: str | None = None) -> RunConfig:
    """Validate a strategy against the model and world size. Raises ConfigError naming the values."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    if recompute not in RECOMPUTE:
        raise ConfigError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    if pp_schedule not in PP_SCHEDULES:
        raise ConfigError(f"pp schedule must be one of {', '.join(PP_SCHEDULES)}, got {pp_schedule!r}")
    world = _pos_int("world", world)
    micro_batch = _pos_int("micro_batch", micro_batch)
    _pos_int("steps", steps)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ConfigError(f"warmup must be a non-negative integer, got {warmup!r}")
    tp_ = 1 if tp is None else _pos_int("tp", tp)
    pp_ = 1 if pp is None else _pos_int("pp", pp)
    if strategy == "single":
        if world != 1:
            raise ConfigError(f"strategy 'single' runs on one GPU, got world={world}")
    if strategy in ("single", "ddp", "fsdp") and (tp_ != 1 or pp_ != 1):
        raise ConfigError(f"strategy {strategy!r} is data parallel only, got tp={tp_} pp={pp_}")
    # Hybrids (`dp` given): tp and pp strategies may leave dp = world / (tp * pp) > 1 (Megatron rank
    # order: tp fastest, then dp, then pp); strategy 'pp' may also take tp > 1 inside its stages.
    dp_ = None if dp is None else _pos_int("dp", dp)
    if dp_ is not None and strategy not in ("tp", "pp"):
        if dp_ != world // (tp_ * pp_):
            raise ConfigError(f"dp={dp_} != world/(tp*pp) = {world // (tp_ * pp_)} for strategy {strategy!r}")
    if strategy == "tp":
        tp_ = (world if dp_ is None else world // dp_) if tp is None else tp_
        if pp_ != 1:
            raise ConfigError(f"strategy 'tp' takes pp=1, got pp={pp_}")
        if tp_ < 2:
            raise ConfigError(f"strategy 'tp' needs tp >= 2, got tp={tp_}")
        if dp_ is None and world != tp_:
            raise ConfigError(f"strategy 'tp' uses all GPUs for tensor parallelism (dp=1): tp={tp_} != world={world}"
                              " (give dp for tensor x data parallelism)")
        if dp_ is not None and world != tp_ * dp_:
            raise ConfigError(f"tp*dp = {tp_}*{dp_} != world={world}")
    if strategy == "pp":
        pp_ = (world // (tp_ * (dp_ or 1))) if pp is None else pp_
        if tp_ != 1 and dp_ is None:
            raise ConfigError(f"strategy 'pp' takes tp=1 unless dp is given, got tp={tp_}")
        if pp_ < 2:
            raise ConfigError(f"strategy 'pp' needs pp >= 2, got pp={pp_}")
        if model.layers % pp_:
            raise ConfigError(f"pp={pp_} does not divide layers={model.layers}")
        if dp_ is None and world != pp_:
            raise ConfigError(f"strategy 'pp' uses all GPUs for pipeline stages (dp=1): pp={pp_} != world={world}"
                              " (give dp for pipeline x data parallelism)")
        if dp_ is not None and world != tp_ * pp_ * dp_:
            raise ConfigError(f"tp*pp*dp = {tp_}*{pp_}*{dp_} != world={world}")
    if tp_ > 1:
        if model.heads % tp_:
            raise ConfigError(f"tp={tp_} does not divide heads={model.heads}")
        if model.ffn_hidden % tp_:
            raise ConfigError(f"tp={tp_} does not divide ffn_hidden={model.ffn_hidden}")
        if model.vocab % tp_:
            raise ConfigError(f"tp={tp_} does not divide vocab={model.vocab} (vocab-parallel embedding)")
    if strategy in ("ddp", "fsdp") and world < 2:
        raise ConfigError(f"strategy {strategy!r} needs world >= 2, got world={world}")
    ep_ = 1 if ep is None else _pos_int("ep", ep)
    if router not in ROUTERS:
        raise ConfigError(f"router must be one of {', '.join(ROUTERS)}, got {router!r}")
    moe = model.moe
    if moe is None:
        if ep_ != 1:
            raise ConfigError(f"ep={ep_} needs an MoE model; {model.name} is dense")
    else:
        if strategy not in MOE_STRATEGIES:
            raise ConfigError(f"an MoE model runs with strategy {' or '.join(MOE_STRATEGIES)}, got {strategy!r}")
        if moe.experts % ep_:
            raise ConfigError(f"experts={moe.experts} is not divisible by ep={ep_}")
        if ep_ not in (1, world):
            raise ConfigError(f"ep must be 1 or world={world} (expert-data-parallel groups of one), got ep={ep_}")
        if ep_ > 1 and strategy != "ddp":
            raise ConfigError(f"ep={ep_} needs strategy 'ddp' (dense parameters data parallel), got {strategy!r}")
        if router == "balanced" and (micro_batch * model.seq_len * moe.top_k) % moe.experts:
            raise ConfigError(f"balanced router needs micro_batch*seq_len*top_k = {micro_batch}*{model.seq_len}*"
                              f"{moe.top_k} divisible by experts={moe.experts}")
    dp = world // (tp_ * pp_)
    if grad_accum is None:
        if global_batch is None:
            grad_accum = 1
        else:
            _pos_int("global_batch", global_batch)
            if global_batch % (micro_batch * dp):
                raise ConfigError(f"global_batch={global_batch} is not a multiple of micro_batch*dp = "
                                  f"{micro_batch}*{dp} = {micro_batch * dp}")
            grad_accum = global_batch // (micro_batch * dp)
    else:
        _pos_int("grad_accum", grad_accum)
        if global_batch is not None and global_batch != micro_batch * grad_accum * dp:
            raise ConfigError(f"global_batch={global_batch} != micro_batch*grad_accum*dp = "
                              f"{micro_batch}*{grad_accum}*{dp} = {micro_batch * grad_accum * dp}")
    if strategy == "pp" and grad_accum < pp_:
        raise ConfigError(f"pipeline needs at least pp={pp_} micro-batches per step, got grad_accum={grad_accum}")
    return RunConfig(model=model, strategy=strategy, world=world, tp=tp_, pp=pp_, micro_batch=micro_batch,
                     grad_accum=grad_accum, recompute=recompute, pp_schedule=pp_schedule, ep=ep_,
                     router=router, warmup=warmup,
                     steps=steps, seed=seed, run_id=run_id)


_MOE_KEYS = ("experts", "top_k", "expert_ffn_hidden")
_MODEL_KEYS = ("layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len") + _MOE_KEYS
_RUN_KEYS = ("strategy", "world", "tp", "pp", "dp", "micro_batch", "grad_accum", "global_batch", "recompute",
             "pp_schedule", "ep", "router", "warmup", "steps", "seed", "run_id")


def from_mapping(d: dict[str, Any], world: int | None = None) -> RunConfig:
    """From a YAML mapping: `{model: {preset: gpt-350m, ...} | preset: ..., strategy: ..., ...}`."""
    if not isinstance(d, dict):
        raise ConfigError(f"config must be a mapping, got {type(d).__name__}")
    d = dict(d)
    model_d = d.pop("model", None) or {}
    if not isinstance(model_d, dict):
        raise ConfigError("model must be a mapping")
    model_d = dict(model_d)
    preset = model_d.pop("preset", None) or d.pop("preset", None)
    name = model_d.pop("name", None)
    unknown_m = set(model_d) - set(_MODEL_KEYS)
    unknown = set(d) - set(_RUN_KEYS)
    if unknown_m or unknown:
        raise ConfigError(f"unknown keys: {', '.join(sorted(unknown_m | unknown))}")
    model = build_model(preset, **model_d, **({"name": name} if name else {}))
    if world is not None:
        d.setdefault("world", world)
    return build_run(model, **d)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--config", type=Path, help="YAML with the keys below (flags override it)")
    ap.add_argument("--preset", choices=sorted(PRESETS))
    for k in _MODEL_KEYS:
        ap.add_argument(f"--{k.replace('_', '-')}", dest=k, type=int)
    ap.add_argument("--strategy", choices=STRATEGIES)
    ap.add_argument("--tp", type=int)
    ap.add_argument("--pp", type=int)
    ap.add_argument("--dp", type=int, help="with tp/pp: data-parallel size of a hybrid (tp*pp*dp = world)")
    ap.add_argument("--micro-batch", dest="micro_batch", type=int)
    ap.add_argument("--grad-accum", dest="grad_accum", type=int)
    ap.add_argument("--global-batch", dest="global_batch", type=int)
    ap.add_argument("--recompute", choices=RECOMPUTE)
    ap.add_argument("--pp-schedule", dest="pp_schedule", choices=PP_SCHEDULES)
    ap.add_argument("--ep", type=int, help="expert parallelism (MoE; 1 or world, strategy ddp)")
    ap.add_argument("--router", choices=ROUTERS, help="MoE router (default balanced)")
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--id", dest="run_id")


def from_args(ns: argparse.Namespace, world: int) -> RunConfig:
    d: dict[str, Any] = {}
    if getattr(ns, "config", None):
        loaded = yaml.safe_load(Path(ns.config).read_text(encoding="utf-8")) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{ns.config}: expected a mapping")
        d = dict(loaded)
    model_d = dict(d.pop("model", None) or {})
    if ns.preset:
        model_d = {"preset": ns.preset}
    for k in _MODEL_KEYS:
        if getattr(ns, k, None) is not None:
            model_d[k] = getattr(ns, k)
    d["model"] = model_d
    for k in _RUN_KEYS:
        if getattr(ns, k, None) is not None:
            d[k] = getattr(ns, k)
    d["world"] = world
    return from_mapping(d)


# -- runs YAML rows (schema of shared/reference/published_calibration.yaml) ----------------

#: GPU name substring -> (catalog chip id, id prefix, memory GB)
CHIPS = {"H100": ("h100-sxm5-80g", "h100", 80), "H200": ("h200-sxm-141g", "h200", 141)}


def chip_for(gpu_name: str | None) -> tuple[str, str, int | None]:
    for key, val in CHIPS.items():
        if gpu_name and key in gpu_name:
            return val
    return ("unknown", "gpu", None)


def make_row(cfg: RunConfig, results: dict[str, Any], env: dict[str, Any], command: str, date: str) -> dict:
    """One row of a runs file. `results` holds step_time_samples_s (max over ranks per step),
    peak_memory_gib and reserved_memory_gib (max over ranks); `env` the versions and device."""
    samples = [round(float(x), 5) for x in results["step_time_samples_s"]]
    step = _median(samples)
    m = cfg.model
    tokens = cfg.global_batch * m.seq_len
    framework = {"single": "single GPU", "ddp": "DDP", "fsdp": "FSDP2 fully_shard", "tp": "Megatron-style TP",
                 "pp": f"pipelining {cfg.pp_schedule.upper()}"}[cfg.strategy]
    if cfg.strategy == "pp" and cfg.tp > 1:
        framework += " x Megatron-style TP"
    if cfg.strategy in ("tp", "pp") and cfg.dp > 1:
        framework += " x DDP"
    if m.moe is not None:   # ep 1 runs the same dispatcher code path without the all-to-all
        framework = f"MoE EP (alltoall dispatcher, {cfg.router} router)"
    sharding = {"single": "none (1 GPU)", "ddp": "none (DDP)", "fsdp": "FSDP FULL_SHARD (ZeRO-3)",
                "tp": "none (tensor parallel)", "pp": "none (pipeline parallel)"}[cfg.strategy]
    num_gpus = cfg.world
    env = {k: (None if v is None else (v if isinstance(v, int) else str(v))) for k, v in env.items()}
    chip, prefix, mem_gb = chip_for(env.get("gpu_model"))
    moe = {} if m.moe is None else {"moe": {
        "experts": m.moe.experts, "top_k": m.moe.top_k, "expert_ffn_hidden": m.moe.expert_ffn_hidden,
        "shared_experts": 0, "layer_freq": 1, "first_dense_layers": 0}}
    moe_par = {} if m.moe is None else {
        "ep": cfg.ep, "moe_router": cfg.router,
        "moe_detail": ("alltoall token dispatcher (permute by expert, all_to_all_single, SequentialMLP loop "
                       "over local experts, all_to_all back, unpermute weighted by router probabilities); "
                       f"{m.moe.experts // cfg.ep} experts per rank; dense parameters "
                       + ("DDP all-reduced, expert parameters not replicated" if cfg.ep > 1 else
                          ("DDP all-reduced with the experts" if cfg.strategy == "ddp" else "on one GPU")))}
    return {
        "id": cfg.run_id or cfg.make_id(prefix),
        "source": {"key": "baige-real-2026",
                   "citation": f"baige-plan benchmarks/real harness, {date}, {command}"},
        "model": {"name": m.name, "type": "dense" if m.moe is None else "moe",
                  "params_b": round(cfg.model.params(cfg.tie_embeddings) / 1e9, 4),
                  "layers": m.layers, "hidden": m.hidden, "heads": m.heads, "kv_heads": m.heads,
                  "ffn_hidden": m.ffn_hidden, "vocab": m.vocab, "seq_len": m.seq_len, "activation": "gelu",
                  "tie_embeddings": cfg.tie_embeddings, **moe},
        "hardware": {"gpu_model": env.get("gpu_model"), "chip": chip, "num_gpus": num_gpus,
                     "gpus_per_node": env.get("gpus_per_node", num_gpus), "gpu_memory_gb": mem_gb,
                     "driver": env.get("driver"), "torch": env.get("torch"), "nccl": env.get("nccl"),
                     "cuda": env.get("cuda")},
        "parallel": {"tp": cfg.tp, "pp": cfg.pp, "dp": cfg.dp, "cp": 1, "zero": cfg.zero,
                     "zero_or_sharding": sharding, "sequence_parallel": False,
                     "micro_batch": cfg.micro_batch, "global_batch_seqs": cfg.global_batch,
                     "grad_accum": cfg.grad_accum, "recompute": cfg.recompute, "precision": "bf16",
                     "precision_detail": PRECISION_DETAIL[cfg.strategy],
                     "attention": "flash", "framework": f"pytorch {env.get('torch')} {framework}",
                     **({"schedule": cfg.pp_schedule} if cfg.strategy == "pp" else {}), **moe_par},
        "results": {"step_time_s": step, "step_time_samples_s": samples,
                    "peak_memory_gib": round(float(results["peak_memory_gib"]), 3),
                    "reserved_memory_gib": round(float(results["reserved_memory_gib"]), 3),
                    "tokens_per_s_per_gpu": round(tokens / step / num_gpus, 1),
                    "warmup_steps": cfg.warmup, "timed_steps": cfg.steps,
                    **_instrumentation(results)},
    }


#: Per-run instrumentation (benchmarks/real/harness.py, steptrace.py), rank 0 unless `per_rank`:
#: host_step_s / optimizer_s are medians over the timed steps; the rest come from one extra
#: profiled step after them (profiled_step_s is its wall time, with the profiler's overhead).
INSTRUMENTATION_KEYS = ("host_step_s", "gpu_busy_s", "compute_busy_s", "nccl_busy_s", "gpu_kernel_sum_s",
                        "gpu_span_s", "kernels_per_step", "cpu_ops_per_step", "cpu_top_ops_per_step",
                        "optimizer_s", "optimizer_kernels_s", "profiled_step_s", "profiled_host_step_s")
_COUNT_KEYS = ("kernels_per_step", "cpu_ops_per_step", "cpu_top_ops_per_step")


def _fig(k: str, v: Any) -> Any:
    return int(round(float(v))) if k in _COUNT_KEYS else round(float(v), 5)


def _instrumentation(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: _fig(k, results[k]) for k in INSTRUMENTATION_KEYS if results.get(k) is not None}
    per = results.get("per_rank")
    if per:
        out["per_rank"] = {k: [_fig(k, x) for x in v] for k, v in per.items()}
    if results.get("kernel_time_by_kind_s"):     # rank 0's profiled step, by kernel kind (steptrace)
        out["kernel_time_by_kind_s"] = {k: round(float(v), 6) for k, v in results["kernel_time_by_kind_s"].items()}
    if results.get("top_kernels"):
        out["top_kernels"] = [[str(n), round(float(t), 6), int(c)] for n, t, c in results["top_kernels"]]
    return out


PRECISION_DETAIL = {
    s: "fp32 master weights, grads and AdamW states; bf16 autocast compute" for s in ("single", "ddp", "tp", "pp")
}
PRECISION_DETAIL["fsdp"] = ("fp32 sharded master weights and AdamW states; bf16 unsharded params for compute "
                            "(MixedPrecisionPolicy param_dtype=bf16, reduce_dtype=fp32)")


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    mid = n // 2
    return round(s[mid] if n % 2 else 0.5 * (s[mid - 1] + s[mid]), 5)


def append_row(path: str | Path, row: dict) -> None:
    """Add (or replace by id) a row in a runs YAML; written atomically."""
    import os
    import tempfile

    p = Path(path)
    doc: dict[str, Any] = {"schema_version": 1, "rows": []}
    if p.exists():
        loaded = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        if isinstance(loaded, dict) and isinstance(loaded.get("rows"), list):
            doc = loaded
    doc["rows"] = [r for r in doc["rows"] if r.get("id") != row["id"]] + [row]
    text = yaml.safe_dump(doc, sort_keys=False, width=120)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, p)


def as_dict(cfg: RunConfig) -> dict:
    return dataclasses.asdict(cfg)
