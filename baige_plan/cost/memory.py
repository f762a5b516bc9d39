"""Memory per device.

Model states (Rajbhandari et al. 2020, ZeRO, Sec. 3.1 and Fig. 1): with mixed precision and Adam,
per parameter: w bytes of 16-bit weights, g bytes of gradients, K = 12 bytes of fp32 master
weights + Adam m and v. ZeRO stage 1 shards K over dp, stage 2 also g, stage 3 also w:
    stage 0: (w + g + K) Psi          stage 1: (w + g) Psi + K Psi / dp
    stage 2: w Psi + (g + K) Psi / dp stage 3: (w + g + K) Psi / dp
The paper uses g = 2 (fp16 grads); Megatron-LM keeps fp32 main grads (g = 4), our default.
Pure fp32 / tf32 training (no 16-bit copy, `precision_state_bytes`): the fp32 weights are the master,
so w = 4, g = 4, K = 8 (Adam m and v): 16 bytes per parameter at ZeRO-0 instead of 18.

Which copies exist, their dtypes and what shards them is the runtime's (specs/runtime.py MemorySemantics,
declared in baige_plan/specs/runtimes/NAME.py with sources): `state_bytes` below.

Activations (Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4, Table 2), bytes per layer for
s tokens, micro-batch b, hidden h, heads a, tensor-parallel t, with 16-bit activations:
    no TP:                 s b h (34 + 5 a s / h)
    TP:                    s b h (10 + 24/t + 5 a s / (h t))
    TP + SP:               s b h / t (34 + 5 a s / h)
    TP + SP + selective:   s b h / t * 34
    full recompute:        2 s b h (/ t with SP or distributed saved activations)
generalised here term by term to GQA (kv heads), SwiGLU, ffn != 4h, no-dropout models and fused
flash attention (which stores the output and fp32 log-sum-exp instead of the s x s scores).
torchtitan's op-level selective AC stores other tensors: `op_sac_layer_bytes`.

Outside the tensors (docs/COST_MODEL.md "Memory model"): the caching allocator reserves more than is
allocated (ALLOCATOR_SLACK x the allocated peak: the reserved peak a user sees), but gives every cached segment
without a live block back when a reservation fails, so only ALLOCATOR_UNRECLAIMABLE x allocated counts against
capacity; the CUDA context, kernel libraries and NCCL buffers live outside it (CUDA_CONTEXT_GIB, NCCL_FIRST_GIB,
NCCL_GROUP_GIB): `reserve_bytes` (what counts), `slack_bytes` (what the reserved peak adds).
"""

from __future__ import annotations

from functools import lru_cache

from baige_plan.cost.fp8 import QUANTIZED_COPY_BYTES
from baige_plan.specs.job import BF16_WEIGHT_PRECISIONS
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.runtime import (  # measured allocator and context figures (specs/runtime.py)
    CUDA_CONTEXT_GIB,
)

GIB = float(1 << 30)
ADAM_K_BYTES = 12          # fp32 master weights (4) + Adam m (4) + v (4)
ADAM_K_BYTES_FP32 = 8      # fp32/tf32 training: Adam m (4) + v (4); the fp32 weights are the master
ADAM_K_BYTES_PARAM_DTYPE = 4   # 16-bit parameters as their own master: Adam m (2) + v (2) in the parameter dtype
FP32_PRECISIONS = ("fp32", "tf32")
FRAMEWORK_RESERVE_GIB = CUDA_CONTEXT_GIB   # the least a process reserves outside its tensors (search bounds)


BF16_GRAD_BYTES = 2   # Megatron --grad-reduce-in-bf16: bf16 main grads, reduced in bf16


def bf16_grad_reduce(s, precision: str) -> bool:
    """The strategy keeps bf16 main grads and reduces them in bf16 (Megatron --grad-reduce-in-bf16, which
    training/arguments.py applies to --bf16 runs: accumulate_allreduce_grads_in_fp32 = False); fp8 runs
    keep bf16 weights and grads, so it applies there too."""
    return bool(getattr(s, "grad_reduce_bf16", False)) and precision in BF16_WEIGHT_PRECISIONS


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


