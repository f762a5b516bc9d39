"""DeepSpeed (Megatron-DeepSpeed for TP, the PipelineEngine for PP, ZeRO for data parallelism).

Pinned: deepspeed 0.19.8 (PyPI; installs and imports on CPU with DS_BUILD_OPS=0). The model side is
Megatron-DeepSpeed (github.com/microsoft/Megatron-DeepSpeed, not on PyPI), read at commit
f4157bea69f3df8c6cb66f2ebcda66ba03d1288e (2024-12-24): megatron/arguments.py, megatron/training.py,
megatron/model/gpt_model.py. tests/integration/check_deepspeed.py feeds the export to the installed
DeepSpeed (DeepSpeedConfig with the plan's data-parallel world, deepspeed.initialize on a stand-in model,
the launcher's own argument and hostfile parsers); the Megatron-DeepSpeed arguments are checked for
agreement with the plan and the config, not by Megatron-DeepSpeed's parser.

Space (paths inside the deepspeed 0.19.8 wheel unless marked MDS = Megatron-DeepSpeed):
- ZeRO 0/1/2/3 without pipeline parallelism. With pp > 1 only 0/1: PipelineEngine.__init__
  (runtime/pipe/engine.py) asserts zero_optimization_stage() < ZeroStageEnum.gradients. MDS
  training.py passes mpu only with --no-pipeline-parallel; with pp > 1 the model is GPTModelPipe, a
  PipelineModule, and deepspeed.initialize builds a PipelineEngine with model.mpu().
- no interleaving: the PipelineEngine runs runtime/pipe/schedule.py TrainSchedule (1F1B); MDS's
  --num-layers-per-virtual-pipeline-stage is Megatron's own schedule, which the DeepSpeed path never
  calls. No layer counts per stage: GPTModelPipe partitions with partition_method='type:transformer'
  (PipelineModule._partition_layers -> runtime/utils.py partition_balanced over the transformer
  layers); the ds_config "pipeline" keys "stages"/"partition" are not read by the engine (written for
  the reader). With layers % pp != 0 that split gives the first layers % pp stages one layer more
  (70 layers on 12 stages: [6] x 10 + [5] x 2, as BLOOM-176B ran): DeepSpeed runs it, but it is not
  Megatron's first/last split that `uneven_split` means, so the planner still refuses it (a gap in the
  planner's space, not in the export). No ring-attention CP (DeepSpeed-Ulysses, --ds-sequence-parallel-size, is a different
  algorithm and GPTModelPipe's topology has no sequence axis).
- MoE (deepspeed.moe.layer.MoE, MDS --num-experts/--moe-expert-parallel-size): runs with the
  PipelineEngine since DeepSpeed PR #5338 / MDS PR #373 (GPTModelPipe builds MoE layers and only
  asserts pipe_partitioned/grad_partitioned off when tp > 1; utils/groups.py builds pipeline-aware
  expert groups), so the former "no EP with PP" refusal was wrong and is removed. Native DeepSpeed MoE
  is refused under ZeRO-3: DeepSpeedEngine._validate_zero3_moe_compatibility ("Native DeepSpeed MoE is
  not supported with ZeRO Stage 3"): added to the refusals.
- precisions bf16/fp16/fp32: the config has bf16 and fp16 sections (runtime/config.py
  get_bfloat16_config/get_float16_config) and nothing for fp8; fp8 GEMMs come from the model code: NVIDIA's
  Megatron-DeepSpeed --fp8-hybrid through Transformer Engine, HabanaAI/Megatron-DeepSpeed's Intel Gaudi
  Transformer Engine (the fp8 rows of Intel's Gaudi 2 performance pages and MLPerf v3.1/v4.0 GPT-3 runs). So fp8
  is in the space and costed as Transformer Engine fp8 (cost/fp8.py); the export refuses it (it writes no
  Transformer Engine arguments for MDS).
Execution semantics (which optimizer runs, and when data-parallel collectives run; read in
runtime/engine.py allreduce_gradients/_do_optimizer_sanity_check, runtime/zero/stage_1_and_2.py,
runtime/bf16_optimizer.py, runtime/pipe/engine.py _exec_reduce_grads, and observed on 2 CPU ranks
with gloo by wrapping deepspeed.comm's TorchBackend collectives: gradients of the 16-bit model are
all-reduced in 16 bits, ZeRO-1/2 included: use_multi_rank_bucket_allreduce, default on, makes
average_tensor one all-reduce per bucket rather than a reduce-scatter):
- ZeRO-0, pp = 1 (bf16: DDP_BFLOAT16 wrapper; fp16: FP16_Optimizer): all-reduce once per step from
  DeepSpeedEngine.backward's epilogue after the last micro-batch's backward: exposed, no all-gather.
- ZeRO-0, pp > 1: ReduceGrads after the pipeline flush (PipelineEngine._exec_reduce_grads): exposed.
  With bf16, _do_optimizer_sanity_check picks BF16_Optimizer for a PipelineModule (model dtype ==
  grad-accumulation dtype == bf16 and pipeline_parallelism), which shards the fp32 master weights and
  Adam states over the data-parallel ranks and all-gathers the bf16 parameters after the step
  (update_lp_params): DeepSpeed runs a bf16 "ZeRO-0" pipeline as ZeRO-1. The export says so; the cost
  model's ZeRO-0 branch has no parameter all-gather and no optimizer sharding (conservative memory,
  missing one all-gather of 2P bytes per step).
- ZeRO-1: for bf16 the export sets data_types.grad_accum_dtype fp32, as Megatron-DeepSpeed's recipes do
  (examples_deepspeed/universal_checkpointing/ds_config.json), which selects BF16_Optimizer (fp32
  accumulation, no gradient hooks: engine.allreduce_gradients -> buffered_allreduce_fallback after the
  backward); for fp16/fp32 it sets overlap_comm false so DeepSpeedZeroOptimizer reduces in
  reduce_gradients after the backward too, not from hooks inside it: one schedule for every precision,
  as grad_sync(zero, pp) has no precision argument. Gradients are reduced once per step (pp = 1: the
  engine's backward epilogue of the last micro-batch; pp > 1: ReduceGrads after the flush, whatever
  overlap_comm says: observed on a 2-stage pipeline), exposed; the 16-bit parameters are all-gathered
  right after the optimizer step (all_gather_dp_groups), exposed. The fp32 accumulators are reduced in
  the communication dtype (bf16 by default: engine.allreduce_bucket casts).
- ZeRO-2 (pp = 1 only): partition_gradients: every parameter's gradient hook reduces it into its
  owner's partition in every micro-batch's backward (reduce_ready_partitions_and_remove_grads ignores
  the accumulation boundary), overlapped on the reduction stream (overlap_comm, set by the export):
  m reductions per step; parameters all-gathered after the step.
- ZeRO-3: parameters fetched per module for every micro-batch's forward and backward (prefetch),
  gradients reduce-scattered in every micro-batch's backward (observed: reduce_scatter_tensor in each
  backward), no post-step all-gather (zero3_gather "micro_batch").
- ZeRO-1/2 reduce with an all-reduce (RuntimeSpec.zero_grad_allreduce), moving 2(n-1)/n of the gradients,
  not the (n-1)/n of a reduce-scatter: runtime/zero/stage_1_and_2.py average_tensor with
  use_multi_rank_bucket_allreduce (default on since DeepSpeed PR #4695, 2023-11) all-reduces every bucket
  and each rank keeps its slice (allreduce_and_copy_with_multiple_ranks); with reduce_scatter off it calls
  gradient_reduction_w_predivide, an all-reduce (GLM-130B ran zero_reduce_scatter false, DeepSpeed 0.6.1,
  arXiv:2210.02414 Table 11); BF16_Optimizer reduces through buffered_allreduce_fallback (all-reduce).
Per micro-batch, outside the GEMMs (github microsoft/DeepSpeed read at tags v0.5.0-v0.7.0 and at 38327e07 = v0.16.4+6):
- gradient accumulation (RuntimeSpec.grad_accum, `_grad_accum`): DeepSpeed has no fused wgrad accumulation.
  BF16_Optimizer (bf16 with ZeRO-1 and grad_accum_dtype fp32, as the export sets and BLOOM-176B ran, or
  ZeRO-0 with pp > 1) runs update_hp_grads after every micro-batch's backward (runtime/pipe/engine.py
  _exec_backward_pass; runtime/bf16_optimizer.py: hp_grad.add_(lp.grad.to(fp32)) per parameter): the cast
  reads 2 B and writes 4, the add reads 4 + 4 and writes 4: 18 B per parameter, every micro-batch. fp16
  (FP16_Optimizer, DeepSpeedZeroOptimizer stage 1 without hooks) and bf16 ZeRO-0 with pp = 1 accumulate in
  the 16-bit .grad through autograd's AccumulateGrad (grad += new: 6 B, from the second micro-batch); fp32
  12 B. ZeRO-2/3 copy gradients into reduction buckets instead (not modelled: 0). fp8 is not a DeepSpeed
  precision: fp8 rows come from forks whose accumulation differs (HabanaAI's accumulate_grads_via_hooks,
  HL_GRAD_ACCUM_DTYPE) and is left at 0.
- pipeline p2p (RuntimeSpec.pipe_partitioned): with tp > 1 the engine sends 1/tp of the boundary tensor
  (pipe_partitioned, grad_partitioned: on whenever the model is tensor parallel, engine.py __init__; since
  v0.5.4 for gradients) and rebuilds it with PartitionedTensor.full() (runtime/utils.py: zeros, all-gather
  over the TP group, clone): the input in every forward of a non-first stage (_exec_forward_pass), the
  output and the received gradient in every backward of a non-last stage (_exec_backward_pass). Each
  transfer is a blocking send/recv in the schedule's step (runtime/pipe/p2p.py), on the critical path as
  the cost model charges p2p. With sequence parallelism the boundary tensor is already split over TP and
  recipes turn partitioning off (MLPerf v3.1 Intel-HabanaLabs run_gpt.sh, HabanaAI/Megatron-DeepSpeed@470cc029
  scripts/run_llama.sh: pipe_partitioned = grad_partitioned = false with sequence parallelism); the export does
  the same.
- partition_activations (StrategySpec.distribute_saved_activations, RuntimeSpec "zeros_list"; a run's or a plan
  file's setting, never searched; the export writes --partition-activations and ds_config's
  activation_checkpointing.partition_activations with it): full recomputation keeps 1/tp of each checkpointed layer
  input (runtime/activation_checkpointing/checkpointing.py v0.6.1 partition_activations: narrow().clone()) and
  rebuilds it before the recompute (gather_partitioned_activations L259-294: torch.zeros of the full size, the
  rank's part copied in, dist.all_gather into the list of views, which ProcessGroupNCCL::allgather copies out of
  its flat staging buffer). GLM-130B ran it (Table 11).
- `recompute: selective` on Intel Gaudi (RuntimeSpec.selective_attention_recompute): HabanaAI's
  Megatron-DeepSpeed wires the Gaudi FusedSDPA kernel as the checkpointed core attention
  (HabanaAI/Megatron-DeepSpeed@470cc029 megatron/model/transformer.py ParallelAttention: core_attention =
  HabanaFlashSelfAttention, checkpoint_core_attention = recompute_granularity == 'selective'; MLPerf
  v3.1 Intel-HabanaLabs transformer.py asserts FusedSDPA runs checkpointed), so the backward re-runs the
  attention forward. On CUDA, Megatron-DeepSpeed's flash path (core_attention_flash) is never
  checkpointed: selective recomputation is free there, as for Megatron.
Left out (measured small or not sourceable as a cost): the ThroughputTimer's torch.cuda.synchronize in
every forward micro-step without a DeepSpeed dataloader (engine.py forward, v0.5 on; configurable since as
timers.throughput.synchronized, which HabanaAI's run_llama.sh sets false): host latency, not a device time;
the tied-embedding all-reduce before ReduceGrads (ReduceTiedGrads, vocab x h / tp per step);
CUDA_LAUNCH_BLOCKING=1 (BLOOM-176B's slurm script; BigScience
measured no throughput change at 160 GPUs, bigscience train/tr11-176B-ml/chronicles-prequel.md).
"""

