"""torchtitan 0.3.0 (on torch 2.14): FSDP2 / HSDP + TP (+SP) + torch.distributed.pipelining schedules
+ CP + EP, eager PyTorch unless compiled. Verified against the installed wheels (torchtitan==0.3.0,
torch==2.14.1); paths below are inside those packages.

Stacks: 0.3.0 needs torch 2.14 (it does not import on torch 2.11/2.12: DataParallelMeshDims); for those stacks
`export --runtime-version 0.2` writes torchtitan 0.2.2's JobConfig flags (`_export_v02`, read at the v0.2.2
tag) and refuses what 0.2.x runs otherwise than costed (`refusal_v02`: DDP with any other dimension, fp32
training without FSDP). torchtitan main after 0.3.0 renamed the batch flags (training.num_tokens_*,
max_context_length, parallelism.num_pp_microbatches): launch.sh's version check refuses it by reading the
installed config sources. launch.sh reads data, tokenizer and run length from BAIGE_DATA_PATH, BAIGE_TOKENIZER
and BAIGE_TRAIN_ITERS (no silent c4 / relative tokenizer) and writes outputs beside the export.

Configuration (torchtitan/config/manager.py ConfigManager): 0.3.0 has no TOML job files. A job is
`--module MODULE --config FUNCTION` (FUNCTION in MODULE.config_registry returns a Trainer.Config; the
model and its converters, e.g. float8, are set there, `model_spec` is not a CLI field) followed by
tyro flags `--section.field value` (torchtitan/trainer.py Trainer.Config; torchtitan/config/configs.py)
and, last, the activation-checkpointing subcommand `activation-checkpoint:{none,selective,full}`
(torchtitan/distributed/activation_checkpoint.py ActivationCheckpointingConfig; tyro rejects parent
flags after it). 0.3.0 still names the batch `training.local_batch_size` / `global_batch_size` /
`seq_len` and `parallelism.pipeline_parallel_microbatch_size` (the num_tokens_* / max_context_length /
num_pp_microbatches names are post-0.3.0 HEAD); there is no `expert_tensor_parallel_degree`.

Space:
- data parallel: `data_parallel_replicate_degree` (ZeRO-0) or `data_parallel_shard_degree` (FSDP2 full
  shard, ZeRO-3). 0.3.0 has no DDP wrapper any more: models/llama3/parallelize.py parallelize_llama
  always calls distributed/fsdp.py apply_fsdp_to_decoder (replicate-only = HSDP with shard size 1). No
  ZeRO-1/2. With cp > 1 the parameters are always FSDP-sharded over the CP ranks
  (distributed/full_dtensor.py resolve_fsdp_mesh: shard axes dp_shard + cp; parallel_dims.py
  build_mesh: "when cp is used, FSDP is also applied"), so ZeRO-0 with cp > 1 is not expressible.
- TP with sequence parallelism optional: `parallelism.enable_sequence_parallel` (default on;
  models/llama3/model.py update_from_config -> set_llama3_sharding_config(enable_sp=...)).
- PP: not with tied embeddings (models/common/decoder.py Decoder.Config.update_from_config raises).
  torch.distributed.pipelining 1F1B / Interleaved1F1B (vpp > 1, `pipeline_parallel_layers_per_stage`
  = layers per virtual stage); any layer split, uneven first/last stages included, through
  `module_fqns_per_model_part` (distributed/pipeline_parallel.py pipeline_llm); Schedule1F1B needs
  micro-batches >= pp (torch/distributed/pipelining/schedules.py Schedule1F1B.__init__); pp > 1 needs
  `training.disable_cuda_graphs` (trainer.py Trainer.Config._validate_cuda_graphs).
- CP: K/V all-gathered across the CP ranks (FlexAttention, the llama3/qwen3 default backend; the
  SDPA ring path is refused under the default spmd_types backend: full_dtensor.py validate_config);
  seq_len % (tp if SP) * 2cp == 0 (trainer.py Trainer.__init__).
- EP: experts sharded over `expert_parallel_degree` ranks borrowed from dp_shard x cp x tp
  (configs.py ParallelismConfig.expert_parallel_degree: efsdp = dp_shard*cp*tp/ep); no separate ETP:
  with ep == 1 the experts are TP-sharded over tp (models/common/moe_sharding.py
  expert_param_placement_dense), with ep > 1 they are not TP-sharded. EP's token dispatch syncs with
  the host, so it also needs `training.disable_cuda_graphs`.
- precision: `training.mixed_precision_param` bfloat16 | float32 (no fp16, no loss scaling); fp8 is a
  model converter (components/quantization/float8.py Float8LinearConverter, needs torchao and SM89+).
- recompute: none, FullAC ("full") and SelectiveAC ("selective"): op-level selective AC (SAC), the only
  selective AC 0.3.0 has (distributed/activation_checkpoint.py ActivationCheckpointingConfig: subcommands
  selective | full | memory-budget | none; the per-layer `selective_ac_option = N` of 2024 torchtitan is
  gone). What it saves and recomputes: `op_sac_recomputed` below; its activation bytes: cost/memory.py
  op_sac_layer_bytes (MemorySemantics.selective = "op_sac").
- model: any decoder the planner represents. torchtitan ships llama3 and qwen3 flavors (FLAVORS); a model
  of another shape is built by a generated config module (`--module baige_torchtitan_config`) that
  registers the planned dimensions as a flavor of torchtitan's llama3 family (dense) or qwen3 family
  (MoE: dense prefix, layer frequency and shared experts are per-layer configs there). What those
  families cannot express is exported as a "model difference" (`model_differences`), not refused: the
  plan is a PyTorch FSDP2 plan whatever the block, and the differences are chosen so that the plan's
  parameter count and FLOPs still hold.
Execution semantics:
- pp == 1: trainer.py train_step runs forward_backward_step per micro-batch with no no_sync, so FSDP2
  reduces (reduce-scatter; all-reduce over the replicate axis) every micro-batch, overlapped with that
  backward, and (fsdp.py get_fsdp_reshard_after_forward_policy "default" = not pp_enabled) reshards
  after forward: parameters are gathered for every micro-batch's forward and again for its backward.
- pp > 1: reshard_after_forward defaults off; torch/distributed/pipelining/stage.py
  backward_maybe_with_nosync turns gradient sync and resharding off for every backward, and
  perform_reduce_grad (Schedule1F1B._step_microbatches' end; the REDUCE_GRAD action after a stage's
  last backward in Interleaved1F1B) runs the stage's reduction once per step after its backward and
  makes the compute stream wait for it (_root_post_backward_final_callback): one gather and one
  reduction per step, not overlapped with backward; unsharded parameters and (fp32, reduce_dtype)
  gradients stay resident through the step. Interleaved1F1B keeps at most 3 local stages gathered
  (schedules.py _add_unshard_reshard max_active_stages=3): with vpp > 3 stages are re-gathered within
  the step, so zero=3 with vpp > 3 is refused.
- eager kernels (cost/execution.py): the export sets --compile.no_enable. With pp == 1 and ep == 1
  torchtitan 0.3.0 captures forward+backward in a CUDA graph by default (trainer.py wrap_with_cuda_graph).
"""