def state_bytes(mem, precision: str, zero: int, shards, k_bytes: float | None = None) -> tuple[float, float, float, float]:
    """(weights, grads, optimizer, step-time gradient copy) bytes per parameter on one device, as the
    runtime allocates them (`mem`: specs/runtime.py MemorySemantics), ZeRO-sharded over `shards` (dp x cp,
    or the expert-data-parallel ranks; a number or a numpy array).

    fp32 / tf32: 4 + 4 + 8 (one fp32 copy, its own master). Mixed precision:
      master "separate" (Megatron, DeepSpeed, Paddle): 2 + grad buffer + 12, and an fp32 gradient copy of
        `step_grad_bytes` for the step when the buffer is 16-bit; Megatron distributed optimizer with bf16
        params and fp32 grads: 2 + 4 + 12/d = "6 + 12/d", with 16-bit grads 2 + 2 + 16/d = "4 + 16/d"
        (Megatron-LM docs/source/api-guide/dist_optimizer.md table);
      master "params" (FSDP2, autocast): 4 + 4 + 8 (+ 2 of autocast's kept cast when not sharded);
      master "params16" (16-bit parameters as their own master, NeMo Automodel): 2 + 2 + `k_bytes`, else 4
        (Adam m, v in the parameter dtype: torch.optim.Adam allocates its states like the parameter).
    `k_bytes` (the strategy's optimizer_bytes_per_param) replaces the 12 of a separate master: 10 when the fp32
      master is kept as the 16-bit remainder beside the bf16 parameter (Megatron-core optimizer_config.py
      store_param_remainders with --use-precision-aware-optimizer, distrib_optimizer.py; apex
      DistributedFusedAdam store_param_remainders, which NeMo 1 megatron_base_model.py picks for bf16 O2 with
      fp32 optimizer state): 2 + Adam m, v 8; 4 with bf16 m, v and no master (apex, optimizer dtype bf16).
    ZeRO: 1 shards the optimizer (and the step copy), 2 also the grads, 3 also the weights."""
    step = 0.0
    if precision in FP32_PRECISIONS:
        w, g, k = 4.0, 4.0, float(ADAM_K_BYTES_FP32)
    elif mem.master == "params":
        w, g, k = 4.0, 4.0, float(ADAM_K_BYTES_FP32)
        if mem.autocast_fp32_params and zero < 3:
            w += 2.0
    elif mem.master == "params16":
        w, g, k = 2.0, 2.0, float(k_bytes or ADAM_K_BYTES_PARAM_DTYPE)
    else:
        w, g, k = 2.0, float(mem.grad_bytes(precision, zero)), float(k_bytes or ADAM_K_BYTES)
        if g < 4:
            step = float(mem.step_grad_bytes)
    w = w / shards if zero >= 3 else w
    g = g / shards if zero >= 2 else g
    k = k / shards if zero >= 1 else k
    step = step / shards if zero >= 1 else step
    return w, g, k, step


def loss_bytes_per_logit(loss: str, execution: str, tp: int, act_bytes: float, eager_extra: float) -> float:
    """Bytes per logit the output layer and loss hold at their peak, on one device (the logits are V/tp wide).
      "fused" (Megatron vocab_parallel_cross_entropy(logits.float()): in-place max/exp on the fp32 copy, which
        it saves): 4 + the 16-bit logits; eager PyTorch adds its measured extra (cost/execution.py).
      "eager_fp32" (torchtitan: F.cross_entropy(pred.float()) outside torch.compile, train.py at 9dec370):
        tp = 1: the eager figure (the same ops as our measured harness) whatever the execution;
        tp > 1: loss_parallel's DTensor log_softmax (torch/distributed/tensor/parallel/loss.py _log_softmax)
        holds the 16-bit logits, their fp32 copy, `shifted` and exp(shifted) or the result: 2 + 4 + 4 + 4."""
    if loss == "eager_fp32":
        if tp > 1:
            return act_bytes + 4 + 4 + 4
        return 4 + act_bytes + eager_extra
    return 4 + act_bytes + (eager_extra if execution == "eager" else 0.0)


