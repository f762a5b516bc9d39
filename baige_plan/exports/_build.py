"""The model's build fields (specs/model.py: position, rotary base and scaling, norm, qk-norm, biases, router)
as Megatron-LM arguments, shared by the Megatron and FlagScale exports (issue 17). Pure: no I/O.

Names and semantics read in megatron-core 0.19.2 / Megatron-LM core_r0.19.0 (checked against the installed
parser, tests/test_model_build_fields.py):
- training/arguments.py _add_network_size_args: --position-embedding-type {learned_absolute, rope, yarn, mrope,
  relative, none}, --rotary-base (type int, default 10000), --use-rope-scaling with --rope-scaling-factor
  (Llama 3.x), --rotary-seq-len-interpolation-factor (type int: positions / factor, HF "linear" scaling).
- core/models/common/embeddings/rotary_pos_embedding.py _apply_scaling: Llama 3 scaling with
  low_freq_factor 1, high_freq_factor 4 and original_max_position_embeddings 8192 fixed; only the factor is
  an argument.
- core/transformer/transformer_config.py (ArgumentGroupFactory flags): --normalization {LayerNorm, RMSNorm},
  --norm-epsilon (layernorm_epsilon, default 1e-5), --qk-layernorm, --disable-bias-linear (add_bias_linear:
  QKV, attention output and both MLP linears), --add-qkv-bias; validate_args forces add_qkv_bias on with
  add_bias_linear, so "linear biases without a QKV bias" cannot be built.
- MoE router (core/transformer/moe/moe_utils.py topk_routing_with_score_function): by default top-k on the
  logits, then softmax over the k (weights sum to 1: HF norm_topk_prob true, Mixtral); --moe-router-pre-softmax
  takes the softmax over all experts first and keeps the top-k probabilities as they are (norm_topk_prob
  false). --moe-shared-expert-gate: a sigmoid gate on the shared experts (qwen2_moe).
Fields the model does not record keep the style defaults the exports always wrote (swiglu: RMSNorm, RoPE,
no linear biases; gelu: LayerNorm, learned positions, linear biases), so their exports are unchanged.
"""

from __future__ import annotations

from baige_plan.specs.model import BUILD_FIELDS

_POSITION = {"rope": "rope", "learned": "learned_absolute", "none": "none"}
_NORM = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}
# rotary_pos_embedding.py _apply_scaling's fixed Llama 3 parameters
MEGATRON_LLAMA3_SCALING = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def recorded(model: dict) -> list[str]:
    """The build fields a plan's model records (top level and moe), in a fixed order."""
    out = [k for k in BUILD_FIELDS if model.get(k) is not None]
    moe = model.get("moe") or {}
    return out + [f"moe.{k}" for k in ("norm_topk_prob", "shared_expert_gate") if moe.get(k) is not None]


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)


def rope_args(model: dict, runtime: str) -> tuple[list[tuple[str, object]], list[str]]:
    """--rotary-base and the rope scaling flags for a RoPE model; caveats for what Megatron builds otherwise."""
    a: list[tuple[str, object]] = []
    caveats: list[str] = []
    theta = model.get("rope_theta")
    if theta is not None:
        if not float(theta).is_integer():
            caveats.append(f"rope_theta {theta:g}: {runtime}'s --rotary-base is an integer; exported rounded to "
                           f"{round(theta)}")
        a.append(("--rotary-base", int(round(theta))))
    sc = model.get("rope_scaling")
    if not sc:
        return a, caveats
    kind, factor = sc["rope_type"], float(sc["factor"])
    if kind == "llama3":
        a += [("--use-rope-scaling", None), ("--rope-scaling-factor", _num(factor))]
        off = {k: sc.get(k) for k, v in MEGATRON_LLAMA3_SCALING.items() if sc.get(k) is not None and sc[k] != v}
        if off:
            caveats.append(f"rope_scaling llama3 {', '.join(f'{k} {v:g}' for k, v in off.items())}: {runtime} fixes "
                           "low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192 "
                           "(rotary_pos_embedding.py _apply_scaling); built with those")
    elif kind == "linear" and factor.is_integer():
        a.append(("--rotary-seq-len-interpolation-factor", int(factor)))
    else:
        caveats.append(f"rope_scaling {kind} (factor {factor:g}): not expressible in {runtime}'s arguments "
                       "(Llama 3 scaling and integer linear interpolation only); built without it")
    return a, caveats


