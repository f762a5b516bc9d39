"""paddle: plan -> launch files (export). Its execution semantics, the RuntimeSpec the cost model and the
search read, are in baige_plan/specs/runtimes/paddle.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

from baige_plan.errors import SpecError
from baige_plan.exports._common import (
    DATA_VAR,
    ITERS_VAR,
    TOKENIZER_VAR,
    Export,
    ExportFile,
    VersionCheck,
    common_caveats,
    data_lines,
    hostfile_file,
    placeholder_hosts,
    plan_info,
    slurm_file,
    version_check_lines,
)
from baige_plan.specs.runtimes.paddle import (
    PADDLE_VERSION,
    RUNTIME,
)

ARGS_FILE = "paddleformers_args.yaml"
CONFIG_FILE = "config.json"   # model config (AutoConfig.from_pretrained(<folder>) reads <folder>/config.json)
LAUNCHER = "paddleformers/cli/launcher.py"   # what `paddleformers-cli train` runs under paddle.distributed.launch


def _strategy(s: dict, dp: int, m: int) -> SimpleNamespace:
    return SimpleNamespace(tp=s["tp"], pp=s["pp"], dp=dp, cp=s.get("cp", 1), ep=s.get("ep", 1), etp=s.get("etp", 1),
                           zero=s.get("zero", 0), micro_batch=s["micro_batch"], vpp=s.get("vpp", 1),
                           recompute=s.get("recompute", "none"), sequence_parallel=bool(s.get("sequence_parallel")),
                           first_stage_layers=s.get("first_stage_layers"), last_stage_layers=s.get("last_stage_layers"))


def moe_layers(model: dict) -> list[int]:
    """0-based indices of the MoE layers (baige-plan MoESpec: i >= first_dense_layers and
    (i - first_dense_layers) % layer_freq == 0)."""
    moe = model.get("moe") or {}
    first, freq = moe.get("first_dense_layers", 0), moe.get("layer_freq", 1)
    return [i for i in range(model["layers"]) if i >= first and (i - first) % freq == 0]


def _build_config(model: dict, cfg: dict, moe_class: bool) -> list[str]:
    """The model's recorded build fields (specs/model.py) in config.json's Hugging Face keys, which
    PaddleFormers 1.2.0's LlamaConfig / Qwen3MoeConfig read (transformers/llama/configuration.py,
    qwen3_moe/configuration.py: rope_theta, rope_scaling, rms_norm_eps, attention_bias; checked by
    tests/integration/check_paddle.py), and what its Llama (dense) / Qwen3-MoE (MoE) classes build otherwise.
    Unrecorded fields keep the config the export always wrote."""
    caveats: list[str] = []
    cls = "Qwen3MoeForCausalLM" if moe_class else "LlamaForCausalLM"
    if model.get("rope_theta") is not None:
        cfg["rope_theta"] = float(model["rope_theta"])
    if model.get("rope_scaling"):
        # paddleformers 1.2.0 llama/configuration.py and qwen3_moe/configuration.py: rope_scaling -> rope_parameters;
        # llama/modeling.py and qwen3_moe/modeling.py build it with modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type]
        cfg["rope_scaling"] = dict(model["rope_scaling"])
    if model.get("norm_eps") is not None:
        cfg["rms_norm_eps"] = float(model["norm_eps"])
    if model.get("norm") == "layernorm":
        caveats.append(f"norm layernorm: {cls} builds RMSNorm")
    if model.get("position_embedding") not in (None, "rope"):
        caveats.append(f"position_embedding {model['position_embedding']}: {cls} builds RoPE")
    if model.get("qk_norm") is not None and model["qk_norm"] != moe_class:
        caveats.append(f"qk_norm {str(model['qk_norm']).lower()}: {cls} builds "
                       + ("per-head q/k RMSNorm" if moe_class else "no q/k norm"))
    if model.get("qkv_bias") or model.get("linear_bias"):
        caveats.append(f"qkv_bias {model.get('qkv_bias')}, linear_bias {model.get('linear_bias')}: exported "
                       f"without biases (attention_bias false, mlp_bias false)")
    return caveats


def model_config(model: dict, seq_len: int) -> tuple[dict, list[str]]:
    """The Hugging-Face-style config.json PaddleFormers' AutoConfig loads for a model of this shape, and what
    it cannot express. Dense: LlamaForCausalLM (native PaddleFormers, TP/PP/SP). MoE: Qwen3MoeForCausalLM,
    PaddleFormers 1.2's general top-k MoE decoder without shared experts (a PaddleFleet model)."""
    caveats: list[str] = []
    cfg = {"hidden_size": model["hidden"], "num_hidden_layers": model["layers"],
           "num_attention_heads": model["heads"], "num_key_value_heads": model.get("kv_heads") or model["heads"],
           "head_dim": model.get("head_dim") or model["hidden"] // model["heads"],
           "intermediate_size": model["ffn_hidden"], "vocab_size": model["vocab"],
           "max_position_embeddings": max(seq_len, model.get("seq_len") or 0),
           "tie_word_embeddings": bool(model.get("tie_embeddings", False)), "hidden_act": "silu",
           "rms_norm_eps": 1e-5, "attention_bias": False}
    if model.get("activation", "swiglu") != "swiglu":
        caveats.append(f"activation {model.get('activation')!r}: PaddleFormers 1.2 has no GPT-style (non-gated) "
                       "decoder class; config.json describes a SwiGLU Llama of the same widths (its MLP has 1.5x "
                       "the FLOPs and parameters), not this model")
    if model.get("dropout"):
        caveats.append(f"dropout {model['dropout']}: the Llama/Qwen3-MoE classes train without hidden dropout")
    moe = model.get("moe")
    caveats += _build_config(model, cfg, moe_class=bool(moe))
    if not moe:
        cfg.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "mlp_bias": False})
        return cfg, caveats
    sparse = set(moe_layers(model))
    cfg.update({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                "num_experts": moe["experts"], "num_experts_per_tok": moe["top_k"],
                "moe_intermediate_size": moe["expert_ffn_hidden"],
                "norm_topk_prob": moe.get("norm_topk_prob") is not False,   # as recorded; True when not
                "decoder_sparse_step": 1, "mlp_only_layers": [i for i in range(model["layers"]) if i not in sparse]})
    caveats.append(f"MoE model {model['name']!r} is exported as PaddleFormers' Qwen3MoeForCausalLM with its shapes "
                   "(PaddleFormers 1.2 has no class of its own for it; Qwen3-MoE adds per-head q/k RMSNorm); it is "
                   "a PaddleFleet model: install paddleformers[paddlefleet] (paddlefleet==0.3.0, from Paddle's "
                   "package index, not PyPI) on the GPU nodes")
    if moe.get("shared_experts"):
        caveats.append(f"{moe['shared_experts']} shared expert(s) are not expressible in Qwen3MoeForCausalLM; "
                       "the exported model has none")
    return cfg, caveats


