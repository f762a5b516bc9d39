"""Model files (`models/*.yaml`, schema baige-plan/model/v1) -> ModelSpec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from baige_plan.errors import InputError, SpecError
from baige_plan.io.yamlio import check_keys, expect_schema, read_document
from baige_plan.specs.model import ModelSpec, MoESpec

SCHEMA = "baige-plan/model/v1"
_REQUIRED = {"schema", "name", "layers", "hidden", "heads", "ffn_hidden", "vocab"}
_OPTIONAL = {"seq_len", "kv_heads", "head_dim", "activation", "tie_embeddings", "dropout", "moe", "source", "notes",
             "params_b"}
_MOE_REQUIRED = {"experts", "top_k", "expert_ffn_hidden"}
_MOE_OPTIONAL = {"shared_experts", "layer_freq", "first_dense_layers"}
_INT_FIELDS = ("layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len", "kv_heads", "head_dim")


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
            _int(m, k, src, "moe.")
        try:
            moe = MoESpec(**m)
        except SpecError as e:
            raise InputError(src, e.field, e.reason) from None
    kw = {k: v for k, v in d.items() if k not in ("schema", "moe", "notes", "params_b")}
    if "source" in kw and not isinstance(kw["source"], str):
        raise InputError(src, "source", "must be a string (citation)")
    try:
        return ModelSpec(moe=moe, **kw)
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
    if m.source:
        d["source"] = m.source
    return d


def load_model_file(path: str | Path) -> ModelSpec:
    return model_from_dict(read_document(path), str(path))