from __future__ import annotations

from dataclasses import replace

from baige_plan.specs.runtime import (
    GradSync,
    MemorySemantics,
    RuntimeSpec,
)

VERSION = "0.3.0"
TORCH_VERSION = "2.14.1"
MAX_ACTIVE_STAGES = 3      # torch/distributed/pipelining/schedules.py _add_unshard_reshard(max_active_stages=3)


def _get(model, key, default=None):
    if isinstance(model, dict):
        return model.get(key, default)
    return getattr(model, key, default)


def op_sac_recomputed(gemms: list, activation: str) -> list:
    """The weight GEMMs of one layer's forward that torchtitan's op-level selective AC runs again in the
    backward (`gemms`: cost/flops.py linear_gemms of the layer, in forward order; returned as Gemm
    pieces, a SwiGLU up-projection split into its w1 and w3 halves).

    Derivation (torchtitan 0.3.0 distributed/activation_checkpoint.py SelectiveAC._wrap_block; torch
    2.14 torch/_functorch/partitioners.py get_default_op_list): each transformer block runs under
    torch.utils.checkpoint with a policy that sees every aten op of the block's forward:
      - aten.mm / aten.linear are counted in forward order (meta["forward_mm_count"], restarting with each
        block); one whose count is even is PREFER_RECOMPUTE, an odd one MUST_SAVE (mm is in the save set:
        compute_intensive_ops);
      - an mm whose weight shape matches force_recompute_mm_shapes_by_fqns (default ["moe.router.gate"])
        is recomputed and not counted: the MoE router GEMM;
      - torch._grouped_mm (routed experts, models/common/moe.py GroupedExperts) is not in the save set:
        recomputed, and not counted;
      - saved besides: flex_attention / SDPA outputs (the attention core is not recomputed), aten.max,
        topk, reduce_scatter_tensor and all_to_all_single; everything else is recomputed: norms, the
        activation function, residual adds, RoPE, casts, token permutations, and the TP all-gathers
        (all-reduces without SP) and CP K/V all-gathers (not in the save set).
    A block's forward mm order in 0.3.0 (llama3/qwen3 build fuse_qkv=True): wqkv 1, wo 2, then a dense
    SwiGLU FFN w1 3, w3 4, w2 5 (feed_forward.py: w2(silu(w1(x)) * w3(x))) or an MoE layer's shared
    experts w1 3, w3 4, w2 5 after its routed experts (moe.py MoE.forward). So a dense SwiGLU layer
    recomputes wo and w3 -- h·q + h·f of its h·(q+2kv) + h·q + 3·h·f weight FLOPs per token (Llama 3 8B:
    18432 of 53248, 35 %); a GELU MLP (up 3, down 4) recomputes wo and its down-projection; an MoE layer
    recomputes wo, the router, every routed-expert GEMM and its shared experts' w3. fp8 (torchao
    Float8Linear) linears still dispatch aten.mm under the policy and follow the same count."""
    forced, counted = [], []
    for g in gemms:
        if g.name == "router" or g.name.startswith("expert_"):
            forced.append(g)
        elif g.name in ("mlp_up", "shared_up") and activation == "swiglu":
            half = replace(g, n=g.n / 2)
            counted += [replace(half, name=g.name + "_w1"), replace(half, name=g.name + "_w3")]
        else:
            counted.append(g)
    return forced + counted[1::2]