def comm_groups(tp, cp, dp, pp, ep=1, etp=1):
    """Communicators a rank uses: one per parallel dimension > 1 (TP, CP, the dp x cp gradient group,
    the pipeline's p2p connections, EP, expert TP)."""
    if type(tp) is int and type(cp) is int and type(dp) is int and type(pp) is int and type(ep) is int \
            and type(etp) is int:             # one strategy (the cost model, per stage): memoised, same value
        return _comm_groups_of(tp, cp, dp, pp, ep, etp)
    return _comm_groups_of.__wrapped__(tp, cp, dp, pp, ep, etp)


@lru_cache(maxsize=4096)
def _comm_groups_of(tp, cp, dp, pp, ep, etp):
    import numpy as np
    n = sum(np.greater(x, 1).astype(int) for x in (tp, cp, np.multiply(dp, cp), pp, ep, etp))
    return int(n) if np.ndim(n) == 0 else n


def outside_gib(mem, groups):
    """GiB a process holds outside its caching allocator: context + NCCL buffers (`mem`'s measured figures).
    `groups` a number or a numpy array."""
    if type(groups) is int:                    # one stage (the cost model): memoised, same value
        return _outside_gib_of(mem, groups)
    return _outside_gib_of.__wrapped__(mem, groups)


@lru_cache(maxsize=1024)
def _outside_gib_of(mem, groups):
    import numpy as np
    out = mem.context_gib + np.where(np.greater(groups, 0), mem.comm_first_gib + mem.comm_group_gib * (groups - 1), 0.0)
    return float(out) if np.ndim(out) == 0 else out


def reserve_bytes(mem, allocated_bytes, groups):
    """What the device needs beyond the allocated tensors, i.e. what counts against capacity: the allocator's
    unreclaimable fragmentation (`mem.allocator_unreclaimable` x allocated: PyTorch releases every other cached
    block and retries before it reports out of memory) + outside the allocator (context, NCCL buffers).
    Numbers or numpy arrays (search/bounds.py)."""
    return allocated_bytes * mem.allocator_unreclaimable + outside_gib(mem, groups) * GIB


def slack_bytes(mem, allocated_bytes, full_recompute: bool = False):
    """Reserved minus allocated at the peak (`mem.allocator_slack`, with full recompute
    `allocator_slack_full_recompute`, x allocated): what torch.cuda.max_memory_reserved (and nvidia-smi) shows
    beyond the tensors; reserve_bytes counts only its unreclaimable part."""
    frac = mem.allocator_slack
    if full_recompute and mem.allocator_slack_full_recompute is not None:
        frac = mem.allocator_slack_full_recompute
    return allocated_bytes * frac


def fp8_layer_weight_bytes(mem, primary: bool, weight16_bytes: float = 2.0, precision: str = "fp8") -> float:
    """Bytes per transformer-layer parameter that fp8 training through Transformer Engine adds to the
    16-bit weight (`weight16_bytes`) the model states already count:
      bf16 primary weights: the cached fp8 weight + transpose, `mem.fp8_weight_cache_bytes` (+2 in Megatron);
      fp8 primary weights (`primary`: --fp8-param-gather, when the runtime has them, mem.fp8_param_bytes > 0):
        the fp8 data + transpose replace the 16-bit weight: fp8_param_bytes - weight16_bytes (2 - 2 = 0).
    Embedding and output layer stay 16-bit (TE linears only), so the caller passes layer parameters.
    `precision` fp4: the cache holds two NVFP4 copies (cost/fp8.py QUANTIZED_COPY_BYTES: 0.5625 B each, 1.125 B per
    parameter); fp4 has no primary-weight mode here (`primary` applies to fp8 only)."""
    if primary and mem.fp8_param_bytes and precision == "fp8":
        return float(mem.fp8_param_bytes) - weight16_bytes
    return float(mem.fp8_weight_cache_bytes) * QUANTIZED_COPY_BYTES[precision]