def biases(model: dict) -> tuple[bool, bool]:
    """(linear biases, QKV bias) the plan's model has: a recorded field, else GPT-style biases for non-swiglu
    models and none for swiglu ones (the catalog's convention); the QKV bias follows the linear ones unless set."""
    lin = model.get("linear_bias")
    lin = model.get("activation", "swiglu") != "swiglu" if lin is None else lin
    qkv = model.get("qkv_bias")
    return lin, lin if qkv is None else qkv


def megatron_model_args(model: dict, runtime: str = "Megatron") -> tuple[list[tuple[str, object]], list[str], str]:
    """(flag, value) pairs from --swiglu through the bias flags, the caveats, and the comment line. A model
    that records no build field gets exactly the style-based arguments and note of before (plan files and
    exports of such models are unchanged)."""
    swiglu = model.get("activation", "swiglu") == "swiglu"
    rec = recorded(model)
    if not rec:
        if swiglu:
            return ([("--swiglu", None), ("--normalization", "RMSNorm"), ("--position-embedding-type", "rope"),
                     ("--disable-bias-linear", None)], [],
                    "model style: swiglu -> Llama conventions (RMSNorm, RoPE, no linear biases); the plan's "
                    "model does not record them")
        return ([("--normalization", "LayerNorm"), ("--position-embedding-type", "learned_absolute")], [],
                "model style: gelu -> GPT-3 conventions (LayerNorm, learned absolute positions, linear "
                "biases); the plan's model does not record them")
    caveats: list[str] = []
    a: list[tuple[str, object]] = [("--swiglu", None)] if swiglu else []
    norm = model.get("norm") or ("rmsnorm" if swiglu else "layernorm")
    a.append(("--normalization", _NORM[norm]))
    if model.get("norm_eps") is not None:
        a.append(("--norm-epsilon", float(model["norm_eps"])))
    pos = model.get("position_embedding") or ("rope" if swiglu else "learned")
    if pos == "alibi":
        caveats.append(f"position_embedding alibi: {runtime} has no ALiBi (--position-embedding-type learned_absolute, "
                       "rope, yarn, mrope, relative, none); exported as learned_absolute, a different model")
    a.append(("--position-embedding-type", _POSITION.get(pos, "learned_absolute")))
    if pos == "rope":
        r, c = rope_args(model, runtime)
        a += r
        caveats += c
    if model.get("qk_norm"):
        a.append(("--qk-layernorm", None))
    if model.get("attention_sinks"):
        caveats.append(f"attention sinks (a learned logit per head, gpt-oss): {runtime}'s pretrain_gpt.py has no "
                       "argument for TransformerConfig.softmax_type 'learnable'; exported with the plain softmax, a "
                       "different model at the same cost (Megatron-Bridge's GPTOSSProvider sets it in Python)")
    lin, qkv = biases(model)
    if not lin:
        a.append(("--disable-bias-linear", None))
        if qkv:
            a.append(("--add-qkv-bias", None))
    elif not qkv:
        caveats.append(f"linear biases without a QKV bias: {runtime}'s validate_args adds the QKV bias whenever "
                       "linear biases are on; exported with it")
    style = [k for k in ("norm", "position_embedding", "linear_bias", "qkv_bias") if model.get(k) is None]
    note = ("model: built as the plan's model records it (" + ", ".join(rec) + ")"
            + (f"; {', '.join(style)} not recorded: the {'swiglu' if swiglu else 'gelu'} style default" if style else ""))
    return a, caveats, note


def megatron_moe_router_args(moe: dict, runtime: str = "Megatron", gate_flag: bool = True
                             ) -> tuple[list[tuple[str, object]], list[str]]:
    """The router's top-k normalisation and the shared-expert gate (module docstring)."""
    a: list[tuple[str, object]] = []
    caveats: list[str] = []
    if moe.get("norm_topk_prob") is False:
        a.append(("--moe-router-pre-softmax", None))
    if moe.get("shared_expert_gate") and moe.get("shared_experts"):
        if gate_flag:
            a.append(("--moe-shared-expert-gate", None))
        else:
            caveats.append(f"moe.shared_expert_gate: {runtime} has no --moe-shared-expert-gate; the shared experts "
                           "are built without their sigmoid gate")
    return a, caveats