from __future__ import annotations

from baige_plan.specs.runtime import (
    NO_GRAD_ACCUM,
    GradAccum,
    GradSync,
    MemorySemantics,
    RuntimeSpec,
)

VERSION = "0.19.8"


def _grad_sync(zero: int, pp: int) -> GradSync:
    if zero >= 3:
        return GradSync(grads="micro_batch", overlap="backward", params="none")
    if zero == 2:
        return GradSync(grads="micro_batch", overlap="backward", params="after_step")
    return GradSync(grads="step", overlap="none", params="after_step" if zero == 1 else "none")


# Gradient accumulation outside the GEMM, bytes per parameter per micro-batch (module docstring):
BF16_OPTIMIZER_ACCUM_BYTES = 2 + 4 + 4 + 4 + 4   # lp.grad.to(fp32): read 2, write 4; hp_grad.add_: read 4 + 4, write 4
AUTOGRAD_ACCUM_BYTES_PER_ELEMENT_BYTE = 3        # AccumulateGrad grad += new: read 2 x, write 1 x the element size


def _grad_accum(precision: str, zero: int, pp: int) -> GradAccum:
    if zero >= 2 or precision == "fp8":
        return NO_GRAD_ACCUM
    if precision == "bf16" and (zero == 1 or pp > 1):
        return GradAccum(BF16_OPTIMIZER_ACCUM_BYTES, first=True)
    elem = 4 if precision in ("fp32", "tf32") else 2
    return GradAccum(AUTOGRAD_ACCUM_BYTES_PER_ELEMENT_BYTE * elem, first=False)


