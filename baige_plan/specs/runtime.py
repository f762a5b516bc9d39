"""What a training runtime (framework) can run and how it executes it: the data every layer reads.

A `RuntimeSpec` is declared once, in the runtime's own module (`baige_plan/specs/runtimes/NAME.py`), with
its pinned version; its export is baige_plan/exports/NAME.py. The search keeps to `RuntimeSpec.refusal(...) is None`; the cost
model reads `grad_sync(zero, pp)` (when and how data-parallel traffic runs) and the execution
defaults. No I/O here.

Gradient-synchronisation vocabulary (`GradSync`), per ZeRO stage and pipeline use:
  grads        "step":        gradients accumulate locally over the m micro-batches and are reduced
                              once per step (Megatron DDP grad buffer / distributed optimizer, DDP with
                              no_sync, DeepSpeed ZeRO-0/1 at the accumulation boundary)
               "micro_batch": reduced after every micro-batch's backward (DeepSpeed ZeRO-2,
                              FSDP2 reduce-scatter without no_sync, Paddle sharding stage 2)
  overlap      "backward":    bucketed, launched as backward produces gradients: hidden under the
                              (last, for "step") micro-batch's backward except the last bucket
               "none":        issued after the backward pass (or after the pipeline flush) completes:
                              fully exposed
  params       "none":        no parameter all-gather (ZeRO-0)
               "next_forward":the updated 16-bit parameters are all-gathered overlapped with the next
                              step's forward (Megatron --overlap-param-gather)
               "after_step":  all-gathered right after the optimizer step, exposed (DeepSpeed ZeRO-1/2,
                              Paddle sharding)
  ZeRO-3 uses `zero3_gather`: "micro_batch" (gather per micro-batch forward and backward, reduce-scatter
  per micro-batch) or "step" (torch.distributed.pipelining with FSDP2: resharding and gradient sync
  are disabled for all but the last micro-batch, so one gather and one reduce-scatter per step, with the
  stage's full parameters and gradients resident through the step).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from baige_plan.errors import SpecError, require
from baige_plan.specs.frozen import hash_once
from baige_plan.specs.job import BF16_WEIGHT_PRECISIONS

# Device memory figures every PyTorch-based runtime shares (MemorySemantics; cost/memory.py reads them).
# Measured (docs/COST_MODEL.md "Memory model"):
# reserved / allocated - 1 at the peak (torch.cuda.max_memory_reserved / max_memory_allocated), medians over the 101
# runs of benchmarks/real/runs_*.yaml (torch 2.11, H100 and H200): the 88 without full recompute 0.0435 (range
# 0.013-0.345, p90 0.152); the 13 with every block checkpointed 0.149 (range 0.093-0.247): recomputing a layer in
# the backward allocates its activations again between the gradients, in blocks of other sizes
ALLOCATOR_SLACK = 0.0435
ALLOCATOR_SLACK_FULL_RECOMPUTE = 0.149
# the part of that slack a step cannot do without: every pattern of benchmarks/real/alloc_reclaim.py (a whole model,
# pipeline rank 0 of 4 stages in 1F1B and interleaved (3 chunks) order; 15.5-28.2 GiB allocated) completed with its
# reserved memory capped at 1.01 x its uncapped allocated peak (torch.cuda.set_per_process_memory_fraction;
# the allocator freed cached segments and retried, num_alloc_retries up to 11), with and without
# expandable_segments: benchmarks/real/alloc_reclaim_h100.yaml (H100, torch 2.11 cu130). An upper bound.
ALLOCATOR_UNRECLAIMABLE = 0.01
# Not applied: with full recompute the harness's shapes needed more (benchmarks/real/alloc_reclaim_h100_recompute.yaml:
# out of memory capped at 1.04 and 1.08 x the allocated peak, complete at 1.16): a 1.54 GiB fp32-logits request found
# no contiguous block in the segments recompute had split. That loss is of the order of the largest allocation, not a
# fraction of allocated, and published full-recompute runs ran where 14.9 % would not fit (Narayanan 2021 ZeRO-3 529B
# on 640 A100: 82.3 > 80 GiB): docs/COST_MODEL.md "Memory model", left out
# device memory outside the allocator (benchmarks/real/memory_overhead.py -> memory_overhead_h200.yaml; H200,
# torch 2.11 cu130, NCCL 2.28.9, NVLS off): CUDA context with cuBLAS/cuDNN handles and workspaces after a GEMM,
# flash-SDPA and cross-entropy forward/backward; NCCL buffers of the first communicator after all-reduce,
# reduce-scatter and all-gather; each further communicator (or the p2p connections) adds about the same again
CUDA_CONTEXT_GIB = 0.743
NCCL_FIRST_GIB = 0.822
NCCL_GROUP_GIB = 0.475

GRADS = ("step", "micro_batch")
OVERLAP = ("backward", "none")
PARAMS = ("none", "next_forward", "after_step")


@dataclass(frozen=True)
class GradSync:
    grads: str = "step"
    overlap: str = "backward"
    params: str = "next_forward"

    def __post_init__(self) -> None:
        # built for every stage's data-parallel sync the search costs (RuntimeSpec.grad_sync): each message only
        # when its check fails
        if self.grads not in GRADS:
            raise SpecError("grads", f"must be one of {GRADS}, got {self.grads!r}")
        if self.overlap not in OVERLAP:
            raise SpecError("overlap", f"must be one of {OVERLAP}, got {self.overlap!r}")
        if self.params not in PARAMS:
            raise SpecError("params", f"must be one of {PARAMS}, got {self.params!r}")


@dataclass(frozen=True)
class GradAccum:
    """Gradient accumulation a runtime runs outside the weight-gradient GEMM, once per micro-batch
    (cost/estimate.py stage_cost charges it to the stage's backward, as HBM traffic over the parameters the
    stage holds). Megatron-core accumulates inside the GEMM (gradient_accumulation_fusion into main_grad):
    no pass, the default.
      bytes_per_param: HBM bytes one accumulation pass moves per parameter (e.g. 16-bit autograd
                       AccumulateGrad `grad += new`: read 2 + 2, write 2 = 6).
      first:           whether the first micro-batch of a step pays it too (False: autograd steals the
                       first gradient and adds only the later ones in place)."""

    bytes_per_param: float = 0.0
    first: bool = True


NO_GRAD_ACCUM = GradAccum()


@dataclass(frozen=True)
class UnfusedKernels:
    """Memory-bound work a runtime runs as separate PyTorch kernels where the default Megatron stack fuses it
    (Transformer Engine / apex absent: specs/runtimes/megatron_local.py). HBM bytes the cost model adds
    (cost/estimate.py stage_cost, _layer_terms); all zero (the default) = the fused kernels of the base costing.
      rope_fwd_bytes / rope_bwd_bytes: per element of the rotated queries and keys, forward / backward, of
                 rotary embedding applied by eager ops (Megatron --no-rope-fusion), in full (the base costing
                 counts a fused RoPE kernel as free).
      softmax_fwd_bytes / softmax_bwd_bytes: standard (unfused) attention only: per attention-score element, the
                 scale-mask-softmax traffic that replaces the fused kernel's read + write (2 x activation bytes
                 forward, twice that backward: compute.layer_memory_bytes).
      optimizer_extra_bytes: optimizer-step HBM bytes per locally owned parameter beyond the fused Adam kernel's
                 (cost/estimate.py ADAM_BYTES_PER_PARAM)."""

    rope_fwd_bytes: float = 0.0
    rope_bwd_bytes: float = 0.0
    softmax_fwd_bytes: float = 0.0
    softmax_bwd_bytes: float = 0.0
    optimizer_extra_bytes: float = 0.0


FUSED_KERNELS = UnfusedKernels()


MASTERS = ("separate", "params", "params16")
SELECTIVE = ("core_attention", "op_sac")
LOSSES = ("fused", "eager_fp32")


@hash_once
@dataclass(frozen=True)
class MemorySemantics:
    """What a runtime allocates on a device (cost/memory.py reads it; docs/COST_MODEL.md "Memory model").

    Model states, bytes per parameter before ZeRO sharding, in 16-bit mixed precision (fp32/tf32 training
    keeps one fp32 copy that is its own master, 4 + 4 + 8 B, in every runtime):
      master "separate": 16-bit model parameters (2 B) + an fp32 master copy in the optimizer (4 B, with Adam
                 m and v: K = 12 B) -- Megatron, DeepSpeed, Paddle O2;
             "params":   the model's parameters are fp32 and are the master (4 B; Adam m, v 8 B); 16-bit
                 copies are made on the fly: FSDP2 MixedPrecisionPolicy all-gathers bf16 (torchtitan; ZeRO-3 of
                 the harness), or autocast runs over the fp32 parameters (`autocast_fp32_params`, plain
                 DDP/TP/PP below ZeRO-3): each weight's cast is kept for its backward (2 B) and the activations
                 autocast leaves in fp32 (residual stream, LayerNorm) add the measured eager extra
                 (cost/execution.py EAGER.extra_activation_bytes_per_token_layer_hidden).
             "params16": the model's parameters are 16-bit and are their own master (2 B), gradients in their
                 dtype (2 B), and the optimizer's states K: the strategy's optimizer_bytes_per_param, else 4
                 (torch.optim.Adam keeps m and v in the parameter dtype) -- NeMo Automodel, which builds its
                 models in bf16 (specs/runtimes/automodel.py).
      grad_bytes_bf16 / grad_bytes_fp16: the gradient buffer the backward accumulates into, per parameter
                 (bf16/fp8 and fp16 training); sharded from ZeRO-2 on, where `grad_bytes_zero2` (when set)
                 replaces it (DeepSpeed's ZeRO-2/3 partitions model-dtype gradients), and from ZeRO-3 on
                 `grad_bytes_zero3` (when set; Megatron-FSDP optim_grads_params keeps the parameter dtype).
      step_grad_bytes: an fp32 copy of the (owned, ZeRO-sharded) gradients the optimizer step allocates when
                 the buffer is 16-bit; it lives from the step to the next zero_grad, not during the forward and
                 backward, so a stage's peak is max(activations, this) on top of the states.
      optimizer sharding group: ZeRO-1+ states shard over the data-parallel ranks including context
                 parallelism (dp x cp) in every runtime here; experts over their expert-data-parallel ranks.
    ZeRO-3 / FSDP transients (and at ZeRO-0 too when `fsdp_always`: torchtitan wraps even replicated
    data parallelism in FSDP2 with a shard group of one):
      zero3_param_bytes: bytes of a gathered (unsharded) parameter: FSDP2 param_dtype / the 16-bit copy.
      zero3_reduce_bytes: the reduce-scatter input of one unit's gradients (FSDP2 reduce_dtype, fp32), beside
                 the unit's 16-bit unsharded gradients, during its backward.
      zero3_prefetch_params: parameters gathered ahead of the unit in use: None = the next whole unit (FSDP2
                 prefetches one module), a number = at most that many (DeepSpeed stage3_prefetch_bucket_size).
      pipeline_grad_bytes: with pipelining and gradient sync skipped until the last micro-batch, the stage's
                 unsharded gradients accumulate in this dtype (FSDP2 upcasts to reduce_dtype: 4 B).
    Activations:
      selective: what `recompute: selective` stores -- "core_attention" (Megatron --recompute-granularity
                 selective, Korthikanti 2022 Sec. 5) or "op_sac" (torchtitan's op-level selective AC: every
                 other matmul's output and the attention outputs are saved, the rest recomputed).
      interleave_group: micro-batches per virtual-stage group of the interleaved schedule; "pp" (Megatron's
                 default --microbatch-group-size-per-vp-stage, torch pipelining's microbatches_per_round,
                 Paddle's num_stages), which sets the in-flight count (cost/memory.py inflight_microbatches).
      fp8_gemm_inputs / fp8_weight_cache_bytes (fp8 training through Transformer Engine): the linears save
                 their fp8-cast inputs for the weight gradient (1 B instead of 2), and keep the fp8 weight and its
                 transpose cached across the micro-batches of a step (bytes per transformer-layer parameter).
      fp8_param_bytes: with fp8 primary weights (the strategy's `fp8_param_gather`: Megatron --fp8-param-gather,
                 NeMo fp8_params / Megatron-Bridge fp8_param_gather, i.e. Transformer Engine fp8_model_init) the
                 layer's parameters are fp8 tensors and no 16-bit copy exists: the fp8 data (1 B) + the transpose
                 TE keeps beside it (1 B on Hopper, whose fp8 GEMMs are TN-only), replacing the 16-bit weight and
                 `fp8_weight_cache_bytes` (bytes per transformer-layer parameter; 0: the runtime has no such mode).
      loss: how the output layer's loss holds the logits -- "fused" (Megatron's in-place vocab-parallel
                 cross-entropy) or "eager_fp32" (torchtitan: F.cross_entropy(pred.float()) outside compile,
                 DTensor loss_parallel with tp > 1): cost/memory.py loss_bytes_per_logit.
    Outside the tensors (measured, benchmarks/real/; docs/COST_MODEL.md):
      allocator_slack: reserved / allocated - 1 of the runtime's caching allocator at the peak (what
                 torch.cuda.max_memory_reserved and nvidia-smi show beyond the tensors).
      allocator_unreclaimable: the part of that slack, as a fraction of allocated, that the allocator cannot
                 give back when a reservation fails: PyTorch frees every cached segment holding no live block
                 and retries (CUDACachingAllocator.cpp malloc: release_available_cached_blocks, then
                 release_cached_blocks), so only free space inside partly used segments is lost. What `fits`
                 counts; the rest of the slack is reclaimable and only in the reserved peak.
      allocator_slack_full_recompute: allocator_slack with every layer recomputed in the backward (None: as
                 without), measured apart (cost/memory.py).
      context_gib: CUDA context + kernel-library handles and workspaces outside the allocator.
      comm_first_gib, comm_group_gib: collective-library buffers of the first communicator in use, and
                 of each further one (one per parallel dimension > 1).
    """

    master: str = "separate"
    grad_bytes_bf16: int = 4
    grad_bytes_fp16: int = 4
    grad_bytes_zero2: int | None = None
    grad_bytes_zero3: int | None = None
    step_grad_bytes: int = 0
    fsdp_always: bool = False
    autocast_fp32_params: bool = False
    zero3_param_bytes: int = 2
    zero3_reduce_bytes: int = 4
    zero3_prefetch_params: float | None = None
    pipeline_grad_bytes: int = 4
    selective: str = "core_attention"
    interleave_group: str = "pp"
    loss: str = "fused"
    fp8_gemm_inputs: bool = False
    fp8_weight_cache_bytes: int = 0
    fp8_param_bytes: int = 0
    # the measured figures every PyTorch-based runtime here shares (module constants above); PyTorch releases
    # cached segments and retries before an out-of-memory, so only the unreclaimable part counts against capacity
    allocator_slack: float = ALLOCATOR_SLACK
    allocator_unreclaimable: float = ALLOCATOR_UNRECLAIMABLE
    allocator_slack_full_recompute: float | None = ALLOCATOR_SLACK_FULL_RECOMPUTE
    context_gib: float = CUDA_CONTEXT_GIB
    comm_first_gib: float = NCCL_FIRST_GIB
    comm_group_gib: float = NCCL_GROUP_GIB
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        require(self.master in MASTERS, "memory.master", f"must be one of {MASTERS}, got {self.master!r}")
        require(self.selective in SELECTIVE, "memory.selective",
                f"must be one of {SELECTIVE}, got {self.selective!r}")
        require(self.interleave_group == "pp", "memory.interleave_group", "only 'pp' is modelled")
        require(self.loss in LOSSES, "memory.loss", f"must be one of {LOSSES}, got {self.loss!r}")
        for k in ("allocator_slack", "allocator_unreclaimable", "context_gib", "comm_first_gib", "comm_group_gib",
                  "allocator_slack_full_recompute"):
            if getattr(self, k) is None:
                continue
            require(getattr(self, k) >= 0, f"memory.{k}", f"must be >= 0, got {getattr(self, k)!r}")

    def grad_bytes(self, precision: str, zero: int = 0) -> int:
        """Gradient-buffer bytes per parameter in 16-bit mixed precision (bf16, fp8: bf16; fp16)."""
        if zero >= 3 and self.grad_bytes_zero3 is not None:
            return self.grad_bytes_zero3
        if zero >= 2 and self.grad_bytes_zero2 is not None:
            return self.grad_bytes_zero2
        return self.grad_bytes_fp16 if precision == "fp16" else self.grad_bytes_bf16


@dataclass(frozen=True)
class RuntimeSpec:
    """One runtime: its space (what combinations it accepts), its schedules and its execution
    semantics. `refuse` returns the reason a strategy cannot run on it, or None; the search and
    `evaluate --runtime` both use it, so a plan never names a combination its runtime refuses."""

    name: str
    title: str                         # what it is, e.g. "Megatron-LM / Megatron-core (NeMo, Megatron-Bridge)"
    package: str                       # the registry package whose parser the exports target
    version: str                       # pinned version the exports target (printed in every export)
    zero_stages: tuple[int, ...]       # ZeRO stages it runs (0 = plain DDP)
    zero_stages_with_pp: tuple[int, ...]
    interleaved: bool                  # vpp > 1 (interleaved 1F1B)
    context_parallel: bool             # ring-attention CP (cp > 1)
    expert_parallel: bool              # ep > 1
    expert_tensor_parallel: bool       # etp > 1
    uneven_split: bool                 # first/last stage layer counts
    sequence_parallel: str             # "optional" | "always" (SP on whenever tp > 1) | "never"
    recompute: tuple[str, ...]
    precisions: tuple[str, ...]
    heterogeneous: bool                # pipelines whose stages run on different chip groups
    schedules: tuple[str, ...]         # pipeline schedules it runs (names as the runtime spells them)
    execution: str                     # "fused" | "eager": how it runs non-GEMM work (cost/execution.py)
    zero3_impl: str                    # "fsdp" (one collective per layer) | "deepspeed" (per weight, flat)
    zero3_gather: Callable[[int], str]  # pp -> "micro_batch" | "step"
    grad_sync: Callable[[int, int], GradSync]   # (zero, pp) -> GradSync
    tp_comm_overlap: bool = False      # TP collectives overlapped with GEMMs (plans assume off unless set)
    fp32_matmul: str = "fp32"          # engine of an fp32 job's matmuls in the runtime's usual stack, on chips
                                       # that have TF32: "tf32" (NGC PyTorch containers set
                                       # TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1) | "fp32" (IEEE: stock PyTorch >= 1.12,
                                       # torch.backends.cuda.matmul.allow_tf32 = False); cost/estimate.py
                                       # engine_precision; a topology group's fp32_matmul overrides it
    grad_bytes: int = 4                # gradient bytes per parameter the DP reduction moves (fp32 main grads)
    memory: MemorySemantics = field(default_factory=MemorySemantics)   # what it allocates (cost/memory.py)
    uneven_interleaved: bool = False   # first/last stage layer counts together with vpp > 1
    split_accounting: bool = False     # embedding / loss counted as pipeline layers (Megatron account_for_*)
    bf16_grad_reduce: bool = False     # bf16 main grads reduced in bf16 (Megatron --grad-reduce-in-bf16)
    tp_pp_dp_mapping: bool = False     # rank order tp-cp-ep-pp-dp on request (Megatron --use-tp-pp-dp-mapping)
    # full recompute keeps 1/tp of each checkpointed input (StrategySpec.distribute_saved_activations) and rebuilds
    # it in the backward: "" = not offered; "into_tensor" = all_gather_into_tensor into an empty buffer (Megatron
    # --distribute-saved-activations); "zeros_list" = a zero-filled buffer, the rank's part copied in, all_gather
    # into its list of views, which torch.distributed copies out of a flat staging buffer (DeepSpeed
    # partition_activations); cost/estimate.py _layer_terms
    distribute_saved_activations: str = ""
    hsdp_zero: tuple[int, ...] = ()    # ZeRO stages it runs hybrid-sharded (StrategySpec.fsdp_shard; () = none)
    cp_comm: str = "p2p"               # context-parallel attention: "p2p" ring | "allgather" | "torch_ring" (cost/cp.py)
    eager_traffic: str = "autocast_fp32"   # eager execution's non-GEMM traffic (cost/execution.py): the harness's
                                       # autocast over fp32 parameters, or "bf16" (bf16 parameters, fused norms)
    balanced_partition: bool = False   # uneven layer counts split balanced over the stages (StrategySpec field)
    fsdp_zero2: bool = False           # zero 2 = FSDP SHARD_GRAD_OP (reshard_after_forward=False), not DeepSpeed's
    fp8_param_gather: bool = False     # fp8 training keeps fp8 primary weights (StrategySpec field; Megatron
                                       # --fp8-param-gather as the NeMo 2 / Megatron-Bridge fp8 recipes set it)
    attention_kernel: str = "cudnn"    # fused attention it launches on chips that have it (specs/chip.py
                                       # ATTENTION_KERNELS; a strategy's attention_kernel overrides it)
    # (precision, zero, pp) -> the gradient accumulation it runs outside the GEMM (GradAccum; None: fused, none)
    grad_accum: Callable[[str, int, int], GradAccum] | None = None
    zero_grad_allreduce: bool = False  # ZeRO-1/2 reduce each gradient bucket with an all-reduce, not a reduce-scatter
    pipe_partitioned: bool = False     # pipeline p2p sends 1/tp of the stage boundary tensor and the receiver
                                       # all-gathers it over TP (forward: the input; backward: output and grad)
    selective_attention_recompute: tuple[str, ...] = ()   # chip families on which `recompute: selective`
                                       # re-runs the fused attention kernel in the backward (checkpointed core)
    export_precisions: tuple[str, ...] | None = None   # precisions its export writes (None: all of
                                       # `precisions`); the others are costed for backtests of published runs
                                       # only, and `plan` refuses them (a plan must start unchanged)
    recompute_early_stop: bool = False  # full recomputation is torch.utils.checkpoint non-reentrant with early
                                       # stop (torch >= 2.1 default): the recomputed forward ends once the last
                                       # tensor the backward needs is saved, before the layer's last GEMM
                                       # (cost/estimate.py early_stop_skip_s); reentrant / own checkpoint: False
    unfused: UnfusedKernels = FUSED_KERNELS   # work it runs unfused (no Transformer Engine / apex); zero: fused
    loss_kernel: str = ""              # its cross-entropy kernel when a strategy names none (StrategySpec.loss_kernel):
                                       # "" = fused vocab-parallel loss, "megatron_unfused" = Megatron's unfused one
    # GEMMs (flops.Gemm names) its fp8 training leaves in 16-bit (cost/fp8.py keep_16bit): Megatron-core's output
    # layer is tensor_parallel.ColumnParallelLinear, not a Transformer Engine module, so fp8_autocast does not reach
    # it (models/gpt/gpt_model.py, core 0.19: TELMHeadColumnParallelLinear only with fp8_output_proj + mxfp8, off by
    # default); its router's gating linear runs in moe_router_dtype or the input's 16-bit dtype (router.py
    # router_gating_linear)
    fp8_16bit_gemms: tuple[str, ...] = ("logits", "router")
    fsdp_default: bool = False         # its data parallelism shards parameters (ZeRO-3) unless told otherwise
                                       # (torchtitan's dp_shard): ZeRO-3 is no extra dimension of its plans
    notes: tuple[str, ...] = field(default_factory=tuple)   # sources for the semantics above
    extra_refusal: Callable[..., str | None] | None = None   # runtime-specific rules (model, job, strategy)
    # the StrategySpec fields extra_refusal reads (besides the model and job): the search asks it once per distinct
    # value of those instead of once per candidate (millions on large MoE spaces); () = not declared, asked every time.
    # tests/test_search_prune.py checks each declaration against the fields the rule really reads
    extra_refusal_reads: tuple[str, ...] = ()
    # model features beyond MHA/GQA decoders the runtime builds: "mla" (multi-head latent attention), "mtp"
    # (multi-token prediction), "swa" (sliding-window attention); a model with one it lacks is refused
    model_features: tuple[str, ...] = ()

    def violation(self, *, zero=None, pp=None, vpp=None, cp=None, ep=None, etp=None, uneven=None, tp=None,
                  sequence_parallel=None, recompute=None, precision=None, account=None) -> tuple[str, str] | None:
        """(field, reason naming the values) of the first declared rule the given values break; None when
        none does. A value left None is not known yet (a pin not given) and breaks nothing: `refusal`
        passes a whole strategy, `plan` its pins."""
        if zero is not None and zero not in self.zero_stages:
            return "zero", f"{self.name} runs ZeRO stages {list(self.zero_stages)}, not zero={zero}"
        if zero is not None and pp is not None and pp > 1 and zero not in self.zero_stages_with_pp:
            return "zero", (f"{self.name} runs ZeRO stages {list(self.zero_stages_with_pp)} with pipeline "
                            f"parallelism, not zero={zero} with pp={pp}")
        if vpp is not None and vpp > 1 and not self.interleaved:
            return "vpp", f"{self.name} has no interleaved pipeline schedule (vpp={vpp})"
        if cp is not None and cp > 1 and not self.context_parallel:
            return "cp", f"{self.name} has no context parallelism (cp={cp})"
        if ep is not None and ep > 1 and not self.expert_parallel:
            return "ep", f"{self.name} has no expert parallelism (ep={ep})"
        if etp is not None and etp > 1 and not self.expert_tensor_parallel:
            return "etp", f"{self.name} has no expert tensor parallelism (etp={etp})"
        if uneven and not self.uneven_split:
            return "pp", f"{self.name} cannot set first/last pipeline stage layer counts"
        if uneven and vpp is not None and vpp > 1 and not self.uneven_interleaved:
            return "vpp", f"{self.name} cannot interleave (vpp={vpp}) a pipeline with uneven first/last stages"
        if account and not self.split_accounting:
            return "account_for", f"{self.name} cannot count the embedding or loss as pipeline layers (account_for_*)"
        if sequence_parallel is False and self.sequence_parallel == "always" and (tp is None or tp > 1):
            return "sequence_parallel", (f"{self.name} always runs sequence parallelism with tensor parallelism "
                                         f"(tp={tp})")
        if sequence_parallel and self.sequence_parallel == "never":
            return "sequence_parallel", f"{self.name} has no Megatron-style sequence parallelism"
        if recompute is not None and recompute not in self.recompute:
            return "recompute", f"{self.name} runs recompute {list(self.recompute)}, not {recompute!r}"
        if precision is not None and precision not in self.precisions:
            return "precision", f"{self.name} runs precisions {list(self.precisions)}, not {precision}"
        return None

    def model_refusal(self, model) -> str | None:
        """Why this runtime cannot build `model` (a feature it lacks: model_features), None when it can."""
        if model is None:
            return None
        need = [f for f, on in (("mla", getattr(model, "mla", None) is not None),
                                ("mtp", bool(getattr(model, "mtp_layers", 0))),
                                ("swa", getattr(model, "sliding_window", None) is not None))
                if on and f not in self.model_features]
        if not need:
            return None
        what = {"mla": "multi-head latent attention", "mtp": "multi-token prediction layers",
                "swa": "sliding-window attention"}
        return f"{self.name} does not build {' or '.join(what[f] for f in need)} (model {model.name}); megatron does"

    def refusal(self, s, model=None, job=None) -> str | None:
        """Why `s` (a StrategySpec) cannot run on this runtime, naming the values; None when it can."""
        v = self.violation(zero=s.zero, pp=s.pp, vpp=s.vpp, cp=s.cp, ep=s.ep, etp=s.etp,
                           uneven=bool(s.first_stage_layers or s.last_stage_layers), tp=s.tp,
                           sequence_parallel=bool(s.sequence_parallel) if s.tp > 1 else None,
                           recompute=s.recompute, precision=job.precision if job is not None else None,
                           account=bool(getattr(s, "account_for_embedding", False) or getattr(s, "account_for_loss", False)))
        if v is not None:
            return v[1]
        if getattr(s, "pipeline_layout", None) is not None and not self.uneven_interleaved:
            return f"{self.name} has no explicit pipeline layout (Megatron --pipeline-model-parallel-layout)"
        why = self.model_refusal(model)
        if why:
            return why
        if getattr(s, "fsdp_shard", 0) and s.zero not in self.hsdp_zero:
            return (f"{self.name} has no hybrid sharding at zero={s.zero} (fsdp_shard={s.fsdp_shard})"
                    + (f"; it runs it at zero {list(self.hsdp_zero)}" if self.hsdp_zero else ""))
        if getattr(s, "tp_pp_dp_mapping", False) and not self.tp_pp_dp_mapping:
            return f"{self.name} has no tp-pp-dp rank order (Megatron --use-tp-pp-dp-mapping)"
        if getattr(s, "distribute_saved_activations", False) and not self.distribute_saved_activations:
            return (f"{self.name} cannot split the checkpointed activations over tensor parallelism (Megatron "
                    "--distribute-saved-activations, DeepSpeed partition_activations)")
        if getattr(s, "grad_reduce_bf16", False):
            if not self.bf16_grad_reduce:
                return f"{self.name} has no bf16 gradient-reduction option (Megatron --grad-reduce-in-bf16)"
            if job is not None and job.precision not in BF16_WEIGHT_PRECISIONS:
                return f"--grad-reduce-in-bf16 applies to bf16/fp8/fp4 training, not {job.precision}"
        if self.extra_refusal is not None:
            return self.extra_refusal(s, model, job)
        return None
