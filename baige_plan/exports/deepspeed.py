"""deepspeed: plan -> launch files (export). Its execution semantics, the RuntimeSpec the cost model and the
search read, are in baige_plan/specs/runtimes/deepspeed.py."""

from __future__ import annotations

import json

from baige_plan.errors import SpecError
from baige_plan.exports._build import mds_model_args, recorded
from baige_plan.exports._common import (
    DATA_VAR,
    ITERS_VAR,
    TOKENIZER_VAR,
    Export,
    ExportFile,
    VersionCheck,
    arg_lines,
    common_caveats,
    data_lines,
    hostfile_file,
    plan_info,
    slurm_file,
    version_check_lines,
)
from baige_plan.exports.megatron import TRAINING_ARGS
from baige_plan.specs.runtimes.deepspeed import (
    RUNTIME,
    VERSION,
)

MEGATRON_DEEPSPEED = "microsoft/Megatron-DeepSpeed"
MEGATRON_DEEPSPEED_COMMIT = "f4157bea69f3df8c6cb66f2ebcda66ba03d1288e"   # main, 2024-12-24


def batch(doc: dict) -> dict:
    """The DeepSpeed batch triple and world for a plan: data-parallel size dp = world / (tp * pp), micro-batch
    and accumulation steps with train_batch_size = micro * gas * dp = the plan's global batch. DeepSpeed has
    no ring-attention CP: with cp > 1 the cp ranks become data-parallel ranks when the plan's micro-batches
    divide by cp ("fold"), else the job runs on tp * pp * dp ranks ("idle": the cp ranks stay unused)."""
    i = plan_info(doc)
    s = i["s"]
    tp, pp, dp, cp, m = s["tp"], s["pp"], s["dp"], s.get("cp", 1), i["m"]
    cp_mode = "none" if cp == 1 else ("fold" if m % cp == 0 else "idle")
    ds_dp, gas = (dp * cp, m // cp) if cp_mode == "fold" else (dp, m)
    return {"dp": ds_dp, "micro": s["micro_batch"], "gas": gas, "train_batch": i["gb"], "world": tp * pp * ds_dp,
            "cp_mode": cp_mode}


def ds_config(doc: dict) -> tuple[dict, list[str]]:
    """The DeepSpeed config dict and the caveats about it."""
    i = plan_info(doc)
    s, job, model = i["s"], i["job"], i["model"]
    prec = job.get("precision", "bf16")
    if prec == "fp8":
        raise SpecError("inputs.job.precision", "fp8 is not a DeepSpeed precision (the config has bf16 and fp16 "
                        "sections only: deepspeed/runtime/config.py; Megatron-DeepSpeed's --fp8-hybrid needs "
                        "Transformer Engine layers this plan was not costed for); re-plan with --precision bf16")
    b = batch(doc)
    zero, pp, tp = s["zero"], s["pp"], s["tp"]
    caveats: list[str] = []
    cfg: dict = {
        "train_batch_size": b["train_batch"],
        "train_micro_batch_size_per_gpu": b["micro"],
        "gradient_accumulation_steps": b["gas"],
        "steps_per_print": 10,
        "gradient_clipping": 1.0,
        "wall_clock_breakdown": False,
    }
    if prec == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif prec == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
                       "hysteresis": 2, "min_loss_scale": 1}
    zc: dict = {"stage": zero}
    if zero == 1:
        zc.update(overlap_comm=False, contiguous_gradients=True)
    elif zero == 2:
        zc.update(overlap_comm=True, contiguous_gradients=True, reduce_scatter=True)
    elif zero >= 3:
        zc.update(overlap_comm=True, contiguous_gradients=True)
    cfg["zero_optimization"] = zc
    if prec == "bf16" and zero == 1:
        cfg["data_types"] = {"grad_accum_dtype": "fp32"}
    rec = s.get("recompute", "none")
    if rec == "full":
        # Megatron-DeepSpeed --deepspeed-activation-checkpointing calls deepspeed.checkpointing.configure with
        # this file and its own flags (megatron/initialize.py setup_deepspeed_random_and_activation_checkpointing)
        cfg["activation_checkpointing"] = {"partition_activations": bool(s.get("distribute_saved_activations")),
                                           "contiguous_memory_optimization": False,
                                           "cpu_checkpointing": False, "number_checkpoints": i["layers"],
                                           "synchronize_checkpoint_boundary": False, "profile": False}
    if pp > 1:
        pipe = {"stages": pp, "partition": "type:transformer",
                "activation_checkpoint_interval": 1 if rec == "full" else 0}
        if model.get("moe") and tp > 1:
            # megatron/model/gpt_model.py GPTModelPipe asserts these off for MoE with tp > 1 and pp > 1, but
            # reads a missing key as off while DeepSpeed's get_pipeline_config defaults both to true
            pipe.update(pipe_partitioned=False, grad_partitioned=False)
        elif s.get("sequence_parallel") and tp > 1:
            # the boundary tensor is already split over TP: no partition + all-gather (as the cost model
            # assumes, module docstring; MLPerf v3.1 Intel-HabanaLabs run_gpt.sh does the same)
            pipe.update(pipe_partitioned=False, grad_partitioned=False)
        cfg["pipeline"] = pipe
    if zero >= 2 and pp > 1:
        caveats.append(f"zero={zero} with pp={pp}: DeepSpeed's PipelineEngine asserts ZeRO stage < 2 "
                       "(deepspeed/runtime/pipe/engine.py PipelineEngine.__init__); deepspeed.initialize will fail. "
                       "Re-plan with --runtime deepspeed")
    if zero == 0 and pp > 1 and prec == "bf16":
        caveats.append("bf16 with pp > 1 and zero=0: DeepSpeed picks its BF16_Optimizer, which shards the fp32 master "
                       "weights and Adam states over the data-parallel ranks and all-gathers the bf16 parameters "
                       "after each step (deepspeed/runtime/engine.py _do_optimizer_sanity_check): it runs as ZeRO-1")
    if b["cp_mode"] == "fold":
        caveats.append(f"cp={s['cp']}: DeepSpeed has no ring-attention context parallelism; the cp ranks run as "
                       f"data-parallel ranks (DeepSpeed dp = {b['dp']}, {b['gas']} micro-batches each), so every rank "
                       "holds whole sequences: more activation memory than planned")
    elif b["cp_mode"] == "idle":
        caveats.append(f"cp={s['cp']}: DeepSpeed has no ring-attention context parallelism and the plan's {i['m']} "
                       f"micro-batches do not divide by cp, so the job runs on tp x pp x dp = {b['world']} ranks, "
                       "each holding whole sequences; the cp ranks stay unused")
    if s.get("vpp", 1) > 1:
        caveats.append(f"vpp={s['vpp']}: the PipelineEngine has no interleaved schedule (1F1B TrainSchedule); the "
                       f"pipeline bubble is {s['vpp']}x the plan's")
    return cfg, caveats