def training_args(doc: dict) -> tuple[dict, list[str]]:
    """The PaddleFormers 1.2 `paddleformers-cli train` arguments (ModelArguments, DataArguments,
    FinetuningArguments = TrainingArguments) for the plan, and what they cannot express."""
    i = plan_info(doc)
    s, job, model = i["s"], i["job"], i["model"]
    tp, pp, dp, cp, ep = s["tp"], s["pp"], s["dp"], s.get("cp", 1), s.get("ep", 1)
    z, vpp, mb, m = s.get("zero", 0), s.get("vpp", 1), s["micro_batch"], i["m"]
    caveats: list[str] = []
    a: dict = {
        # ModelArguments: a fresh model (pretraining) built from <model_name_or_path>/config.json
        "stage": "PT", "fine_tuning": "full", "model_name_or_path": ".", "continue_training": False,
        # DataArguments: Megatron-style indexed pretraining data ("WEIGHT PREFIX ...", launch.sh fills it)
        "dataset_type": "pretrain", "input_dir": "1.0 ./data/pretrain_text_document", "split": "1000,0,0",
        "max_seq_len": job["seq_len"],
        # TrainingArguments
        "output_dir": "./checkpoints", "do_train": True, "do_eval": False, "max_steps": 1000,
        "per_device_train_batch_size": mb, "per_device_eval_batch_size": mb, "gradient_accumulation_steps": m,
        "tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp,
    }
    if pp > 1:
        a["virtual_pipeline_model_parallel_size"] = vpp
    a["sequence_parallel"] = bool(s.get("sequence_parallel")) and tp > 1
    if z:
        a["sharding"] = f"stage{z}"
        a["sharding_parallel_size"] = dp * cp       # cp ranks are carved out of the sharding group
    else:
        a["sharding"] = ""                          # TrainingArguments defaults to "stage1"
    if cp > 1:
        a["context_parallel_size"] = cp
    if ep > 1:
        a.update({"use_expert_parallel": True, "expert_model_parallel_size": ep,
                  "moe_token_dispatcher_type": "alltoall"})
        if s.get("moe_dispatcher", "alltoall") != "alltoall":
            caveats.append(f"MoE dispatcher {s['moe_dispatcher']} is costed but PaddleFormers runs alltoall; "
                           "exported as alltoall")
    if s.get("etp", 1) > 1:
        caveats.append(f"expert tensor parallelism (etp={s['etp']}) is not supported by PaddleFormers 1.2; not exported")
    prec = job.get("precision", "bf16")
    if prec == "fp8":
        caveats.append("fp8: PaddleFormers 1.2 trains fp8 only in its DeepSeek-V3/ERNIE pretraining paths, not "
                       "with these model classes; exported as bf16")
        prec = "bf16"
    if prec in ("bf16", "fp16"):
        a.update({"compute_type": prec, "bf16": prec == "bf16", "fp16": prec == "fp16", "fp16_opt_level": "O2",
                  "amp_master_grad": True})
    else:   # fp32: FinetuningArguments.compute_type "float32"; master grads need AMP
        a.update({"compute_type": "float32", "bf16": False, "fp16": False, "amp_master_grad": False})
    rc = s.get("recompute", "none")
    if rc == "full":
        a.update({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1})
    elif rc == "selective":
        caveats.append("selective recompute: PaddleFormers 1.2's Llama and pipeline layers implement only full "
                       "recompute (granularity full, method uniform, 1 layer); exported without recompute, which "
                       "needs more activation memory than planned")
    counts = i["counts"]
    if pp > 1 and len(set(counts)) > 1:
        if vpp == 1 and not model.get("moe"):
            # pp_layers.py:SegmentLayers.do_segment takes a list of boundaries over the pipeline's layer list
            # [embedding, decoder layers..., norm, lm_head]; embedding goes with the first stage
            bounds = [0]
            for c in counts[:-1]:
                bounds.append(bounds[-1] + c + (1 if len(bounds) == 1 else 0))
            a["pp_seg_method"] = str(bounds)
        else:
            caveats.append(f"uneven layer split {counts} is not expressible with vpp or PaddleFleet models: Paddle "
                           "splits the layers equally")
    refusal = RUNTIME.refusal(_strategy(s, dp, m), SimpleNamespace(moe=model.get("moe"), activation=model.get("activation", "swiglu")),
                              SimpleNamespace(precision=job.get("precision", "bf16"), global_batch=i["gb"]))
    if refusal:   # exit 2 (exports/files.py refusal says the same for `baige-plan export`)
        raise SpecError("strategy", f"PaddleFormers {RUNTIME.version} / Paddle {PADDLE_VERSION} refuse this plan: "
                        f"{refusal}")
    return a, caveats


