"""Per-layer compute time on one device: GEMMs by roofline, memory-bound ops by bytes/bandwidth.

GEMM time (roofline, Williams et al. 2009):
    t = max( F / (peak * eff(F_each)),  bytes / (hbm_GBps * hbm_eff) )
with eff(F) the chip's measured GEMM efficiency curve at one GEMM's FLOPs (catalog data) and
bytes = the GEMM's operand and result traffic. Backward runs dgrad and wgrad GEMMs of the same
sizes (2x forward FLOPs, Narayanan 2021 Appendix).
Fused flash attention runs at FLASH_FRACTION of the GEMM rate at the same size (FlashAttention-2
reaches ~70% of A100 peak forward vs ~85% for cuBLAS GEMMs (Dao 2023, Fig. 4-6); FlashMLA 660 of
989 TFLOP/s on H800); backward at FLASH_BWD_FRACTION (FA2 backward is slower than forward).
Memory-bound ops (norms, activations, dropout, residual adds, softmax, cross-entropy, optimizer)
are charged as bytes moved / achievable HBM bandwidth (`layer_memory_bytes`).

Precisions (docs/COST_MODEL.md, "Precisions"): bf16/fp16 GEMMs run at their tensor-core peak and
curve; fp8 GEMMs at the fp8 ones with attention in bf16; fp32 (IEEE fp32 on CUDA cores, PyTorch's
default allow_tf32=False) at peak_tflops.fp32 and the fp32 curve; tf32 (fp32 storage, TF32 tensor-core
matmuls) at peak_tflops.tf32 and the tf32 curve. fp32 and tf32 keep 4-byte activations. FlashAttention
has no fp32 kernel: the fused option there is PyTorch SDPA's memory-efficient kernel, which ignores
allow_tf32 (its fp32 path is fixed by the kernel: 3xTF32 tensor-core MMAs on sm80+, CUDA-core FMAs
before; aten/src/ATen/native/transformers/cuda/mem_eff_attention/gemm_kernel_utils.h,
DefaultGemmType), so in both precisions it is costed at MEM_EFF_FRACTION (forward) /
MEM_EFF_BWD_FRACTION (backward) of the chip's fp32 GEMM rate at the launch's size: the ratios measured
on H100 and H200 (benchmarks/real/gemm_fp32_tf32_*.raw.json, head dim 128, seq 1024-8192).

Expert GEMMs (docs/COST_MODEL.md, "MoE"). Every expert's GEMM has M = the tokens routed to it
(flops.tokens_per_expert). A grouped GEMM (Megatron --moe-grouped-gemm, torch._grouped_mm, TE
GroupedLinear; Gemm kind "expert_grouped") runs all local experts in one launch: like a fused attention
kernel its efficiency follows the whole launch's FLOPs, and its roofline traffic is every expert's
weights + tokens; the weight stream runs at GROUPED_GEMM_MEM_FRACTION of the achievable HBM rate. Looped
expert GEMMs (SequentialMLP, eager; kind "linear") are costed at one expert's FLOPs. Measured on H100
(benchmarks/real/moe_gemm_sweep.py -> moe_gemm_sweep_h100.raw.json, 4 expert shapes, m = 64..8192,
compared by benchmarks/real/moe_gemm_compare.py): the grouped rule is within 0.86-1.08x of the measured
torch._grouped_mm time for m >= 512 (median 0.99); the per-expert rule overstated it 1.2-2x (measured/model
0.51-0.85 for m = 256..8192).
"""

from __future__ import annotations

from dataclasses import dataclass

from baige_plan.cost.flops import SIXTEEN_BIT_KIND, Gemm
from baige_plan.cost.memory import FP32_PRECISIONS  # fp32 storage: 4-byte weights, grads, activations
from baige_plan.specs.calibration import COMMITTED
from baige_plan.specs.chip import ChipSpec
from baige_plan.specs.job import QUANTIZED_PRECISIONS
from baige_plan.specs.model import ModelSpec