def _grad_sync(zero: int, pp: int) -> GradSync:
    # pp == 1: reduced every micro-batch inside its backward; pp > 1: once per step, after the stage's
    # last backward (stage.py perform_reduce_grad), the compute stream waiting on it.
    if pp == 1:
        return GradSync(grads="micro_batch", overlap="backward", params="none")
    return GradSync(grads="step", overlap="none", params="none")


def _refusal(s, model, job) -> str | None:
    # zero=0 with dp > 1 and tp / pp > 1 stays in this (0.3.0) space: 0.3.0 has no DDP wrapper, replicated data
    # parallelism is FSDP2 with a shard group of one (models/llama3/parallelize.py: "Always run
    # apply_fsdp_to_decoder -- with shard_degree=1 it is a no-op for the all-gather but still installs the
    # MixedPrecisionPolicy"), so it runs, in bf16. torchtitan 0.2.x refuses it ("DDP has not supported > 1D
    # parallelism") and trains every plan without dp_shard > 1 or cp > 1 in fp32: `export --runtime-version 0.2`
    # refuses those plans (refusal_v02); the planner's space is 0.3.0's.
    if s.cp > 1 and s.zero == 0:
        return (f"torchtitan always FSDP-shards the parameters over the context-parallel ranks (cp={s.cp}), "
                "so ZeRO-0 with cp > 1 does not exist there (plan zero=3)")
    moe = model is not None and _get(model, "moe") is not None
    if s.ep > 1 and s.etp != 1:
        return (f"torchtitan has no expert tensor parallelism beside expert parallelism (ep={s.ep}, etp={s.etp}): "
                "routed experts are EP-sharded only")
    if moe and s.ep == 1 and s.etp != s.tp:
        return (f"torchtitan shards the experts over the tensor-parallel ranks when ep=1: etp must equal "
                f"tp={s.tp}, not {s.etp}")
    if s.ep > 1:
        shard = s.dp * s.cp * s.tp if s.zero >= 3 else s.cp * s.tp
        if shard % s.ep:
            return (f"torchtitan borrows the {s.ep} expert-parallel ranks from data_parallel_shard x cp x tp = "
                    f"{shard} (zero={s.zero}), which ep does not divide")
        if s.zero == 0 and shard != s.ep:
            return (f"with zero=0 torchtitan would still FSDP-shard the experts over cp*tp/ep = {shard // s.ep} "
                    "ranks: ZeRO-0 experts need ep = cp*tp")
    if s.zero >= 3 and s.pp > 1 and s.vpp > MAX_ACTIVE_STAGES:
        return (f"Interleaved1F1B keeps at most {MAX_ACTIVE_STAGES} FSDP stages gathered per rank (torch "
                f"pipelining _add_unshard_reshard): with vpp={s.vpp} and zero=3 stages are re-gathered within "
                "the step, which the once-per-step cost does not cover")
    if job is not None:
        m = job.global_batch // (s.dp * s.micro_batch)
        if s.pp > 1 and s.vpp == 1 and m < s.pp:
            return (f"torch.distributed.pipelining's Schedule1F1B needs micro-batches per step ({m}) >= pp "
                    f"({s.pp})")
        div = (s.tp if s.sequence_parallel else 1) * (2 * s.cp if s.cp > 1 else 1)
        if job.seq_len % div:
            return f"torchtitan needs seq_len ({job.seq_len}) divisible by tp(SP) x 2cp = {div}"
    if model is not None and s.pp > 1 and bool(_get(model, "tie_embeddings", False)):
        return (f"torchtitan refuses tied embeddings with pipeline parallelism (pp={s.pp}): "
                "models/common/decoder.py Decoder.Config.update_from_config raises NotImplementedError")
    # any decoder shape runs: a model torchtitan does not ship is built by the exported config module
    # (model_differences says what its llama3/qwen3 families build otherwise)
    return None


