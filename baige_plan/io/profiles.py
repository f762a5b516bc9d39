"""Profile files (schema baige-plan/profile/v1) <-> ProfileSpec: strict loading (unknown keys are
errors naming key and file) and a deterministic writer (floats written with repr: they read back
bit for bit, so a profile of the analytical model's own numbers reproduces its plans exactly).

    schema: baige-plan/profile/v1
    name: opt-350m@h100-sxm5-80g-bf16
    model: {name: opt-350m, layers: 24, hidden: 1024, heads: 16, kv_heads: 16, ffn_hidden: 4096,
            vocab: 50272, activation: gelu}
    chip: h100-sxm5-80g          # catalog id of the chip it was measured on (matched to groups)
    seq_len: 2048
    precision: bf16
    attention: flash             # flash | standard
    execution: fused             # optional: fused | eager (absent: applies to both)
    provenance: {method: measured, device: ..., torch: ..., cuda: ..., date: ..., command: ..., notes: ...}
    entries:
      - tp: 1
        micro_batch: 1
        recompute: selective     # none | selective | full
        sequence_parallel: false
        layer: {forward_s: .., backward_s: .., recompute_s: 0.0, activation_bytes: .., working_bytes: ..,
                output_bytes: .., parameter_bytes: .., optimizer_s: ..}
        embedding: {forward_s: .., backward_s: .., activation_bytes: .., parameter_bytes: ..}
        logits: {forward_s: .., backward_s: .., activation_bytes: .., parameter_bytes: ..}
        optimizer_s_per_param: ..
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from baige_plan.errors import InputError, SpecError
from baige_plan.io.yamlio import check_keys, expect_schema, get_typed, read_document
from baige_plan.specs.profile import (
    SCHEMA,
    LayerProfile,
    PartProfile,
    ProfiledModel,
    ProfileEntry,
    ProfileSpec,
    Provenance,
)

_TOP_REQ = {"schema", "name", "model", "chip", "seq_len", "precision", "provenance", "entries"}
_TOP_OPT = {"attention", "execution", "notes"}
_MODEL_REQ = {"name", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "activation"}
_MODEL_OPT = {"head_dim"}
_PROV_REQ = {"method"}
_PROV_OPT = {"device", "torch", "cuda", "date", "command", "source", "notes"}
_ENTRY_REQ = {"tp", "micro_batch", "recompute", "layer"}
_ENTRY_OPT = {"sequence_parallel", "embedding", "logits", "optimizer_s_per_param"}
_LAYER_KEYS = ("forward_s", "backward_s", "recompute_s", "activation_bytes", "working_bytes", "output_bytes",
               "parameter_bytes", "optimizer_s")
_PART_KEYS = ("forward_s", "backward_s", "activation_bytes", "parameter_bytes")
_NUM = (int, float)


def _nums(d: dict, keys: tuple[str, ...], src: str, path: str) -> dict:
    out = {}
    for k in keys:
        if d.get(k) is not None:
            out[k] = float(get_typed(d, k, src, path, _NUM))
    return out


def _spec(fn, src: str, path: str, **kw):
    try:
        return fn(**kw)
    except SpecError as e:
        raise InputError(src, f"{path}.{e.field}" if path else e.field, e.reason) from None


def profile_from_dict(d: Any, src: str) -> ProfileSpec:
    d = expect_schema(d, src, SCHEMA)
    d = check_keys(d, src, "", _TOP_REQ, _TOP_OPT)
    m = check_keys(d["model"], src, "model", _MODEL_REQ, _MODEL_OPT)
    mkw: dict[str, Any] = {"name": get_typed(m, "name", src, "model", (str,)),
                           "activation": get_typed(m, "activation", src, "model", (str,))}
    for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab"):
        mkw[k] = get_typed(m, k, src, "model", (int,))
    if m.get("head_dim") is not None:
        mkw["head_dim"] = get_typed(m, "head_dim", src, "model", (int,))
    model = _spec(ProfiledModel, src, "", **mkw)
    p = check_keys(d["provenance"], src, "provenance", _PROV_REQ, _PROV_OPT)
    pkw = {k: str(p[k]) for k in _PROV_REQ | _PROV_OPT if p.get(k) is not None}
    prov = _spec(Provenance, src, "", **pkw)
    raw = d["entries"]
    if not isinstance(raw, list) or not raw:
        raise InputError(src, "entries", "must be a non-empty list")
    entries = []
    for i, e in enumerate(raw):
        path = f"entries[{i}]"
        e = check_keys(e, src, path, _ENTRY_REQ, _ENTRY_OPT)
        layer = check_keys(e["layer"], src, f"{path}.layer", set(), set(_LAYER_KEYS))
        lkw = _nums(layer, _LAYER_KEYS, src, f"{path}.layer")
        kw: dict[str, Any] = {"tp": get_typed(e, "tp", src, path, (int,)),
                              "micro_batch": get_typed(e, "micro_batch", src, path, (int,)),
                              "recompute": get_typed(e, "recompute", src, path, (str,)),
                              "sequence_parallel": get_typed(e, "sequence_parallel", src, path, (bool,), False),
                              "layer": _spec(LayerProfile, src, f"{path}.layer", **lkw)}
        for part in ("embedding", "logits"):
            if e.get(part) is not None:
                pd = check_keys(e[part], src, f"{path}.{part}", set(), set(_PART_KEYS))
                kw[part] = _spec(PartProfile, src, f"{path}.{part}", **_nums(pd, _PART_KEYS, src, f"{path}.{part}"))
        if e.get("optimizer_s_per_param") is not None:
            kw["optimizer_s_per_param"] = float(get_typed(e, "optimizer_s_per_param", src, path, _NUM))
        entries.append(_spec(ProfileEntry, src, path, **kw))
    return _spec(ProfileSpec, src, "", name=get_typed(d, "name", src, "", (str,)), model=model,
                 chip=get_typed(d, "chip", src, "", (str,)), seq_len=get_typed(d, "seq_len", src, "", (int,)),
                 precision=get_typed(d, "precision", src, "", (str,)), entries=tuple(entries), provenance=prov,
                 attention=get_typed(d, "attention", src, "", (str,), "flash"),
                 execution=get_typed(d, "execution", src, "", (str,), None))


def load_profile(path: str | Path) -> ProfileSpec:
    return profile_from_dict(read_document(path), str(path))


def _part_dict(p, keys: tuple[str, ...]) -> dict:
    return {k: getattr(p, k) for k in keys if getattr(p, k) is not None}


def profile_to_dict(p: ProfileSpec) -> dict:
    """The file form (fixed key order); also embedded in plan files' cluster groups."""
    m = p.model
    model = {"name": m.name, "layers": m.layers, "hidden": m.hidden, "heads": m.heads, "kv_heads": m.kv_heads,
             "ffn_hidden": m.ffn_hidden, "vocab": m.vocab, "activation": m.activation}
    if m.head_dim is not None:
        model["head_dim"] = m.head_dim
    prov = {k: getattr(p.provenance, k) for k in ("method", "device", "torch", "cuda", "date", "command", "source",
                                                  "notes") if getattr(p.provenance, k) is not None}
    entries = []
    for e in p.entries:
        d: dict[str, Any] = {"tp": e.tp, "micro_batch": e.micro_batch, "recompute": e.recompute,
                             "sequence_parallel": e.sequence_parallel, "layer": _part_dict(e.layer, _LAYER_KEYS)}
        if e.embedding is not None:
            d["embedding"] = _part_dict(e.embedding, _PART_KEYS)
        if e.logits is not None:
            d["logits"] = _part_dict(e.logits, _PART_KEYS)
        if e.optimizer_s_per_param is not None:
            d["optimizer_s_per_param"] = e.optimizer_s_per_param
        entries.append(d)
    doc: dict[str, Any] = {"schema": SCHEMA, "name": p.name, "model": model, "chip": p.chip, "seq_len": p.seq_len,
                           "precision": p.precision, "attention": p.attention}
    if p.execution is not None:
        doc["execution"] = p.execution
    doc["provenance"] = prov
    doc["entries"] = entries
    return doc


class _Dumper(yaml.SafeDumper):
    pass


def _flow_map(dumper, data):
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=True)


class _Flow(dict):
    pass


_Dumper.add_representer(_Flow, _flow_map)


def dump_profile(p: ProfileSpec, header: str = "") -> str:
    """YAML text: one line per part of an entry; floats as repr (exact round trip)."""
    doc = profile_to_dict(p)
    doc["model"] = _Flow(doc["model"])
    for e in doc["entries"]:
        for k in ("layer", "embedding", "logits"):
            if k in e:
                e[k] = _Flow(e[k])
    text = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=200, default_flow_style=False)
    return (header if header.endswith("\n") or not header else header + "\n") + text