def _yaml(args: dict) -> str:
    # JSON scalars and flow lists are YAML: safe_load reads them back with the same types
    return "".join(f"{k}: {json.dumps(v)}\n" for k, v in args.items())


def export(doc: dict) -> Export:
    i = plan_info(doc)
    s, job, model = i["s"], i["job"], i["model"]
    caveats = common_caveats(i)
    args, arg_caveats = training_args(doc)
    cfg, cfg_caveats = model_config(model, job["seq_len"])
    caveats += arg_caveats + cfg_caveats
    pins = f"paddleformers=={RUNTIME.version} on paddlepaddle=={PADDLE_VERSION} (GPU build on the nodes)"
    head = [f"# {i['title']}", f"# {RUNTIME.title}: {pins}",
            "# `paddleformers-cli train` arguments (ModelArguments, DataArguments, TrainingArguments);",
            "# launch.sh overrides model_name_or_path and input_dir; any key=value after it overrides more"]
    head += [f"# cannot express: {c}" for c in caveats]
    strat = (f"# plan: tp={s['tp']} pp={s['pp']} vpp={s.get('vpp', 1)} dp={s['dp']} cp={s.get('cp', 1)} "
             f"ep={s.get('ep', 1)} zero={s.get('zero', 0)} micro_batch={s['micro_batch']} micro_batches={i['m']} "
             f"global_batch={i['gb']} world={i['devices'] or s['tp'] * s['pp'] * s['dp'] * s.get('cp', 1)}")
    args_text = "\n".join(head + [strat]) + "\n" + _yaml(args)

    groups = i["cluster"].get("groups", [])
    dpn = groups[0]["devices_per_node"] if groups else 8
    devices = ",".join(str(d) for d in range(dpn))
    nnodes = sum(g["nodes"] for g in groups) if groups else 1
    if i.get("hosts"):
        nnodes = sum(len(v) for v in i["hosts"].values())
    launch = [
        "#!/usr/bin/env bash",
        f"# {i['title']}",
        f"# {RUNTIME.title}: {pins}",
        "# Run the same command on every node (Paddle's launcher finds its rank from --ips, which must be IPs:",
        "# the hosts of ./hostfile are resolved here with getent; IPS=10.0.0.1,10.0.0.2 overrides them):",
        f"#   {DATA_VAR}=/data/corpus_text_document {TOKENIZER_VAR}=/path/to/tokenizer ./launch.sh [key=value ...]",
        "# (e.g. learning_rate=3e-4). The model folder PaddleFormers loads is made under BAIGE_OUTPUT_DIR (default:",
        "# output/ beside this script): this folder's config.json (the plan's model shape) and the tokenizer's files;",
        "# MODEL_DIR names a ready one instead. Checkpoints and logs go to BAIGE_OUTPUT_DIR too.",
    ]
    launch += [f"# cannot express: {c}" for c in caveats]
    if placeholder_hosts(i) and nnodes == 1:
        ips = ['IPS="${IPS:-127.0.0.1}"   # one node']
    else:
        ips = ['if [ -z "${IPS:-}" ]; then',
               "  while read -r host _; do",
               '    case "$host" in ""|"#"*) continue ;; esac',
               "    ip=$(getent ahostsv4 \"$host\" 2>/dev/null | awk 'NR == 1 {print $1}' || true)",
               '    [ -n "$ip" ] || { echo "launch.sh: cannot resolve $host (./hostfile) to an IPv4 address: Paddle\'s '
               '--ips needs IPs (put them in the hostfile or set IPS)" >&2; exit 2; }',
               '    IPS="${IPS:+$IPS,}$ip"',
               '  done < "$HERE/hostfile"',
               "fi"]
    launch += [
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        *data_lines(**DATA_HELP),
        *version_check_lines(f"paddleformers=={RUNTIME.version} on paddlepaddle=={PADDLE_VERSION}", VERSIONS),
        *ips,
        'OUT="${BAIGE_OUTPUT_DIR:-$HERE/output}"',
        f'read -r -a words <<< "${DATA_VAR}"',
        f'if [ "${{#words[@]}}" -eq 1 ]; then DATA="1.0 ${DATA_VAR}"; else DATA="${DATA_VAR}"; fi',
        'if [ -z "${MODEL_DIR:-}" ]; then',
        '  MODEL_DIR="$OUT/model"',
        '  mkdir -p "$MODEL_DIR"',
        f'  for f in "${TOKENIZER_VAR}"/*; do',
        f'    case "$(basename "$f")" in {CONFIG_FILE}|*.safetensors|*.pdparams|*.bin) ;; *) ln -sfn "$f" "$MODEL_DIR/" 2>/dev/null || true ;; esac',
        "  done",
        f'  cp "$HERE/{CONFIG_FILE}" "$MODEL_DIR/{CONFIG_FILE}.tmp.$$" && mv -f "$MODEL_DIR/{CONFIG_FILE}.tmp.$$" '
        f'"$MODEL_DIR/{CONFIG_FILE}"',
        "fi",
        'ENTRY="$("$PYTHON" -c \'import paddleformers.cli.launcher as m; print(m.__file__)\')"',
        f'exec "$PYTHON" -m paddle.distributed.launch --ips "$IPS" --devices {devices} --log_dir "$OUT/log" \\',
        f'    "$ENTRY" train "$HERE/{ARGS_FILE}" model_name_or_path="$MODEL_DIR" input_dir="$DATA" '
        f'max_steps="${ITERS_VAR}" output_dir="$OUT/checkpoints" "$@"',
    ]
    return Export((ExportFile(ARGS_FILE, args_text),
                   ExportFile(CONFIG_FILE, json.dumps(cfg, indent=2) + "\n"),
                   ExportFile("launch.sh", "\n".join(launch) + "\n"),
                   hostfile_file(i, "one node per line (placeholder names: replace with the nodes' IPs, in rank order)",
                                 fmt="plain"),
                   slurm_file(i, nnodes=nnodes, gpus=dpn, runtime="paddle", data_kw=DATA_HELP,
                              pre=["# Paddle's --ips: the allocation's nodes as IPv4 addresses, in SLURM's order",
                                   'IPS=""',
                                   'for h in "${NODES[@]}"; do',
                                   "  ip=$(getent ahostsv4 \"$h\" | awk 'NR == 1 {print $1}')",
                                   '  [ -n "$ip" ] || { echo "slurm.sbatch: cannot resolve $h to an IPv4 address" >&2; '
                                   'exit 2; }',
                                   '  IPS="${IPS:+$IPS,}$ip"',
                                   "done",
                                   "export IPS"])), tuple(caveats))


# What launch.sh reads from the data variables (exports/_common.py data_lines; no mock data for these model
# classes' pretraining path) and the versions it accepts (the pinned paddleformers line on its paddle line).
DATA_HELP = {"data": "Megatron-style indexed pretraining data: a PREFIX of PREFIX.bin/.idx, or 'WEIGHT PREFIX ...' "
                     "(input_dir)",
             "tokenizer": "the model's tokenizer folder (its files go beside this export's config.json)",
             "mock": None}
VERSIONS = (VersionCheck("paddleformers", "1.2.0", "1.3", dists=("paddleformers",)),
            VersionCheck("paddlepaddle", "3.3.0", "3.4", dists=("paddlepaddle-gpu", "paddlepaddle")))


__all__ = ["RUNTIME", "PADDLE_VERSION", "export", "training_args", "model_config", "moe_layers"]
