"""Megatron-LM / Megatron-core (what NeMo and Megatron-Bridge run): the default runtime.

Why the default: every published run the cost model is calibrated on (Megatron-LM 2021/2022 tables,
NeMo and Megatron-Bridge performance recipes) ran it, and it is the one open runtime that runs
every dimension the planner searches (TP+SP, PP with interleaving and uneven first/last stages, CP,
EP/ETP, distributed optimizer).

Pinned: megatron-core 0.19.2 (PyPI). It is the first line of wheels that ships the argument parser
(megatron/training/arguments.py: parse_args, validate_args; megatron-core <= 0.16.1 ships only
megatron/core), and it needs Python >= 3.12. pretrain_gpt.py itself is not in the wheel: it is the
Megatron-LM repository's entry point on the release branch core_r0.19.0, whose
megatron/training/arguments.py and core/transformer/transformer_config.py are identical to the
wheel's; its __main__ runs parse_and_validate_args, gpt_config_from_args and
pretrain_cfg_container_from_args, which tests/integration/check_megatron.py runs on the export.

Space, verified against megatron-core 0.19.2 (paths inside the wheel):
- ZeRO 0 (DDP, fp32 main-grad buffer: core/distributed/distributed_data_parallel.py) and 1
  (--use-distributed-optimizer: core/optimizer/distrib_optimizer.py shards optimizer state and
  reduce-scatters the full-size grad buffer, so gradients are not sharded). Both run with pp > 1.
- ZeRO 3 = Megatron-FSDP (--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params, the
  parser's default strategy: training/arguments.py:3023), pp == 1. Read in the 0.19.2 wheel:
  * validate_args (training/arguments.py:1100-1165): forces --use-distributed-optimizer, Adam/SGD only,
    asserts CUDA_DEVICE_MAX_CONNECTIONS != "1" (:1143; launch.sh unsets it) and --ckpt-format
    fsdp_dtensor (:1146); TP and CP only warn (:1413-1425, they prefer CUDA_DEVICE_MAX_CONNECTIONS=1);
    EP is supported (expert data-parallel group); no rule on pp, but Megatron's Megatron-FSDP examples
    and docs run pp = 1 (examples/megatron_fsdp at core_v0.19.0) and the per-micro-batch costing below is
    read for that loop only: not planned with pp > 1.
  * units: every TransformerLayer / MoETransformerLayer (core/distributed/fsdp/mcore_fsdp_adapter.py:162);
    the embedding and output layer are not units (kept unsharded in 16 bits; the memory model counts them
    as one gathered unit, as for FSDP2).
  * parameters: all-gathered per unit before its forward, prefetching the next unit, resharded after it,
    and gathered again before its backward (megatron_fsdp.py _pre_forward_param_unshard :780,
    _pre_backward_param_unshard :897): per micro-batch, forward and backward (zero3_gather "micro_batch";
    at most two units' parameters and gradients unsharded at a time: docs/user-guide/features/
    megatron_fsdp.md "FSDP Unit Modules").
  * gradients: reduce-scattered after every micro-batch's backward, per unit, overlapped with it
    (megatron_fsdp.py:755 and :862 grad_reduce_every_bprop for optim_grads[_params]; :330-333 force
    overlap_param_gather and overlap_grad_reduce on), not once per step: no_sync (:1150) only defers the
    no_shard/optim strategies.
  * bytes: parameters in the model dtype (16-bit) sharded over dp x cp, fp32 main parameters
    (--megatron-fsdp-main-params-dtype fp32), main gradients in the parameter dtype
    (--megatron-fsdp-main-grads-dtype auto -> None -> param dtype: param_and_grad_buffer.py:2306
    _resolve_group_grad_dtype; --grad-reduce-in-bf16 does not reach it, training/training.py:2000) and
    reduce-scattered in that dtype (grad_comm_dtype None -> main grads dtype): MEMORY grad_bytes_zero3 and
    zero3_reduce_bytes 2, DP traffic in 16 bits (cost/estimate.py dp_traffic, ZeRO-3 branch).
- Not planned: ZeRO-2 (Megatron-FSDP optim_grads: 16-bit parameters kept whole, gradients
  reduce-scattered in the parameter dtype every micro-batch). The DP traffic model reads one gradient
  dtype per runtime below ZeRO-3 (RuntimeSpec.grad_bytes: Megatron's fp32 main grads), so it would cost
  that reduction at twice its bytes; exported as ZeRO-1 with a caveat. torch FSDP2 (--use-torch-fsdp2,
  fully_shard per TransformerLayer, resharded after forward, reduce-scatter every micro-batch:
  core/distributed/torch_fully_sharded_data_parallel.py) is the same ZeRO-3 execution but refuses pp,
  ep, the distributed optimizer, gradient-accumulation fusion, tied embeddings and fp16 (arguments.py
  :997-1015); runs that used it are costed as zero 3, the export writes Megatron-FSDP.
- interleaved 1F1B (--num-virtual-stages-per-pipeline-rank): validate_args needs pp > 1 with p2p
  overlap (on by default), pp > 2 with --no-overlap-p2p-communication; core/pipeline_parallel/schedules.py
  forward_backward_pipelining_with_interleaving needs the micro-batch group (default
  --microbatch-group-size-per-virtual-pipeline-stage = pp, core/model_parallel_config.py) within
  [pp, M] and M % group == 0 or >= pp: with the default, micro-batches % pp == 0 (the space's rule).
- uneven first/last stages (--decoder-first/last-pipeline-num-layers; core/transformer/
  transformer_config.py __post_init__ "Uneven PP", transformer_block.py get_num_layers_to_build): the
  middle stages share the rest evenly; they combine with interleaving when the first, last and
  per-middle-rank counts are each divisible by vpp (every chunk of a stage holds count/vpp layers;
  validate_args then requires --num-virtual-stages-per-pipeline-rank, not
  --num-layers-per-virtual-pipeline-stage). `uneven_interleaved`.
- embedding / loss counted as pipeline layers (--account-for-embedding-in-pipeline-split,
  --account-for-loss-in-pipeline-split, TransformerConfig fields exposed by the parser's
  ArgumentGroupFactory): pp must divide layers + e + l and vpp the per-rank share; the first chunk of
  the first stage (last chunk of the last stage) builds one transformer layer fewer. Refused together
  with first/last counts (__post_init__ ValueError). What Megatron-Bridge's Llama 3.1 405B
  (126 layers, pp 8, vpp 8 on H100) and Qwen3-235B-A22B (94 layers, pp 8, vpp 4) recipes set.
  `split_accounting`. The planner searches both where layers % (pp·vpp) != 0 (search/space.py
  uneven_splits); specs/strategy.py chunk_layers is Megatron's rule. Any other split is expressible
  with --pipeline-model-parallel-layout (core/transformer/pipeline_parallel_layer_layout.py), which
  the export uses for free-form splits.
- CP (ring attention through Transformer Engine, --cp-comm-type p2p default): validate_args needs
  seq_length % (2·cp) == 0.
- EP/ETP (MoE): validate_args needs experts % ep == 0; --expert-tensor-parallel-size defaults to tp
  (validate_args), so the export always passes it for MoE models; the expert grid tp·cp·dp =
  etp·ep·edp (core/parallel_state.py initialize_model_parallel).
- SP optional with TP (validate_args turns it off when tp == 1), except for MoE models: MoELayer.
  forward (core/transformer/moe/moe_layer.py) raises in training when tp > 1 without SP. Added as
  `extra_refusal` (the space let MoE plans with tp > 1 and SP off through).
- CUDA_DEVICE_MAX_CONNECTIONS=1 is asserted by validate_args when tp > 1 or cp > 1 before Blackwell
  (training/utils/common_utils.py get_device_arch_version() < 10); launch.sh exports it, except for
  Megatron-FSDP (ZeRO-3), which asserts the opposite and only warns with TP/CP: launch.sh unsets it.
- recompute none / selective (--recompute-granularity selective: recompute_modules ["core_attn"],
  the attention core, as the cost model assumes) / full (--recompute-granularity full
  --recompute-method uniform --recompute-num-layers 1: every layer; transformer_config.py requires
  a method and a layer count for full).
- precisions: bf16 (--bf16), fp16 (--fp16, dynamic loss scaling), fp32 (no flag), fp8 (--bf16 plus
  --fp8-format hybrid through Transformer Engine; transformer_config.py fp8 / fp8_recipe), fp4 (--bf16 plus
  --fp4-format e2m1 --fp4-recipe nvfp4: TE's NVFP4BlockScaling, TE >= 2.7 on Blackwell; transformer_config.py fp4 /
  fp4_recipe, core_v0.19.0; arguments.py refuses --fp4-format together with --fp8-format).
Execution semantics:
- gradients: accumulated in an fp32 main-grad buffer over all micro-batches, reduced once per step
  in buckets overlapped with the last micro-batch's backward (--overlap-grad-reduce, which the export
  sets); the distributed optimizer's 16-bit parameter all-gather overlaps the next forward
  (--overlap-param-gather, which validate_args allows only with the distributed optimizer and
  --overlap-grad-reduce). With pp > 1 each stage starts its reduction in its own last backward.
- fused kernels (TE / apex), TP communication exposed unless --tp-comm-overlap (not planned: needs
  TE userbuffers bootstrapped at launch; validate_args requires SP for it).
"""

