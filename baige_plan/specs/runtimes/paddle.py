"""PaddlePaddle hybrid parallel through PaddleFormers' Trainer (`paddleformers-cli train`).

Pinned: paddleformers==1.2.0 on paddlepaddle==3.3.1 (tests/integration/requirements-paddle.txt; the
export is checked by PaddleFormers' own parser in tests/integration/check_paddle.py). Sources below are
files of those two wheels, as file:function.

Space:
- dp; tensor (mp) with optional sequence parallelism; pipeline with interleaving: vpp is
  `virtual_pipeline_model_parallel_size`, and paddle/distributed/fleet/model.py:distributed_model picks the
  schedule from it and the accumulation steps m: interleaved 1F1B (PipelineParallelWithInterleave) only when
  m >= 2·pp, "forward-then-backward" (PipelineParallelWithInterleaveFthenB) when pp <= m < 2·pp; the
  pipeline_configs `schedule_mode` field is read only by the static-graph pipeline optimizer. Layers split
  equally (pp_layers.py:SegmentLayers.do_segment, "layer:" method: layers % (pp·vpp) == 0), or at the
  boundaries a `pp_seg_method` list gives (ModelArguments; nn/pp_model.py literal_evals it; vpp 1 only:
  PipelineLayer asserts a "layer:" method with vpp): uneven first/last stages for the native classes.
- sharding stage 1/2/3 = ZeRO 1/2/3 over the dp ranks; with pp > 1 only stage 1
  (trainer/training_args.py:TrainingArguments.__post_init__: "pipeline parallel is not compatible for
  sharding stage2 or stage3"); stage 3 not with tp > 1 (trainer/trainer.py:Trainer._wrap_model).
- expert parallelism (expert_model_parallel_size) only with sharding carrying all of dp
  (training_args.py:_post_init_parallel_degree: data_parallel_size must be 1 with ep > 1) and with
  tp | ep (sharding_parallel_size % moe_sharding_parallel_size == 0, moe_sharding = tp·cp·dp/ep); no
  expert tensor parallelism (_post_init_parallel_degree asserts expert_tensor_model_parallel_size == 1).
- context parallelism (context_parallel_size): Paddle 3.3.1 builds context-parallel groups only in
  EPHybridCommunicateGroup (fleet/fleet.py:Fleet._create_hcg, used only when ep_degree > 1; the plain
  HybridCommunicateGroup has no CP group and TrainingArguments.cp_sharding_degree asserts), carved out of
  the sharding group (dataset_world_size asserts data_parallel_size == 1); PaddleFormers splits the sequence
  only for PaddleFleet models (trainer.py:Trainer._get_inputs_list). So cp > 1 needs an MoE model, ep > 1
  and zero >= 1.
- recompute: only full (granularity full, method uniform, 1 layer: the only combination
  transformers/llama/modeling.py:LlamaModel.forward and nn/pp_model.py honour; no selective recompute).
- bf16 / fp16 (AMP O2, fp32 master gradients) / fp32; no fp8 for these model classes.
Execution semantics (trainer/trainer.py:Trainer._inner_training_loop, amp_master_grad on as by default):
- dp (no sharding): gradients accumulate under no_sync (or unsynchronised hybrid layers) and are
  all-reduced once, after the last micro-batch's backward (fused_allreduce_gradients_no_sync): exposed;
- sharding stage 1 (DygraphShardingOptimizer, split_param on by default): reduce-scatter once per step
  after the last backward, all-gather of the updated parameters after the step, both exposed;
- stage 2 (GroupShardedStage2): gradients reduced to their owner by backward hooks in every micro-batch's
  backward, synchronously (sync_op=True unless stage2_overlap), parameters broadcast after the step;
- with pp > 1 (training_pipeline_step then the same reduction): after the pipeline flush.
"""

from __future__ import annotations

from baige_plan.specs.runtime import (
    GradSync,
    MemorySemantics,
    RuntimeSpec,
)

RUNTIME_VERSION = "1.2.0"     # paddleformers (RUNTIME.version)
PADDLE_VERSION = "3.3.1"      # paddlepaddle the pinned paddleformers runs on (and check_paddle.py uses)


def _grad_sync(zero: int, pp: int) -> GradSync:
    if zero == 2:
        return GradSync(grads="micro_batch", overlap="none", params="after_step")
    if zero == 1:
        return GradSync(grads="step", overlap="none", params="after_step")
    return GradSync(grads="step", overlap="none", params="none")


def _get(o, k, default=None):
    return o.get(k, default) if isinstance(o, dict) else getattr(o, k, default)