def _refusal(s, model, job) -> str | None:
    if s.zero >= 3 and model is not None and getattr(model, "moe", None) is not None:
        return ("DeepSpeed refuses its native MoE layers (what Megatron-DeepSpeed builds) under ZeRO-3 "
                "(deepspeed/runtime/engine.py DeepSpeedEngine._validate_zero3_moe_compatibility)")
    return None


# What DeepSpeed allocates (cost/memory.py state_bytes; docs/COST_MODEL.md "Memory model"), deepspeed 0.19.8:
MEMORY = MemorySemantics(
    master="separate",     # 16-bit model params; fp32 master partition in the optimizer
    grad_bytes_bf16=4,     # ZeRO-0/1 bf16: BF16_Optimizer (runtime/bf16_optimizer.py: fp32_groups_gradients_flat =
                           # zeros_like(bf16 flat, grad_acc_dtype fp32), full size; the export sets grad_accum_dtype fp32)
    grad_bytes_fp16=2,     # fp16: FP16_Optimizer / DeepSpeedZeroOptimizer keep fp16 gradients
    grad_bytes_zero2=2,    # ZeRO-2/3: model-dtype gradients reduced into partitions (zero/stage_1_and_2.py,
                           # zero/stage3.py)
    step_grad_bytes=4,     # their step: fp32 gradient partition (single_partition_of_fp32_groups[i].grad)
    zero3_reduce_bytes=2,  # ZeRO-3 reduce-scatters model-dtype gradients (zero/stage3.py ipg bucket, 16-bit)
    zero3_prefetch_params=5e7,   # zero/config.py stage3_prefetch_bucket_size default 5e7 (the export sets none)
    selective="core_attention", interleave_group="pp",
    sources=("deepspeed/runtime/bf16_optimizer.py BF16_Optimizer._setup_for_real_optimizer",
             "deepspeed/runtime/zero/stage_1_and_2.py DeepSpeedZeroOptimizer: fp32 partition, partitioned grads"),
)