from __future__ import annotations

from baige_plan.specs.runtime import (
    GradSync,
    MemorySemantics,
    RuntimeSpec,
)

VERSION = "0.19.2"


def _grad_sync(zero: int, pp: int) -> GradSync:
    return GradSync(grads="step", overlap="backward", params="next_forward" if zero >= 1 else "none")


def _refusal(s, model, job) -> str | None:
    if model is not None and getattr(model, "moe", None) is not None and s.tp > 1 and not s.sequence_parallel:
        return (f"megatron MoE layers refuse to train with tensor parallelism (tp={s.tp}) without sequence "
                "parallelism (megatron/core/transformer/moe/moe_layer.py MoELayer.forward)")
    return None


# What Megatron-core allocates (cost/memory.py state_bytes; docs/COST_MODEL.md "Memory model"), read at
# NVIDIA/Megatron-LM main (d98e8a64, 2026), Megatron-FSDP in the megatron-core 0.19.2 wheel:
MEMORY = MemorySemantics(
    master="separate",     # 16-bit params + fp32 main params in the optimizer (optimizer/optimizer.py
                           # Float16OptimizerWithFloat16Params; distrib_optimizer.py shards them)
    grad_bytes_bf16=4,     # grad buffer dtype = fp32 if grad_reduce_in_fp32 else param dtype (distributed/
                           # param_and_grad_buffer.py group_params_for_buffers); training/arguments.py
                           # validate_args turns accumulate_allreduce_grads_in_fp32 on for --bf16 (fp8 runs --bf16)
    grad_bytes_fp16=2,     # ... and leaves it off for --fp16: fp16 grad buffer
    step_grad_bytes=4,     # 16-bit buffer: the step's fp32 main grads (_copy_model_grads_to_main_grads .float())
    grad_bytes_zero3=2,    # Megatron-FSDP main grads in the parameter dtype (param_and_grad_buffer.py
                           # _resolve_group_grad_dtype with megatron_fsdp_main_grads_dtype None), sharded
    zero3_reduce_bytes=2,  # ... reduce-scattered in that dtype (MixedPrecisionPolicy grad_comm_dtype None)
    selective="core_attention",   # --recompute-granularity selective: recompute_modules ["core_attn"]
    fp8_gemm_inputs=True,  # fp8 through TE: transformer_engine/pytorch/module/linear.py saves the quantized input
    fp8_weight_cache_bytes=2,   # TE caches the fp8 weight + its transpose while is_first_microbatch is passed
                                # (core/extensions/transformer_engine.py TELinear; module/base.py weight workspace)
    fp8_param_bytes=2,     # --fp8-param-gather (TE fp8_model_init): layer weights are Float8Tensors, no bf16 copy:
                           # fp8 data 1 B + the transpose TE caches beside it 1 B (Hopper fp8 GEMMs are TN-only;
                           # TE v1.9 module/linear.py weight_tensor.transpose_2d(fill_cache=True), v2.8
                           # module/base.py get_weight_workspace: a QuantizedTensor keeps row- and column-wise
                           # usage); NeMo 2 bf16_with_fp8_mixed (fp8_params/fp8_param_gather True since v2.0.0) and
                           # Megatron-Bridge's delayed/current/MXFP8 fp8 presets set it (training/mixed_precision.py)
    interleave_group="pp",  # pipeline_parallel/schedules.py get_pp_rank_microbatches with the default
                            # microbatch_group_size_per_vp_stage = pp (core/model_parallel_config.py)
    sources=("docs/user-guide/features/dist_optimizer.md: bytes/param 18 | 6 + 12/d (bf16 params, fp32 grads), "
             "20 | 4 + 16/d (fp16 params and grads), d = the distributed optimizer's dp x cp group "
             "(optimizer/__init__.py intra_dp_cp_group)",
             "NeMo / Megatron-Bridge performance recipes set grad_reduce_in_fp32 False (bf16 buffer, 4 + 16/d): "
             "not this runtime's default"),
)

