"""Model architecture spec (SPEC §4 model file). Pure data, validates itself."""

from __future__ import annotations

import math
from dataclasses import dataclass

from baige_plan.errors import require
from baige_plan.limits import MAX_EXPERTS, MAX_LAYERS, MAX_SEQ_LEN, MAX_VOCAB, MAX_WIDTH
from baige_plan.specs.frozen import hash_once

ACTIVATIONS = ("swiglu", "gelu")
# What a runtime needs to build the same model (issue 17). Every field defaults to None ("not recorded"):
# exports then keep their style-based defaults, and plan files of models that do not set them are unchanged.
POSITION_EMBEDDINGS = ("rope", "learned", "alibi", "none")
NORMS = ("rmsnorm", "layernorm")
# Hugging Face rope_scaling rope_type values (transformers modeling_rope_utils.py ROPE_INIT_FUNCTIONS)
ROPE_SCALINGS = ("llama3", "linear", "dynamic", "yarn", "longrope")
# upper limits (baige_plan/limits.py): far above any real model, low enough that work stays bounded
_MAX = {"layers": MAX_LAYERS, "hidden": MAX_WIDTH, "heads": MAX_WIDTH, "kv_heads": MAX_WIDTH,
        "head_dim": MAX_WIDTH, "ffn_hidden": MAX_WIDTH, "vocab": MAX_VOCAB, "seq_len": MAX_SEQ_LEN,
        "sliding_window": MAX_SEQ_LEN,
        "moe.experts": MAX_EXPERTS, "moe.top_k": MAX_EXPERTS, "moe.expert_ffn_hidden": MAX_WIDTH,
        "moe.layer_freq": MAX_LAYERS, "moe.shared_experts": MAX_EXPERTS, "moe.first_dense_layers": MAX_LAYERS,
        **{f"mla.{k}": MAX_WIDTH for k in ("kv_lora_rank", "qk_head_dim", "qk_rope_head_dim", "v_head_dim",
                                           "q_lora_rank")}}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _pos_int(value, field: str) -> None:
    if type(value) is int and 0 < value <= _MAX[field]:
        return
    require(_is_int(value) and value > 0, field, f"must be a positive integer, got {value!r}")
    _at_most(value, field)


def _at_most(value: int, field: str) -> None:
    hi = _MAX[field]
    require(value <= hi, field, f"{value:,} exceeds the limit of {hi:,}")


def _opt_bool(value, field: str) -> None:
    require(value is None or isinstance(value, bool), field, f"must be true or false, got {value!r}")


def _opt_pos_float(value, field: str, below: float | None = None) -> None:
    if value is None:
        return
    require(not isinstance(value, str), field, f"must be a number, got the text {value!r} (YAML reads 1e-5 as "
            "text: write 1.0e-5)")
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    require(ok and (below is None or value < below), field,
            f"must be a positive number{f' below {below:g}' if below is not None else ''}, got {value!r}")


@dataclass(frozen=True)
class RopeScalingSpec:
    """Hugging Face `rope_scaling` (transformers modeling_rope_utils.py): `rope_type` and its `factor`;
    llama3 also low/high_freq_factor and original_max_position_embeddings, yarn the original length."""

    rope_type: str
    factor: float
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    original_max_position_embeddings: int | None = None

    def __post_init__(self) -> None:
        require(self.rope_type in ROPE_SCALINGS, "rope_scaling.rope_type",
                f"must be one of {', '.join(ROPE_SCALINGS)}, got {self.rope_type!r}")
        _opt_pos_float(self.factor, "rope_scaling.factor")
        require(self.factor is not None, "rope_scaling.factor", "is required")
        _opt_pos_float(self.low_freq_factor, "rope_scaling.low_freq_factor")
        _opt_pos_float(self.high_freq_factor, "rope_scaling.high_freq_factor")
        for name in ("factor", "low_freq_factor", "high_freq_factor"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, float(v))
        o = self.original_max_position_embeddings
        require(o is None or (_is_int(o) and 0 < o <= MAX_SEQ_LEN), "rope_scaling.original_max_position_embeddings",
                f"must be a positive integer up to {MAX_SEQ_LEN:,}, got {o!r}")


