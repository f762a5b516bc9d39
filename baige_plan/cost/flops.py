"""FLOP counts.

Two conventions, both stated in the output:
- *model FLOPs* (MFU): Megatron-LM `num_floating_point_operations` (megatron/training/training.py,
  2025): 3 (fwd + wgrad + dgrad) x 2 (FMA) x per-token GEMM sizes, causal attention counted as half
  the s x s score matrix, no recomputation.
- *executed FLOPs* (HFU and time): what the kernels actually run, i.e. plus recomputation, and
  with full s x s attention scores for non-fused ("standard") attention, which computes the
  masked half too (Narayanan et al. 2021, Eq. 3 convention).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from baige_plan.specs.model import ModelSpec


def _ffn_factor(model: ModelSpec) -> int:
    """GEMMs stacked in the MLP: SwiGLU has gate+up+down (3), GeLU has up+down (2)."""
    return 3 if model.activation == "swiglu" else 2


def megatron_model_flops(model: ModelSpec, batch: int, seq_len: int) -> float:
    """Megatron-LM `num_floating_point_operations(args, batch_size)` for MHA/GQA models.

    F = B*s * [ L_attn * 6*(h*(q + 2kv) + q*s/2*2 + q*h)
              + L_dense * 6*ffn*f*h + L_moe * 6*(e_ffn*topk + shared_ffn)*f*h
              + 6*h*V ],   f = 3 (SwiGLU) or 2 (GeLU).
    Source: NVIDIA/Megatron-LM megatron/training/training.py `num_floating_point_operations`
    (the `standard_self_attn_term`, `/ 2  # causal mask` version). Router GEMMs are not counted,
    as in Megatron.
    """
    h, s = model.hidden, seq_len
    q, kv = model.q_dim, model.kv_dim
    n_window = model.window_layers_in(0, model.layers)
    if model.mla is not None:
        # the `multi_latent_attention` branch: q (lora) + kv lora + rotary key + output projection, and the
        # causal core with query/key head width qk + rope and value head width v
        a, heads = model.mla, model.heads
        qk = a.qk_head_dim + a.qk_rope_head_dim
        q_term = h * heads * qk if a.q_lora_rank is None else a.q_lora_rank * (h + heads * qk + 1)
        attn = 6 * (q_term + a.kv_lora_rank * (h + heads * (a.qk_head_dim + a.v_head_dim) + 1)
                    + h * a.qk_rope_head_dim + heads * a.v_head_dim * h)
        attn += 6 * (heads * qk / 2 + heads * a.v_head_dim / 2) * s
    else:
        attn = 6 * (h * (q + 2 * kv) + q * s + q * h)
    # sliding-window layers: the core over min(window, s/2) keys per query instead of s/2 (module docstring of
    # attention_gemms); MLA and windows do not meet in any model here, so the MHA/GQA core is the one replaced
    window_saving = 0.0
    if n_window and model.mla is None:
        window_saving = n_window * 12 * q * max(0.0, s / 2 - min(s / 2, model.sliding_window))
    f = _ffn_factor(model)
    # multi-token prediction: `mtp_num_layers` more layers of the last layer's kind, their norms and 2h -> h
    # projection, and one more output layer each
    mtp = model.mtp_layers
    last_moe = model.is_moe_layer(model.layers - 1)
    n_moe = model.moe_layer_count + (mtp if last_moe else 0)
    n_dense = model.layers + mtp - n_moe
    mlp = n_dense * 6 * model.ffn_hidden * f * h
    if model.moe is not None:
        routed = model.moe.expert_ffn_hidden * model.moe.top_k
        shared = model.moe.expert_ffn_hidden * model.moe.shared_experts
        mlp += n_moe * 6 * (routed + shared) * f * h
    mtp_proj = 6 * mtp * (3 * h + 2 * h * h)
    logits = 6 * h * model.vocab * (1 + mtp)
    return float(batch) * s * ((model.layers + mtp) * attn - window_saving + mlp + mtp_proj + logits)


def narayanan_eq3_flops(batch: int, seq_len: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021 (arXiv:2104.04473) Eq. (3), FLOPs per iteration *with* full
    activation recomputation (4 forward-equivalents), GPT with ffn = 4h:
        F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
    Used to turn the paper's TFLOP/s into step times."""
    B, s, L, h, V = batch, seq_len, layers, hidden, vocab
    return 96.0 * B * s * L * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * L * h))


