"""Megatron-core without Transformer Engine (`--runtime megatron-local`): the same Megatron-LM / megatron-core
as specs/runtimes/megatron.py, on a stack that has neither Transformer Engine nor apex (stock PyTorch wheels).

Why a runtime of its own (not an option of `megatron`): every field a plan is costed and exported with follows
from the runtime name it records (RuntimeSpec, `strategy.runtime` in the plan file), so a plan for a TE-less
stack is searched in that stack's space, costed with its kernels and exported with its switches, and re-
evaluates the same from the file alone; plans of `megatron` are untouched (issue 17, item 3).

Read in megatron-core 0.19.2 (the wheel; Megatron-LM core_r0.19.0 for pretrain_gpt.py / gpt_builders.py),
as launched on a TE-less torch 2.11 stack (issue 17: four switches made every non-cp export train):
- `--transformer-impl local`: gpt_builders.py _get_transformer_layer_spec -> gpt_layer_specs.py
  get_gpt_layer_local_spec: ColumnParallelLinear / RowParallelLinear, WrappedTorchNorm (torch RMSNorm /
  LayerNorm), core attention = megatron/core/transformer/dot_product_attention.py DotProductAttention
  (baddbmm scores, FusedScaleMaskSoftmax, bmm: unfused).
- `--no-persist-layer-norm`: the persistent LayerNorm kernel is apex's (FastLayerNorm): no cost difference.
- `--no-gradient-accumulation-fusion`: tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication
  .backward computes `grad_weight = grad_output.t().matmul(total_input)` as a 16-bit tensor instead of
  accumulating into the fp32 main_grad inside the GEMM (fused_weight_gradient_mlp_cuda, apex/TE); the DDP
  backward hook (distributed/distributed_data_parallel.py _make_backward_post_hook) then runs
  `param.main_grad.add_(param.grad.data)` for every parameter after every micro-batch's backward: read fp32
  main grad 4 B + 16-bit grad 2 B, write fp32 4 B = 10 B per parameter, the first micro-batch too (the buffer
  is zeroed, not stolen): GradAccum(10, first=True), charged by cost/estimate.py over the stage's parameters
  (the input embedding's gradient takes this add_ in both stacks: counted here too, < 1 ms per micro-batch at
  Llama 3's vocabulary on H100).
- `--no-rope-fusion`: models/common/embeddings/rope_utils.py _apply_rotary_pos_emb_bshd on q and k by eager ops,
  per 16-bit element: t*cos (read 1, write 1), _rotate_half = neg of half (0.5 + 0.5) + cat (1 + 1), *sin (1 + 1),
  add (2 + 1), cat with the empty pass-through part (1 + 1): 12 accesses = 24 B forward; autograd's backward:
  grad*sin (2), neg (1), chunk's cat (2), grad*cos (2), the two gradients' sum (3), slice_backward (zeros + copy,
  3): 13 = 26 B. The base costing counts a fused RoPE as free, so these are added in full (UnfusedKernels).
- attention, two choices (`--attention` on plan/evaluate, `strategy.attention` in the plan file):
  * flash (default): PyTorch scaled_dot_product_attention, whose flash backend is FlashAttention-2 (specs/chip.py
    ATTENTION_KERNELS "fa2"; torch's own FA2 build). Megatron's local spec has no SDPA core, so the export writes
    a layer-spec module (baige_sdpa_spec.py: the local spec with DotProductAttention.forward replaced by one SDPA
    call) passed with Megatron's own `--spec MODULE NAME` (training/arguments.py; gpt_builders.py gpt_builder:
    `import_module(args.spec)`), and launch.sh puts the export folder on PYTHONPATH.
  * standard: Megatron's DotProductAttention as is, plus `--no-masked-softmax-fusion`: with the fusion on (the
    parser's default) FusedScaleMaskSoftmax imports Megatron's compiled scaled_upper_triang_masked_softmax_cuda for
    16 < seq <= 4096 (core/fusions/fused_softmax.py is_kernel_available, ScaledUpperTriangMaskedSoftmax), which a
    TE/apex-less stack does not have; forward_torch_softmax then runs in the 16-bit dtype (the parser's
    --attention-softmax-in-fp32 is off by default and the config takes the parser's value: training/arguments.py,
    "incompatible defaults in dataclass"), per score element: masked_fill_ (read 2, write 2; the broadcast causal
    mask stays in L2) and softmax (2 + 2) = 8 B forward at least; backward: softmax backward (read gradient 2,
    output 2, write 2) and masked_fill (2 + 2) = 10 B at least, against the fused kernel's read + write (4 B
    forward, 8 backward: compute.layer_memory_bytes). Measured, they move far more: torch's masked_fill_ with the
    [b, 1, s, s] mask broadcast over the heads, and its softmax over rows longer than 1024 (not the single-pass
    persistent kernel), took 6.45 + 7.91 ms forward for 2.15e9 scores (b 4, 32 heads, s 4096, head dim 64) on one
    H200, i.e. 28.3 B per score at the 4.23 TB/s a device copy reached there; the backward of the whole core less
    twice its two batched GEMMs took 23.8 ms, 46.9 B per score (benchmarks/real/local_attention_pieces.py ->
    local_attention_pieces_h200.raw.json). These measured effective bytes are what the variant is costed with
    (SOFTMAX_FWD_BYTES, SOFTMAX_BWD_BYTES), at the chip's achievable HBM rate (H200: 4.30 TB/s in the catalog).
    The stored softmax output is the same 16-bit tensor the fused kernel keeps (the bmm reads it; dropout with p = 0
    returns its input): no memory difference (measured 113.8 GiB against 113.4 predicted for the 1B plan with
    recompute none). Attention dropout is 0 in these models.
  Measured on 4x H200 (issue 17): steps 1.19-1.25x the TE prediction with SDPA, 1.75-1.90x with the unfused core.
- optimizer: core/optimizer/__init__.py imports TE's FusedAdam, else apex's, else `torch.optim.AdamW`
  (USING_PYTORCH_OPTIMIZER; _get_megatron_optimizer_based_on_param_groups: AdamW with decoupled weight decay,
  capturable False), whose default on CUDA tensors is the foreach implementation (torch/optim/adam.py
  _default_to_fused_or_foreach -> _multi_tensor_adam): per fp32 element _foreach_mul_ (weight decay, 4 + 4),
  lerp_ (m: 4 + 4 + 4), mul_ + addcmul_ (v: 4 + 4, 4 + 4 + 4), sqrt (4 + 4), div_ (4 + 4), add_ eps (4 + 4),
  addcdiv_ (4 + 4 + 4 + 4) = 80 B, against the fused kernel's 28 (read grad, master, m, v; write master, m, v):
  52 B more per owned parameter (UnfusedKernels.optimizer_extra_bytes).
- no sequence parallelism: the local norms (core/transformer/torch_norm.py WrappedTorchNorm, torch RMSNorm /
  LayerNorm) assert `not config.sequence_parallel` (seen on 2x H200: both tp 2 exports with --sequence-parallel
  stopped at model build); tensor parallelism runs with all-reduces, as costed without SP.
- no Transformer Engine: no fp8 (its fp8 runs through TE), no TP communication overlap (userbuffers are TE's),
  no context parallelism (Megatron runs cp only through TEDotProductAttention: refused, with the reason), no
  grouped expert GEMM (TEGroupedMLP; the local SequentialMLP expert loop is not costed: MoE models refused),
  and ZeRO-3 (Megatron-FSDP) is not planned (not launched without TE here).
"""