FLASH_FRACTION = 0.80
FLASH_BWD_FRACTION = 0.70
DEFAULT_HBM_EFF = 0.85      # only when the chip file has no measured value (NOTES: 85-90%)
# bytes per GEMM input element; fp4: NVFP4 E2M1 data + one E4M3 scale per 16 elements
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5 + 1 / 16}
# PyTorch SDPA memory-efficient attention (the fused kernel that runs fp32) vs the fp32 GEMM rate of
# the same sweep at the launch's FLOPs; medians over H100 + H200, fp32 and tf32 mode, head dim 128
# (forward 0.71-0.89, backward 0.44-0.58; benchmarks/real/gemm_fp32_tf32.py)
MEM_EFF_FRACTION = 0.84
MEM_EFF_BWD_FRACTION = 0.53
# Grouped expert GEMM in its weight-bound regime (per-expert M below the ridge point, m <~ 256 on H100
# bf16): measured time / (all experts' operand bytes / achievable HBM) = 1.29 median over the 16
# memory-bound points of benchmarks/real/moe_gemm_sweep_h100.raw.json (range 1.07-1.82), i.e. the
# kernel streams weights at 1/1.29 = 0.77 of the rate a device-to-device copy reaches.
GROUPED_GEMM_MEM_FRACTION = 0.77
# Transformer Engine GroupedLinear on Hopper = one cuBLAS GEMM per expert spread over the streams of
# nvte_get_num_compute_streams() = 4 (TE 2.x common/util/multi_stream.cpp; te_general_grouped_gemm ->
# nvte_multi_stream_cublas_gemm). Costed at the curve's efficiency for 4 experts' FLOPs together: measured
# (benchmarks/real/moe_expert_streams.py, H100, 4-stream cuBLAS loop replayed from a CUDA graph, 18 points of
# 8-128 experts x 64-8192 tokens) measured/model median 0.96 (0.80-1.30); the whole-launch grouped rule
# gave 1.06 (0.84-1.71, too fast at <= 512 tokens per expert). dgrad + wgrad took 2.06 x the forward
# (1.61-2.55), as the 2 x every GEMM's backward is charged.
TE_GEMM_STREAMS = 4


@dataclass(frozen=True)
class ChipRates:
    peak_flops: float         # FLOP/s for the GEMM dtype
    hbm_Bps: float            # achievable bytes/s
    dtype: str
    act_bytes: int            # bytes per activation element (bf16/fp16: 2; fp8 keeps bf16; fp32/tf32: 4)
    chip: ChipSpec
    attn_dtype: str = ""      # attention runs in 16-bit even in fp8 training (Transformer Engine default)
    attn_peak_flops: float = 0.0
    fused_dtype: str = ""     # fp32/tf32: fused attention = SDPA memory-efficient kernel at the fp32 rate
    fused_peak_flops: float = 0.0
    gemm_scale: float = 1.0   # Calibration.gemm_scale: multiplier on the chip's GEMM-efficiency curves
    attn_kernel: str = ""     # the runtime's fused-attention kernel (specs/chip.py ATTENTION_KERNELS; "": none known)
    eager_Bps: float = 0.0    # eager PyTorch's autocast traffic (cost/execution.py EagerTraffic) moves at this rate

    @classmethod
    def of(cls, chip: ChipSpec, precision: str, gemm_scale: float | None = None) -> ChipRates:
        """Rates of `precision` on `chip`; SpecError naming the figure when the chip lacks one.
        `gemm_scale`: the chip's GEMM-efficiency multiplier (specs/calibration.py Calibration.gemm_scale_for);
        None: the committed calibration's."""
        if gemm_scale is None:
            gemm_scale = COMMITTED.gemm_scale_for(chip.id)
        gemm_dtype = precision    # fp32 -> fp32 (CUDA cores), tf32 -> tf32 (tensor cores)
        hbm = chip.need("hbm_GBps") * 1e9 * (chip.hbm_efficiency or DEFAULT_HBM_EFF)
        act = 4 if precision in FP32_PRECISIONS else 2
        attn = "bf16" if precision in QUANTIZED_PRECISIONS else gemm_dtype   # TE quantises linears only
        fused, fused_peak = "", 0.0
        if precision in FP32_PRECISIONS:
            fused, fused_peak = "fp32", chip.peak("fp32") * 1e12
            chip.gemm_curve("fp32")   # the fused-attention rate needs it: fail here, naming the figure
        eager = chip.hbm_GBps * 1e9 * chip.eager_hbm_efficiency if chip.eager_hbm_efficiency else hbm
        return cls(chip.peak(gemm_dtype) * 1e12, hbm, gemm_dtype, act, chip, attn, chip.peak(attn) * 1e12,
                   fused, fused_peak, gemm_scale, eager_Bps=eager)


