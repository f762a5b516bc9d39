"""Hugging Face `config.json` -> the ModelSpec build fields (issue 17): what a runtime needs to build the
same model. Used by io/hf_config.py; a key the config leaves out stays None (not recorded), except what the
model type's transformers modeling code fixes whatever the config says:

  model_type           position  norm       qk_norm  qkv_bias         linear_bias (attn out + MLP)
  llama                rope      rmsnorm    false    attention_bias   attention_bias (= mlp_bias, else refused)
  mistral, mixtral     rope      rmsnorm    false    false            false    (modeling_mistral/mixtral: bias=False)
  qwen2, qwen2_moe     rope      rmsnorm    false    true             false    (modeling_qwen2: q/k/v bias=True,
                                                                               o_proj and MLP bias=False)
  qwen3, qwen3_moe     rope      rmsnorm    true     attention_bias   attention_bias (MLP bias=False: a true
                                                                               attention_bias is refused)
  gpt_neox             rope      layernorm  false    attention_bias   attention_bias (MLP bias=True: false refused)
  gpt2                 learned   layernorm  false    true             true
  opt                  learned   layernorm  false    enable_bias      enable_bias
  bloom                alibi     layernorm  false    true             true
  gpt_oss              rope      rmsnorm    false    true             true     (GptOssConfig: attention_bias True;
                                                                               biased experts)
  deepseek_v2/v3,      rope      rmsnorm    false    attention_bias   attention_bias (MLP bias=False: a true
  kimi_k2                                                              attention_bias is refused)

attention_bias defaults: false for llama/qwen3 (LlamaConfig, Qwen3Config), true for gpt_neox
(GPTNeoXConfig); enable_bias defaults true (OPTConfig). Router (MoE): mixtral renormalises its top-k softmax
weights (modeling_mixtral MixtralSparseMoeBlock: routing_weights /= sum), so norm_topk_prob true; qwen2_moe /
qwen3_moe read `norm_topk_prob` (unset when absent); qwen2_moe's shared expert has a sigmoid gate
(Qwen2MoeSparseMoeBlock.shared_expert_gate).
"""

from __future__ import annotations

import math
from typing import Any

from baige_plan.errors import InputError, SpecError
from baige_plan.specs.model import RopeScalingSpec

_ROPE_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gpt_neox",
               "deepseek_v2", "deepseek_v3", "kimi_k2", "gpt_oss")
_POSITION = {**{t: "rope" for t in _ROPE_TYPES}, "gpt2": "learned", "opt": "learned", "bloom": "alibi"}
_LAYERNORM = ("gpt2", "opt", "bloom", "gpt_neox")
_QK_NORM = ("qwen3", "qwen3_moe")


def _bool(cfg: dict, src: str, key: str, default: bool) -> bool:
    v = cfg.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise InputError(src, key, f"expected true or false, got {v!r}")
    return v


def _number(cfg: dict, src: str, key: str, where: str | None = None) -> float | None:
    v = cfg.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise InputError(src, where or key, f"expected a positive number, got {v!r}")
    return float(v)


def _rope_theta(cfg: dict, src: str, model_type: str) -> float | None:
    if model_type not in _ROPE_TYPES:
        return None
    params = cfg.get("rope_parameters")   # transformers >= 5 nests it: {"rope_theta": ..., "rope_type": ...}
    if isinstance(params, dict) and params.get("rope_theta") is not None:
        return _number(params, src, "rope_theta", "rope_parameters.rope_theta")
    key = "rotary_emb_base" if model_type == "gpt_neox" else "rope_theta"
    return _number(cfg, src, key)


def _rope_scaling(cfg: dict, src: str, model_type: str) -> RopeScalingSpec | None:
    if model_type not in _ROPE_TYPES:
        return None
    key, sc = "rope_scaling", cfg.get("rope_scaling")
    if sc is None and isinstance(cfg.get("rope_parameters"), dict):
        key, sc = "rope_parameters", cfg["rope_parameters"]
    if sc is None:
        return None
    if not isinstance(sc, dict):
        raise InputError(src, key, f"expected an object or null, got {sc!r}")
    kind = sc.get("rope_type", sc.get("type"))
    if kind in (None, "default"):
        return None
    extra = {k: sc[k] for k in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
             if sc.get(k) is not None}
    try:
        return RopeScalingSpec(rope_type=kind, factor=sc.get("factor"), **extra)
    except SpecError as e:
        raise InputError(src, f"{key}.{e.field.split('.')[-1]}", e.reason) from None


def _biases(cfg: dict, src: str, model_type: str) -> tuple[bool, bool]:
    """(qkv_bias, linear_bias) as the model type's modeling code builds them (module docstring)."""
    if model_type in ("mistral", "mixtral"):
        return False, False
    if model_type in ("qwen2", "qwen2_moe"):
        return True, False
    if model_type in ("gpt2", "bloom"):
        return True, True
    if model_type == "opt":
        b = _bool(cfg, src, "enable_bias", True)
        return b, b
    if model_type == "gpt_oss":
        return True, True     # GptOssConfig sets attention_bias True; its experts and router carry biases
    if model_type == "gpt_neox":
        b = _bool(cfg, src, "attention_bias", True)
        if not b:
            raise InputError(src, "attention_bias", "false leaves GPT-NeoX's MLP biases on (bias=True there): "
                             "baige-plan records one bias switch for attention output and MLP together")
        return True, True
    att = _bool(cfg, src, "attention_bias", False)
    mlp = _bool(cfg, src, "mlp_bias", False) if model_type == "llama" else False
    if att != mlp:
        raise InputError(src, "attention_bias", f"attention_bias={str(att).lower()} with an MLP bias of "
                         f"{str(mlp).lower()}: baige-plan records one bias switch for the attention output and "
                         "the MLP together (linear_bias), as Megatron's --disable-bias-linear does")
    return att, att


def build_fields(cfg: dict, src: str, model_type: str) -> dict[str, Any]:
    """ModelSpec keyword arguments for the build fields of a supported `model_type`."""
    eps_key = next((k for k in ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon") if cfg.get(k) is not None),
                   None)
    qkv, lin = _biases(cfg, src, model_type)
    return {"position_embedding": _POSITION[model_type], "rope_theta": _rope_theta(cfg, src, model_type),
            "rope_scaling": _rope_scaling(cfg, src, model_type),
            "norm": "layernorm" if model_type in _LAYERNORM else "rmsnorm",
            "norm_eps": _number(cfg, src, eps_key) if eps_key else None,
            "qk_norm": model_type in _QK_NORM, "qkv_bias": qkv, "linear_bias": lin,
            # GptOssAttention.sinks: one learned logit per head (none of the other types has them: unset)
            "attention_sinks": True if model_type == "gpt_oss" else None}


def moe_build_fields(cfg: dict, src: str, model_type: str, shared: bool) -> dict[str, Any]:
    """MoESpec keyword arguments: the router's top-k normalisation and the shared-expert gate."""
    if model_type in ("mixtral", "gpt_oss"):
        # both renormalise the top-k: mixtral's softmax weights / their sum, gpt-oss a softmax over the top-k logits
        return {"norm_topk_prob": True, "shared_expert_gate": False}
    v = cfg.get("norm_topk_prob")
    if v is not None and not isinstance(v, bool):
        raise InputError(src, "norm_topk_prob", f"expected true or false, got {v!r}")
    return {"norm_topk_prob": v, "shared_expert_gate": shared and model_type == "qwen2_moe"}