def megatron_deepspeed_args(doc: dict) -> tuple[list[tuple[str, object]], list[str], list[str]]:
    """(flag, value) pairs for Megatron-DeepSpeed's pretrain_gpt.py (value None: a switch; names from
    megatron/arguments.py at MEGATRON_DEEPSPEED_COMMIT and deepspeed.add_config_arguments), caveats, notes."""
    i = plan_info(doc)
    s, model, job = i["s"], i["model"], i["job"]
    b = batch(doc)
    tp, pp, zero = s["tp"], s["pp"], s["zero"]
    caveats: list[str] = []
    notes: list[str] = []
    heads, hidden = model["heads"], model["hidden"]
    kv = model.get("kv_heads") or heads
    head_dim = model.get("head_dim") or hidden // heads
    seq = job["seq_len"]
    a: list[tuple[str, object]] = [("--tensor-model-parallel-size", tp), ("--pipeline-model-parallel-size", pp)]
    if pp == 1:
        a.append(("--no-pipeline-parallel", None))   # GPTModel + mpu, not GPTModelPipe (megatron/training.py)
    if s.get("sequence_parallel") and tp > 1:
        a.append(("--sequence-parallel", None))
    a += [("--num-layers", i["layers"]), ("--hidden-size", hidden), ("--ffn-hidden-size", model["ffn_hidden"]),
          ("--num-attention-heads", heads)]
    if kv != heads:
        a.append(("--num-key-value-heads", kv))
    if head_dim * heads != hidden:
        a.append(("--kv-channels", head_dim))
    a += [("--seq-length", seq), ("--max-position-embeddings", max(seq, model.get("seq_len") or seq))]
    if recorded(model):   # position, rotary base, norm and epsilon, biases as recorded (exports/_build.py)
        build, build_caveats, build_note = mds_model_args(model)
        a += build
        caveats += build_caveats
        notes.append(build_note)
    elif model.get("activation", "swiglu") == "swiglu":
        a += [("--swiglu", None), ("--normalization", "rmsnorm"), ("--use-rotary-position-embeddings", None),
              ("--no-position-embedding", None), ("--disable-bias-linear", None)]
        notes.append("model style: swiglu -> Llama conventions (RMSNorm, RoPE, no linear biases); the plan's model "
                     "does not record them")
    else:
        a.append(("--normalization", "layernorm"))
        notes.append("model style: gelu -> GPT-3 conventions (LayerNorm, learned absolute positions, linear biases)")
    if not model.get("tie_embeddings", False):
        a.append(("--untie-embeddings-and-output-weights", None))
    drop = model.get("dropout", 0.0) or 0.0
    a += [("--attention-dropout", drop), ("--hidden-dropout", drop)]
    if s.get("attention", "flash") == "flash":
        a.append(("--use-flash-attn-v2", None))
    moe = model.get("moe")
    if moe:
        a += [("--num-experts", moe["experts"]), ("--moe-expert-parallel-size", s.get("ep", 1)),
              ("--topk", moe["top_k"]), ("--expert-interval", moe.get("layer_freq", 1)),
              ("--create-moe-param-group", None)]
        if moe.get("first_dense_layers", 0) or moe.get("shared_experts", 0):
            caveats.append("MoE first dense layers / shared experts: Megatron-DeepSpeed places experts on every "
                           "--expert-interval-th layer and has no shared experts (mlp-type residual is one dense "
                           "residual MLP); exported without them")
        if moe["expert_ffn_hidden"] != model["ffn_hidden"]:
            caveats.append(f"expert width {moe['expert_ffn_hidden']} != ffn {model['ffn_hidden']}: Megatron-DeepSpeed "
                           "experts use --ffn-hidden-size; exported with the dense width")
        if tp > 1:
            caveats.append("MoE with tp > 1: Megatron-DeepSpeed replicates each expert over the tensor-parallel ranks "
                           "(no --enable-expert-tensor-parallelism) and DeepSpeed builds expert groups from "
                           "consecutive ranks (deepspeed/utils/groups.py _create_expert_and_data_parallel)")
    elif s.get("ep", 1) > 1:
        caveats.append(f"ep={s['ep']} on a dense model: nothing to split; not exported")
    rec = s.get("recompute", "none")
    if rec == "full":
        # the DeepSpeed path still uses the old flags (megatron/arguments.py "HACK"); GPTModelPipe turns
        # --checkpoint-num-layers into PipelineModule's activation_checkpoint_interval
        a += [("--checkpoint-activations", None), ("--checkpoint-num-layers", 1),
              ("--deepspeed-activation-checkpointing", None)]
        if s.get("distribute_saved_activations"):
            # megatron/initialize.py passes args.partition_activations to deepspeed.checkpointing.configure, which
            # overrides the config file's value (set alike in ds_config.json)
            a.append(("--partition-activations", None))
    elif rec == "selective":
        a.append(("--recompute-granularity", "selective"))
    prec = job.get("precision", "bf16")
    if prec == "bf16":
        a.append(("--bf16", None))
    elif prec == "fp16":
        a.append(("--fp16", None))
    a += [("--micro-batch-size", b["micro"]), ("--global-batch-size", b["train_batch"]),
          ("--zero-stage", zero), ("--deepspeed", None), ("--deepspeed_config", "ds_config.json")]
    notes.append(f"global batch {b['train_batch']} = DeepSpeed dp {b['dp']} (world {b['world']} / (tp {tp} x pp {pp}))"
                 f" x {b['gas']} micro-batches x micro-batch {b['micro']}")
    a += list(TRAINING_ARGS)   # Megatron's names, which Megatron-DeepSpeed's parser shares (megatron/arguments.py)
    notes.append(f"data, tokenizer and run length: launch.sh appends them from {DATA_VAR} (--data-path), "
                 f"{TOKENIZER_VAR} (--tokenizer-type HFTokenizer --tokenizer-model) and {ITERS_VAR} (--train-iters); "
                 "the learning-rate schedule, eval and logging flags are defaults to adjust; checkpointing and any "
                 "other argument: EXTRA_ARGS")
    return a, caveats, notes