def moe_fusion_args(model: dict) -> list[tuple[str, object]]:
    """--no-bias-gelu-fusion for a GELU MoE model with linear biases: the MoE experts pass the router's weights
    as per_token_scale, and core/transformer/mlp.py MLP.forward raises "Only support fusion of swiglu and
    quick_gelu with per_token_scale in MLP" under bias_activation_fusion, which training/argument_utils.py takes
    from --bias-gelu-fusion (on by default; validate_args turns it off only with --disable-bias-linear).
    Issue 17: an 8-expert top-2 GELU export died at its first step on 4 H200s."""
    if not model.get("moe") or model.get("activation", "swiglu") == "swiglu":
        return []
    return [("--no-bias-gelu-fusion", None)] if biases(model)[0] else []


def as_config(args: list[tuple[str, object]]) -> dict:
    """Megatron (flag, value) pairs as FlagScale's YAML keys: --norm-epsilon 1e-05 -> norm_epsilon: 1e-05,
    a switch -> True."""
    return {k[2:].replace("-", "_"): (True if v is None else v) for k, v in args}


# Megatron-DeepSpeed at the pinned commit (exports/deepspeed.py MEGATRON_DEEPSPEED_COMMIT), megatron/arguments.py:
# --normalization {layernorm, rmsnorm}, --layernorm-epsilon, --use-rotary-position-embeddings with
# --rotary-position-embeddings-theta (type int, dest rope_theta), --no-position-embedding, --disable-bias-linear
# (one switch for every linear); no rope scaling, qk-norm, ALiBi, QKV-only bias or router flags.
def mds_model_args(model: dict) -> tuple[list[tuple[str, object]], list[str], str]:
    """Megatron-DeepSpeed arguments for a model that records build fields (see `recorded`)."""
    rt = "Megatron-DeepSpeed"
    swiglu = model.get("activation", "swiglu") == "swiglu"
    caveats: list[str] = []
    a: list[tuple[str, object]] = [("--swiglu", None)] if swiglu else []
    a.append(("--normalization", model.get("norm") or ("rmsnorm" if swiglu else "layernorm")))
    if model.get("norm_eps") is not None:
        a.append(("--layernorm-epsilon", float(model["norm_eps"])))
    pos = model.get("position_embedding") or ("rope" if swiglu else "learned")
    if pos == "rope":
        a += [("--use-rotary-position-embeddings", None), ("--no-position-embedding", None)]
        theta = model.get("rope_theta")
        if theta is not None:
            a.append(("--rotary-position-embeddings-theta", int(round(theta))))
            if not float(theta).is_integer():
                caveats.append(f"rope_theta {theta:g}: {rt}'s theta is an integer; exported rounded")
        if model.get("rope_scaling"):
            sc = model["rope_scaling"]
            caveats.append(f"rope_scaling {sc['rope_type']} (factor {float(sc['factor']):g}): {rt} has no rope "
                           "scaling; built without it")
    elif pos == "none":
        a.append(("--no-position-embedding", None))
    elif pos == "alibi":
        caveats.append(f"position_embedding alibi: {rt}'s GPT model has no ALiBi; built with learned absolute "
                       "positions, a different model")
    if model.get("qk_norm"):
        caveats.append(f"qk_norm: {rt} has no q/k normalisation; built without it")
    lin, qkv = biases(model)
    if not lin:
        a.append(("--disable-bias-linear", None))
    if qkv != lin:
        caveats.append(f"qkv_bias {str(qkv).lower()} with linear_bias {str(lin).lower()}: {rt} has one bias switch "
                       f"(--disable-bias-linear) for every linear; built with{'out' if not lin else ''} biases")
    moe = model.get("moe") or {}
    if moe.get("norm_topk_prob") is False:
        caveats.append(f"moe.norm_topk_prob false: {rt} has no router flag for un-normalised top-k weights; built "
                       "with DeepSpeed's gating")
    return a, caveats, "model: built as the plan's model records it (" + ", ".join(recorded(model)) + ")"
