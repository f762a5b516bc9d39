"""Parameter counts (per layer, per device) for Megatron-style sharding."""

from __future__ import annotations

from baige_plan.specs.model import ModelSpec


def attention_params(m: ModelSpec) -> int:
    """QKV (h x (q + 2kv)) + output projection (q x h) + 2 norms (2h each, weight and bias). Multi-head latent
    attention: its down projections and latent norms (attention_duplicated_params), the q and kv up projections
    and the output projection (heads x v_head_dim x h)."""
    if m.mla is not None:
        a = m.mla
        up = (a.q_lora_rank or m.hidden) * m.q_dim + a.kv_lora_rank * m.heads * (a.qk_head_dim + a.v_head_dim)
        return attention_duplicated_params(m) + up + m.o_dim * m.hidden + 4 * m.hidden
    return m.hidden * (m.q_dim + 2 * m.kv_dim) + m.q_dim * m.hidden + 4 * m.hidden


def attention_duplicated_params(m: ModelSpec) -> int:
    """Attention parameters every tensor-parallel rank holds whole: MLA's down projections and the norms of their
    outputs (Megatron-core builds them as TELinear parallel_mode 'duplicated'); none otherwise."""
    if m.mla is None:
        return 0
    a = m.mla
    q = a.q_lora_rank * m.hidden + a.q_lora_rank if a.q_lora_rank is not None else 0
    return q + m.hidden * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank


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