def model_state_bytes_per_param(zero: int, dp: int, weight_bytes: float = 2, grad_bytes: float = 4,
                                k_bytes: float = ADAM_K_BYTES) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes per parameter on one device for a ZeRO stage (ZeRO paper)."""
    w = weight_bytes / dp if zero >= 3 else weight_bytes
    g = grad_bytes / dp if zero >= 2 else grad_bytes
    k = k_bytes / dp if zero >= 1 else k_bytes
    return w, g, k


def layer_activation_bytes(model: ModelSpec, seq_len: int, micro_batch: int, tp: int, cp: int, sp: bool,
                           recompute: str, standard_attention: bool, moe: bool = False, act_bytes: int = 2,
                           etp: int = 1, selective: str = "core_attention", fp8_gemm_inputs: bool = False,
                           modules: str = "", distributed: bool = False, moe_saved: str = "dispatcher",
                           quant_copy_bytes: float = 1.0) -> float:
    """Stored activation bytes of one transformer layer for one micro-batch (Korthikanti, term by term).

    Terms (per token, 16-bit, `sh` = sharded over tp only with SP):
      attention: LN1 input 2h (sh), QKV input 2h (sh), Q 2q/t, K 2kv/t, V 2kv/t,
                 [standard] softmax out 2as/t, dropout mask as/t, dropout out 2as/t (per token x s),
                 [flash] output 2q/t + fp32 logsumexp 4a/t, proj input 2q/t, dropout mask h (sh)
      MLP:       LN2 input 2h (sh), MLP input 2h (sh), up-projection out 2f/t (SwiGLU: 4f/t),
                 activation out 2f/t, dropout mask h (sh)
    With ffn = 4h, MHA, dropout and standard attention this equals Korthikanti's
    34 + 5as/h (SP) or 10 + 24/t + 5as/(ht) (no SP).
    `fp8_gemm_inputs`: Transformer Engine's fp8 linears save their fp8-cast input for the weight gradient
    (transformer_engine/pytorch/module/linear.py, layernorm_linear.py: saved_inputmat = the quantized
    inputmat), 1 B instead of 2 for the QKV, projection, MLP and second-MLP inputs; `quant_copy_bytes` is that
    copy's bytes per element (fp8 1; NVFP4 0.5 + 1/16 of block scales: cost/fp8.py QUANTIZED_COPY_BYTES).
    `moe_saved`: "dispatcher" (a fused permute/unpermute: the expert activations and the permuted copies above), or
    "torchtitan_eager": what torchtitan 0.2.2's eager MoE.forward (models/moe/moe.py, utils.py _permute) leaves for
    its backward per routed row of R = tokens/tp x top-k x etp: the padded permuted input that both first
    grouped_mm save (2h), the first GEMM's output for silu, silu's output and the third GEMM's output for the
    product, and the product for the second GEMM (4 x 2f/etp), the fp32 copy of the unsorted expert outputs bmm
    saves for the score-weighted combine (4h), and three int64 index sets (routing, expert order, padding
    permutation: 24 B); per token the fp32 router softmax output (4E, over the tokens the rank routes). The
    norm and MoE inputs stay as above; shared experts are a plain FeedForward.
    """
    if recompute == "selective" and selective == "op_sac":
        return op_sac_layer_bytes(model, seq_len, micro_batch, tp, cp, sp, moe, act_bytes)
    h, a, t = model.hidden, model.heads, tp
    s_loc = seq_len / cp
    tokens = s_loc * micro_batch
    sh = t if sp else 1
    drop = 1 if model.dropout > 0 else 0
    ab = act_bytes / 2.0   # scale 16-bit terms for fp32 activations
    if recompute == "full":
        # `distributed`: --distribute-saved-activations / partition_activations keep 1/t of the input (no SP)
        return tokens * 2 * h * ab / (t if distributed else sh)
    attn = (2 * h + 2 * h) / sh * ab + (2 * model.q_dim + 4 * model.kv_dim) / t * ab + 2 * model.o_dim / t * ab
    attn += drop * h / sh
    if model.mla is not None:
        # the latents: each down projection's output (its norm's input) and the norm's output (the up projection's
        # input), on the sequence-parallel shard
        ml = model.mla
        attn += 2 * (2 * (ml.q_lora_rank or 0) + 2 * ml.kv_lora_rank + ml.qk_rope_head_dim) / sh * ab
        if "mla_up_proj" in modules and recompute == "selective":
            # recompute_modules mla_up_proj: Q, K and V are rebuilt from the latents in the backward, not kept
            attn -= (2 * model.q_dim + 4 * model.kv_dim) / t * ab
    if standard_attention:
        if recompute != "selective":
            attn += (2 + 2 * drop) * a * seq_len / t * ab + drop * a * seq_len / t
    else:
        attn += 2 * model.o_dim / t * ab + 4 * a / t
    if moe and model.moe is not None:
        e = model.moe
        f_tok = e.expert_ffn_hidden * (e.top_k + e.shared_experts) / t
    else:
        f_tok = model.ffn_hidden / t
    up = 4 if model.activation == "swiglu" else 2
    mlp = (2 * h + 2 * h) / sh * ab + drop * h / sh
    if moe and model.moe is not None and moe_saved == "torchtitan_eager":
        e = model.moe
        rows = e.top_k * etp / t                           # routed rows per token of the micro-batch
        mlp += (up + 2) * e.expert_ffn_hidden * e.shared_experts / t * ab \
            + rows * ((2 * h + 8 * e.expert_ffn_hidden / etp) * ab + 4 * h + 24) + 4 * e.experts * etp / t
    else:
        mlp += (up + 2) * f_tok * ab
        if moe and model.moe is not None:
            mlp += 2 * h * model.moe.top_k / t * ab   # permuted token copies held for the combine
    if fp8_gemm_inputs:
        # the 2 B of each saved GEMM input become quant_copy_bytes
        mlp -= (2.0 - quant_copy_bytes) * (h / sh + model.o_dim / t + h / sh + f_tok)
    if modules and recompute == "selective":
        # Megatron recompute_modules (StrategySpec.recompute_modules): what the backward rebuilds is not kept
        gemm_in = quant_copy_bytes if fp8_gemm_inputs else 2 * ab        # a saved GEMM input, per element
        if "layernorm" in modules:      # the two norms' outputs, the QKV and first MLP GEMMs' inputs
            mlp -= 2 * h / sh * gemm_in
        if "moe_act" in modules and moe and model.moe is not None:
            # the routed experts' activation output (the second expert GEMM's input); the shared experts are
            # another module (shared_experts)
            mlp -= model.moe.expert_ffn_hidden * model.moe.top_k / t * gemm_in
    return tokens * (attn + mlp)


def op_sac_layer_bytes(model: ModelSpec, seq_len: int, micro_batch: int, tp: int, cp: int, sp: bool,
                       moe: bool = False, act_bytes: int = 2) -> float:
    """Stored bytes of one layer under torchtitan's op-level selective AC (torchtitan
    parallelisms/parallelize_llama.py _apply_ac_to_transformer_block at 9dec370, 2024-12; distributed/
    activation_checkpoint.py in 0.3.0): the block input, and the outputs of the ops in `_save_list` --
    aten.mm except every second one (the counter restarts with each block: mm 1, 3, 5, 7 are saved),
    flash/efficient SDPA (output + fp32 logsumexp), reduce_scatter_tensor (SP) -- everything else is
    recomputed in the backward. Per token, 16-bit, in forward order the matmuls are
      wq (q/t), wk (kv/t), wv (kv/t), wo (h: a row-parallel partial sum is full width), and for a dense
      layer w1 (f/t), w3 (f/t), w2 (h); an MoE layer's router (experts) and shared-expert matmuls (its
      routed experts run as grouped_mm, not saved).
    SwiGLU: saved wq, wv, w1, w2 = q/t + kv/t + f/t + h."""
    t = tp
    tokens = seq_len / cp * micro_batch
    h = model.hidden
    widths = [model.q_dim / t, model.kv_dim / t, model.kv_dim / t, h]
    if moe and model.moe is not None:
        widths.append(model.moe.experts)
        for _ in range(model.moe.shared_experts):
            widths += [model.moe.expert_ffn_hidden / t, model.moe.expert_ffn_hidden / t, h]
    elif model.activation == "swiglu":
        widths += [model.ffn_hidden / t, model.ffn_hidden / t, h]
    else:
        widths += [model.ffn_hidden / t, h]
    mm = sum(widths[0::2])
    per_token = (h / (t if sp else 1) + mm + model.q_dim / t) * act_bytes + 4 * model.heads / t
    if sp and t > 1:
        per_token += 2 * h / t * act_bytes   # the two reduce-scatter outputs
    return tokens * per_token


def korthikanti_layer_bytes(s: int, b: int, h: int, a: int, t: int, sp: bool, selective: bool) -> float:
    """Korthikanti Table 2 closed forms (MHA, ffn = 4h, dropout, standard attention)."""
    if sp and selective:
        return s * b * h / t * 34
    if sp:
        return s * b * h / t * (34 + 5 * a * s / h)
    if selective:
        return s * b * h * (10 + 24 / t)
    return s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


def inflight_microbatches(pp, vpp, m, stage=0):
    """Micro-batches of a stage's activations held at the peak (stage micro-batch units: all of the
    stage's layers), by the schedule's own warm-up rule (Megatron-core pipeline_parallel/schedules.py
    get_pp_rank_microbatches; torch.distributed.pipelining Schedule1F1B / ScheduleInterleaved1F1B and
    Paddle's interleaved schedule use the same counts): rank r runs `warmup` forwards before its first
    backward and one more forward per 1F1B step, so warmup + 1 (chunk-)micro-batches are held:
        1F1B:        warmup = p - r - 1                               -> min(p - r, m)
        interleaved: warmup = 2 (p - r - 1) + (v - 1) g, g = p         -> min(warmup + 1, m v) / v
    (g: micro-batches per virtual-stage group, --microbatch-group-size-per-vp-stage, default pp; each
    chunk holds 1/v of the stage's layers). Rank 0 interleaved: p + (p - 1)/v = p (1 + (p-1)/(p v)),
    Korthikanti 2022 Sec. 4.2.3; the last rank still holds ((v - 1) p + 1)/v, not 1.
    Works on numbers and on numpy arrays (search/bounds.py)."""
    if type(pp) is int and type(vpp) is int and type(m) is int and type(stage) is int:
        return _inflight_of(pp, vpp, m, stage)    # one stage (the cost model): memoised, same value
    return _inflight_of.__wrapped__(pp, vpp, m, stage)


@lru_cache(maxsize=4096)
def _inflight_of(pp, vpp, m, stage):
    import numpy as np
    warm_i = 2 * (pp - stage - 1) + (vpp - 1) * pp
    inter = np.minimum(warm_i + 1, m * vpp) / vpp
    plain = np.minimum(pp - stage, m)
    out = np.where(pp == 1, 1.0, np.where(vpp > 1, inter, plain))
    return float(out) if np.ndim(out) == 0 else out