from __future__ import annotations

from dataclasses import replace

from baige_plan.specs.runtime import GradAccum, UnfusedKernels
from baige_plan.specs.runtimes import megatron as _mg

VERSION = _mg.VERSION

# --no-gradient-accumulation-fusion: main_grad.add_(grad) per parameter per micro-batch (module docstring)
GRAD_ACCUM_BYTES_PER_PARAM = 4 + 2 + 4
ROPE_FWD_BYTES = 24.0          # eager RoPE, per 16-bit element of q and k (module docstring)
ROPE_BWD_BYTES = 26.0
# forward_torch_softmax in 16 bits (masked_fill_ + softmax), effective bytes per score element at the device-copy
# rate, measured on H200 (benchmarks/real/local_attention_pieces_h200.raw.json; module docstring); the bytes a
# single-pass kernel would need are 8 and 10
SOFTMAX_FWD_BYTES = 28.3
SOFTMAX_BWD_BYTES = 46.9
FOREACH_ADAMW_BYTES = 80.0     # torch.optim.AdamW foreach step per fp32 element (module docstring)
FUSED_ADAM_KERNEL_BYTES = 28.0


def _grad_accum(precision: str, zero: int, pp: int) -> GradAccum:
    return GradAccum(GRAD_ACCUM_BYTES_PER_PARAM, first=True)


