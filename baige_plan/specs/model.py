"""Model architecture spec (SPEC §4 model file). Pure data, validates itself."""

from __future__ import annotations

from dataclasses import dataclass

from baige_plan.errors import require
from baige_plan.limits import MAX_EXPERTS, MAX_LAYERS, MAX_SEQ_LEN, MAX_VOCAB, MAX_WIDTH

ACTIVATIONS = ("swiglu", "gelu")
# upper limits (baige_plan/limits.py): far above any real model, low enough that work stays bounded
_MAX = {"layers": MAX_LAYERS, "hidden": MAX_WIDTH, "heads": MAX_WIDTH, "kv_heads": MAX_WIDTH,
        "head_dim": MAX_WIDTH, "ffn_hidden": MAX_WIDTH, "vocab": MAX_VOCAB, "seq_len": MAX_SEQ_LEN,
        "moe.experts": MAX_EXPERTS, "moe.top_k": MAX_EXPERTS, "moe.expert_ffn_hidden": MAX_WIDTH,
        "moe.layer_freq": MAX_LAYERS, "moe.shared_experts": MAX_EXPERTS, "moe.first_dense_layers": MAX_LAYERS}


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

    def __post_init__(self) -> None:
        for name in ("experts", "top_k", "expert_ffn_hidden", "layer_freq"):
            _pos_int(getattr(self, name), f"moe.{name}")
        for name in ("shared_experts", "first_dense_layers"):
            v = getattr(self, name)
            require(_is_int(v) and v >= 0, f"moe.{name}", f"must be an integer >= 0, got {v!r}")
            _at_most(v, f"moe.{name}")
        require(self.top_k <= self.experts, "moe.top_k",
                f"top_k={self.top_k} exceeds experts={self.experts}")


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

    def __post_init__(self) -> None:
        require(isinstance(self.name, str) and self.name != "", "name", "must be a non-empty string")
        for name in ("layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len"):
            _pos_int(getattr(self, name), name)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        _pos_int(self.kv_heads, "kv_heads")
        require(self.heads % self.kv_heads == 0, "kv_heads",
                f"heads={self.heads} is not a multiple of kv_heads={self.kv_heads}")
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
        if self.moe is not None:
            require(self.moe.first_dense_layers < self.layers, "moe.first_dense_layers",
                    f"first_dense_layers={self.moe.first_dense_layers} leaves no MoE layer of {self.layers}")

    # -- derived shapes -------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Width of the query projection (heads x head_dim); equals hidden unless head_dim is set."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def is_moe_layer(self, index: int) -> bool:
        if self.moe is None or index < self.moe.first_dense_layers:
            return False
        return (index - self.moe.first_dense_layers) % self.moe.layer_freq == 0

    @property
    def moe_layer_count(self) -> int:
        return sum(1 for i in range(self.layers) if self.is_moe_layer(i))

    def moe_layers_in(self, start: int, end: int) -> int:
        return sum(1 for i in range(start, end) if self.is_moe_layer(i))