# What torchtitan allocates (cost/memory.py state_bytes; docs/COST_MODEL.md "Memory model"):
MEMORY = MemorySemantics(
    master="params",       # fp32 model parameters, FSDP2-sharded (they are the optimizer's params), AdamW m, v
    fsdp_always=True,      # parallelize_llama always applies FSDP2 (ZeRO-0 = a shard group of one)
    zero3_param_bytes=2,   # MixedPrecisionPolicy(param_dtype=training.mixed_precision_param, default bfloat16)
    zero3_reduce_bytes=4,  # ... reduce_dtype=training.mixed_precision_reduce, default float32
    pipeline_grad_bytes=4,  # pipelining skips gradient sync until the last micro-batch: FSDPParam.
                            # to_accumulated_grad_if_needed upcasts the unsharded grads to reduce_dtype (fp32)
    selective="op_sac",    # activation_checkpoint selective (op): save every other mm + SDPA outputs
    loss="eager_fp32",     # train.py loss_fn: cross_entropy(pred.float()), never compiled; loss_parallel with TP
    interleave_group="pp",  # torch pipelining ScheduleInterleaved1F1B: microbatches_per_round = pp (m % pp == 0)
    sources=("torchtitan config manager: training.mixed_precision_param bfloat16 / mixed_precision_reduce "
             "float32 (config_manager.py at 9dec370; config/configs.py in 0.3.0)",
             "torch/distributed/fsdp/_fully_shard/_fsdp_param.py FSDPParam.to_accumulated_grad_if_needed",
             "torchtitan parallelisms/parallelize_llama.py _apply_ac_to_transformer_block (_save_list, mm_count)",
             "torchtitan metrics.py DeviceMemoryMonitor: the logged 'memory' is max reserved, GiB"),
)