SIXTEEN_BIT_KIND = "linear_16bit"   # a linear an fp8 job runs in 16-bit (cost/fp8.py keep_16bit)


@dataclass(frozen=True)
class Gemm:
    """One GEMM kind in a layer, per device, forward pass: (m x k) @ (k x n), `count` instances
    (batched GEMMs: count = batch). `flops` = 2 m n k count."""

    name: str
    m: float
    n: float
    k: float
    count: float = 1.0
    kind: str = "linear"       # linear | attention | ... | SIXTEEN_BIT_KIND

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.count

    @property
    def flops_each(self) -> float:
        return 2.0 * self.m * self.n * self.k

    @property
    def k_head(self) -> float:
        """Head dimension of an attention GEMM (its k for QK^T, its n for PV)."""
        return min(self.n, self.k) if self.kind.startswith("attention") else self.k


def attention_gemms(model: ModelSpec, micro_batch: int, seq_len: int, tp: int, cp: int,
                    standard: bool, window: int | None = None) -> list[Gemm]:
    """Core attention (QK^T and PV) per device for one layer's forward.

    Each CP rank holds s/cp queries and attends to all s keys (ring attention). Standard attention
    computes the full masked score matrix (Megatron 2021 fused-softmax path); fused flash kernels
    skip the masked half, so they execute the causal half (Dao 2023). A sliding-window layer (`window` tokens,
    ModelSpec.is_window_layer) with fused kernels attends to min(window, s/2) keys per query on average (the
    count Megatron-Bridge's published Model TFLOP/s of gpt-oss use); standard attention still computes and masks
    every score."""
    heads = model.heads // tp
    sq = seq_len / cp
    keys = seq_len if standard else seq_len / 2.0
    if window is not None and not standard:
        keys = min(keys, float(window))
    n = micro_batch * heads
    return [Gemm("attn_qk", sq, keys, model.head_dim, n, "attention"),
            Gemm("attn_pv", sq, model.v_head_dim, keys, n, "attention")]


def tokens_per_expert(model: ModelSpec, tokens: float, tp: int, ep: int = 1, etp: int = 1) -> float:
    """The per-expert GEMM M dimension: tokens routed to one expert on this device, per micro-batch.

    Megatron-core alltoall dispatcher with sequence parallelism (token_dispatcher.py,
    MoEAlltoAllTokenDispatcher): each rank routes its tokens/tp tokens to top_k experts each, the
    all-to-all over the ep ranks brings every rank the assignments of its E/ep local experts, and the
    expert-TP all-gather multiplies them by etp. Balanced routing (the forced-balance benchmark setting
    and the harness's `balanced` router) gives every expert the same share:
        m = (tokens / tp) * etp * top_k * ep / E.
    Example: Qwen3-30B-A3B, micro-batch 2 x 4096 tokens, tp 1, ep 8, E 128, top-8: m = 8192*8*8/128 = 4096."""
    e = model.moe
    assert e is not None
    return tokens / tp * etp * e.top_k * ep / e.experts


def expert_load_factor(router: str, mean_tokens: float, experts_per_rank: int, ranks: int,
                       capacity_factor: float | None = None) -> float:
    """Load of the busiest EP rank over the mean (>= 1): under expert parallelism every rank waits for
    the slowest at the combine all-to-all, so the straggler sets the pace.

    - "balanced": forced-balance routing (Megatron `moe_router_force_load_balancing`, NeMo's and
      Automodel's benchmark setting, the harness's default router): every expert gets exactly the
      mean, factor 1.
    - "random": assignments drawn independently and uniformly (the best case a learned router with
      load-balancing loss approaches). A rank's load is a sum over its experts_per_rank experts of
      n = mean_tokens * experts_per_rank assignments; for n >> ranks log ranks the maximum over `ranks`
      bins of multinomially thrown balls is n/r + sqrt(2 (n/r) ln r) (Raab & Steger 1998, "Balls into
      bins - a simple and tight analysis", RANDOM'98, Theorem 1, case m >> n log n):
          factor = 1 + sqrt(2 ln(ranks) / (mean_tokens * experts_per_rank)).
    - capacity_factor c (token dropping, Megatron `moe_expert_capacity_factor` with
      `moe_pad_expert_input_to_capacity`): every expert is padded to c x mean (moe_utils.get_capacity:
      ceil(tokens/E * c)), so the factor is c, whatever the router.
    """
    if capacity_factor is not None:
        return float(capacity_factor)
    if router == "balanced" or ranks <= 1:
        return 1.0
    if router != "random":
        raise ValueError(f"unknown router {router!r}: balanced | random")
    n = max(mean_tokens * experts_per_rank, 1.0)
    return 1.0 + math.sqrt(2.0 * math.log(ranks) / n)


