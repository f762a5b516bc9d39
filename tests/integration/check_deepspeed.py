#!/usr/bin/env python3
"""Integration check: the installed DeepSpeed accepts baige-plan's DeepSpeed export unchanged, and what it
parsed is the plan.

Usage (runtime venv, see requirements-deepspeed.txt; not the project venv; CPU only):
    .venv-it/deepspeed/bin/python tests/integration/check_deepspeed.py [-v] DIR [DIR...]
Each DIR holds plan.yaml (or plan.json) and the files of `baige-plan export DIR/plan.yaml --to deepspeed
--out-dir DIR`: ds_config.json, megatron_deepspeed_args.txt, launch.sh, hostfile (.deepspeed_env).

The expected values come from the plan file alone (not from baige_plan, not from the export): tp = the
stages' tp, pp = the number of stages, DeepSpeed's data-parallel size dp = world / (tp * pp) with
world = tp * pp * replicas * cp, micro-batch, micro-batches per step, global batch = replicas x
micro-batches x micro-batch, ZeRO stage, precision, recompute, layers per stage.

For each DIR (deepspeed 0.19.8 source paths):
1. launch.sh runs under bash with a stand-in `deepspeed` first on PATH that records its argv, working
   folder and environment. The argv goes through DeepSpeed's launcher: launcher/runner.py parse_args,
   then the hostfile through fetch_hostfile, parse_inclusion_exclusion and apply_num_nodes_and_gpus,
   as runner.main does: the ranks it would start must be the plan's world. What follows
   pretrain_gpt.py must be megatron_deepspeed_args.txt; its DeepSpeed part goes through
   deepspeed.add_config_arguments (the parser Megatron-DeepSpeed adds), and --deepspeed_config must
   name DIR/ds_config.json. .deepspeed_env is read as runner.main reads it.
2. ds_config.json goes through deepspeed.runtime.config.DeepSpeedConfig(path, mpu) with torch.distributed
   initialised (gloo, world 1) and an mpu whose get_data_parallel_world_size() is the plan's dp: the
   path deepspeed.initialize takes for Megatron-DeepSpeed's mpu (pp == 1) or GPTModelPipe's grid
   (pp > 1), so DeepSpeed's own batch assertion checks train_batch = micro x gas x dp. The parsed
   values must be the plan's (batch triple, ZeRO stage, bf16/fp16, pipeline stages, activation
   checkpoint interval, activation checkpointing for full recompute).
3. What deepspeed.initialize and PipelineEngine.__init__ check beyond the config object is run, not
   mirrored: deepspeed.initialize on a stand-in model (pp > 1: a PipelineModule, so the PipelineEngine
   with its "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" assertion; pp == 1 with
   ZeRO-3: built inside deepspeed.zero.Init with the config, as Megatron-DeepSpeed's model_provider
   does), with the config unchanged except train_batch_size rescaled to the one-rank world
   (micro x gas). The engine must report the plan's micro-batch, accumulation steps, ZeRO stage and
   dtype, and one optimizer step (micro-batches x forward/backward) must run. Full recompute:
   deepspeed.checkpointing.configure(mpu, deepspeed_config=...) as Megatron-DeepSpeed's
   --deepspeed-activation-checkpointing calls it, and the stand-in layers run through
   deepspeed.checkpointing.checkpoint (pp == 1) or the PipelineModule's activation_checkpoint_interval.
4. The layer split: DeepSpeed's PipelineModule._find_layer_type and runtime/utils.py partition_balanced
   over the layer list Megatron-DeepSpeed's GPTModelPipe builds (megatron/model/gpt_model.py at
   microsoft/Megatron-DeepSpeed@f4157bea, mirrored: names only), with its
   partition_method='type:transformer', must give the plan's layers per stage.
5. The Megatron-DeepSpeed arguments must agree with the plan and the config (sizes, batch, ZeRO stage,
   precision, recompute, model shape). Megatron-DeepSpeed is not on PyPI: this is an agreement check,
   not its parser.
Prints `ok DIR` or `FAIL DIR: reason` per DIR, then `N passed, M failed`; exit 1 if any failed.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import logging
import os
import shlex
import sys
import tempfile
import time
import traceback
import types
import warnings
from pathlib import Path

import torch
from _checklib import CheckFailure, capture_launch, load_plan, need, run_serial

HIDDEN = 8   # stand-in model width


def expect(plan: dict) -> dict:
    """What the plan says, read from the plan file only."""
    strat = dict(plan["strategy"])
    p0 = plan["pipelines"][0]
    strat.update(p0.get("strategy") or {})
    stages = p0["stages"]
    tp, pp, reps = stages[0]["tp"], len(stages), p0["replicas"]
    cp = strat.get("cp", 1)
    m, mb = p0["micro_batches"], strat["micro_batch"]
    world = tp * pp * reps * cp
    dp = world // (tp * pp)
    gb = reps * m * mb
    need(gb % (mb * dp) == 0, f"global batch {gb} is not a multiple of micro-batch {mb} x DeepSpeed dp {dp}")
    model, job = plan["inputs"]["model"], plan["inputs"]["job"]
    # what DeepSpeed cannot run as planned (the export says so in its caveats): the plan's time and memory
    # would not hold, so the export does not realise it
    need(strat.get("vpp", 1) == 1, f"the plan interleaves (vpp={strat.get('vpp')}); DeepSpeed's PipelineEngine runs "
         "1F1B only (deepspeed/runtime/pipe/schedule.py TrainSchedule)")
    need(cp == 1, f"the plan uses ring-attention context parallelism (cp={cp}); DeepSpeed has none")
    need(len(plan["pipelines"]) == 1, "the plan has several pipeline shapes; one DeepSpeed job runs one")
    return {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "world": world, "micro": mb, "gas": gb // (mb * dp), "gb": gb,
            "zero": strat["zero"], "precision": job.get("precision", "bf16"), "recompute": strat.get("recompute", "none"),
            "sp": bool(strat.get("sequence_parallel")) and tp > 1, "ep": strat.get("ep", 1),
            "counts": [st["layers"][1] - st["layers"][0] for st in stages], "model": model, "seq": job["seq_len"],
            "layers": model["layers"]}


# ------------------------------------------------------------------------------------------- launch


def arg_tokens(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            out += shlex.split(line)
    return out


DATA_PATH, TOKENIZER = "/data/corpus_text_document", "/tokenizer"


def run_launch(d: Path, tmp: Path) -> tuple[list[str], Path, dict[str, str]]:
    """argv the deepspeed launcher gets from launch.sh, the folder it runs in, its environment."""
    mds = tmp / "Megatron-DeepSpeed"
    mds.mkdir(exist_ok=True)
    # the documented data variables (launch.sh refuses to start without them) and this venv's python for the
    # version check (deepspeed and torch of requirements-deepspeed.txt are inside its supported range)
    launch = capture_launch(d, tmp, "deepspeed", {"MEGATRON_DS": str(mds), "BAIGE_DATA_PATH": DATA_PATH,
                                                  "BAIGE_TOKENIZER": TOKENIZER, "PYTHON": sys.executable})
    return launch.argv, launch.cwd, launch.env


def check_launch(d: Path, e: dict, tmp: Path, notes: list[str]) -> list[str]:
    """Returns the pretrain_gpt.py arguments the launcher would pass."""
    from deepspeed.launcher import runner

    argv, cwd, env = run_launch(d, tmp)
    args = runner.parse_args(argv)
    need(Path(args.user_script).name == "pretrain_gpt.py", f"launcher runs {args.user_script}, not pretrain_gpt.py")
    need(args.include == "" and args.exclude == "", "launch.sh uses --include/--exclude")
    hostfile = Path(args.hostfile) if os.path.isabs(args.hostfile) else cwd / args.hostfile
    if args.hostfile == "/dev/null":   # one node: no hostfile, local resources, no ssh (runner.fetch_hostfile)
        need(args.num_nodes == 1, f"--hostfile /dev/null with --num_nodes {args.num_nodes}")
    else:
        need(hostfile.is_file(), f"hostfile {hostfile} missing")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        pool = runner.fetch_hostfile(str(hostfile)) or {"localhost": args.num_gpus}
        active = runner.parse_inclusion_exclusion(pool, args.include, args.exclude)
        active = runner.apply_num_nodes_and_gpus(active, args.num_nodes, args.num_gpus)
    need(args.num_nodes <= len(pool), f"--num_nodes {args.num_nodes} > {len(pool)} hosts in the hostfile")
    need(all(args.num_gpus <= n for n in list(pool.values())[:args.num_nodes]),
         f"--num_gpus {args.num_gpus} exceeds a host's slots")
    ranks = sum(len(v) for v in active.values())
    need(ranks == e["world"], f"the launcher would start {ranks} ranks ({args.num_nodes} nodes x {args.num_gpus}); "
         f"the plan has {e['world']} (tp {e['tp']} x pp {e['pp']} x dp {e['dp']})")
    want = arg_tokens((d / "megatron_deepspeed_args.txt").read_text())
    need(args.user_args[:len(want)] == want, "pretrain_gpt.py arguments differ from megatron_deepspeed_args.txt")
    data = ["--data-path", DATA_PATH, "--tokenizer-type", "HFTokenizer", "--tokenizer-model", TOKENIZER,
            "--train-iters", "100"]
    need(args.user_args[len(want):] == data, f"launch.sh appends {args.user_args[len(want):]}, not the data "
         f"arguments {data}")
    # the environment on every node: launch.sh exports + .deepspeed_env, read as runner.main reads it
    exports = {}
    envfile = cwd / runner.DEEPSPEED_ENVIRONMENT_NAME
    if envfile.is_file():
        for var in envfile.read_text().splitlines(keepends=True):
            key, val = var.split("=", maxsplit=1)
            exports[key.strip()] = val.strip()
    if e["sp"]:
        for where, vals in (("launch.sh", env), (runner.DEEPSPEED_ENVIRONMENT_NAME, exports)):
            need(vals.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1", f"--sequence-parallel needs "
                 f"CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-DeepSpeed validate_args); {where} does not set it")
    # the DeepSpeed arguments Megatron-DeepSpeed's parse_args adds (deepspeed.add_config_arguments)
    import deepspeed
    ds_args, _ = deepspeed.add_config_arguments(argparse.ArgumentParser(allow_abbrev=False)).parse_known_args(want)
    need(ds_args.deepspeed, "--deepspeed missing: Megatron-DeepSpeed would not use DeepSpeed")
    need(ds_args.deepspeed_config is not None, "--deepspeed_config missing")
    cfg = Path(ds_args.deepspeed_config)
    cfg = cfg if cfg.is_absolute() else cwd / cfg
    need(cfg.resolve() == (d / "ds_config.json").resolve(), f"--deepspeed_config names {cfg}, not DIR/ds_config.json")
    notes.append(f"launcher: {args.num_nodes} nodes x {args.num_gpus} = {ranks} ranks")
    return want


# ------------------------------------------------------------------------------------- Megatron args


def flags(tokens: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for k, t in enumerate(tokens):
        if t.startswith("--"):
            nxt = tokens[k + 1] if k + 1 < len(tokens) else None
            out[t] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def check_args(tokens: list[str], e: dict, cfg: dict) -> dict:
    f = flags(tokens)
    model = e["model"]

    def val(flag, want, why=""):
        got = f.get(flag)
        need(flag in f and got is not None and str(got) == str(want),
             f"{flag} is {got!r}, the plan says {want}{why}")

    val("--tensor-model-parallel-size", e["tp"])
    val("--pipeline-model-parallel-size", e["pp"])
    need(("--no-pipeline-parallel" in f) == (e["pp"] == 1),
         "--no-pipeline-parallel must be given exactly when pp == 1 (megatron/training.py passes mpu to "
         "deepspeed.initialize only then; otherwise the model is GPTModelPipe)")
    val("--micro-batch-size", e["micro"])
    val("--global-batch-size", e["gb"])
    val("--zero-stage", e["zero"], " (Megatron-DeepSpeed enables deepspeed.zero.Init from it)")
    need(int(f["--zero-stage"]) == cfg["zero_optimization"]["stage"], "--zero-stage differs from ds_config.json")
    val("--seq-length", e["seq"])
    val("--num-layers", model["layers"])
    val("--hidden-size", model["hidden"])
    val("--num-attention-heads", model["heads"])
    val("--ffn-hidden-size", model["ffn_hidden"])
    kv = model.get("kv_heads") or model["heads"]
    if kv != model["heads"]:
        val("--num-key-value-heads", kv, " (GQA)")
    need(int(f.get("--max-position-embeddings") or 0) >= e["seq"], "--max-position-embeddings < --seq-length")
    need(("--sequence-parallel" in f) == e["sp"], "--sequence-parallel does not match the plan")
    swiglu = model.get("activation", "swiglu") == "swiglu"
    need(("--swiglu" in f) == swiglu, "--swiglu does not match the model's activation")
    need(("--untie-embeddings-and-output-weights" in f) == (not model.get("tie_embeddings", False)),
         "--untie-embeddings-and-output-weights does not match the model")
    prec = e["precision"]
    need(("--bf16" in f) == (prec == "bf16") and ("--fp16" in f) == (prec == "fp16"),
         f"precision flags {[k for k in ('--bf16', '--fp16') if k in f]} do not match the plan's {prec}")
    full = e["recompute"] == "full"
    need(("--checkpoint-activations" in f) == full, "--checkpoint-activations does not match recompute "
         f"{e['recompute']!r}")
    if full:
        need("--deepspeed-activation-checkpointing" in f, "full recompute without --deepspeed-activation-checkpointing")
    need((f.get("--recompute-granularity") == "selective") == (e["recompute"] == "selective"),
         "--recompute-granularity selective does not match the plan")
    moe = model.get("moe")
    if moe:
        val("--num-experts", moe["experts"])
        val("--moe-expert-parallel-size", e["ep"])
        val("--topk", moe["top_k"])
        need("--create-moe-param-group" in f, "MoE under ZeRO needs --create-moe-param-group")
        need(moe["experts"] % e["ep"] == 0, "experts % ep != 0 (deepspeed/moe/layer.py MoE.__init__)")
    # Megatron's micro-batch calculator: gb / (mb x data-parallel size) micro-batches, which Megatron-DeepSpeed
    # hands DeepSpeed every iteration (training.py: set_train_batch_size(dp x mb x num_microbatches))
    need(e["gb"] % (e["micro"] * e["dp"]) == 0 and e["gb"] // (e["micro"] * e["dp"]) == cfg["gradient_accumulation_steps"],
         "Megatron's micro-batches per step differ from gradient_accumulation_steps")
    return f


# ------------------------------------------------------------------------------------------ DeepSpeed


class PlanMpu:
    """What DeepSpeedConfig asks of Megatron-DeepSpeed's mpu (or GPTModelPipe's PipelineParallelGrid)."""

    def __init__(self, e: dict):
        self.e = e

    def get_data_parallel_world_size(self):
        return self.e["dp"]

    def get_tensor_model_parallel_world_size(self):
        return self.e["tp"]

    def get_pipeline_model_parallel_world_size(self):
        return self.e["pp"]

    def get_data_parallel_rank(self):
        return 0

    def get_tensor_model_parallel_rank(self):
        return 0

    def get_tensor_model_parallel_group(self):
        return None


def setup_deepspeed():
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("BAIGE_DS_PORT", "29517"), RANK="0",
                      WORLD_SIZE="1", LOCAL_RANK="0")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")   # no accelerator probing (and its warning): the check is CPU-only
    warnings.filterwarnings("ignore")
    import deepspeed
    import deepspeed.ops

    for name in ("DeepSpeed", "deepspeed"):
        logging.getLogger(name).setLevel(logging.ERROR)
    from deepspeed.utils import logger
    logger.setLevel(logging.ERROR)
    # The CPU accelerator JIT-compiles its shared-memory all-reduce kernel (deepspeed_shm_comm) on the first
    # TorchBackend; a one-rank CPU check never uses it, and compiling takes ~90 s on a cold cache.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    with contextlib.redirect_stdout(io.StringIO()):
        deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    acc = deepspeed.get_accelerator()
    note = None
    if not acc.is_fp16_supported():
        # device capability of this CPU, not a property of the config (the export targets GPUs)
        acc.is_fp16_supported = lambda: True
        note = "this CPU reports no fp16; the engine's device probe is answered as on a GPU"
    return deepspeed, note


def check_config(d: Path, e: dict, notes: list[str]) -> tuple[dict, object]:
    from deepspeed.runtime.config import DeepSpeedConfig

    raw = json.loads((d / "ds_config.json").read_text())
    mpu = PlanMpu(e)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            c = DeepSpeedConfig(str(d / "ds_config.json"), mpu=mpu)
    except (AssertionError, ValueError) as err:
        raise CheckFailure(f"DeepSpeedConfig refused it: {type(err).__name__}: {err} ({_where(err)})") from None
    need(c.world_size == e["dp"], f"DeepSpeedConfig used a data-parallel world of {c.world_size}, not the plan's "
         f"{e['dp']} (torch.distributed not initialised?)")
    got = (c.train_batch_size, c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps)
    want = (e["gb"], e["micro"], e["gas"])
    need(got == want, f"train_batch/micro/gas parsed as {got}, the plan says {want} (dp {e['dp']})")
    need(c.zero_optimization_stage == e["zero"], f"ZeRO stage {c.zero_optimization_stage}, the plan says {e['zero']}")
    prec = e["precision"]
    need(prec in ("bf16", "fp16", "fp32"), f"the plan's precision {prec} has no DeepSpeed config")
    need(c.bfloat16_config.enabled == (prec == "bf16") and c.float16_config.enabled == (prec == "fp16"),
         f"bf16={c.bfloat16_config.enabled} fp16={c.float16_config.enabled}, the plan says {prec}")
    full = e["recompute"] == "full"
    if e["pp"] > 1:
        need(raw.get("pipeline", {}).get("stages") == e["pp"], f"pipeline.stages is {raw.get('pipeline', {}).get('stages')}, "
             f"the plan has pp {e['pp']}")
        interval = c.pipeline["activation_checkpoint_interval"]
        need((interval > 0) == full, f"pipeline.activation_checkpoint_interval {interval} with recompute {e['recompute']!r}")
    if full:
        need("activation_checkpointing" in raw, "full recompute without an activation_checkpointing section")
    notes.append(f"config: {got[0]} = {got[1]} x {got[2]} x dp {c.world_size}, ZeRO-{c.zero_optimization_stage}, {prec}")
    return raw, c


def partition_counts(e: dict) -> list[int]:
    """Transformer layers per stage as Megatron-DeepSpeed's GPTModelPipe + DeepSpeed's PipelineModule split them."""
    from deepspeed.pipe import LayerSpec, PipelineModule
    from deepspeed.runtime import utils as ds_utils

    def mod(name):
        return LayerSpec(type(name, (torch.nn.Module,), {}))

    def fn(name):
        return types.FunctionType((lambda x: x).__code__, {}, name)

    model = e["model"]
    # megatron/model/gpt_model.py GPTModelPipe.__init__ (microsoft/Megatron-DeepSpeed@f4157bea): the spec list
    specs = [fn("_to_float16"), mod("EmbeddingPipe")]
    specs += [mod("ParallelTransformerLayerPipe") for _ in range(model["layers"])]
    if model.get("moe"):
        specs.append(fn("_calculate_moe_loss"))
    specs.append(mod("RMSNorm" if model.get("activation", "swiglu") == "swiglu" else "LayerNorm"))
    specs.append(mod("EmbeddingPipe" if model.get("tie_embeddings", False) else "LMHeadPipe"))
    if e["precision"] in ("bf16", "fp16"):
        specs.append(fn("float16_to_fp32"))
    holder = types.SimpleNamespace(_layer_specs=specs)
    idx = PipelineModule._find_layer_type(holder, "transformer")   # partition_method='type:transformer'
    weights = [0] * len(specs)
    for k in idx:
        weights[k] = 1
    parts = ds_utils.partition_balanced(weights=weights, num_parts=e["pp"])
    return [sum(weights[parts[s]:parts[s + 1]]) for s in range(e["pp"])]


def check_split(e: dict, notes: list[str]) -> None:
    if e["pp"] == 1:
        return
    got = partition_counts(e)
    need(got == e["counts"], f"DeepSpeed partitions the {e['layers']} layers as {got} (type:transformer), the "
         f"plan's stages hold {e['counts']}")
    notes.append(f"stages {got}")


class _Dense(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x):
        return torch.tanh(self.lin(x))


class _ToModelDtype(torch.nn.Module):
    """GPTModelPipe's first entry, _to_float16: inputs to the model dtype."""

    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, x):
        return x.to(self.dtype)