RUNTIME = RuntimeSpec(
    name="megatron",
    title="Megatron-LM / Megatron-core (NeMo, Megatron-Bridge)",
    package="megatron-core",
    version=VERSION,
    zero_stages=(0, 1, 3),             # 3: Megatron-FSDP optim_grads_params (module docstring)
    zero_stages_with_pp=(0, 1),
    interleaved=True,
    context_parallel=True,
    expert_parallel=True,
    expert_tensor_parallel=True,
    uneven_split=True,
    uneven_interleaved=True,
    split_accounting=True,
    # --grad-reduce-in-bf16 (megatron/training/arguments.py validate_args: with --bf16 it sets
    # accumulate_allreduce_grads_in_fp32 = False, so main grads and their reduction are bf16); Megatron-Bridge
    # perf recipes set the equivalent grad_reduce_in_fp32=False (e.g. llama31_405b_pretrain_1024gpu_h100_bf16)
    bf16_grad_reduce=True,
    tp_pp_dp_mapping=True,      # --use-tp-pp-dp-mapping (training/config/common_config.py, core 0.19)
    # --distribute-saved-activations (training/arguments.py; core tensor_parallel/random.py CheckpointFunction)
    distribute_saved_activations="into_tensor",   # gather_split_1d_tensor: all_gather_into_tensor, torch.empty
    # Megatron-FSDP HSDP: --num-distributed-optimizer-instances R > 1 (mcore_fsdp_adapter.py _init_dist_index:
    # enable_hsdp, intra_dp_cp shard group + inter_dist_opt replica group; training/arguments.py)
    hsdp_zero=(3,),
    sequence_parallel="optional",
    recompute=("none", "selective", "full"),
    precisions=("bf16", "fp16", "fp8", "fp32", "tf32", "fp4"),
    # fp8 runs keep fp8 primary weights (--fp8-param-gather), as NeMo 2 (bf16_with_fp8_mixed fp8_params, v2.0.0+)
    # and Megatron-Bridge's fp8 presets (training/mixed_precision.py v0.2.0) set it: the memory the recipes run at
    fp8_param_gather=True,
    # Transformer Engine's userbuffer TP overlap, as the NeMo / Megatron-Bridge performance recipes run tensor
    # parallelism with sequence parallelism (tp_comm_overlap in their perf configs); exported --tp-comm-overlap
    tp_comm_overlap=True,
    # fp32 jobs: Megatron-LM's README recommends NGC's PyTorch container, which sets
    # TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 (fp32 matmuls on TF32 tensor cores on Ampere and later; NVIDIA_TF32_OVERRIDE=0
    # turns it off); Sailor's A100 fp32 OPT-350M profile (8.7 ms per layer fwd+bwd, 23.7 TFLOP/s) exceeds the IEEE
    # fp32 peak 19.5 in such a container (eth-easl/sailor Dockerfile: FROM nvcr.io/nvidia/pytorch:24.10-py3)
    fp32_matmul="tf32",
    heterogeneous=False,
    # --multi-latent-attention (TE spec: down projections TELinear 'duplicated', as cost/flops.py costs them),
    # --mtp-num-layers and --window-size / --window-attn-skip-freq (TE's sliding window; megatron/training/
    # arguments.py, core 0.19)
    model_features=("mla", "mtp", "swa"),
    schedules=("1F1B", "interleaved-1F1B"),
    execution="fused",
    zero3_impl="fsdp",
    zero3_gather=lambda pp: "micro_batch",
    grad_sync=_grad_sync,
    memory=MEMORY,
    notes=("megatron/core/distributed/distributed_data_parallel.py: grad buffer, overlap_grad_reduce",
           "megatron/core/optimizer/distrib_optimizer.py: reduce-scatter grads, all-gather params",
           "megatron/training/arguments.py validate_args: the parser's rules (megatron-core 0.19.2)",
           "megatron/core/transformer/transformer_config.py: uneven PP and recompute rules",
           "megatron/core/transformer/moe/moe_layer.py MoELayer.forward: MoE with tp > 1 needs SP",
           "megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py: ZeRO-3 gathers per unit per "
           "micro-batch (forward, backward), reduce-scatters every micro-batch"),
    extra_refusal=_refusal,
    extra_refusal_reads=("tp", "sequence_parallel"),
)
