"""megatron: plan -> launch files (export). Its execution semantics, the RuntimeSpec the cost model and the
search read, are in baige_plan/specs/runtimes/megatron.py."""

from __future__ import annotations

from baige_plan.cost.fp8 import MXFP8_CHIPS
from baige_plan.exports._build import megatron_model_args, megatron_moe_router_args, moe_fusion_args
from baige_plan.exports._common import (
    DATA_VAR,
    ITERS_VAR,
    MOCK_VAR,
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
from baige_plan.specs.job import BF16_WEIGHT_PRECISIONS
from baige_plan.specs.runtimes.megatron import (
    RUNTIME,
    VERSION,
)
from baige_plan.specs.strategy import split_fields

MEGATRON_LM_REF = "core_r0.19.0"   # Megatron-LM release branch whose pretrain_gpt.py goes with the wheel

# Placeholders a launch needs that a plan does not decide (optimizer schedule, run length, logging).
TRAINING_ARGS: tuple[tuple[str, object], ...] = (
    ("--lr", 3.0e-4), ("--min-lr", 3.0e-5), ("--lr-decay-style", "cosine"),
    ("--lr-warmup-fraction", 0.01), ("--weight-decay", 0.1), ("--adam-beta1", 0.9), ("--adam-beta2", 0.95),
    ("--clip-grad", 1.0), ("--init-method-std", 0.02), ("--log-interval", 1), ("--eval-interval", 100),
    ("--eval-iters", 1))


def moe_layer_freq(moe: dict, layers: int) -> int | str:
    """Megatron --moe-layer-freq for the plan's MoE placement (layer i is MoE when i >= first_dense_layers
    and (i - first_dense_layers) % layer_freq == 0): the integer when there is no dense prefix, else a
    list expression in the parser's alphabet (digits , [ ] ( ) + *: training/arguments.py _eval_pattern)."""
    k, f = int(moe.get("first_dense_layers", 0) or 0), int(moe.get("layer_freq", 1) or 1)
    if k == 0:
        return f
    rest = layers - k
    parts = [f"[0]*{k}"]
    period = "[1]" if f == 1 else f"([1]+[0]*{f - 1})"
    if rest // f:
        parts.append(f"{period}*{rest // f}" if f > 1 else f"[1]*{rest}")
    r = rest % f
    if r and f > 1:
        parts.append("[1]" if r == 1 else f"[1]+[0]*{r - 1}")
    return "+".join(parts)


def pipeline_layout(counts: list[int], vpp: int, mtp: int = 0) -> str:
    """--pipeline-model-parallel-layout for per-stage layer counts: pp·vpp virtual stages, listed virtual
    stage by virtual stage (chunk v of rank p is entry v·pp + p); E (embedding) first, L (loss) last.
    A stage's count is spread over its vpp chunks as evenly as possible (the first chunks take the
    remainder)."""
    chunks = [[c // vpp + (1 if v < c % vpp else 0) for v in range(vpp)] for c in counts]
    return layout_string([chunks[p][v] for v in range(vpp) for p in range(len(counts))], mtp)


def layout_string(layout: list[int], mtp: int = 0) -> str:
    """--pipeline-model-parallel-layout of explicit per-virtual-stage counts (model order): E first, the MTP
    layers (m) and L last."""
    out = []
    for k, n in enumerate(layout):
        s = ("t" if n == 1 else f"t*{n}") if n else ""
        if k == 0:
            s = "E" + s
        if k == len(layout) - 1:
            s = s + "m" * mtp + "L"
        out.append(s)
    return "|".join(out)


def _split_args(counts: list[int], vpp: int, account: tuple[bool, bool] = (False, False),
                layout: list[int] | None = None, mtp: int = 0) -> tuple[list[tuple[str, object]], list[str]]:
    """Pipeline split flags: nothing for an even split, else Megatron's own rule that builds exactly these
    stage counts with vpp chunks (specs/strategy.py split_fields: the plan's account_for_* flags first,
    then first/last counts, then the accounting flags), else an explicit layout. Also the vpp flag (never
    with a layout: validate_args allows one of them)."""
    pp = len(counts)
    vflag = [("--num-virtual-stages-per-pipeline-rank", vpp)] if vpp > 1 else []
    if pp == 1:
        return vflag, []
    if layout:      # the plan's own layout (StrategySpec.pipeline_layout), as costed
        return [("--pipeline-model-parallel-layout", layout_string(layout, mtp))], []
    kw = split_fields(counts, vpp, account)
    if kw is not None:
        out: list[tuple[str, object]] = []
        if kw["first_stage_layers"] is not None:
            out.append(("--decoder-first-pipeline-num-layers", kw["first_stage_layers"]))
        if kw["last_stage_layers"] is not None:
            out.append(("--decoder-last-pipeline-num-layers", kw["last_stage_layers"]))
        if kw["account_for_embedding"]:
            out.append(("--account-for-embedding-in-pipeline-split", None))
        if kw["account_for_loss"]:
            out.append(("--account-for-loss-in-pipeline-split", None))
        return vflag + out, []
    caveats = []
    if vpp > 1:
        caveats.append(f"layer split {counts} with vpp={vpp}: no first/last or embedding/loss accounting rule of "
                       "Megatron builds these stage counts with interleaving; exported as an explicit "
                       "--pipeline-model-parallel-layout whose chunks within a stage differ by at most one layer")
    return [("--pipeline-model-parallel-layout", pipeline_layout(counts, vpp, mtp))], caveats


def megatron_args(doc: dict) -> tuple[list[tuple[str, object]], list[str], list[str]]:
    """(flag, value) pairs for pretrain_gpt.py (value None: a switch), the caveats, and comment lines."""
    i = plan_info(doc)
    s, counts, model, job = i["s"], i["counts"], i["model"], i["job"]
    tp, pp, cp, dp = s["tp"], s["pp"], s.get("cp", 1), s["dp"]
    ep, etp, vpp, zero = s.get("ep", 1), s.get("etp", 1), s.get("vpp", 1), s.get("zero", 0)
    caveats = [c for c in common_caveats(i) if not c.startswith("free-form layer split")]
    notes: list[str] = []
    heads, hidden = model["heads"], model["hidden"]
    kv = model.get("kv_heads") or heads
    head_dim = model.get("head_dim") or hidden // heads
    seq = job["seq_len"]
    a: list[tuple[str, object]] = [
        ("--num-layers", i["layers"]), ("--hidden-size", hidden), ("--ffn-hidden-size", model["ffn_hidden"]),
        ("--num-attention-heads", heads)]
    if kv != heads:
        a += [("--group-query-attention", None), ("--num-query-groups", kv)]
    mla = model.get("mla")
    if mla:
        # Megatron-core MLASelfAttention (megatron/training/arguments.py, core 0.19)
        a += [("--multi-latent-attention", None), ("--kv-lora-rank", mla["kv_lora_rank"]),
              ("--qk-head-dim", mla["qk_head_dim"]), ("--qk-pos-emb-head-dim", mla["qk_rope_head_dim"]),
              ("--v-head-dim", mla["v_head_dim"])]
        if mla.get("q_lora_rank"):
            a.append(("--q-lora-rank", mla["q_lora_rank"]))
    elif head_dim * heads != hidden:
        a.append(("--kv-channels", head_dim))
    if model.get("mtp_layers"):
        a.append(("--mtp-num-layers", model["mtp_layers"]))
    if model.get("sliding_window"):
        # megatron/core/transformer/utils.py is_layer_window_attention: layer_number % freq == 0 is full attention
        a.append(("--window-size", f"{model['sliding_window']},0"))
        if model.get("full_attention_every"):
            a.append(("--window-attn-skip-freq", model["full_attention_every"]))
    a += [("--seq-length", seq), ("--max-position-embeddings", max(seq, model.get("seq_len") or seq))]
    # position, rotary base/scaling, norm and epsilon, qk-norm, biases as the model records them (exports/_build.py)
    build, build_caveats, build_note = megatron_model_args(model)
    a += build
    caveats += build_caveats
    notes.append(build_note)
    if not model.get("tie_embeddings", False):
        a.append(("--untie-embeddings-and-output-weights", None))
    drop = model.get("dropout", 0.0) or 0.0
    a += [("--attention-dropout", drop), ("--hidden-dropout", drop)]
    moe = model.get("moe")
    if moe:
        a += [("--num-experts", moe["experts"]), ("--moe-router-topk", moe["top_k"]),
              ("--moe-ffn-hidden-size", moe["expert_ffn_hidden"])]
        if moe.get("shared_experts"):
            a.append(("--moe-shared-expert-intermediate-size", moe["shared_experts"] * moe["expert_ffn_hidden"]))
        router, router_caveats = megatron_moe_router_args(moe)
        a += router + moe_fusion_args(model)
        caveats += router_caveats
        disp = s.get("moe_dispatcher") or "alltoall"     # as costed (cost/moe.py moe_dispatch_comm_s)
        a += [("--moe-layer-freq", moe_layer_freq(moe, i["layers"])), ("--moe-token-dispatcher-type", disp),
              ("--moe-grouped-gemm", None)]
        if s.get("moe_a2a_overlap"):
            # TransformerConfig.overlap_moe_expert_parallel_comm (combined 1F1B), as costed (cost/moe.py)
            a.append(("--overlap-moe-expert-parallel-comm", None))
            notes.append("EP all-to-all overlap: Megatron asks for CUDA_DEVICE_MAX_CONNECTIONS > 1 on Hopper and before "
                         "(megatron/training/arguments.py); launch.sh sets 1 when tp or cp > 1")
        if disp == "flex":
            # transformer_config.py moe_flex_dispatcher_backend (default deepep); DeepEP is a separate install
            a.append(("--moe-flex-dispatcher-backend", "deepep"))
            notes.append("MoE flex dispatcher: needs DeepEP installed (github.com/deepseek-ai/DeepEP)")
        if s.get("moe_fused_mlp"):
            # TransformerConfig.use_transformer_engine_op_fuser (megatron-core >= 0.18: experts.py _make_fused_ops);
            # TE fuses the experts only with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 set before it is imported (launch.sh)
            a.append(("--use-transformer-engine-op-fuser", None))
            notes.append("MoE fused grouped MLP: needs megatron-core >= 0.18, Transformer Engine with the CuTe-DSL grouped "
                         "MLP (ops/fused/grouped_mlp.py) and nvidia-cudnn-frontend >= 1.23; launch.sh sets "
                         "NVTE_CUTEDSL_FUSED_GROUPED_MLP=1")
    notes.append("needs Transformer Engine (--transformer-impl transformer_engine, the default): fused RoPE, "
                 "context parallelism, FP8 and grouped GEMM run through it")
    notes.append(f"data, tokenizer and run length: launch.sh appends them from {DATA_VAR} (--data-path), "
                 f"{TOKENIZER_VAR} (--tokenizer-type HuggingFaceTokenizer --tokenizer-model) and {ITERS_VAR} "
                 f"(--train-iters); {MOCK_VAR}=1: mock tokens with NullTokenizer (vocab {model['vocab']}, padded by "
                 f"Megatron to a multiple of 128*tp = {128 * tp}); with a real tokenizer the vocabulary is the "
                 f"tokenizer's (the plan assumed {model['vocab']})")

    # parallelism
    a += [("--tensor-model-parallel-size", tp), ("--pipeline-model-parallel-size", pp),
          ("--context-parallel-size", cp)]
    if s.get("sequence_parallel") and tp > 1:
        a.append(("--sequence-parallel", None))
    if moe:
        a += [("--expert-model-parallel-size", ep), ("--expert-tensor-parallel-size", etp)]
    elif ep > 1 or etp > 1:
        caveats.append(f"ep={ep}, etp={etp} on a dense model: Megatron has no experts to split; not exported")
    split, split_caveats = _split_args(counts, vpp, (bool(s.get("account_for_embedding")),
                                                     bool(s.get("account_for_loss"))),
                                       s.get("pipeline_layout"), int(model.get("mtp_layers") or 0))
    a += split
    caveats += split_caveats
    if zero >= 3:
        a += _fsdp_args()
        if s.get("fsdp_shard"):
            # HSDP: Megatron-FSDP shards within dp·cp / R ranks and keeps R copies (mcore_fsdp_adapter.py
            # _init_dist_index: enable_hsdp = num_distributed_optimizer_instances > 1)
            a.append(("--num-distributed-optimizer-instances", dp * s.get("cp", 1) // int(s["fsdp_shard"])))
        if pp > 1:
            caveats.append(f"zero=3 with pp={pp}: Megatron-FSDP's parser takes it, but its per-micro-batch gathers were "
                           "read (and are costed) for pp=1 only; Megatron's FSDP examples run pp=1")
    elif zero == 2:
        caveats.append(f"zero=2: megatron-core {VERSION} shards gradients without parameters only through "
                       "Megatron-FSDP optim_grads, which the planner does not cost (runtimes/megatron.py); exported "
                       "as ZeRO-1 (--use-distributed-optimizer), which holds full gradients per rank: more memory "
                       "than planned")
    # Megatron-FSDP overlaps its gathers and reduce-scatters whatever the flags (megatron_fsdp.py:330-333)
    overlap = s.get("overlap_grad_reduce", True) or zero >= 3
    if zero >= 1:
        a.append(("--use-distributed-optimizer", None))
    if overlap:   # validate_args: --overlap-param-gather needs the distributed optimizer and --overlap-grad-reduce
        a += [("--overlap-grad-reduce", None)] + ([("--overlap-param-gather", None)] if zero >= 1 else [])
    if s.get("grad_reduce_bf16"):
        a.append(("--grad-reduce-in-bf16", None))
    if s.get("tp_pp_dp_mapping"):   # rank order tp-cp-ep-pp-dp (training/initialize.py), as costed
        a.append(("--use-tp-pp-dp-mapping", None))
    from baige_plan.specs import (
        runtimes,  # the plan's runtime (FlagScale exports through these arguments too)
    )
    rt = runtimes.get(s.get("runtime") or "megatron")
    if (s.get("loss_kernel") or rt.loss_kernel) != "megatron_unfused":
        # the jit-fused vocab-parallel loss (native impl), as costed (cost/execution.py FUSED_LOSS_BYTES_PER_LOGIT)
        # and as NeMo / Megatron-Bridge recipes run it; without the flag Megatron runs one op per step
        a.append(("--cross-entropy-loss-fusion", None))
        if s.get("loss_kernel") == "te_xent":   # Transformer Engine's kernel (cost/execution.py TE_XENT_...)
            a.append(("--cross-entropy-fusion-impl", "te"))
    if s.get("tp_comm_overlap", rt.tp_comm_overlap) and tp > 1:
        if s.get("sequence_parallel"):
            a.append(("--tp-comm-overlap", None))
        else:
            caveats.append("tp_comm_overlap needs tp > 1 with sequence parallelism (validate_args); not exported")
    if s.get("execution", "fused") != "fused":
        caveats.append(f"execution={s['execution']}: Megatron runs fused kernels (Transformer Engine); the plan "
                       "was costed for eager execution")
    rec = s.get("recompute", "none")
    if rec == "selective":
        a.append(("--recompute-granularity", "selective"))
        if s.get("recompute_modules"):     # megatron/training/arguments.py --recompute-modules (nargs *)
            a.append(("--recompute-modules", ("core_attn", *s["recompute_modules"].split(","))))
    elif rec == "full":
        a += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", 1)]
        if s.get("distribute_saved_activations"):   # 1/tp of each checkpointed input kept (training/arguments.py)
            a.append(("--distribute-saved-activations", None))
    if s.get("attention") == "standard":
        a.append(("--attention-backend", "unfused"))

    # precision
    prec = job.get("precision", "bf16")
    if prec in BF16_WEIGHT_PRECISIONS:
        a.append(("--bf16", None))
    elif prec == "fp16":
        a.append(("--fp16", None))
    if prec == "fp8":
        # the scaling recipe the plan is costed with (cost/fp8.py): Megatron's --fp8-recipe names
        chip = ((i["cluster"].get("groups") or [{}])[0].get("chip") or {})
        chip_id = chip.get("id", "") if isinstance(chip, dict) else str(chip)
        recipe = s.get("fp8_recipe") or ("mxfp8" if chip_id in MXFP8_CHIPS else "current")
        a += [("--fp8-format", "hybrid"), ("--fp8-recipe", {"current": "tensorwise"}.get(recipe, recipe))]
        if recipe == "delayed":
            a += [("--fp8-amax-history-len", 1024), ("--fp8-amax-compute-algo", "max")]
        if RUNTIME.fp8_param_gather and zero < 3:
            a.append(("--fp8-param-gather", None))   # fp8 primary weights, as costed (RuntimeSpec.fp8_param_gather)
    if prec == "fp4":
        # NVFP4 GEMMs through TE's NVFP4BlockScaling (cost/fp8.py), bf16 primary weights as costed (no
        # --fp4-param-gather)
        a += [("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")]

    # batch
    a += [("--micro-batch-size", s["micro_batch"]), ("--global-batch-size", i["gb"])]
    notes.append(f"global batch {i['gb']} = dp {dp} x {i['m']} micro-batches x micro-batch {s['micro_batch']}")
    a += list(TRAINING_ARGS)
    notes.append("learning-rate schedule, eval and logging flags are defaults to adjust; the run length is "
                 f"{ITERS_VAR} (launch.sh)")
    return a, caveats, notes


def _fsdp_args() -> list[tuple[str, object]]:
    """ZeRO-3 as Megatron-FSDP (module docstring): its full-sharding strategy, the checkpoint format
    validate_args requires with it, and sharded initialisation (--init-model-with-meta-device: the model is
    built on the meta device and materialised per unit shard, so no rank ever holds all of its 16-bit
    parameters, which ZeRO-3 plans do not fit)."""
    return [("--use-megatron-fsdp", None), ("--data-parallel-sharding-strategy", "optim_grads_params"),
            ("--ckpt-format", "fsdp_dtensor"), ("--init-model-with-meta-device", None)]


def _env(s: dict) -> dict[str, str]:
    env = {}
    # Megatron-FSDP asserts the opposite (validate_args: CUDA_DEVICE_MAX_CONNECTIONS != 1) and only warns with
    # TP/CP; launch.sh unsets it for ZeRO-3 plans (_launch_sh)
    if (s["tp"] > 1 or s.get("cp", 1) > 1) and s.get("zero", 0) < 3:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    if s.get("moe_fused_mlp"):     # read by TE when it registers its fused ops (ops/fused/grouped_mlp.py)
        env["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] = "1"
    return env


def _launch_sh(i: dict, env: dict[str, str]) -> str:
    groups = i["cluster"].get("groups", [])
    nnodes = sum(g["nodes"] for g in groups)
    nproc = groups[0]["devices_per_node"] if groups else 1
    lines = ["#!/usr/bin/env bash", f"# {i['title']}",
             f"# Megatron-LM launch (megatron-core=={VERSION}; pretrain_gpt.py from Megatron-LM {MEGATRON_LM_REF}).",
             f"# Run once on every node: NODE_RANK=0..{nnodes - 1} (line order of ./hostfile), MASTER_ADDR = node 0.",
             "# MEGATRON_LM: the Megatron-LM checkout (default: the current folder); extra arguments are passed on",
             "# to pretrain_gpt.py after those in megatron_args.txt (MEGATRON_ARGS overrides that file's path).",
             "set -euo pipefail",
             'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
             f"NNODES={nnodes}",
             f"NPROC_PER_NODE={nproc}",
             'NODE_RANK="${NODE_RANK:-0}"']
    if nnodes > 1:
        lines.append('MASTER_ADDR="${MASTER_ADDR:-$(awk \'!/^#/ && NF {print $1; exit}\' "$HERE/hostfile" '
                     '2>/dev/null || true)}"')
        lines.append('MASTER_ADDR="${MASTER_ADDR:-localhost}"')
    else:
        lines.append('MASTER_ADDR="${MASTER_ADDR:-localhost}"')
    lines += ['MASTER_PORT="${MASTER_PORT:-6000}"', 'MEGATRON_LM="${MEGATRON_LM:-$PWD}"']
    lines += data_lines(**DATA_HELP, mock_default=i["opts"].mock_data)
    lines += version_check_lines(f"megatron-core=={VERSION} (or Megatron-LM {MEGATRON_LM_REF} or newer) on torch",
                                 VERSIONS, pythonpath="$MEGATRON_LM")
    if env:
        lines.append("# tp > 1 or cp > 1: megatron/training/arguments.py validate_args asserts this before Blackwell")
    lines += [f"export {k}={v}" for k, v in env.items()]
    if i["s"].get("zero", 0) >= 3:
        lines += ["# Megatron-FSDP (zero 3): validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS != 1",
                  "unset CUDA_DEVICE_MAX_CONNECTIONS"]
    lines += ['ARGS_FILE="${MEGATRON_ARGS:-$HERE/megatron_args.txt}"',
              "# one argument per line, shell-quoted; lines starting with # are comments",
              'eval "ARGS=($(grep -v \'^[[:space:]]*#\' "$ARGS_FILE"))"',
              f'if [ "${MOCK_VAR}" = 1 ]; then',
              f'  DATA_ARGS=(--mock-data --tokenizer-type NullTokenizer --vocab-size {i["model"]["vocab"]})',
              "else",
              f'  read -r -a DATA_PATHS <<< "${DATA_VAR}"   # a prefix, or "WEIGHT PREFIX WEIGHT PREFIX ..."',
              '  DATA_ARGS=(--data-path "${DATA_PATHS[@]}" --tokenizer-type HuggingFaceTokenizer '
              f'--tokenizer-model "${TOKENIZER_VAR}")',
              "fi",
              f'DATA_ARGS+=(--train-iters "${ITERS_VAR}")',
              'exec torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" --node-rank "$NODE_RANK" \\',
              '  --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" \\',
              '  "$MEGATRON_LM/pretrain_gpt.py" "${ARGS[@]}" "${DATA_ARGS[@]}" "$@"']
    return "\n".join(lines) + "\n"


# What launch.sh reads from the data variables (exports/_common.py data_lines), and the versions it accepts:
# the megatron-core wheel the arguments were checked with up to Megatron-LM main (0.20.0, d98e8a64, 2026-08;
# megatron/core/package_info.py, read from the MEGATRON_LM checkout when there is one), on the torch its
# pyproject.toml requires (torch>=2.6.0).
DATA_HELP = {"data": "Megatron indexed data: a PREFIX of PREFIX.bin/.idx, or 'WEIGHT PREFIX WEIGHT PREFIX ...' "
                     "(--data-path)",
             "tokenizer": "a Hugging Face tokenizer folder or hub name (--tokenizer-type HuggingFaceTokenizer "
                          "--tokenizer-model)",
             "mock": "Megatron mock tokens with NullTokenizer (--mock-data)"}
VERSIONS = (VersionCheck("megatron-core", "0.19.0", "0.21", dists=("megatron-core",),
                         files=("megatron/core/package_info.py",)),
            VersionCheck("torch", "2.6.0", dists=("torch",)))


def slurm(i: dict) -> ExportFile:
    """slurm.sbatch: launch.sh on every node of the allocation (exports/_common.py slurm_file)."""
    groups = i["cluster"].get("groups", [])
    return slurm_file(i, nnodes=sum(g["nodes"] for g in groups), gpus=groups[0]["devices_per_node"] if groups else 1,
                      runtime="megatron", data_kw=DATA_HELP,
                      pre=[': "${MEGATRON_LM:?set MEGATRON_LM to the Megatron-LM checkout (pretrain_gpt.py), '
                           'at the same path on every node}"', "export MEGATRON_LM"])


def export(doc: dict) -> Export:
    i = plan_info(doc)
    args, caveats, notes = megatron_args(doc)
    lines = [f"# {i['title']}",
             f"# {RUNTIME.title}: megatron-core=={VERSION} (PyPI), pretrain_gpt.py arguments "
             f"(Megatron-LM {MEGATRON_LM_REF}); one argument per line, shell-quoted"]
    lines += [f"# {n}" for n in notes]
    lines += [f"# cannot express: {c}" for c in caveats]
    lines += arg_lines(args)
    files = (ExportFile("megatron_args.txt", "\n".join(lines) + "\n"),
             ExportFile("launch.sh", _launch_sh(i, _env(i["s"]))),
             hostfile_file(i, "one line per node, NODE_RANK = line order: HOSTNAME slots=DEVICES (placeholder names: replace with yours)"),
             slurm(i))
    return Export(files, tuple(caveats))