class _Stack(torch.nn.Module):
    """pp == 1 stand-in; full recompute runs each layer through deepspeed.checkpointing.checkpoint as
    Megatron-DeepSpeed's ParallelTransformer._checkpointed_forward does under --deepspeed-activation-checkpointing."""

    def __init__(self, n, recompute):
        super().__init__()
        self.layers = torch.nn.ModuleList(_Dense() for _ in range(n))
        self.recompute = recompute

    def forward(self, x):
        import deepspeed
        x = self.layers[0](x)   # the embedding's place: not checkpointed, so the checkpointed inputs need grad
        for layer in self.layers[1:]:
            x = deepspeed.checkpointing.checkpoint(layer, x) if self.recompute else layer(x)
        return x


def check_engine(deepspeed, d: Path, e: dict, raw: dict, f: dict, notes: list[str]) -> None:
    from deepspeed.pipe import PipelineModule
    from deepspeed.runtime.pipe.engine import PipelineEngine

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(e["precision"], torch.float32)
    full = e["recompute"] == "full"
    if full:
        # megatron/initialize.py setup_deepspeed_random_and_activation_checkpointing (--deepspeed-activation-checkpointing)
        nl = int(f.get("--checkpoint-num-layers") or 1)
        deepspeed.checkpointing.configure(PlanMpu(e), deepspeed_config=str(d / "ds_config.json"),
                                          partition_activations="--partition-activations" in f,
                                          contiguous_checkpointing="--contigious-checkpointing" in f,
                                          num_checkpoints=-(-e["layers"] // nl), checkpoint_in_cpu="--checkpoint-in-cpu" in f,
                                          synchronize="--synchronize-each-layer" in f, profile="--profile-backward" in f)
        need(deepspeed.checkpointing.is_configured(), "deepspeed.checkpointing did not configure")
        from deepspeed.runtime.activation_checkpointing import checkpointing as ckpt
        need(not ckpt.PARTITION_ACTIVATIONS and not ckpt.CPU_CHECKPOINT, "activation checkpoints partitioned or "
             "offloaded: the plan's memory model stores each layer's input on the device")
        ckpt.mp_size = 1   # the stand-in below runs on one rank
    cfg = copy.deepcopy(raw)
    cfg["train_batch_size"] = e["micro"] * e["gas"]   # the same run on a one-rank data-parallel world
    torch.manual_seed(0)
    n_layers = 4
    if e["pp"] > 1:
        # GPTModelPipe: activation_checkpoint_interval = --checkpoint-num-layers with --checkpoint-activations
        interval = int(f.get("--checkpoint-num-layers") or 1) if "--checkpoint-activations" in f else 0
        model = PipelineModule(layers=[_ToModelDtype(dtype)] + [_Dense() for _ in range(n_layers)], num_stages=1,
                               loss_fn=lambda out, y: (out.float() - y).pow(2).mean(),
                               activation_checkpoint_interval=interval)
    else:
        with deepspeed.zero.Init(config_dict_or_path=cfg, enabled=e["zero"] == 3):
            model = _Stack(n_layers, full)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)   # Megatron-DeepSpeed hands its own optimizer in
    try:
        eng, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)
    except AssertionError as err:
        raise CheckFailure(f"deepspeed.initialize refused it: {err or 'assertion failed'} "
                           f"({_where(err)})") from None
    except (ValueError, NotImplementedError, RuntimeError) as err:
        raise CheckFailure(f"deepspeed.initialize refused it: {type(err).__name__}: {err} ({_where(err)})") from None
    need((e["pp"] > 1) == isinstance(eng, PipelineEngine), f"engine is {type(eng).__name__}")
    got = (eng.train_micro_batch_size_per_gpu(), eng.gradient_accumulation_steps(), eng.zero_optimization_stage(),
           eng.bfloat16_enabled(), eng.fp16_enabled())
    want = (e["micro"], e["gas"], e["zero"], e["precision"] == "bf16", e["precision"] == "fp16")
    need(got == want, f"engine has (micro, gas, zero, bf16, fp16) = {got}, the plan says {want}")
    if e["pp"] > 1:
        need(eng.micro_batches == e["gas"], f"PipelineEngine runs {eng.micro_batches} micro-batches, not {e['gas']}")
        need((eng.module.activation_checkpoint_interval > 0) == full, "PipelineModule activation checkpoint interval "
             f"{eng.module.activation_checkpoint_interval} with recompute {e['recompute']!r}")
    # one optimizer step: gas micro-batches
    mb = e["micro"]
    data = [(torch.randn(mb, HIDDEN), torch.randn(mb, HIDDEN)) for _ in range(e["gas"])]
    if e["pp"] > 1:
        eng.train_batch(iter(data))
    else:
        for x, y in data:
            loss = (eng(x.to(dtype)).float() - y).pow(2).mean()
            eng.backward(loss)
            eng.step()
    need(eng.global_steps == 1, f"{e['gas']} micro-batches made {eng.global_steps} optimizer steps, not 1")
    notes.append(f"{type(eng).__name__} + {type(eng.optimizer).__name__}: one step of {e['gas']} micro-batches ran")