@dataclass(frozen=True)
class MoESpec:
    """Mixture-of-experts part of a model.

    Layer i (0-based) is an MoE layer when i >= first_dense_layers and
    (i - first_dense_layers) % layer_freq == 0 (Megatron's integer `--moe-layer-freq`; with
    layer_freq 1 every layer after the dense prefix is MoE). Shared experts each have
    `expert_ffn_hidden` width and run on every token.
    """

    experts: int
    top_k: int
    expert_ffn_hidden: int
    shared_experts: int = 0
    layer_freq: int = 1
    first_dense_layers: int = 0
    # router: top-k weights renormalised to sum 1 (HF norm_topk_prob; Mixtral always) or the softmax over all
    # experts kept as is (qwen2_moe norm_topk_prob false); None: not recorded
    norm_topk_prob: bool | None = None
    shared_expert_gate: bool | None = None   # a sigmoid gate on the shared experts' output (qwen2_moe)

    def __post_init__(self) -> None:
        _opt_bool(self.norm_topk_prob, "moe.norm_topk_prob")
        _opt_bool(self.shared_expert_gate, "moe.shared_expert_gate")
        for name in ("experts", "top_k", "expert_ffn_hidden", "layer_freq"):
            _pos_int(getattr(self, name), f"moe.{name}")
        for name in ("shared_experts", "first_dense_layers"):
            v = getattr(self, name)
            require(_is_int(v) and v >= 0, f"moe.{name}", f"must be an integer >= 0, got {v!r}")
            _at_most(v, f"moe.{name}")
        require(self.top_k <= self.experts, "moe.top_k",
                f"top_k={self.top_k} exceeds experts={self.experts}")


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi K2; Megatron-core MLASelfAttention, --multi-latent-attention).

    Per layer: q = up_q(norm(down_q(x))) (q_lora_rank None: one projection x -> heads x (qk_head_dim + qk_rope_head_dim)),
    [c_kv, k_rope] = down_kv(x) (width kv_lora_rank + qk_rope_head_dim), [k_nope, v] = up_kv(norm(c_kv)) (heads x
    (qk_head_dim + v_head_dim)); attention runs with every head's own keys and values (no grouping) of head dim
    qk_head_dim + qk_rope_head_dim for QK^T and v_head_dim for PV; the output projection takes heads x v_head_dim.
    The down projections are not split over tensor parallelism (Megatron-core: TELinear parallel_mode
    'duplicated', on the sequence-parallel shard); the up and output projections are, as a dense layer's."""

    kv_lora_rank: int
    qk_head_dim: int           # the part of each head's query/key without rotary embedding (HF qk_nope_head_dim)
    qk_rope_head_dim: int      # the rotary part (Megatron --qk-pos-emb-head-dim)
    v_head_dim: int
    q_lora_rank: int | None = None

    def __post_init__(self) -> None:
        for name in ("kv_lora_rank", "qk_head_dim", "qk_rope_head_dim", "v_head_dim"):
            _pos_int(getattr(self, name), f"mla.{name}")
        if self.q_lora_rank is not None:
            _pos_int(self.q_lora_rank, "mla.q_lora_rank")


