"""What torchtitan 0.3.0's llama3 and qwen3 families build of the model's build fields (specs/model.py), and
where that differs from what the plan's model records (issue 17). torchtitan builds only its registry's
blocks: a recorded field it builds otherwise is reported as a model difference (exports/torchtitan.py
Difference: stderr and a comment line), never changed silently. Pure: no I/O.

Read in the torchtitan 0.3.0 wheel (tests/integration/requirements-torchtitan.txt):
- llama3 (models/llama3/__init__.py, every flavor): ComplexRoPE.Config(theta=500000, scaling="llama") with
  models/common/rope.py's defaults scaling_factor 8.0, low_freq_factor 1.0, high_freq_factor 4.0,
  original_max_position_embeddings 8192; RMSNorm.Config without eps (models/common/nn_modules.py default
  1e-5); no q/k norm; linears without bias.
- qwen3 (models/qwen3/__init__.py): CosSinRoPE.Config(theta=1000000.0), no scaling; _qwen3_norm: RMSNorm eps
  _EPS = 1e-6, also on q and k per head (qk_norm); linears without bias; MoE router score_func "softmax" with
  route_norm=True (top-k weights renormalised); shared experts without a gate.
"""

from __future__ import annotations

from dataclasses import asdict

_LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192}
FAMILY_BUILD: dict[str, dict] = {
    "llama3": {"position_embedding": "rope", "rope_theta": 500000.0, "rope_scaling": _LLAMA3_SCALING,
               "norm": "rmsnorm", "norm_eps": 1e-5, "qk_norm": False, "qkv_bias": False, "linear_bias": False,
               "moe.norm_topk_prob": True, "moe.shared_expert_gate": False},
    "qwen3": {"position_embedding": "rope", "rope_theta": 1000000.0, "rope_scaling": None,
              "norm": "rmsnorm", "norm_eps": 1e-6, "qk_norm": True, "qkv_bias": False, "linear_bias": False,
              "moe.norm_topk_prob": True, "moe.shared_expert_gate": False},
}
WHY = ("torchtitan {v}'s {fam} family builds it so ({where}); register your own block to train the planned "
       "model itself")
_WHERE = {"llama3": "models/llama3/__init__.py: ComplexRoPE theta 500000 with llama scaling, RMSNorm eps 1e-5, "
                    "no qk-norm, no biases",
          "qwen3": "models/qwen3/__init__.py: CosSinRoPE theta 1e6, RMSNorm eps 1e-6 with q/k norm, no biases, "
                   "softmax router with route_norm"}


def word(v) -> str:
    """One word for a Difference's planned/built value (tests/integration/check_torchtitan.py parses them)."""
    if v is None:
        return "none"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else f"{v:g}"
    if isinstance(v, dict):   # rope scaling
        rest = ",".join(f"{k}={v[k]:g}" for k in ("factor", "low_freq_factor", "high_freq_factor",
                                                   "original_max_position_embeddings") if v.get(k) is not None)
        return f"{v['rope_type']}({rest})"
    return str(v).replace(" ", "_")


def _same_scaling(planned: dict | None, built: dict | None) -> bool:
    if not planned or not built:
        return not planned and not built
    keys = ("rope_type", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    return all(planned.get(k) is None or planned.get(k) == built.get(k) for k in keys)


def _as_dict(model) -> dict:
    """A plan's inputs.model dict as is; a ModelSpec as the fields this module reads."""
    if isinstance(model, dict):
        return model
    d = {k: getattr(model, k, None) for k in FAMILY_BUILD["llama3"] if not k.startswith("moe.")}
    d["rope_scaling"] = asdict(d["rope_scaling"]) if d["rope_scaling"] is not None else None
    d["moe"] = asdict(model.moe) if getattr(model, "moe", None) is not None else None
    return d


def build_differences(model, family: str, version: str) -> list[tuple[str, object, object, str]]:
    """(field, planned, built, why) for every build field the model records that `family` builds otherwise."""
    model = _as_dict(model)
    built = FAMILY_BUILD[family]
    moe = model.get("moe") or {}
    out = []
    for field, b in built.items():
        if field.startswith("moe."):
            if not moe:
                continue
            p = moe.get(field[4:])
            if field == "moe.shared_expert_gate" and not moe.get("shared_experts"):
                continue
        else:
            p = model.get(field)
        if p is None and not (field == "rope_scaling" and model.get("rope_theta") is not None):
            continue   # not recorded (rope_scaling unset beside a recorded rope_theta: no scaling)
        same = _same_scaling(p, b) if field == "rope_scaling" else (
            abs(p - b) <= 1e-12 * max(abs(b), 1.0) if isinstance(b, float) and not isinstance(p, bool) else p == b)
        if not same:
            out.append((field, word(p), word(b), WHY.format(v=version, fam=family, where=_WHERE[family])))
    return out