def gemm_time_s(g: Gemm, r: ChipRates, passes: float = 1.0, bwd: bool = False) -> float:
    """Roofline time of `passes` executions of GEMM g (forward-sized)."""
    attention = g.kind.startswith("attention")
    # attention, and the linears an fp8 job keeps in 16-bit (cost/fp8.py keep_16bit), run in attn_dtype: the
    # 16-bit type in fp8 training, the job's own otherwise
    dtype, peak = ((r.attn_dtype, r.attn_peak_flops) if attention or g.kind == SIXTEEN_BIT_KIND
                   else (r.dtype, r.peak_flops))
    if g.kind == "attention_flash" and r.fused_dtype:
        dtype, peak = r.fused_dtype, r.fused_peak_flops
    curve = r.chip.gemm_curve(dtype)
    # A fused attention kernel runs batch x heads in one launch: its efficiency follows the whole
    # call's size. So does a grouped expert GEMM (one launch over the local experts: its tiles fill the
    # chip together; GROUPED_GEMM note above); looped expert GEMMs are sized by one expert's tokens:
    # small experts fill the chip as poorly as a small GEMM does.
    # Transformer Engine's GroupedLinear (Megatron TEGroupedMLP; kind "expert_streams") runs one cuBLAS GEMM
    # per expert over TE_GEMM_STREAMS streams: as many experts fill the chip together.
    eff = curve.at(g.flops if attention or g.kind == "expert_grouped" else
                   min(TE_GEMM_STREAMS, g.count) * g.flops_each if g.kind == "expert_streams" else g.flops_each)
    if r.gemm_scale != 1.0:     # a refit calibration (specs/calibration.py); 1.0 leaves the curve untouched
        eff = min(1.0, eff * r.gemm_scale)
    if g.kind == "attention_flash":
        if r.fused_dtype:
            # fp32/tf32: SDPA memory-efficient kernel, measured against the fp32 GEMM rate
            eff *= MEM_EFF_BWD_FRACTION if bwd else MEM_EFF_FRACTION
        elif r.chip.flash_efficiency is not None:
            # measured fused-attention rate (chip file, at head dim 128); smaller heads give each
            # tile less work per byte: sqrt(head_dim/128) fits the measured runs (docs/VALIDATION.md)
            eff = r.chip.flash_efficiency * min(1.0, g.k_head / 128) ** 0.5
        elif r.attn_kernel in r.chip.attention_kernels:
            # the runtime's kernel, sourced per chip by the sequence length one launch covers (its queries;
            # head dim 128; smaller heads as above)
            fwd_curve, bwd_curve = r.chip.attention_kernels[r.attn_kernel]
            eff = (bwd_curve if bwd else fwd_curve).at(g.m) * min(1.0, g.k_head / 128) ** 0.5
        else:
            eff *= FLASH_BWD_FRACTION if bwd else FLASH_FRACTION
    t_compute = g.flops / (peak * eff)
    in_bytes = DTYPE_BYTES.get(dtype, 2)
    if g.kind == "attention_flash":
        # a fused kernel keeps the s x s scores / probabilities on chip: QK^T reads Q and K, PV reads V and
        # writes O (Dao 2022, Sec. 3); only a materialised score matrix is HBM traffic (standard attention)
        traffic = g.count * (g.m * g.k + g.k * g.n) * in_bytes if g.name == "attn_qk" else \
            g.count * (g.k * g.n * in_bytes + g.m * g.n * r.act_bytes)
    else:
        traffic = g.count * (g.m * g.k * in_bytes + g.k * g.n * in_bytes + g.m * g.n * r.act_bytes)
    t_mem = traffic / r.hbm_Bps
    if g.kind in ("expert_grouped", "expert_streams"):
        t_mem /= GROUPED_GEMM_MEM_FRACTION
    return passes * max(t_compute, t_mem)


def gemms_time_s(gemms: list[Gemm], r: ChipRates, bwd: bool = False) -> float:
    return sum(gemm_time_s(g, r, bwd=bwd) for g in gemms)


def layer_memory_bytes(model: ModelSpec, tokens: float, micro_batch: int, seq_len: int, tp: int, cp: int,
                       sp: bool, standard_attention: bool, act_bytes: int, moe: bool,
                       fused_experts: bool = False) -> tuple[float, float]:
    """Bytes moved by the memory-bound (non-GEMM) ops of one layer's forward on one device.

    Returns (bytes_outside_attention_core, bytes_attention_core). Counted per element of
    `act_bytes` (Megatron fused kernels: fused LayerNorm, bias-GeLU, bias-dropout-add,
    scale-mask-softmax):
      - 2 norms: read + write of h per token; 2 residual bias-dropout-adds: read x, read residual,
        write out (+1-byte dropout mask when dropout > 0). Without SP every TP rank repeats these
        on all tokens; with SP each handles tokens/tp (Korthikanti 2022, Sec. 4.2.2).
      - activation: GeLU reads and writes ffn/tp per token; SwiGLU reads 2 ffn/tp, writes ffn/tp; the routed
        experts' not where `fused_experts` (their SwiGLU runs in a GEMM epilogue: cost/moe.py fused_grouped_mlp).
      - standard attention core: scale-mask-softmax reads and writes the b*(a/tp)*s*s/cp scores;
        attention dropout reads and writes them again plus a 1-byte mask. Flash attention keeps
        them on chip (0 bytes here).
    """
    h = model.hidden
    norm_tokens = tokens / tp if sp else tokens
    drop = 1 if model.dropout > 0 else 0
    per_tok = 2 * (2 * h) * act_bytes + 2 * (3 * h * act_bytes + drop * h)
    if moe and model.moe is not None:
        e = model.moe
        width = e.expert_ffn_hidden * (0 if fused_experts else e.top_k) + e.expert_ffn_hidden * e.shared_experts
        # experts run on tokens/tp (SP) per rank; routing and token permutation: moe_dispatch_bytes
        act = tokens / tp * width * (3 if model.activation == "swiglu" else 2) * act_bytes
    else:
        width = model.ffn_hidden / tp
        act = tokens * width * (3 if model.activation == "swiglu" else 2) * act_bytes
    outside = norm_tokens * per_tok + act
    core = 0.0
    if standard_attention:
        scores = micro_batch * (model.heads / tp) * (seq_len / cp) * seq_len
        core = scores * (2 * act_bytes + (2 * act_bytes + 1 if model.dropout > 0 else 0))
    return outside, core