RUNTIME = RuntimeSpec(
    name="deepspeed",
    title="DeepSpeed (Megatron-DeepSpeed: TP, PipelineEngine, ZeRO)",
    package="deepspeed",
    version=VERSION,
    zero_stages=(0, 1, 2, 3),
    zero_stages_with_pp=(0, 1),
    interleaved=False,
    context_parallel=False,
    expert_parallel=True,
    expert_tensor_parallel=False,
    uneven_split=False,   # PipelineModule's balanced partition is not a first/last split (see docstring)
    sequence_parallel="optional",
    recompute=("none", "selective", "full"),
    precisions=("bf16", "fp16", "fp32", "tf32", "fp8"),
    export_precisions=("bf16", "fp16", "fp32", "tf32"),
    heterogeneous=False,
    schedules=("1F1B",),
    execution="fused",
    zero3_impl="deepspeed",
    zero3_gather=lambda pp: "micro_batch",
    grad_sync=_grad_sync,
    memory=MEMORY,
    attention_kernel="fa2",            # Megatron-DeepSpeed: the flash-attn 2 package (--use-flash-attn-v2)
    balanced_partition=True,           # PipelineModule partition_method 'type:transformer' (module docstring)
    grad_accum=_grad_accum,            # no fused wgrad accumulation (module docstring)
    zero_grad_allreduce=True,          # stage_1_and_2.py average_tensor: all-reduce per bucket
    grad_bytes=2,                      # DP reductions in the 16-bit communication dtype (engine.py
                                       # communication_data_type defaults to fp16/bf16; allreduce_bucket casts)
    # Megatron-DeepSpeed's loss is Megatron's unfused vocab_parallel_cross_entropy (megatron/core/tensor_parallel/
    # cross_entropy.py of its 2022 Megatron base; the fused one came to Megatron-core in 2024)
    loss_kernel="megatron_unfused",
    pipe_partitioned=True,             # runtime/pipe/engine.py: pipe_partitioned / grad_partitioned with tp > 1
    # activation_checkpointing.partition_activations (runtime/activation_checkpointing/checkpointing.py
    # partition_activations / gather_partitioned_activations; Megatron-DeepSpeed --partition-activations)
    distribute_saved_activations="zeros_list",    # gather_partitioned_activations (v0.6.1 L259-294)
    selective_attention_recompute=("intel-gaudi",),   # HabanaAI Megatron-DeepSpeed checkpoints FusedSDPA
    extra_refusal=_refusal,
    extra_refusal_reads=("zero",),
    notes=("deepspeed/runtime/engine.py DeepSpeedEngine.allreduce_gradients: ZeRO-2/3 reduce every micro-batch "
           "(partition_gradients), ZeRO-0/1 only at the accumulation boundary",
           "deepspeed/runtime/zero/stage_1_and_2.py reduce_ready_partitions_and_remove_grads, average_tensor "
           "(use_multi_rank_bucket_allreduce: one all-reduce per bucket); step: all_gather_dp_groups after the step",
           "deepspeed/runtime/pipe/engine.py PipelineEngine.__init__: assert zero stage < 2; _exec_reduce_grads "
           "after the flush",
           "deepspeed/runtime/engine.py _do_optimizer_sanity_check: bf16 + PipelineModule + ZeRO-0 -> BF16_Optimizer "
           "(optimizer states sharded, parameters all-gathered after the step)",
           "deepspeed/runtime/engine.py _validate_zero3_moe_compatibility: no native MoE under ZeRO-3"),
)
