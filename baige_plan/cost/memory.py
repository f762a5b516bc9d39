"""Memory per device.

Model states (Rajbhandari et al. 2020, ZeRO, Sec. 3.1 and Fig. 1): with mixed precision and Adam,
per parameter: w bytes of 16-bit weights, g bytes of gradients, K = 12 bytes of fp32 master
weights + Adam m and v. ZeRO stage 1 shards K over dp, stage 2 also g, stage 3 also w:
    stage 0: (w + g + K) Psi          stage 1: (w + g) Psi + K Psi / dp
    stage 2: w Psi + (g + K) Psi / dp stage 3: (w + g + K) Psi / dp
The paper uses g = 2 (fp16 grads); Megatron-LM keeps fp32 main grads (g = 4), our default.
Pure fp32 / tf32 training (no 16-bit copy, `precision_state_bytes`): the fp32 weights are the master,
so w = 4, g = 4, K = 8 (Adam m and v): 16 bytes per parameter at ZeRO-0 instead of 18.

Activations (Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4, Table 2), bytes per layer for
s tokens, micro-batch b, hidden h, heads a, tensor-parallel t, with 16-bit activations:
    no TP:                 s b h (34 + 5 a s / h)
    TP:                    s b h (10 + 24/t + 5 a s / (h t))
    TP + SP:               s b h / t (34 + 5 a s / h)
    TP + SP + selective:   s b h / t * 34
    full recompute:        2 s b h (/ t with SP)
generalised here term by term to GQA (kv heads), SwiGLU, ffn != 4h, no-dropout models and fused
flash attention (which stores the output and fp32 log-sum-exp instead of the s x s scores).
"""

from __future__ import annotations

from baige_plan.specs.model import ModelSpec

GIB = float(1 << 30)
ADAM_K_BYTES = 12          # fp32 master weights (4) + Adam m (4) + v (4)
ADAM_K_BYTES_FP32 = 8      # fp32/tf32 training: Adam m (4) + v (4); the fp32 weights are the master
FP32_PRECISIONS = ("fp32", "tf32")
FRAMEWORK_RESERVE_GIB = 1.5  # CUDA context, NCCL buffers, allocator slack (estimate; see COST_MODEL.md)


def weight_bytes(precision: str) -> int:
    """Bytes of the weight copy the GEMMs read (and ZeRO/FSDP gathers): 16-bit in mixed precision
    (bf16, fp16, fp8 -- Transformer Engine keeps bf16 weights and quantises on the fly), fp32 in fp32/tf32."""
    return 4 if precision in FP32_PRECISIONS else 2


def precision_state_bytes(precision: str, grad_bytes: float = 4) -> tuple[float, float, float]:
    """(weights, grads, optimizer K) bytes per parameter before ZeRO sharding.

    Mixed precision: 16-bit weights, the runtime's main-grad bytes, K = 12 (fp32 master + Adam m, v).
    fp32 / tf32: fp32 weights that are their own master, fp32 grads, K = 8 (Adam m, v)."""
    if precision in FP32_PRECISIONS:
        return 4.0, 4.0, float(ADAM_K_BYTES_FP32)
    return 2.0, float(grad_bytes), float(ADAM_K_BYTES)


def model_state_bytes_per_param(zero: int, dp: int, weight_bytes: float = 2, grad_bytes: float = 4,
                                k_bytes: float = ADAM_K_BYTES) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes per parameter on one device for a ZeRO stage (ZeRO paper)."""
    w = weight_bytes / dp if zero >= 3 else weight_bytes
    g = grad_bytes / dp if zero >= 2 else grad_bytes
    k = k_bytes / dp if zero >= 1 else k_bytes
    return w, g, k


def layer_activation_bytes(model: ModelSpec, seq_len: int, micro_batch: int, tp: int, cp: int, sp: bool,
                           recompute: str, standard_attention: bool, moe: bool = False, act_bytes: int = 2,
                           etp: int = 1) -> float:
    """Stored activation bytes of one transformer layer for one micro-batch (Korthikanti, term by term).

    Terms (per token, 16-bit, `sh` = sharded over tp only with SP):
      attention: LN1 input 2h (sh), QKV input 2h (sh), Q 2q/t, K 2kv/t, V 2kv/t,
                 [standard] softmax out 2as/t, dropout mask as/t, dropout out 2as/t (per token x s),
                 [flash] output 2q/t + fp32 logsumexp 4a/t, proj input 2q/t, dropout mask h (sh)
      MLP:       LN2 input 2h (sh), MLP input 2h (sh), up-projection out 2f/t (SwiGLU: 4f/t),
                 activation out 2f/t, dropout mask h (sh)
    With ffn = 4h, MHA, dropout and standard attention this equals Korthikanti's
    34 + 5as/h (SP) or 10 + 24/t + 5as/(ht) (no SP).
    """
    h, a, t = model.hidden, model.heads, tp
    s_loc = seq_len / cp
    tokens = s_loc * micro_batch
    sh = t if sp else 1
    drop = 1 if model.dropout > 0 else 0
    ab = act_bytes / 2.0   # scale 16-bit terms for fp32 activations
    if recompute == "full":
        return tokens * 2 * h * ab / sh
    attn = (2 * h + 2 * h) / sh * ab + (2 * model.q_dim + 4 * model.kv_dim) / t * ab + 2 * model.q_dim / t * ab
    attn += drop * h / sh
    if standard_attention:
        if recompute != "selective":
            attn += (2 + 2 * drop) * a * seq_len / t * ab + drop * a * seq_len / t
    else:
        attn += 2 * model.q_dim / t * ab + 4 * a / t
    if moe and model.moe is not None:
        e = model.moe
        f_tok = e.expert_ffn_hidden * (e.top_k + e.shared_experts) / t
    else:
        f_tok = model.ffn_hidden / t
    up = 4 if model.activation == "swiglu" else 2
    mlp = (2 * h + 2 * h) / sh * ab + (up + 2) * f_tok * ab + drop * h / sh
    if moe and model.moe is not None:
        mlp += 2 * h * model.moe.top_k / t * ab   # permuted token copies held for the combine
    return tokens * (attn + mlp)


def korthikanti_layer_bytes(s: int, b: int, h: int, a: int, t: int, sp: bool, selective: bool) -> float:
    """Korthikanti Table 2 closed forms (MHA, ffn = 4h, dropout, standard attention)."""
    if sp and selective:
        return s * b * h / t * 34
    if sp:
        return s * b * h / t * (34 + 5 * a * s / h)
    if selective:
        return s * b * h * (10 + 24 / t)
    return s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


def inflight_microbatches(pp: int, vpp: int, m: int, stage: int = 0) -> float:
    """Micro-batches whose activations a stage holds at peak under 1F1B (stage 0 holds pp),
    interleaved: pp * (1 + (pp-1)/(pp*vpp)) layer-stage equivalents (Korthikanti Sec. 4.2.3).
    Returned as a multiplier on one micro-batch's activations of the whole stage."""
    if pp == 1:
        return 1.0
    held = min(pp - stage, m)
    if vpp > 1:
        return held * (1.0 + (pp - 1) / (pp * vpp))
    return float(held)
