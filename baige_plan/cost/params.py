"""Parameter counts (per layer, per device) for Megatron-style sharding."""

from __future__ import annotations

from baige_plan.specs.model import ModelSpec


def attention_params(m: ModelSpec) -> int:
    """QKV (h x (q + 2kv)) + output projection (q x h) + 2 norms (2h each, weight and bias)."""
    return m.hidden * (m.q_dim + 2 * m.kv_dim) + m.q_dim * m.hidden + 4 * m.hidden


def dense_mlp_params(m: ModelSpec, ffn: int | None = None) -> int:
    f = 3 if m.activation == "swiglu" else 2
    return f * m.hidden * (m.ffn_hidden if ffn is None else ffn)


def expert_params(m: ModelSpec) -> int:
    """One routed expert's MLP."""
    assert m.moe is not None
    return dense_mlp_params(m, m.moe.expert_ffn_hidden)


def layer_params_split(m: ModelSpec, moe_layer: bool) -> tuple[int, int]:
    """(dense-sharded params, routed-expert params) of one layer, unsharded."""
    if not moe_layer:
        return attention_params(m) + dense_mlp_params(m), 0
    e = m.moe
    assert e is not None
    dense = attention_params(m) + m.hidden * e.experts
    if e.shared_experts:
        dense += dense_mlp_params(m, e.shared_experts * e.expert_ffn_hidden)
    return dense, e.experts * expert_params(m)


def total_params(m: ModelSpec) -> int:
    n = m.vocab * m.hidden * (1 if m.tie_embeddings else 2)
    for i in range(m.layers):
        d, e = layer_params_split(m, m.is_moe_layer(i))
        n += d + e
    return n


def active_params(m: ModelSpec) -> int:
    """Parameters touched per token (routed experts counted top_k times)."""
    n = m.vocab * m.hidden * (1 if m.tie_embeddings else 2)
    for i in range(m.layers):
        d, e = layer_params_split(m, m.is_moe_layer(i))
        n += d + (e // m.moe.experts * m.moe.top_k if e else 0)
    return n