def linear_gemms(model: ModelSpec, tokens: float, tp: int, moe: bool, ep: int = 1, etp: int = 1,
                 grouped: bool | str = False, sp: bool = True) -> list[Gemm]:
    """Weight GEMMs of one layer's forward on one device, Megatron column/row-parallel split.

    tokens = micro_batch * seq_len / cp on this device (before SP gathering).
    Expert GEMMs: `grouped` True = one grouped-GEMM launch over the local experts (torch._grouped_mm:
    torchtitan; kind "expert_grouped"), False = one GEMM per expert (SequentialMLP loop, eager PyTorch;
    kind "linear"), or the kind itself ("expert_streams": Transformer Engine GroupedLinear, one cuBLAS GEMM
    per expert over 4 streams, what Megatron `--moe-grouped-gemm` runs; cost/moe.py expert_gemm_kind).
    Either way each expert's GEMM has M = tokens_per_expert(...).
    Multi-head latent attention (ModelSpec.mla): the down projections are not split over TP and run on this
    rank's sequence-parallel shard (tokens / tp; every token without SP), the up and output projections as
    column / row parallel (Megatron-core MLASelfAttention)."""
    h = model.hidden
    if model.mla is not None:
        a = model.mla
        down = tokens / tp if sp else tokens
        out = [Gemm("q_down", down, a.q_lora_rank, h), Gemm("q_up", tokens, model.q_dim / tp, a.q_lora_rank)] \
            if a.q_lora_rank is not None else [Gemm("q", tokens, model.q_dim / tp, h)]
        out += [Gemm("kv_down", down, a.kv_lora_rank + a.qk_rope_head_dim, h),
                Gemm("kv_up", tokens, model.heads * (a.qk_head_dim + a.v_head_dim) / tp, a.kv_lora_rank),
                Gemm("attn_proj", tokens, h, model.o_dim / tp)]
    else:
        out = [Gemm("qkv", tokens, (model.q_dim + 2 * model.kv_dim) / tp, h),
               Gemm("attn_proj", tokens, h, model.q_dim / tp)]
    up = 2 if model.activation == "swiglu" else 1
    if not moe:
        out += [Gemm("mlp_up", tokens, up * model.ffn_hidden / tp, h),
                Gemm("mlp_down", tokens, h, model.ffn_hidden / tp)]
        return out
    e = model.moe
    assert e is not None
    # Megatron-core MoE (alltoall dispatcher, SP on): each rank routes its tokens/tp, gathered
    # over the etp group; with balanced routing each of the E/ep local experts sees
    # m = (tokens/tp)*etp*topk*ep/E tokens. Per-rank FLOPs equal a dense MLP of width
    # topk*e_ffn split tp ways.
    local_experts = e.experts / ep
    m = tokens_per_expert(model, tokens, tp, ep, etp)
    kind = grouped if isinstance(grouped, str) else "expert_grouped" if grouped else "linear"
    out += [Gemm("router", tokens, e.experts, h),
            Gemm("expert_up", m, up * e.expert_ffn_hidden / etp, h, local_experts, kind),
            Gemm("expert_down", m, h, e.expert_ffn_hidden / etp, local_experts, kind)]
    if e.shared_experts:
        sh = e.shared_experts * e.expert_ffn_hidden
        out += [Gemm("shared_up", tokens, up * sh / tp, h), Gemm("shared_down", tokens, h, sh / tp)]
    return out


def logits_gemm(model: ModelSpec, tokens: float, tp: int) -> Gemm:
    return Gemm("logits", tokens, model.vocab / tp, model.hidden)