def _nodes(i: dict, world: int) -> tuple[int, int]:
    groups = i["cluster"].get("groups", [])
    dpn = groups[0]["devices_per_node"] if groups else world
    per = min(dpn, world)
    return -(-world // per), per


# What launch.sh reads from the data variables (exports/_common.py data_lines; Megatron-DeepSpeed has no mock
# data), and the versions it accepts: the DeepSpeed release line the export was checked with, on the torch
# Megatron-DeepSpeed's Megatron base needs (its arguments.py asserts torch >= 1.x; DeepSpeed 0.19 wheels need >= 2.x).
DATA_HELP = {"data": "Megatron indexed data: a PREFIX of PREFIX.bin/.idx, or 'WEIGHT PREFIX ...' (--data-path)",
             "tokenizer": "a Hugging Face tokenizer folder or hub name (--tokenizer-type HFTokenizer --tokenizer-model)",
             "mock": None}
VERSIONS = (VersionCheck("deepspeed", "0.19.0", "0.20", dists=("deepspeed",)),
            VersionCheck("torch", "2.6.0", dists=("torch",)))


def _launch_sh(i: dict, world: int, env: dict[str, str]) -> str:
    nodes, gpus = _nodes(i, world)
    lines = ["#!/usr/bin/env bash", f"# {i['title']}",
             f"# DeepSpeed launcher (deepspeed=={VERSION}) running Megatron-DeepSpeed pretrain_gpt.py "
             f"({MEGATRON_DEEPSPEED}@{MEGATRON_DEEPSPEED_COMMIT[:8]}) on {nodes} x {gpus} = {world} ranks.",
             ("# Run once, on this node: a single-node launch uses no hostfile and no ssh." if nodes == 1 else
              "# Run once, on the first node of ./hostfile: the launcher reaches the others over ssh (passwordless) and "
              "runs `cd $PWD` there, so this folder and MEGATRON_DS must be at the same paths on every node (a shared "
              "filesystem). Under SLURM, slurm.sbatch starts launch.sh on every node instead (BAIGE_DS_NO_SSH=1)."),
             "# MEGATRON_DS: the Megatron-DeepSpeed checkout (default: the current folder); EXTRA_ARGS: more",
             "# arguments (checkpointing, ...), appended after megatron_deepspeed_args.txt and the data arguments.",
             "set -euo pipefail",
             'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
             'MEGATRON_DS="$(cd "${MEGATRON_DS:-$PWD}" && pwd)"']
    lines += data_lines(**DATA_HELP)
    lines += version_check_lines(f"deepspeed=={VERSION} with Megatron-DeepSpeed@{MEGATRON_DEEPSPEED_COMMIT[:8]} on "
                                 "torch", VERSIONS)
    if env:
        lines.append("# Megatron-DeepSpeed validate_args requires this with --sequence-parallel; ./.deepspeed_env "
                     "carries it to the other nodes")
        lines += [f"export {k}={v}" for k, v in env.items()]
    lines += ["# ds_config.json, hostfile and .deepspeed_env are read from here",
              'cd "$HERE"',
              "# one argument per line, shell-quoted; lines starting with # are comments",
              'eval "ARGS=($(grep -v \'^[[:space:]]*#\' megatron_deepspeed_args.txt))"',
              'eval "EXTRA=(${EXTRA_ARGS:-})"',
              f'read -r -a DATA_PATHS <<< "${DATA_VAR}"   # a prefix, or "WEIGHT PREFIX WEIGHT PREFIX ..."',
              f'DATA_ARGS=(--data-path "${{DATA_PATHS[@]}}" --tokenizer-type HFTokenizer --tokenizer-model "${TOKENIZER_VAR}"'
              f' --train-iters "${ITERS_VAR}")',
              # one node: no hostfile (deepspeed/launcher/runner.py fetch_hostfile: not a file -> local resources,
              # no ssh check); several: the hostfile, over ssh, or --no_ssh per node under SLURM (slurm.sbatch)
              f'HOSTS=({"--hostfile /dev/null" if nodes == 1 else "--hostfile hostfile"})',
              'if [ "${BAIGE_DS_NO_SSH:-0}" = 1 ]; then',
              '  HOSTS+=(--no_ssh --node_rank "${NODE_RANK:?set NODE_RANK}" --master_addr "${MASTER_ADDR:?set MASTER_ADDR}"'
              ' --master_port "${MASTER_PORT:-29500}")',
              "fi",
              f'exec deepspeed "${{HOSTS[@]}}" --num_nodes {nodes} --num_gpus {gpus} \\',
              '  "$MEGATRON_DS/pretrain_gpt.py" "${ARGS[@]}" "${DATA_ARGS[@]}" "${EXTRA[@]}" "$@"']
    return "\n".join(lines) + "\n"


def export(doc: dict) -> Export:
    i = plan_info(doc)
    if i["opts"].mock_data:
        raise SpecError("--mock-data", f"Megatron-DeepSpeed ({MEGATRON_DEEPSPEED_COMMIT[:8]}) has no mock data "
                        "(megatron/arguments.py has no --mock-data): launch.sh needs BAIGE_DATA_PATH and BAIGE_TOKENIZER")
    cfg, caveats = ds_config(doc)
    args, arg_caveats, notes = megatron_deepspeed_args(doc)
    caveats = common_caveats(i) + caveats + arg_caveats
    b = batch(doc)
    meta = {"plan": i["title"], "deepspeed": VERSION,
            "megatron_deepspeed": f"{MEGATRON_DEEPSPEED}@{MEGATRON_DEEPSPEED_COMMIT}"}
    if caveats:
        meta["cannot_express"] = caveats
    # DeepSpeedConfig ignores keys it does not know: the provenance travels inside the JSON, which has no comments
    cfg = {"baige_plan": meta, **cfg}
    lines = [f"# {i['title']}",
             f"# {RUNTIME.title}: deepspeed=={VERSION}; Megatron-DeepSpeed pretrain_gpt.py arguments "
             f"({MEGATRON_DEEPSPEED}@{MEGATRON_DEEPSPEED_COMMIT}, megatron/arguments.py); one per line, shell-quoted"]
    lines += [f"# {n}" for n in notes]
    lines += [f"# cannot express: {c}" for c in caveats]
    lines += arg_lines(args)
    sp = bool(i["s"].get("sequence_parallel")) and i["s"]["tp"] > 1
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if sp else {}
    files = [ExportFile("ds_config.json", json.dumps(cfg, indent=2) + "\n"),
             ExportFile("megatron_deepspeed_args.txt", "\n".join(lines) + "\n"),
             ExportFile("launch.sh", _launch_sh(i, b["world"], env)),
             hostfile_file(i, f"DeepSpeed launcher hostfile (deepspeed=={VERSION}): HOSTNAME slots=DEVICES, "
                                  "placeholder names: replace with yours; the first --num_nodes lines are used"
                                  + ("; a single-node launch does not read it" if b["world"] <= _nodes(i, b["world"])[1]
                                     else "")),
             slurm_file(i, nnodes=_nodes(i, b["world"])[0], gpus=_nodes(i, b["world"])[1], runtime="deepspeed",
                        data_kw=DATA_HELP, pre=[': "${MEGATRON_DS:?set MEGATRON_DS to the Megatron-DeepSpeed checkout, '
                                                'at the same path on every node}"',
                                                "export MEGATRON_DS BAIGE_DS_NO_SSH=1   # launch.sh on every node, "
                                                "deepspeed --no_ssh --node_rank"])]
    if env:
        # deepspeed/launcher/runner.py reads KEY=VALUE lines from ./.deepspeed_env and exports them on every node
        files.append(ExportFile(".deepspeed_env", "".join(f"{k}={v}\n" for k, v in env.items())))
    return Export(tuple(files), tuple(caveats))
