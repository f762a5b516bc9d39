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
partition_activations' all-gather of each checkpointed layer input in the backward (a strategy knob the
plan does not carry; GLM-130B ran it); CUDA_LAUNCH_BLOCKING=1 (BLOOM-176B's slurm script; BigScience
measured no throughput change at 160 GPUs, bigscience train/tr11-176B-ml/chronicles-prequel.md).
"""

from __future__ import annotations

import json

from baige_plan.cost.memory import (
    ALLOCATOR_SLACK,
    ALLOCATOR_SLACK_FULL_RECOMPUTE,
    ALLOCATOR_UNRECLAIMABLE,
    CUDA_CONTEXT_GIB,
    NCCL_FIRST_GIB,
    NCCL_GROUP_GIB,
)
from baige_plan.errors import SpecError
from baige_plan.runtimes._build import mds_model_args, recorded
from baige_plan.runtimes._common import (
    DATA_VAR,
    ITERS_VAR,
    TOKENIZER_VAR,
    Export,
    ExportFile,
    VersionCheck,
    arg_lines,
    common_caveats,
    data_lines,
    hostfile_file,
    plan_info,
    slurm_file,
    version_check_lines,
)
from baige_plan.runtimes.megatron import TRAINING_ARGS
from baige_plan.specs.runtime import NO_GRAD_ACCUM, GradAccum, GradSync, MemorySemantics, RuntimeSpec

VERSION = "0.19.8"
MEGATRON_DEEPSPEED = "microsoft/Megatron-DeepSpeed"
MEGATRON_DEEPSPEED_COMMIT = "f4157bea69f3df8c6cb66f2ebcda66ba03d1288e"   # main, 2024-12-24


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
    # PyTorch releases cached segments and retries before an out-of-memory: only the unreclaimable part
    # counts against capacity (cost/memory.py ALLOCATOR_UNRECLAIMABLE, measured)
    allocator_unreclaimable=ALLOCATOR_UNRECLAIMABLE,
    allocator_slack_full_recompute=ALLOCATOR_SLACK_FULL_RECOMPUTE,
    allocator_slack=ALLOCATOR_SLACK, context_gib=CUDA_CONTEXT_GIB, comm_first_gib=NCCL_FIRST_GIB,
    comm_group_gib=NCCL_GROUP_GIB,
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
    pipe_partitioned=True,             # runtime/pipe/engine.py: pipe_partitioned / grad_partitioned with tp > 1
    selective_attention_recompute=("intel-gaudi",),   # HabanaAI Megatron-DeepSpeed checkpoints FusedSDPA
    extra_refusal=_refusal,
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


def batch(doc: dict) -> dict:
    """The DeepSpeed batch triple and world for a plan: data-parallel size dp = world / (tp * pp), micro-batch
    and accumulation steps with train_batch_size = micro * gas * dp = the plan's global batch. DeepSpeed has
    no ring-attention CP: with cp > 1 the cp ranks become data-parallel ranks when the plan's micro-batches
    divide by cp ("fold"), else the job runs on tp * pp * dp ranks ("idle": the cp ranks stay unused)."""
    i = plan_info(doc)
    s = i["s"]
    tp, pp, dp, cp, m = s["tp"], s["pp"], s["dp"], s.get("cp", 1), i["m"]
    cp_mode = "none" if cp == 1 else ("fold" if m % cp == 0 else "idle")
    ds_dp, gas = (dp * cp, m // cp) if cp_mode == "fold" else (dp, m)
    return {"dp": ds_dp, "micro": s["micro_batch"], "gas": gas, "train_batch": i["gb"], "world": tp * pp * ds_dp,
            "cp_mode": cp_mode}


def ds_config(doc: dict) -> tuple[dict, list[str]]:
    """The DeepSpeed config dict and the caveats about it."""
    i = plan_info(doc)
    s, job, model = i["s"], i["job"], i["model"]
    prec = job.get("precision", "bf16")
    if prec == "fp8":
        raise SpecError("inputs.job.precision", "fp8 is not a DeepSpeed precision (the config has bf16 and fp16 "
                        "sections only: deepspeed/runtime/config.py; Megatron-DeepSpeed's --fp8-hybrid needs "
                        "Transformer Engine layers this plan was not costed for); re-plan with --precision bf16")
    b = batch(doc)
    zero, pp, tp = s["zero"], s["pp"], s["tp"]
    caveats: list[str] = []
    cfg: dict = {
        "train_batch_size": b["train_batch"],
        "train_micro_batch_size_per_gpu": b["micro"],
        "gradient_accumulation_steps": b["gas"],
        "steps_per_print": 10,
        "gradient_clipping": 1.0,
        "wall_clock_breakdown": False,
    }
    if prec == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif prec == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
                       "hysteresis": 2, "min_loss_scale": 1}
    zc: dict = {"stage": zero}
    if zero == 1:
        zc.update(overlap_comm=False, contiguous_gradients=True)
    elif zero == 2:
        zc.update(overlap_comm=True, contiguous_gradients=True, reduce_scatter=True)
    elif zero >= 3:
        zc.update(overlap_comm=True, contiguous_gradients=True)
    cfg["zero_optimization"] = zc
    if prec == "bf16" and zero == 1:
        cfg["data_types"] = {"grad_accum_dtype": "fp32"}
    rec = s.get("recompute", "none")
    if rec == "full":
        # Megatron-DeepSpeed --deepspeed-activation-checkpointing calls deepspeed.checkpointing.configure with
        # this file and its own flags (megatron/initialize.py setup_deepspeed_random_and_activation_checkpointing)
        cfg["activation_checkpointing"] = {"partition_activations": False, "contiguous_memory_optimization": False,
                                           "cpu_checkpointing": False, "number_checkpoints": i["layers"],
                                           "synchronize_checkpoint_boundary": False, "profile": False}
    if pp > 1:
        pipe = {"stages": pp, "partition": "type:transformer",
                "activation_checkpoint_interval": 1 if rec == "full" else 0}
        if model.get("moe") and tp > 1:
            # megatron/model/gpt_model.py GPTModelPipe asserts these off for MoE with tp > 1 and pp > 1, but
            # reads a missing key as off while DeepSpeed's get_pipeline_config defaults both to true
            pipe.update(pipe_partitioned=False, grad_partitioned=False)
        elif s.get("sequence_parallel") and tp > 1:
            # the boundary tensor is already split over TP: no partition + all-gather (as the cost model
            # assumes, module docstring; MLPerf v3.1 Intel-HabanaLabs run_gpt.sh does the same)
            pipe.update(pipe_partitioned=False, grad_partitioned=False)
        cfg["pipeline"] = pipe
    if zero >= 2 and pp > 1:
        caveats.append(f"zero={zero} with pp={pp}: DeepSpeed's PipelineEngine asserts ZeRO stage < 2 "
                       "(deepspeed/runtime/pipe/engine.py PipelineEngine.__init__); deepspeed.initialize will fail. "
                       "Re-plan with --runtime deepspeed")
    if zero == 0 and pp > 1 and prec == "bf16":
        caveats.append("bf16 with pp > 1 and zero=0: DeepSpeed picks its BF16_Optimizer, which shards the fp32 master "
                       "weights and Adam states over the data-parallel ranks and all-gathers the bf16 parameters "
                       "after each step (deepspeed/runtime/engine.py _do_optimizer_sanity_check): it runs as ZeRO-1")
    if b["cp_mode"] == "fold":
        caveats.append(f"cp={s['cp']}: DeepSpeed has no ring-attention context parallelism; the cp ranks run as "
                       f"data-parallel ranks (DeepSpeed dp = {b['dp']}, {b['gas']} micro-batches each), so every rank "
                       "holds whole sequences: more activation memory than planned")
    elif b["cp_mode"] == "idle":
        caveats.append(f"cp={s['cp']}: DeepSpeed has no ring-attention context parallelism and the plan's {i['m']} "
                       f"micro-batches do not divide by cp, so the job runs on tp x pp x dp = {b['world']} ranks, "
                       "each holding whole sequences; the cp ranks stay unused")
    if s.get("vpp", 1) > 1:
        caveats.append(f"vpp={s['vpp']}: the PipelineEngine has no interleaved schedule (1F1B TrainSchedule); the "
                       f"pipeline bubble is {s['vpp']}x the plan's")
    return cfg, caveats


def megatron_deepspeed_args(doc: dict) -> tuple[list[tuple[str, object]], list[str], list[str]]:
    """(flag, value) pairs for Megatron-DeepSpeed's pretrain_gpt.py (value None: a switch; names from
    megatron/arguments.py at MEGATRON_DEEPSPEED_COMMIT and deepspeed.add_config_arguments), caveats, notes."""
    i = plan_info(doc)
    s, model, job = i["s"], i["model"], i["job"]
    b = batch(doc)
    tp, pp, zero = s["tp"], s["pp"], s["zero"]
    caveats: list[str] = []
    notes: list[str] = []
    heads, hidden = model["heads"], model["hidden"]
    kv = model.get("kv_heads") or heads
    head_dim = model.get("head_dim") or hidden // heads
    seq = job["seq_len"]
    a: list[tuple[str, object]] = [("--tensor-model-parallel-size", tp), ("--pipeline-model-parallel-size", pp)]
    if pp == 1:
        a.append(("--no-pipeline-parallel", None))   # GPTModel + mpu, not GPTModelPipe (megatron/training.py)
    if s.get("sequence_parallel") and tp > 1:
        a.append(("--sequence-parallel", None))
    a += [("--num-layers", i["layers"]), ("--hidden-size", hidden), ("--ffn-hidden-size", model["ffn_hidden"]),
          ("--num-attention-heads", heads)]
    if kv != heads:
        a.append(("--num-key-value-heads", kv))
    if head_dim * heads != hidden:
        a.append(("--kv-channels", head_dim))
    a += [("--seq-length", seq), ("--max-position-embeddings", max(seq, model.get("seq_len") or seq))]
    if recorded(model):   # position, rotary base, norm and epsilon, biases as recorded (runtimes/_build.py)
        build, build_caveats, build_note = mds_model_args(model)
        a += build
        caveats += build_caveats
        notes.append(build_note)
    elif model.get("activation", "swiglu") == "swiglu":
        a += [("--swiglu", None), ("--normalization", "rmsnorm"), ("--use-rotary-position-embeddings", None),
              ("--no-position-embedding", None), ("--disable-bias-linear", None)]
        notes.append("model style: swiglu -> Llama conventions (RMSNorm, RoPE, no linear biases); the plan's model "
                     "does not record them")
    else:
        a.append(("--normalization", "layernorm"))
        notes.append("model style: gelu -> GPT-3 conventions (LayerNorm, learned absolute positions, linear biases)")
    if not model.get("tie_embeddings", False):
        a.append(("--untie-embeddings-and-output-weights", None))
    drop = model.get("dropout", 0.0) or 0.0
    a += [("--attention-dropout", drop), ("--hidden-dropout", drop)]
    if s.get("attention", "flash") == "flash":
        a.append(("--use-flash-attn-v2", None))
    moe = model.get("moe")
    if moe:
        a += [("--num-experts", moe["experts"]), ("--moe-expert-parallel-size", s.get("ep", 1)),
              ("--topk", moe["top_k"]), ("--expert-interval", moe.get("layer_freq", 1)),
              ("--create-moe-param-group", None)]
        if moe.get("first_dense_layers", 0) or moe.get("shared_experts", 0):
            caveats.append("MoE first dense layers / shared experts: Megatron-DeepSpeed places experts on every "
                           "--expert-interval-th layer and has no shared experts (mlp-type residual is one dense "
                           "residual MLP); exported without them")
        if moe["expert_ffn_hidden"] != model["ffn_hidden"]:
            caveats.append(f"expert width {moe['expert_ffn_hidden']} != ffn {model['ffn_hidden']}: Megatron-DeepSpeed "
                           "experts use --ffn-hidden-size; exported with the dense width")
        if tp > 1:
            caveats.append("MoE with tp > 1: Megatron-DeepSpeed replicates each expert over the tensor-parallel ranks "
                           "(no --enable-expert-tensor-parallelism) and DeepSpeed builds expert groups from "
                           "consecutive ranks (deepspeed/utils/groups.py _create_expert_and_data_parallel)")
    elif s.get("ep", 1) > 1:
        caveats.append(f"ep={s['ep']} on a dense model: nothing to split; not exported")
    rec = s.get("recompute", "none")
    if rec == "full":
        # the DeepSpeed path still uses the old flags (megatron/arguments.py "HACK"); GPTModelPipe turns
        # --checkpoint-num-layers into PipelineModule's activation_checkpoint_interval
        a += [("--checkpoint-activations", None), ("--checkpoint-num-layers", 1),
              ("--deepspeed-activation-checkpointing", None)]
    elif rec == "selective":
        a.append(("--recompute-granularity", "selective"))
    prec = job.get("precision", "bf16")
    if prec == "bf16":
        a.append(("--bf16", None))
    elif prec == "fp16":
        a.append(("--fp16", None))
    a += [("--micro-batch-size", b["micro"]), ("--global-batch-size", b["train_batch"]),
          ("--zero-stage", zero), ("--deepspeed", None), ("--deepspeed_config", "ds_config.json")]
    notes.append(f"global batch {b['train_batch']} = DeepSpeed dp {b['dp']} (world {b['world']} / (tp {tp} x pp {pp}))"
                 f" x {b['gas']} micro-batches x micro-batch {b['micro']}")
    a += list(TRAINING_ARGS)   # Megatron's names, which Megatron-DeepSpeed's parser shares (megatron/arguments.py)
    notes.append(f"data, tokenizer and run length: launch.sh appends them from {DATA_VAR} (--data-path), "
                 f"{TOKENIZER_VAR} (--tokenizer-type HFTokenizer --tokenizer-model) and {ITERS_VAR} (--train-iters); "
                 "the learning-rate schedule, eval and logging flags are defaults to adjust; checkpointing and any "
                 "other argument: EXTRA_ARGS")
    return a, caveats, notes


def _nodes(i: dict, world: int) -> tuple[int, int]:
    groups = i["cluster"].get("groups", [])
    dpn = groups[0]["devices_per_node"] if groups else world
    per = min(dpn, world)
    return -(-world // per), per


# What launch.sh reads from the data variables (runtimes/_common.py data_lines; Megatron-DeepSpeed has no mock
# data), and the versions it accepts: the DeepSpeed release line the export was checked with, on the torch
# Megatron-DeepSpeed's Megatron base needs (its arguments.py asserts torch >= 1.x; DeepSpeed 0.19 wheels need >= 2.x).
DATA_HELP = {"data": "Megatron indexed data: a PREFIX of PREFIX.bin/.idx, or 'WEIGHT PREFIX ...' (--data-path)",
             "tokenizer": "a Hugging Face tokenizer folder or hub name (--tokenizer-type HFTokenizer --tokenizer-model)",
             "mock": None}
VERSIONS = (VersionCheck("deepspeed", "0.19.0", "0.20", dists=("deepspeed",)),
            VersionCheck("torch", "2.6.0", dists=("torch",)))


def _launch_sh(i: dict, world: int, env: dict[str, str]) -> str:
    nodes, gpus = _nodes(i, world)
    lines = ["#!/usr/bin/env bash", f"# {i['title']}",
             f"# DeepSpeed launcher (deepspeed=={VERSION}) running Megatron-DeepSpeed pretrain_gpt.py "
             f"({MEGATRON_DEEPSPEED}@{MEGATRON_DEEPSPEED_COMMIT[:8]}) on {nodes} x {gpus} = {world} ranks.",
             ("# Run once, on this node: a single-node launch uses no hostfile and no ssh." if nodes == 1 else
              "# Run once, on the first node of ./hostfile: the launcher reaches the others over ssh (passwordless) and "
              "runs `cd $PWD` there, so this folder and MEGATRON_DS must be at the same paths on every node (a shared "
              "filesystem). Under SLURM, slurm.sbatch starts launch.sh on every node instead (BAIGE_DS_NO_SSH=1)."),
             "# MEGATRON_DS: the Megatron-DeepSpeed checkout (default: the current folder); EXTRA_ARGS: more",
             "# arguments (checkpointing, ...), appended after megatron_deepspeed_args.txt and the data arguments.",
             "set -euo pipefail",
             'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
             'MEGATRON_DS="$(cd "${MEGATRON_DS:-$PWD}" && pwd)"']
    lines += data_lines(**DATA_HELP)
    lines += version_check_lines(f"deepspeed=={VERSION} with Megatron-DeepSpeed@{MEGATRON_DEEPSPEED_COMMIT[:8]} on "
                                 "torch", VERSIONS)
    if env:
        lines.append("# Megatron-DeepSpeed validate_args requires this with --sequence-parallel; ./.deepspeed_env "
                     "carries it to the other nodes")
        lines += [f"export {k}={v}" for k, v in env.items()]
    lines += ["# ds_config.json, hostfile and .deepspeed_env are read from here",
              'cd "$HERE"',
              "# one argument per line, shell-quoted; lines starting with # are comments",
              'eval "ARGS=($(grep -v \'^[[:space:]]*#\' megatron_deepspeed_args.txt))"',
              'eval "EXTRA=(${EXTRA_ARGS:-})"',
              f'read -r -a DATA_PATHS <<< "${DATA_VAR}"   # a prefix, or "WEIGHT PREFIX WEIGHT PREFIX ..."',
              f'DATA_ARGS=(--data-path "${{DATA_PATHS[@]}}" --tokenizer-type HFTokenizer --tokenizer-model "${TOKENIZER_VAR}"'
              f' --train-iters "${ITERS_VAR}")',
              # one node: no hostfile (deepspeed/launcher/runner.py fetch_hostfile: not a file -> local resources,
              # no ssh check); several: the hostfile, over ssh, or --no_ssh per node under SLURM (slurm.sbatch)
              f'HOSTS=({"--hostfile /dev/null" if nodes == 1 else "--hostfile hostfile"})',
              'if [ "${BAIGE_DS_NO_SSH:-0}" = 1 ]; then',
              '  HOSTS+=(--no_ssh --node_rank "${NODE_RANK:?set NODE_RANK}" --master_addr "${MASTER_ADDR:?set MASTER_ADDR}"'
              ' --master_port "${MASTER_PORT:-29500}")',
              "fi",
              f'exec deepspeed "${{HOSTS[@]}}" --num_nodes {nodes} --num_gpus {gpus} \\',
              '  "$MEGATRON_DS/pretrain_gpt.py" "${ARGS[@]}" "${DATA_ARGS[@]}" "${EXTRA[@]}" "$@"']
    return "\n".join(lines) + "\n"


def export(doc: dict) -> Export:
    i = plan_info(doc)
    if i["opts"].mock_data:
        raise SpecError("--mock-data", f"Megatron-DeepSpeed ({MEGATRON_DEEPSPEED_COMMIT[:8]}) has no mock data "
                        "(megatron/arguments.py has no --mock-data): launch.sh needs BAIGE_DATA_PATH and BAIGE_TOKENIZER")
    cfg, caveats = ds_config(doc)
    args, arg_caveats, notes = megatron_deepspeed_args(doc)
    caveats = common_caveats(i) + caveats + arg_caveats
    b = batch(doc)
    meta = {"plan": i["title"], "deepspeed": VERSION,
            "megatron_deepspeed": f"{MEGATRON_DEEPSPEED}@{MEGATRON_DEEPSPEED_COMMIT}"}
    if caveats:
        meta["cannot_express"] = caveats
    # DeepSpeedConfig ignores keys it does not know: the provenance travels inside the JSON, which has no comments
    cfg = {"baige_plan": meta, **cfg}
    lines = [f"# {i['title']}",
             f"# {RUNTIME.title}: deepspeed=={VERSION}; Megatron-DeepSpeed pretrain_gpt.py arguments "
             f"({MEGATRON_DEEPSPEED}@{MEGATRON_DEEPSPEED_COMMIT}, megatron/arguments.py); one per line, shell-quoted"]
    lines += [f"# {n}" for n in notes]
    lines += [f"# cannot express: {c}" for c in caveats]
    lines += arg_lines(args)
    sp = bool(i["s"].get("sequence_parallel")) and i["s"]["tp"] > 1
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if sp else {}
    files = [ExportFile("ds_config.json", json.dumps(cfg, indent=2) + "\n"),
             ExportFile("megatron_deepspeed_args.txt", "\n".join(lines) + "\n"),
             ExportFile("launch.sh", _launch_sh(i, b["world"], env)),
             hostfile_file(i, f"DeepSpeed launcher hostfile (deepspeed=={VERSION}): HOSTNAME slots=DEVICES, "
                                  "placeholder names: replace with yours; the first --num_nodes lines are used"
                                  + ("; a single-node launch does not read it" if b["world"] <= _nodes(i, b["world"])[1]
                                     else "")),
             slurm_file(i, nnodes=_nodes(i, b["world"])[0], gpus=_nodes(i, b["world"])[1], runtime="deepspeed",
                        data_kw=DATA_HELP, pre=[': "${MEGATRON_DS:?set MEGATRON_DS to the Megatron-DeepSpeed checkout, '
                                                'at the same path on every node}"',
                                                "export MEGATRON_DS BAIGE_DS_NO_SSH=1   # launch.sh on every node, "
                                                "deepspeed --no_ssh --node_rank"])]
    if env:
        # deepspeed/launcher/runner.py reads KEY=VALUE lines from ./.deepspeed_env and exports them on every node
        files.append(ExportFile(".deepspeed_env", "".join(f"{k}={v}\n" for k, v in env.items())))
    return Export(tuple(files), tuple(caveats))