def _extra_refusal(s, model=None, job=None) -> str | None:
    """Rules of PaddleFormers 1.2 / Paddle 3.3.1 beyond the RuntimeSpec fields (see the module docstring)."""
    tp, pp, dp, cp, ep, z, vpp = s.tp, s.pp, s.dp, s.cp, s.ep, s.zero, s.vpp
    act = _get(model, "activation") if model is not None else None
    if act and act != "swiglu":
        return (f"PaddleFormers {RUNTIME_VERSION} has no decoder class with a non-gated {act} MLP "
                "(its GPT-style models are gone; Llama/Qwen/ERNIE are SwiGLU)")
    if cp > 1 and ep == 1:
        return (f"paddle runs context parallelism (cp={cp}) only inside its expert-parallel topology "
                "(Paddle 3.3.1 Fleet._create_hcg builds CP groups only when ep > 1) on PaddleFleet MoE models; "
                "dense models and ep=1 have no CP")
    if cp > 1 and z == 0:
        return (f"paddle carves context parallelism (cp={cp}) out of the sharding group: it needs zero >= 1 "
                "(TrainingArguments.dataset_world_size: CP cannot coexist with data parallel)")
    if ep > 1:
        if z == 0 and dp * cp > 1:
            return (f"paddle runs expert parallelism (ep={ep}) only with sharding over the data-parallel ranks "
                    f"(zero >= 1): data_parallel_size must be 1, here dp·cp={dp * cp} with zero=0")
        moe_sharding = tp * cp * dp // ep
        sharding = dp * cp if z else 1
        if moe_sharding > 1 and sharding > 1 and sharding % moe_sharding:
            return (f"paddle needs sharding_parallel_size (dp·cp={sharding}) divisible by moe_sharding "
                    f"(tp·cp·dp/ep={moe_sharding}), i.e. ep={ep} a multiple of tp={tp}")
    uneven = getattr(s, "first_stage_layers", None) or getattr(s, "last_stage_layers", None)
    if uneven and model is not None and _get(model, "moe"):
        return ("paddle sets uneven pipeline stages (pp_seg_method) only for its native decoder classes, "
                "not for PaddleFleet MoE models")
    if z == 3 and tp > 1:
        return f"paddle runs sharding stage3 without tensor parallelism only (tp={tp})"
    if vpp > 1 and job is not None:
        gb = _get(job, "global_batch")
        if gb:
            m = gb // (dp * s.micro_batch)
            if m < 2 * pp:
                return (f"paddle runs the interleaved 1F1B schedule (vpp={vpp}) only with micro-batches per "
                        f"replica >= 2·pp = {2 * pp}, here {m} (fewer runs forward-then-backward or fails)")
    return None


# What PaddleFormers allocates as the export runs it (cost/memory.py state_bytes): AMP O2 with 16-bit parameters and
# fp32 master weights and moments in the optimizer, and amp_master_grad True (set by the export): fp32 weight
# gradients after the backward (paddleformers/trainer/training_args.py TrainingArguments.amp_master_grad).
# Paddle's own allocator (auto_growth) was not measured: PyTorch's caching-allocator and CUDA/NCCL figures are used.
MEMORY = MemorySemantics(
    master="separate", grad_bytes_bf16=4, grad_bytes_fp16=4, step_grad_bytes=0,
    selective="core_attention", interleave_group="pp",   # PipelineParallelWithInterleave warm-up = Megatron's
    # Paddle's auto-growth allocator was not measured: PyTorch's figures (cost/memory.py)
    sources=("paddleformers/trainer/training_args.py amp_master_grad", "baige_plan/exports/paddle.py export: "
             "fp16_opt_level O2, amp_master_grad True"),
)

RUNTIME = RuntimeSpec(
    name="paddle",
    title="PaddlePaddle hybrid parallel (PaddleFormers Trainer)",
    package="paddleformers",
    version=RUNTIME_VERSION,
    zero_stages=(0, 1, 2, 3),
    zero_stages_with_pp=(0, 1),
    interleaved=True,
    context_parallel=True,
    expert_parallel=True,
    expert_tensor_parallel=False,
    uneven_split=True,        # pp_seg_method boundaries (dense, vpp 1; _extra_refusal)
    sequence_parallel="optional",
    recompute=("none", "full"),
    precisions=("bf16", "fp16", "fp32", "tf32"),
    heterogeneous=False,
    schedules=("1F1B", "VPP"),
    execution="fused",
    zero3_impl="fsdp",
    zero3_gather=lambda pp: "micro_batch",
    grad_sync=_grad_sync,
    memory=MEMORY,
    attention_kernel="fa2",            # PaddleNLP/PaddleFormers: FlashAttention-2 (paddle flash_attn, use_flash_attention)
    notes=(f"paddleformers 1.2.0 on paddlepaddle {PADDLE_VERSION}",
           "paddleformers/trainer/training_args.py:TrainingArguments.__post_init__: sharding stage2/3 refused "
           "with pipeline parallel; _post_init_parallel_degree: ep needs data_parallel_size 1, etp 1",
           "paddleformers/trainer/trainer.py:Trainer._inner_training_loop: gradient reduction after the last "
           "micro-batch (dp, stage 1, pp); GroupShardedStage2 backward hooks reduce every micro-batch",
           "paddle/distributed/fleet/fleet.py:Fleet._create_hcg: context parallel groups only with ep > 1",
           "paddle/distributed/fleet/model.py:distributed_model: interleaved 1F1B needs m >= 2·pp",
           "paddleformers/transformers/llama/modeling.py:LlamaModel.forward: only full/uniform/1 recompute"),
    extra_refusal=_extra_refusal,
)
