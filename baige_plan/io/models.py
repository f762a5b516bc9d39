"""Model files (`models/*.yaml`, schema baige-plan/model/v1) -> ModelSpec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from baige_plan.errors import InputError, SpecError
from baige_plan.io.yamlio import check_keys, expect_schema, read_document
from baige_plan.specs.model import BUILD_FIELDS, MLASpec, ModelSpec, MoESpec, RopeScalingSpec

SCHEMA = "baige-plan/model/v1"
_REQUIRED = {"schema", "name", "layers", "hidden", "heads", "ffn_hidden", "vocab"}
_OPTIONAL = {"seq_len", "kv_heads", "head_dim", "activation", "tie_embeddings", "dropout", "moe", "source", "notes",
             "params_b", "mla", "mtp_layers", "sliding_window", "full_attention_every", *BUILD_FIELDS}
_MOE_REQUIRED = {"experts", "top_k", "expert_ffn_hidden"}
_MOE_OPTIONAL = {"shared_experts", "layer_freq", "first_dense_layers", "norm_topk_prob", "shared_expert_gate"}
_MOE_BUILD = ("norm_topk_prob", "shared_expert_gate")   # written only when set (plan files stay unchanged)
_MLA_REQUIRED = {"kv_lora_rank", "qk_head_dim", "qk_rope_head_dim", "v_head_dim"}
_MLA_OPTIONAL = {"q_lora_rank"}
_ROPE_REQUIRED = {"rope_type", "factor"}
_ROPE_OPTIONAL = {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}
_INT_FIELDS = ("layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len", "kv_heads", "head_dim", "mtp_layers",
               "sliding_window", "full_attention_every")


def _int(d: dict, key: str, src: str, path: str) -> None:
    v = d.get(key)
    if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
        raise InputError(src, f"{path}{key}", f"expected an integer, got {v!r}")


def model_from_dict(d: Any, src: str, *, check_schema: bool = True) -> ModelSpec:
    """Build a ModelSpec from a model document (a model file, or the `inputs.model` of a plan)."""
    if check_schema:
        d = expect_schema(d, src, SCHEMA)
        d = check_keys(d, src, "", _REQUIRED, _OPTIONAL)
    else:
        d = check_keys(d, src, "model", _REQUIRED - {"schema"}, _OPTIONAL | {"schema"})
    for k in _INT_FIELDS:
        _int(d, k, src, "")
    moe = None
    if d.get("moe") is not None:
        m = check_keys(d["moe"], src, "moe", _MOE_REQUIRED, _MOE_OPTIONAL)
        for k in m:
            if k not in _MOE_BUILD:
                _int(m, k, src, "moe.")
        try:
            moe = MoESpec(**m)
        except SpecError as e:
            raise InputError(src, e.field, e.reason) from None
    mla = None
    if d.get("mla") is not None:
        a = check_keys(d["mla"], src, "mla", _MLA_REQUIRED, _MLA_OPTIONAL)
        for k in a:
            _int(a, k, src, "mla.")
        try:
            mla = MLASpec(**a)
        except SpecError as e:
            raise InputError(src, e.field, e.reason) from None
    rope_scaling = None
    if d.get("rope_scaling") is not None:
        r = check_keys(d["rope_scaling"], src, "rope_scaling", _ROPE_REQUIRED, _ROPE_OPTIONAL)
        try:
            rope_scaling = RopeScalingSpec(**r)
        except SpecError as e:
            raise InputError(src, e.field, e.reason) from None
    pb = d.get("params_b")      # the published size, for the reader (the model counts its own parameters)
    if pb is not None and (isinstance(pb, bool) or not isinstance(pb, (int, float)) or not 0 < pb < 1e7):
        raise InputError(src, "params_b", f"must be a positive number of billions (documentation), got {pb!r}")
    kw = {k: v for k, v in d.items() if k not in ("schema", "moe", "mla", "notes", "params_b", "rope_scaling")}
    if "source" in kw and not isinstance(kw["source"], str):
        raise InputError(src, "source", "must be a string (citation)")
    try:
        return ModelSpec(moe=moe, mla=mla, rope_scaling=rope_scaling, **kw)
    except SpecError as e:
        raise InputError(src, e.field, e.reason) from None
    except TypeError as e:
        raise InputError(src, "", str(e)) from None


def model_to_dict(m: ModelSpec) -> dict:
    """The model-file form (key order fixed), used inside plan files."""
    d: dict[str, Any] = {"schema": SCHEMA, "name": m.name, "layers": m.layers, "hidden": m.hidden,
                         "heads": m.heads, "kv_heads": m.kv_heads, "head_dim": m.head_dim,
                         "ffn_hidden": m.ffn_hidden, "vocab": m.vocab, "seq_len": m.seq_len,
                         "activation": m.activation, "tie_embeddings": m.tie_embeddings, "dropout": m.dropout}
    if m.moe is not None:
        d["moe"] = {"experts": m.moe.experts, "top_k": m.moe.top_k, "expert_ffn_hidden": m.moe.expert_ffn_hidden,
                    "shared_experts": m.moe.shared_experts, "layer_freq": m.moe.layer_freq,
                    "first_dense_layers": m.moe.first_dense_layers}
        d["moe"].update({k: getattr(m.moe, k) for k in _MOE_BUILD if getattr(m.moe, k) is not None})
    if m.mla is not None:   # written only when set: plan files of other models are unchanged
        d["mla"] = {k: getattr(m.mla, k) for k in ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_rope_head_dim",
                                                   "v_head_dim") if getattr(m.mla, k) is not None}
    if m.mtp_layers:
        d["mtp_layers"] = m.mtp_layers
    if m.sliding_window is not None:
        d["sliding_window"] = m.sliding_window
        if m.full_attention_every is not None:
            d["full_attention_every"] = m.full_attention_every
    if m.source:
        d["source"] = m.source
    d.update(build_dict(m))
    return d


def build_dict(m: ModelSpec) -> dict:
    """The build fields the model records (SPEC §4 model file, issue 17), in BUILD_FIELDS order; none when
    unset, so plan files of models that record none are byte-identical to before they existed."""
    out: dict[str, Any] = {}
    for k in BUILD_FIELDS:
        v = getattr(m, k)
        if v is None:
            continue
        if k == "rope_scaling":
            v = {f: getattr(v, f) for f in ("rope_type", "factor", "low_freq_factor", "high_freq_factor",
                                            "original_max_position_embeddings") if getattr(v, f) is not None}
        out[k] = v
    return out


def load_model_file(path: str | Path) -> ModelSpec:
    return model_from_dict(read_document(path), str(path))