def _where(err: BaseException) -> str:
    tb = traceback.extract_tb(err.__traceback__)
    for fr in reversed(tb):
        if "deepspeed" in fr.filename:
            return f"{fr.filename.split('site-packages/')[-1]}:{fr.lineno} {fr.name}"
    return "?"


def check_dir(deepspeed, d: Path, notes: list[str]) -> None:
    d = d.resolve()
    plan = load_plan(d)
    e = expect(plan)
    for name in ("ds_config.json", "megatron_deepspeed_args.txt", "launch.sh", "hostfile"):
        need((d / name).is_file(), f"{name} missing")
    with tempfile.TemporaryDirectory() as tmp:
        tokens = check_launch(d, e, Path(tmp), notes)
    raw, _ = check_config(d, e, notes)
    f = check_args(tokens, e, raw)
    check_split(e, notes)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        check_engine(deepspeed, d, e, raw, f, notes)


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    dirs = [Path(a) for a in argv if a != "-v"]
    if not dirs:
        print(__doc__)
        return 2
    t0 = time.time()
    deepspeed, note = setup_deepspeed()
    if verbose:
        print(f"deepspeed {deepspeed.__version__}, torch {torch.__version__}; ready in "
              f"{time.time() - t0:.1f} s" + (f"; {note}" if note else ""), flush=True)

    def check(d: Path) -> list[str]:
        notes: list[str] = []
        check_dir(deepspeed, d, notes)
        return notes

    passed, failed = run_serial(dirs, check, verbose)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