def _refusal(s, model, job) -> str | None:
    if model is not None and getattr(model, "moe", None) is not None:
        return ("megatron-local: MoE models are not planned without Transformer Engine (Megatron's local "
                "SequentialMLP expert loop is not costed); use --runtime megatron on a TE stack")
    return _mg._refusal(s, model, job)


RUNTIME = replace(
    _mg.RUNTIME,
    name="megatron-local",
    title="Megatron-LM / Megatron-core without Transformer Engine (--transformer-impl local)",
    zero_stages=(0, 1),
    zero_stages_with_pp=(0, 1),
    # the local norms refuse SP: core/transformer/torch_norm.py WrappedTorchNorm.__new__ asserts
    # `not config.sequence_parallel` (measured: both tp 2 exports with --sequence-parallel stopped there)
    sequence_parallel="never",
    context_parallel=False,            # cp only through TEDotProductAttention
    precisions=("bf16", "fp16", "fp32", "tf32"),   # fp8 runs through Transformer Engine
    fp8_param_gather=False,
    tp_comm_overlap=False,             # userbuffers are Transformer Engine's
    attention_kernel="fa2",            # PyTorch SDPA flash backend (the exported baige_sdpa_spec.py)
    grad_accum=_grad_accum,
    unfused=UnfusedKernels(rope_fwd_bytes=ROPE_FWD_BYTES, rope_bwd_bytes=ROPE_BWD_BYTES,
                           softmax_fwd_bytes=SOFTMAX_FWD_BYTES, softmax_bwd_bytes=SOFTMAX_BWD_BYTES,
                           optimizer_extra_bytes=FOREACH_ADAMW_BYTES - FUSED_ADAM_KERNEL_BYTES),
    # the export writes no --cross-entropy-loss-fusion: the loss runs one op per step (2x and 4x H200 runs:
    # benchmarks/real/runs_megatron_local_h200x*.yaml)
    loss_kernel="megatron_unfused",
    # the local spec builds MLA's down projections tensor-parallel (ColumnParallelLinear), not the duplicated TE
    # linears the cost model charges; MTP not checked without Transformer Engine
    model_features=(),
    memory=replace(_mg.MEMORY, fp8_gemm_inputs=False, fp8_weight_cache_bytes=0, fp8_param_bytes=0),
    notes=_mg.RUNTIME.notes + (
        "megatron/core/models/gpt/gpt_layer_specs.py get_gpt_layer_local_spec: the --transformer-impl local layer",
        "megatron/core/optimizer/__init__.py: torch.optim.AdamW when neither TE nor apex imports",
        "megatron/core/tensor_parallel/layers.py: wgrad as a separate tensor without gradient_accumulation_fusion"),
    extra_refusal=_refusal,
    extra_refusal_reads=_mg.RUNTIME.extra_refusal_reads,   # its own rule reads the model only
)
