"""Hugging Face `config.json` -> ModelSpec, mapped key by key for the model types we know.

Supported `model_type`s: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gpt2,
gpt_neox, opt, bloom, and with multi-head latent attention deepseek_v2, deepseek_v3, kimi_k2.
Anything else is an InputError naming `model_type`.

Key mapping (first key present wins):

  layers         num_hidden_layers | n_layer
  hidden         hidden_size | n_embd                 (gpt2: n_embd)
  heads          num_attention_heads | n_head
  kv_heads       num_key_value_heads                   (default: heads)
  head_dim       head_dim                              (default: hidden / heads)
  ffn_hidden     intermediate_size | n_inner | ffn_dim (gpt2 and bloom: default 4 * hidden)
  vocab          vocab_size
  seq_len        max_position_embeddings | n_positions | seq_length (default 2048, see below)
  activation     hidden_act | activation_function: silu/swish on a gated MLP -> swiglu;
                 gelu* and relu on a plain two-matrix MLP -> gelu
  tie_embeddings tie_word_embeddings (default per model type, as transformers does)
  dropout        the largest of hidden_dropout | resid_pdrop | dropout | attention_dropout | attn_pdrop
                 (default 0.0)
  moe.experts    num_local_experts | num_experts
  moe.top_k      num_experts_per_tok
  moe.expert_ffn_hidden   moe_intermediate_size (mixtral: intermediate_size)
  moe.shared_experts      qwen2_moe: round(shared_expert_intermediate_size / moe_intermediate_size)
  moe.layer_freq          decoder_sparse_step
  moe.first_dense_layers  mlp_only_layers, when it is a prefix [0, 1, ..., k-1], combined with
                          decoder_sparse_step: transformers makes layer i MoE when
                          (i + 1) % step == 0 and i is not in mlp_only_layers, which is exactly
                          ModelSpec's rule with first_dense_layers = the first such i.
  deepseek_v2/v3, kimi_k2 (modeling_deepseek_v3: layer i is MoE when i >= first_k_dense_replace and
                          i % moe_layer_freq == 0):
                 moe.experts n_routed_experts, moe.top_k num_experts_per_tok, moe.expert_ffn_hidden
                 moe_intermediate_size, moe.shared_experts n_shared_experts, moe.first_dense_layers
                 first_k_dense_replace, moe.layer_freq moe_layer_freq (1 only: other values put MoE layers
                 where ModelSpec's rule does not); mla.* q_lora_rank (null: one q projection),
                 kv_lora_rank, qk_nope_head_dim (mla.qk_head_dim), qk_rope_head_dim, v_head_dim;
                 mtp_layers num_nextn_predict_layers (default 0); kv_heads = heads.

Approximations (the estimate is a planning model, not a parameter-exact replica):

- seq_len: the config's maximum context (max_position_embeddings), except that contexts longer
  than 32768 tokens (e.g. 131072 for Llama 3.1) are replaced by 8192, a typical pre-training
  length; the user sets the real one with `--seq-len`. With no length key at all (BLOOM uses
  ALiBi) the default is 2048.
- Build fields (what a runtime needs to build the same model; io/hf_build.py maps them):
  position_embedding, rope_theta (rope_theta | rope_parameters.rope_theta | rotary_emb_base), rope_scaling,
  norm, norm_eps (rms_norm_eps | layer_norm_eps | layer_norm_epsilon), qk_norm, qkv_bias, linear_bias,
  moe.norm_topk_prob, moe.shared_expert_gate. A key the config leaves out stays unset (the runtime's default
  applies), except what the model type's transformers code fixes (norm kind, qk-norm, hard-wired biases).
- OPT: `word_embed_proj_dim` / project_in / project_out are ignored (the embedding is taken as
  hidden wide; true for opt-1.3b and larger, not for opt-350m). ReLU MLPs are modelled as the
  two-matrix `gelu` shape (same FLOPs and weights).
- GPT-NeoX parallel residual and partial rotary are ignored.
- qwen2_moe: the single shared expert of width `shared_expert_intermediate_size` is counted as
  `round(shared / moe_intermediate_size)` shared experts of `moe_intermediate_size` each (same
  weights and FLOPs when it divides evenly; at least one); its sigmoid gate is ignored.
- The dense `intermediate_size` of an MoE model is kept as `ffn_hidden` (used by dense layers).
- Sliding-window attention: gpt_oss `sliding_window` with `layer_types` (every k-th layer full) and
  mistral/mixtral `sliding_window` (every layer) are read (ModelSpec.sliding_window, full_attention_every);
  qwen2's `use_sliding_window` (a max_window_layers prefix rule) is ignored: costed as full causal attention.
- gpt_oss: the expert width is `intermediate_size`, every layer is MoE; its attention sinks and clamped
  SwiGLU are not costed (a per-head logit and an elementwise clamp).
- mlp_only_layers that are not a prefix of the layer list cannot be represented: an InputError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from baige_plan.errors import InputError, SpecError
from baige_plan.io.hf_build import build_fields, moe_build_fields
from baige_plan.io.yamlio import kind_of, read_json
from baige_plan.specs.model import MLASpec, ModelSpec, MoESpec

_MLA_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")
SUPPORTED = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
             "gpt2", "gpt_neox", "opt", "bloom", "gpt_oss", *_MLA_TYPES)
_GATED = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gpt_oss", *_MLA_TYPES)
_MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss")
# transformers' default for tie_word_embeddings when the config leaves it out
_TIE_DEFAULT = {"llama": False, "mistral": False, "mixtral": False, "qwen2": False, "qwen2_moe": False,
                "qwen3": False, "qwen3_moe": False, "gpt2": True, "gpt_neox": False, "opt": True,
                "bloom": True, "gpt_oss": False, **dict.fromkeys(_MLA_TYPES, False)}
SEQ_LEN_CAP = 32768
SEQ_LEN_FALLBACK = 8192
SEQ_LEN_DEFAULT = 2048


class _Reader:
    def __init__(self, cfg: dict, src: str):
        self.cfg = cfg
        self.src = src

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def first(self, *keys: str) -> str | None:
        for k in keys:
            if self.has(k):
                return k
        return None

    def int_(self, *keys: str, default: Any = ...) -> Any:
        k = self.first(*keys)
        if k is None:
            if default is ...:
                raise InputError(self.src, keys[0], "required key is missing"
                                 + (f" (also looked for {', '.join(keys[1:])})" if len(keys) > 1 else ""))
            return default
        v = self.cfg[k]
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError(self.src, k, f"expected an integer, got {v!r}")
        if v <= 0:
            raise InputError(self.src, k, f"must be a positive integer, got {v}")
        return v

    def str_(self, *keys: str, default: Any = ...) -> Any:
        k = self.first(*keys)
        if k is None:
            if default is ...:
                raise InputError(self.src, keys[0], "required key is missing")
            return default
        v = self.cfg[k]
        if not isinstance(v, str):
            raise InputError(self.src, k, f"expected a string, got {v!r}")
        return v

    def bool_(self, key: str, default: bool) -> bool:
        if not self.has(key):
            return default
        v = self.cfg[key]
        if not isinstance(v, bool):
            raise InputError(self.src, key, f"expected true or false, got {v!r}")
        return v


def _activation(r: _Reader, model_type: str) -> str:
    key = r.first("hidden_act", "activation_function")
    act = r.str_(key) if key else ("silu" if model_type in _GATED else "gelu")
    a = act.lower()
    if model_type in _GATED:
        if a not in ("silu", "swish"):
            raise InputError(r.src, key or "hidden_act",
                             f"{act!r} on a gated ({model_type}) MLP is not supported; only silu/swish (SwiGLU)")
        return "swiglu"
    if a.startswith("gelu") or a in ("relu", "quick_gelu"):
        return "gelu"
    raise InputError(r.src, key or "hidden_act", f"activation {act!r} is not supported (gelu*, relu, silu)")


_DROPOUT_KEYS = ("hidden_dropout", "resid_pdrop", "dropout", "attention_dropout", "attn_pdrop")


def _dropout(r: _Reader) -> float:
    p = 0.0
    for k in _DROPOUT_KEYS:
        if r.has(k):
            v = r.cfg[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v < 1.0:
                raise InputError(r.src, k, f"expected a probability in [0, 1), got {v!r}")
            p = max(p, float(v))
    return p


def _seq_len(r: _Reader) -> int:
    n = r.int_("max_position_embeddings", "n_positions", "seq_length", default=SEQ_LEN_DEFAULT)
    return SEQ_LEN_FALLBACK if n > SEQ_LEN_CAP else n


def _first_dense(r: _Reader, layers: int) -> int:
    if not r.has("mlp_only_layers"):
        return 0
    v = r.cfg["mlp_only_layers"]
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise InputError(r.src, "mlp_only_layers", f"expected a list of layer indices, got {v!r}")
    idx = sorted(set(v))
    if idx != list(range(len(idx))):
        raise InputError(r.src, "mlp_only_layers",
                         f"{v!r} is not a prefix [0..k-1]; baige-plan models dense layers only as a prefix")
    if len(idx) >= layers:
        raise InputError(r.src, "mlp_only_layers", f"{len(idx)} dense layers leave no MoE layer of {layers}")
    return len(idx)


def _mla_moe(r: _Reader, model_type: str) -> MoESpec | None:
    """DeepSeek-style MoE (module docstring); None when the config has no routed experts."""
    experts = r.int_("n_routed_experts", default=None)
    if experts is None:
        return None
    freq = r.int_("moe_layer_freq", default=1)
    if freq != 1:
        raise InputError(r.src, "moe_layer_freq", f"{freq}: MoE layers where i % {freq} == 0 after the dense prefix "
                         "do not follow ModelSpec's layer rule; only 1 is supported")
    try:
        return MoESpec(experts=experts, top_k=r.int_("num_experts_per_tok"),
                       expert_ffn_hidden=r.int_("moe_intermediate_size"),
                       shared_experts=_count(r, "n_shared_experts"), layer_freq=1,
                       first_dense_layers=_count(r, "first_k_dense_replace"),
                       **moe_build_fields(r.cfg, r.src, model_type, False))
    except SpecError as e:
        raise InputError(r.src, e.field, e.reason) from None


def _window(r: _Reader, model_type: str, layers: int) -> tuple[int | None, int | None]:
    """(sliding_window, full_attention_every): `layer_types` (gpt_oss; transformers' per-layer
    "sliding_attention" / "full_attention") when the full layers are exactly every k-th ((i + 1) % k == 0) or
    none; gpt_oss without it alternates from a sliding layer 0 (GptOssConfig); mistral/mixtral's
    `sliding_window` applies to every layer. Other patterns cannot be represented: an InputError."""
    w = r.cfg.get("sliding_window")
    if model_type not in ("gpt_oss", "mistral", "mixtral") or w is None:
        return None, None
    w = r.int_("sliding_window")
    if model_type != "gpt_oss":
        return w, None
    types = r.cfg.get("layer_types")
    if types is None:
        types = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or \
            any(t not in ("sliding_attention", "full_attention") for t in types):
        raise InputError(r.src, "layer_types", f"expected {layers} of 'sliding_attention' / 'full_attention'")
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    if not full:
        return w, None
    k = full[0] + 1
    if k < 2 or full != list(range(k - 1, layers, k)):
        raise InputError(r.src, "layer_types", "full-attention layers other than every k-th layer (k >= 2) cannot "
                         "be represented (ModelSpec.full_attention_every)")
    return w, k


def _count(r: _Reader, key: str) -> int:
    """An integer >= 0 the config may leave out or set null (0 then)."""
    v = r.cfg.get(key)
    if v is None or v == 0 and not isinstance(v, bool):
        return 0
    return r.int_(key)


def _mla(r: _Reader) -> MLASpec:
    q = r.cfg.get("q_lora_rank")
    try:
        return MLASpec(kv_lora_rank=r.int_("kv_lora_rank"), qk_head_dim=r.int_("qk_nope_head_dim"),
                       qk_rope_head_dim=r.int_("qk_rope_head_dim"), v_head_dim=r.int_("v_head_dim"),
                       q_lora_rank=None if q is None else r.int_("q_lora_rank"))
    except SpecError as e:
        raise InputError(r.src, e.field.replace("mla.qk_head_dim", "qk_nope_head_dim").replace("mla.", ""),
                         e.reason) from None


def _moe(r: _Reader, model_type: str, layers: int) -> MoESpec | None:
    if model_type in _MLA_TYPES:
        return _mla_moe(r, model_type)
    if model_type not in _MOE:
        return None
    experts = r.int_("num_local_experts", "num_experts")
    top_k = r.int_("num_experts_per_tok")
    if model_type in ("mixtral", "gpt_oss"):
        eff = r.int_("intermediate_size")
    else:
        eff = r.int_("moe_intermediate_size")
    shared = 0
    if model_type == "qwen2_moe" and r.has("shared_expert_intermediate_size"):
        sh = r.int_("shared_expert_intermediate_size")
        shared = max(1, round(sh / eff))
    every = model_type in ("mixtral", "gpt_oss")     # every layer MoE
    layer_freq = r.int_("decoder_sparse_step", default=1) if not every else 1
    dense_prefix = _first_dense(r, layers) if not every else 0
    # first MoE layer: the first i >= dense_prefix with (i + 1) % layer_freq == 0
    first_dense = dense_prefix + (-(dense_prefix + 1)) % layer_freq
    if first_dense >= layers:
        raise InputError(r.src, "decoder_sparse_step",
                         f"decoder_sparse_step={layer_freq} leaves no MoE layer of {layers}")
    try:
        return MoESpec(experts=experts, top_k=top_k, expert_ffn_hidden=eff, shared_experts=shared,
                       layer_freq=layer_freq, first_dense_layers=first_dense,
                       **moe_build_fields(r.cfg, r.src, model_type, shared > 0))
    except SpecError as e:
        raise InputError(r.src, e.field, e.reason) from None


def hf_config_to_model(cfg: Any, src: str, name: str | None = None) -> ModelSpec:
    """Map an already-parsed config.json dict; `src` names it in errors."""
    if not isinstance(cfg, dict):
        raise InputError(src, "", f"expected a JSON object, got {kind_of(cfg)}")
    r = _Reader(cfg, src)
    model_type = r.str_("model_type")
    if model_type not in SUPPORTED:
        raise InputError(src, "model_type", f"unsupported model_type {model_type!r} (supported: {', '.join(SUPPORTED)})")

    layers = r.int_("num_hidden_layers", "n_layer")
    hidden = r.int_("n_embd") if model_type == "gpt2" else r.int_("hidden_size", "n_embd")
    heads = r.int_("num_attention_heads", "n_head")
    kv_heads = r.int_("num_key_value_heads", default=None)
    head_dim = r.int_("head_dim", default=None)
    mla, mtp = None, 0
    if model_type in _MLA_TYPES:
        # no key/value groups, and head_dim is the query/key head width (qk_nope + qk_rope) the spec derives
        mla, kv_heads, head_dim = _mla(r), heads, None
        mtp = _count(r, "num_nextn_predict_layers")
    if model_type in ("gpt2", "bloom"):
        ffn = r.int_("n_inner", "intermediate_size", default=4 * hidden)
    elif model_type == "opt":
        ffn = r.int_("ffn_dim")
    else:
        ffn = r.int_("intermediate_size")
    vocab = r.int_("vocab_size")
    seq_len = _seq_len(r)
    activation = _activation(r, model_type)
    tie = r.bool_("tie_word_embeddings", _TIE_DEFAULT[model_type])
    moe = _moe(r, model_type, layers)
    window = _window(r, model_type, layers)

    if name is None:
        for key in ("_name_or_path", "name_or_path"):
            nop = cfg.get(key)
            if isinstance(nop, str) and nop.strip():
                # a hub id ("org/model") is kept; a local path is reduced to its last part
                name = Path(nop.rstrip("/")).name if nop.startswith(("/", ".", "~")) else nop.strip()
                break
    try:
        m = ModelSpec(name=name or model_type, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                      head_dim=head_dim, ffn_hidden=ffn, vocab=vocab, seq_len=seq_len,
                      activation=activation, tie_embeddings=tie, dropout=_dropout(r), moe=moe, mla=mla,
                      mtp_layers=mtp, sliding_window=window[0], full_attention_every=window[1],
                      source=f"Hugging Face config.json ({model_type}): {src}",
                      **build_fields(cfg, src, model_type))
    except SpecError as e:
        raise InputError(src, _json_key(e.field, cfg), e.reason) from None
    if not name:        # issue 19: named from the config (model type and size), never after its folder
        from dataclasses import replace

        from baige_plan.cost.params import total_params
        n = total_params(m)
        size = f"{n / 1e9:.3g}b" if n >= 1e9 else f"{n / 1e6:.3g}m"
        m = replace(m, name=f"{model_type}-{size}")
    return m


# ModelSpec field -> the config.json keys it is read from (errors name the key the user wrote, issue 19)
_JSON_KEYS = {"layers": ("num_hidden_layers", "n_layer"), "hidden": ("hidden_size", "n_embd"),
              "heads": ("num_attention_heads", "n_head"), "kv_heads": ("num_key_value_heads",),
              "head_dim": ("head_dim",), "ffn_hidden": ("intermediate_size", "ffn_dim", "n_inner"),
              "vocab": ("vocab_size",), "seq_len": ("max_position_embeddings", "n_positions", "seq_length"),
              "moe.experts": ("num_local_experts", "num_experts"), "moe.top_k": ("num_experts_per_tok",),
              "moe.expert_ffn_hidden": ("moe_intermediate_size", "intermediate_size"),
              "dropout": ("attention_dropout", "hidden_dropout", "resid_pdrop")}


def _json_key(field: str, cfg: dict) -> str:
    """`hidden_size (hidden)`: the config's own key for a ModelSpec field, the internal name beside it."""
    keys = _JSON_KEYS.get(field, ())
    key = next((k for k in keys if k in cfg), keys[0] if keys else None)
    return f"{key} ({field})" if key and key != field else field


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read a Hugging Face `config.json` and map it to a ModelSpec.

    Name: the JSON's `_name_or_path` if set (a local path is reduced to its last component),
    else the parent folder's name. Read as strictly as every input (io/yamlio.py): a regular file
    within the size limit, no duplicate keys, no NaN/Infinity.
    """
    p = Path(path)
    return hf_config_to_model(read_json(p), str(p))