RUNTIME = RuntimeSpec(
    name="torchtitan",
    title="torchtitan (FSDP2/HSDP, TP+SP, pipelining schedules, CP, EP)",
    package="torchtitan",
    version=VERSION,
    fsdp_default=True,                  # parallelize.py: data parallelism is dp_shard (FSDP2), reshard after forward
    zero_stages=(0, 2, 3),              # 2: FSDP2 with fsdp_reshard_after_forward "never" (SHARD_GRAD_OP)
    zero_stages_with_pp=(0, 3),
    fsdp_zero2=True,
    # HSDP: --parallelism.data_parallel_replicate_degree R x data_parallel_shard_degree S/cp (parallel_dims.py:
    # dp_replicate x dp_shard mesh, FSDP2 fully_shard(mesh=(dp_replicate, dp_shard_cp)))
    hsdp_zero=(2, 3),
    interleaved=True,
    context_parallel=True,
    expert_parallel=True,
    expert_tensor_parallel=True,        # only as etp == tp with ep == 1 (see _refusal)
    uneven_split=True,
    sequence_parallel="optional",
    recompute=("none", "selective", "full"),   # selective = op-level SAC (op_sac_recomputed, memory "op_sac")
    precisions=("bf16", "fp8", "fp32"),
    # components/quantization/float8.py Float8LinearConverter converts every nn.Linear not in filter_fqns (default []),
    # but torchtitan's llama3 train configs set filter_fqns = ["output"] (models/llama3/train_configs/llama3_8b.toml,
    # _70b, _405b @ 820504e), the MXFP8 converter skips the output layer by default, and our export keeps lm_head in
    # bf16: the logits GEMM stays 16-bit (the MoE router gate is converted)
    fp8_16bit_gemms=("logits",),
    heterogeneous=False,
    schedules=("1F1B", "Interleaved1F1B"),
    execution="eager",
    zero3_impl="fsdp",
    zero3_gather=lambda pp: "micro_batch" if pp == 1 else "step",
    grad_sync=_grad_sync,
    memory=MEMORY,
    cp_comm="allgather",               # FlexAttention CP: K/V all-gathered (module docstring, "CP")
    # FSDP2 MixedPrecisionPolicy(param_dtype=bf16) computes in bf16 without autocast; on torch >= 2.8 nn.RMSNorm is one
    # fused kernel (aten._fused_rms_norm): cost/execution.py Bf16EagerTraffic (runs of older torch state theirs)
    eager_traffic="bf16",
    # PyTorch SDPA's flash backend (FlashAttention-2) in the torch releases published torchtitan / FSDP runs used
    # (cuDNN was opt-in from 2.5: pytorch#138522, preferred again only with cuDNN > 9.15, torch 2.11); 0.3.0's
    # FlexAttention is FA2-class (PyTorch's FlexAttention post: ~90% of FA2 forward, ~85% backward)
    attention_kernel="fa2",
    # full AC: ptd_checkpoint_wrapper(..., early_stop=ac_config.early_stop), ACConfig.early_stop default False since
    # pytorch/torchtitan@25413d224 (2025-08-29; 0.2.x, 0.3.0: FullAC passes early_stop=False); published runs before
    # that ran torch's default (on), which io/runs.py sets per row (StrategySpec.recompute_early_stop)
    recompute_early_stop=False,
    extra_refusal=_refusal,
    notes=("torch/distributed/pipelining/stage.py backward_maybe_with_nosync, perform_reduce_grad",
           "torchtitan/trainer.py Trainer.train_step: backward per micro-batch without no_sync",
           "torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy: default = not pp_enabled",
           "torchtitan/models/llama3/parallelize.py parallelize_llama: FSDP2 always (no DDP wrapper)",
           "torchtitan/distributed/full_dtensor.py resolve_fsdp_mesh: parameters sharded over dp_shard x cp",
           "torchtitan/config/configs.py ParallelismConfig: efsdp = dp_shard*cp*tp/ep, no ETP degree",
           "torchtitan/distributed/activation_checkpoint.py SelectiveAC: op-level SAC (op_sac_recomputed)"),
)