@hash_once
@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    heads: int
    ffn_hidden: int
    vocab: int
    seq_len: int = 2048
    kv_heads: int | None = None
    head_dim: int | None = None
    activation: str = "swiglu"
    tie_embeddings: bool = False
    dropout: float = 0.0          # hidden/attention dropout probability (GPT-3-era 0.1; Llama 0)
    moe: MoESpec | None = None
    source: str | None = None
    # -- what a runtime needs to build the same model (None: not recorded; SPEC §4 model file) --
    position_embedding: str | None = None      # rope | learned | alibi | none
    rope_theta: float | None = None            # rotary base (HF rope_theta)
    rope_scaling: RopeScalingSpec | None = None   # None beside a recorded rope_theta: no scaling
    norm: str | None = None                    # rmsnorm | layernorm
    norm_eps: float | None = None              # HF rms_norm_eps / layer_norm_eps / layer_norm_epsilon
    qk_norm: bool | None = None                # RMSNorm on each head's q and k (Qwen3)
    qkv_bias: bool | None = None               # bias on the q, k, v projections (Qwen2: true)
    linear_bias: bool | None = None            # bias on the attention output and MLP linears (GPT-2/3: true)
    attention_sinks: bool | None = None        # a learned per-head logit in each softmax (gpt-oss; not costed)
    mla: MLASpec | None = None                 # multi-head latent attention instead of MHA/GQA projections
    mtp_layers: int = 0                        # multi-token prediction depth (DeepSeek-V3: 1; Megatron --mtp-num-layers)
    # sliding-window attention: each query attends to the last `sliding_window` tokens (Megatron --window-size
    # w,0; HF sliding_window) on every layer, or with `full_attention_every` k on all but every k-th layer
    # (0-based layer i is full when (i + 1) % k == 0: Megatron --window-attn-skip-freq k; gpt-oss k = 2)
    sliding_window: int | None = None
    full_attention_every: int | None = None

    def __post_init__(self) -> None:
        require(isinstance(self.name, str) and self.name != "", "name", "must be a non-empty string")
        for name in ("layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len"):
            _pos_int(getattr(self, name), name)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        _pos_int(self.kv_heads, "kv_heads")
        require(self.heads % self.kv_heads == 0, "kv_heads",
                f"heads={self.heads} is not a multiple of kv_heads={self.kv_heads}")
        if self.sliding_window is not None:
            _pos_int(self.sliding_window, "sliding_window")
        if self.full_attention_every is not None:
            require(self.sliding_window is not None, "full_attention_every", "needs sliding_window")
            require(_is_int(self.full_attention_every) and 2 <= self.full_attention_every <= MAX_LAYERS,
                    "full_attention_every", f"must be an integer >= 2 (every k-th layer full), got "
                    f"{self.full_attention_every!r}")
        require(_is_int(self.mtp_layers) and 0 <= self.mtp_layers <= 8, "mtp_layers",
                f"must be an integer from 0 to 8, got {self.mtp_layers!r}")
        if self.mla is not None:
            # every head keeps its own keys and values; head_dim is the query/key head width
            require(self.kv_heads == self.heads, "kv_heads",
                    f"multi-head latent attention has no key/value groups: kv_heads={self.kv_heads} must equal "
                    f"heads={self.heads}")
            qk = self.mla.qk_head_dim + self.mla.qk_rope_head_dim
            require(self.head_dim in (None, qk), "head_dim",
                    f"with mla the query/key head width is qk_head_dim + qk_rope_head_dim = {qk}, got {self.head_dim}")
            object.__setattr__(self, "head_dim", qk)
        if self.head_dim is None:
            require(self.hidden % self.heads == 0, "heads",
                    f"hidden={self.hidden} is not divisible by heads={self.heads}; set head_dim")
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        _pos_int(self.head_dim, "head_dim")
        require(self.activation in ACTIVATIONS, "activation",
                f"must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}")
        require(isinstance(self.tie_embeddings, bool), "tie_embeddings", "must be true or false")
        require(isinstance(self.dropout, (int, float)) and not isinstance(self.dropout, bool)
                and 0.0 <= self.dropout < 1.0, "dropout", f"must be in [0, 1), got {self.dropout!r}")
        self._check_build_fields()
        if self.moe is not None:
            require(self.moe.first_dense_layers < self.layers, "moe.first_dense_layers",
                    f"first_dense_layers={self.moe.first_dense_layers} leaves no MoE layer of {self.layers}")

    def _check_build_fields(self) -> None:
        pe = self.position_embedding
        require(pe is None or pe in POSITION_EMBEDDINGS, "position_embedding",
                f"must be one of {', '.join(POSITION_EMBEDDINGS)}, got {pe!r}")
        require(self.norm is None or self.norm in NORMS, "norm", f"must be one of {', '.join(NORMS)}, got {self.norm!r}")
        _opt_pos_float(self.rope_theta, "rope_theta")
        _opt_pos_float(self.norm_eps, "norm_eps", below=1.0)
        for name in ("rope_theta", "norm_eps"):   # one spelling in plan files: 500000 and 500000.0 alike
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("qk_norm", "qkv_bias", "linear_bias", "attention_sinks"):
            _opt_bool(getattr(self, name), name)
        rope = self.rope_theta is not None or self.rope_scaling is not None
        require(not rope or pe in (None, "rope"), "position_embedding",
                f"{pe!r} with rope_theta/rope_scaling set: rotary settings need position_embedding rope")

    # -- derived shapes -------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Width of the query projection (heads x head_dim); equals hidden unless head_dim is set."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of one of the key and value projections; with mla the mean of the two (keys heads x
        (qk_head_dim + qk_rope_head_dim), values heads x v_head_dim), so 2 kv_dim = k_dim + v_dim either way."""
        return (self.k_dim + self.v_dim) // 2 if self.mla is not None else self.kv_heads * self.head_dim

    @property
    def k_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def v_dim(self) -> int:
        return self.heads * self.mla.v_head_dim if self.mla is not None else self.kv_heads * self.head_dim

    @property
    def o_dim(self) -> int:
        """Width of the attention output (the output projection's input): heads x the value head width."""
        return self.heads * self.mla.v_head_dim if self.mla is not None else self.q_dim

    @property
    def v_head_dim(self) -> int:
        return self.mla.v_head_dim if self.mla is not None else self.head_dim

    def is_moe_layer(self, index: int) -> bool:
        if self.moe is None or index < self.moe.first_dense_layers:
            return False
        return (index - self.moe.first_dense_layers) % self.moe.layer_freq == 0

    def is_window_layer(self, index: int) -> bool:
        """Whether layer `index` (0-based) attends within the sliding window (Megatron is_layer_window_attention)."""
        if self.sliding_window is None:
            return False
        k = self.full_attention_every
        return k is None or (index + 1) % k != 0

    def window_layers_in(self, start: int, end: int) -> int:
        return sum(1 for i in range(start, end) if self.is_window_layer(i))

    @property
    def moe_layer_count(self) -> int:
        return sum(1 for i in range(self.layers) if self.is_moe_layer(i))

    def moe_layers_in(self, start: int, end: int) -> int:
        if self.moe is None:        # a dense model (every stage the cost model costs asks): no layer to count
            return 0
        return sum(1 for i in range(start, end) if self.is_moe_layer(i))



BUILD_FIELDS = ("position_embedding", "rope_theta", "rope_scaling", "norm", "norm_eps", "qk_norm", "qkv_bias",
                "linear_bias", "attention_sinks")