ROUTER_FWD_BYTES_PER_LOGIT = 9    # read fp32 logits, write fp32 probs + bool routing map
ROUTER_BWD_BYTES_PER_LOGIT = 13   # read grad probs, saved probs and routing map, write grad logits


def moe_dispatch_bytes(model: ModelSpec, tokens: float, tp: int, ep: int, etp: int,
                       act_bytes: int, dispatcher: str = "alltoall") -> tuple[float, float]:
    """(forward, backward) HBM bytes of one MoE layer's routing and token permutation on one device,
    per micro-batch: Megatron-core's alltoall dispatcher with fused kernels (--moe-router-fusion,
    --moe-permute-fusion; megatron/core/transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher,
    moe_utils.py permute / unpermute / sort_chunks_by_idxs, backed by Transformer Engine's fused
    permutation kernels). With N = tokens/tp routed tokens on the rank (SP), A = N*k (token, expert)
    assignments, R = A*etp assignments its local experts receive, L = E/ep local experts, b bytes per
    activation element:
      router score + top-k (TE fused_topk_with_score_function) over the N x E logits: 9 B per logit
        forward (read fp32 logits; write fp32 probs and the bool routing map), 13 B backward;
      permutation 1 (dispatch_preprocess -> permute): gather A rows of h: read A*h*b, write A*h*b;
      permutation 2 (dispatch_postprocess -> sort_chunks_by_idxs, only when L > 1): R rows read + written;
      its inverse after the experts (combine_preprocess): R rows read + written;
      unpermutation 1 (combine_postprocess -> unpermute with merging probs): read A rows, write N rows.
        forward = h*b*(3A + N + 4R[L>1]) + 9 N E
    Backward: each permutation's gradient is the inverse permutation of the same rows, plus one more
    read of the A expert outputs for the router-probability gradient:
        backward = h*b*(4A + N + 4R[L>1]) + 13 N E
    (The all-to-alls themselves are communication: estimate.moe_dispatch_comm_s.) The permutations run
    at the copy rate: benchmarks/real/moe_gemm_sweep_h100.raw.json measured a 16384 x top-8 x 2048
    index_select gather at 3.12 TB/s against a 2.99 TB/s device-to-device copy on H100.
    `dispatcher` "flex" (MoEFlexTokenDispatcher, Megatron-LM token_dispatcher.py @ d98e8a6): the token gather
    before the exchange and the final weighted unpermutation are the communication kernels' own work -- HybridEP's
    hybrid_ep_dispatch reads the source tokens and permutes what it receives (`get_permuted_hidden_states_by_experts`
    returns its output as is), hybrid_ep_combine unpermutes and reduces the k copies of a token; DeepEP's fused
    dispatch / combine do the same, with one fused TE permute of the received rows and its inverse around the
    experts (_DeepepManager) -- and there is no sort_chunks_by_idxs pass. What stays is one permutation of the R
    received rows and its inverse (read + write each), and the router:
        forward = h*b*4R + 9 N E,  backward = h*b*(4R + A) + 13 N E"""
    e = model.moe
    assert e is not None
    h = model.hidden
    n = tokens / tp
    a = n * e.top_k
    rcv = a * etp
    sort = 4 * rcv if e.experts / ep > 1 else 0.0
    logits = n * e.experts
    if dispatcher == "flex":
        return (h * act_bytes * 4 * rcv + ROUTER_FWD_BYTES_PER_LOGIT * logits,
                h * act_bytes * (4 * rcv + a) + ROUTER_BWD_BYTES_PER_LOGIT * logits)
    fwd = h * act_bytes * (3 * a + n + sort) + ROUTER_FWD_BYTES_PER_LOGIT * logits
    bwd = h * act_bytes * (4 * a + n + sort) + ROUTER_BWD_BYTES_PER_LOGIT * logits
    return fwd, bwd
