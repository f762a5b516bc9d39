"""A parallel strategy (SPEC §3 strategy options) and its divisibility rules.

As in Megatron-core, world = tp·pp·cp·dp; MoE layers re-fold a stage's tp·cp·dp ranks into
ep × etp × edp, so ep must divide tp·cp·dp / etp. Messages name the values, as torchtitan's
`ParallelDims` does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from baige_plan.errors import SpecError, require
from baige_plan.limits import MAX_DEVICES, MAX_GLOBAL_BATCH, MAX_LAYERS
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec

RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("flash", "standard")


# upper limits (baige_plan/limits.py): a parallel dimension never exceeds the largest cluster
_MAX = {"micro_batch": MAX_GLOBAL_BATCH, "vpp": MAX_LAYERS, "first_stage_layers": MAX_LAYERS,
        "last_stage_layers": MAX_LAYERS}


def _pos(v, name: str) -> None:
    hi = _MAX.get(name, MAX_DEVICES)
    if type(v) is int and 0 < v <= hi:     # the common case, without building a message (hot in the search)
        return
    require(isinstance(v, int) and not isinstance(v, bool) and v > 0, name,
            f"must be a positive integer, got {v!r}")
    require(v <= hi, name, f"{v:,} exceeds the limit of {hi:,}")


# Megatron recompute_modules the cost model knows beyond core_attn (StrategySpec.recompute_modules)
RECOMPUTE_MODULES = ("mla_up_proj", "moe_act", "layernorm")


@dataclass(frozen=True)
class StrategySpec:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    zero: int = 1
    micro_batch: int = 1
    vpp: int = 1
    recompute: str = "selective"
    sequence_parallel: bool | None = None   # None: on when tp > 1 and inputs are not distributed (below)
    attention: str = "flash"                # flash (fused, no s² activations) | standard (2021-era)
    first_stage_layers: int | None = None   # Megatron --decoder-first-pipeline-num-layers (uneven split)
    last_stage_layers: int | None = None    # Megatron --decoder-last-pipeline-num-layers
    account_for_embedding: bool = False     # Megatron --account-for-embedding-in-pipeline-split
    account_for_loss: bool = False          # Megatron --account-for-loss-in-pipeline-split
    # Megatron --pipeline-model-parallel-layout: transformer layers of each of the pp·vpp virtual stages in model
    # order (virtual stage k runs on pipeline rank k % pp as its chunk k // pp), e.g. DeepSeek-V3's recipes
    pipeline_layout: tuple[int, ...] | None = None
    grad_reduce_bf16: bool = False          # Megatron --grad-reduce-in-bf16: bf16 main grads, reduced in bf16
    # Megatron --use-tp-pp-dp-mapping: ranks ordered tp-cp-ep-pp-dp instead of tp-cp-ep-dp-pp (megatron/training/
    # initialize.py), so a replica's pipeline stages are neighbours (NVLink inside an NVL72 domain) and the
    # data-parallel groups stride over whole replicas (cost/estimate.py _placement_per_node, homogeneous_pp_link)
    tp_pp_dp_mapping: bool = False
    fp8_param_gather: bool = False          # Megatron --fp8-param-gather: fp8 primary weights (TE fp8_model_init)
    optimizer_bytes_per_param: float = 0.0  # optimizer state per parameter before sharding; 0: the runtime's (fp32
                                            # master + Adam m, v = 12 B); 10: master kept as a 16-bit remainder
                                            # (--use-precision-aware-optimizer, apex DistributedFusedAdam)
    overlap_grad_reduce: bool = True        # DP gradient reduction overlapped with the last backward
    execution: str = "fused"                # fused (Megatron/TE kernels) | eager (PyTorch eager + autocast)
    tp_comm_overlap: bool = False           # Transformer Engine userbuffers: TP collectives overlap the GEMMs
    zero3_impl: str = "fsdp"                # ZeRO-3 collectives: fsdp (one per layer, NCCL hierarchical rings)
                                            # | deepspeed (one per weight, flat over the DP world; Narayanan 2021)
    # hybrid sharding (HSDP): ZeRO-2/3 states sharded over groups of this many of the dp·cp ranks, the groups
    # replicated (dp·cp / fsdp_shard copies, gradients all-reduced across them); 0: sharded over all dp·cp ranks.
    # torchtitan data_parallel_shard_degree x cp (replicate = the rest), FSDP1 HYBRID_SHARD (the node), Megatron-FSDP
    # --num-distributed-optimizer-instances = dp·cp / fsdp_shard (cost/estimate.py dp_traffic, state sharding)
    fsdp_shard: int = 0
    runtime: str = "megatron"               # baige_plan/specs/runtimes/: whose execution semantics the cost follows
    attention_kernel: str = ""              # fused-attention kernel (fa2 | cudnn | fa3); "": the runtime's
    fp8_recipe: str = ""                    # fp8 scaling (delayed | current | mxfp8); "": the chip's (cost/fp8.py)
    activation_offload_layers: int = 0      # layers per stage whose activations go to host memory (Megatron
                                            # cpu_offloading_num_layers; cost/offload.py)
    eager_traffic: str = ""                 # eager non-GEMM traffic (cost/execution.py): autocast_fp32 | bf16;
                                            # "": the runtime's (a run of an older torch states its own)
    cp_comm: str = ""                       # context-parallel attention (cost/cp.py: p2p | allgather | torch_ring);
                                            # "": the runtime's (a run of an older release states its own)
    fp8_output_proj: bool = False           # MXFP8 output layer (Megatron-core TransformerConfig.fp8_output_proj,
                                            # TELMHeadColumnParallelLinear; set by Megatron-Bridge's gpt-oss and
                                            # DeepSeek MXFP8 perf recipes); off: the logits GEMM stays 16-bit
    balanced_partition: bool = False        # layers % pp != 0 without first/last counts: the first layers % pp
                                            # stages take one layer more (DeepSpeed PipelineModule's
                                            # partition_method 'type:transformer'; specs/runtimes/deepspeed.py)
    moe_token_drop: bool = False            # MoE experts padded to a static capacity (Megatron
                                            # --moe-pad-expert-input-to-capacity): no host sync per MoE layer
    cuda_graph_scope: str = ""              # CUDA-graphed parts (comma list of attn, moe_router, moe_preprocess,
                                            # full = every layer / the iteration); cost/moe.py host-bound MoE layers
    moe_dispatcher: str = ""                # MoE token dispatcher (alltoall | allgather | flex = DeepEP/HybridEP);
                                            # "": alltoall, what the runtimes' MoE recipes run (cost/moe.py)
    # Megatron --recompute-modules beyond core_attn (comma-separated, selective recompute): mla_up_proj (MLA's up
    # projections run again instead of keeping Q, K, V), moe_act (the experts' activation function), layernorm
    # (the two norms' outputs); cost/memory.py layer_activation_bytes, cost/estimate.py _layer_terms
    recompute_modules: str = ""
    # Transformer Engine's fused grouped MLP (TE op fuser, NVTE_CUTEDSL_FUSED_GROUPED_MLP=1; Megatron-core
    # --use-transformer-engine-op-fuser): the experts' FC1 + SwiGLU + probability scaling + quantisation of FC2's input
    # as one CuTe-DSL grouped kernel, FC2 as one grouped GEMM (TE ops/fused/grouped_mlp.py @ d0067d0: MXFP8 / NVFP4
    # recipes, compute capability 10); cost/moe.py fused_grouped_mlp
    moe_fused_mlp: bool = False
    moe_a2a_overlap: bool = False           # Megatron-core overlap_moe_expert_parallel_comm: one micro-batch's
                                            # forward runs beside another's backward, layer by layer, so each
                                            # one's EP all-to-alls overlap the other's compute (cost/moe.py
                                            # a2a_overlap_pair_s); needs ep > 1, no full recomputation, vpp with pp
    recompute_early_stop: str = ""          # full recomputation through torch's non-reentrant checkpoint stops
                                            # once the backward's tensors exist, skipping the layer's last GEMM
                                            # ("on" | "off"; "": the runtime's, RuntimeSpec.recompute_early_stop)
    # full recomputation keeps only this rank's 1/tp of each checkpointed layer input and all-gathers it over TP
    # before the layer runs again in the backward: Megatron --distribute-saved-activations (core tensor_parallel/
    # random.py CheckpointFunction: split_tensor_into_1d_equal_chunks / gather_split_1d_tensor), DeepSpeed
    # activation_checkpointing.partition_activations (Megatron-DeepSpeed --partition-activations); cost/estimate.py
    # _layer_terms, cost/memory.py layer_activation_bytes
    distribute_saved_activations: bool = False
    loss_kernel: str = ""                   # cross-entropy kernel: "" = the runtime's (RuntimeSpec.memory.loss);
                                            # "flash_xent" = flash_attn.losses.cross_entropy (LLM Foundry's MPT
                                            # default loss_fn fused_crossentropy); "megatron_unfused" = Megatron's
                                            # vocab-parallel loss without --cross-entropy-loss-fusion (one op per
                                            # step); "te_xent" = Transformer Engine 2.2-2.17 parallel_cross_entropy
                                            # (Megatron --cross-entropy-fusion-impl te), gradient written in place
                                            # into the 16-bit logits: cost/estimate.py _logits_terms

    def __post_init__(self) -> None:
        # hot: the search builds thousands of strategies, so each check below builds its message only when it fails
        # (`if not ...: raise`, the same error `require` raises)
        for k in ("tp", "pp", "dp", "cp", "ep", "etp", "micro_batch", "vpp"):
            _pos(getattr(self, k), k)
        if self.zero not in (0, 1, 2, 3):
            raise SpecError("zero", f"must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.recompute not in RECOMPUTE:
            raise SpecError("recompute", f"must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        if self.attention not in ATTENTION:
            raise SpecError("attention", f"must be one of {', '.join(ATTENTION)}, got {self.attention!r}")
        if self.execution not in ("fused", "eager"):
            raise SpecError("execution", f"must be fused or eager, got {self.execution!r}")
        if self.zero3_impl not in ("fsdp", "deepspeed"):
            raise SpecError("zero3_impl", f"must be fsdp or deepspeed, got {self.zero3_impl!r}")
        if self.optimizer_bytes_per_param:     # 0 (the runtime's) is the common case: no message built (hot)
            ob = self.optimizer_bytes_per_param
            require(isinstance(ob, (int, float)) and not isinstance(ob, bool) and 0 < ob <= 64,
                    "optimizer_bytes_per_param", f"must be from 0 to 64, got {ob!r}")
        if self.attention_kernel not in ("", "fa2", "cudnn", "fa3"):
            raise SpecError("attention_kernel", f"must be fa2, cudnn or fa3, got {self.attention_kernel!r}")
        # the per-run release fields: their defaults (0, "") are the common case, so no message is built (hot: the
        # search constructs a strategy per candidate)
        if self.fsdp_shard:
            _pos(self.fsdp_shard, "fsdp_shard")
            n = self.dp * self.cp
            require(self.zero >= 2, "fsdp_shard",
                    f"hybrid sharding (fsdp_shard={self.fsdp_shard}) shards ZeRO-2/3 states; zero={self.zero}")
            require(1 < self.fsdp_shard < n and n % self.fsdp_shard == 0, "fsdp_shard",
                    f"fsdp_shard={self.fsdp_shard} must divide dp·cp = {self.dp}·{self.cp} = {n} and lie strictly "
                    f"between 1 and {n} (0 = shard over all {n}; zero 0 = no sharding)")
            require(self.fsdp_shard % self.cp == 0, "fsdp_shard",
                    f"fsdp_shard={self.fsdp_shard} must be a multiple of cp={self.cp}: the context-parallel ranks of "
                    "a replica share its shards (torchtitan shards over data_parallel_shard x cp)")
            require(self.ep == 1, "fsdp_shard",
                    f"hybrid sharding with expert parallelism (ep={self.ep}) is not modelled: plan fsdp_shard 0")
        if self.activation_offload_layers:
            require(isinstance(self.activation_offload_layers, int) and self.activation_offload_layers >= 0,
                    "activation_offload_layers",
                    f"must be a whole number >= 0, got {self.activation_offload_layers!r}")
        if self.eager_traffic:
            require(self.eager_traffic in ("autocast_fp32", "bf16"), "eager_traffic",
                    f"must be autocast_fp32 or bf16, got {self.eager_traffic!r}")
        if self.cp_comm:
            require(self.cp_comm in ("p2p", "allgather", "torch_ring"), "cp_comm",
                    f"must be p2p, allgather or torch_ring, got {self.cp_comm!r}")
        if self.fp8_recipe not in ("", "delayed", "current", "mxfp8"):
            raise SpecError("fp8_recipe", f"must be delayed, current or mxfp8, got {self.fp8_recipe!r}")
        if self.moe_dispatcher not in ("", "alltoall", "allgather", "flex"):
            raise SpecError("moe_dispatcher", f"must be alltoall, allgather or flex, got {self.moe_dispatcher!r}")
        if self.loss_kernel not in ("", "flash_xent", "megatron_unfused", "te_xent"):
            raise SpecError("loss_kernel", "must be flash_xent, megatron_unfused or te_xent (or empty: the runtime's), "
                            f"got {self.loss_kernel!r}")
        if self.recompute_early_stop not in ("", "on", "off"):
            raise SpecError("recompute_early_stop", f"must be on or off, got {self.recompute_early_stop!r}")
        require(self.moe_fused_mlp in (True, False), "moe_fused_mlp", f"must be true or false, got {self.moe_fused_mlp!r}")
        if self.moe_a2a_overlap:
            # megatron-core TransformerConfig.__post_init__ (overlap_moe_expert_parallel_comm)
            require(self.moe_a2a_overlap is True, "moe_a2a_overlap", f"must be true or false, got {self.moe_a2a_overlap!r}")
            why = a2a_overlap_refusal(ep=self.ep, pp=self.pp, vpp=self.vpp, recompute=self.recompute)
            require(why is None, "moe_a2a_overlap", why and why[1])
        if self.cuda_graph_scope:
            bad = [x for x in self.cuda_graph_scope.split(",") if x not in ("attn", "moe_router", "moe_preprocess", "full")]
            require(not bad, "cuda_graph_scope", f"must list attn, moe_router, moe_preprocess or full, got {bad!r}")
        if self.sequence_parallel is None:
            # Megatron's default with TP; distributing the checkpointed inputs over TP is its alternative (the two
            # exclude each other), so asking for that leaves SP off
            object.__setattr__(self, "sequence_parallel", self.tp > 1 and not self.distribute_saved_activations)
        if self.tp == 1 and self.sequence_parallel:
            # SP shards along the TP group; with tp=1 it is a no-op, so store the canonical form.
            object.__setattr__(self, "sequence_parallel", False)
        if self.distribute_saved_activations:
            # megatron/training/arguments.py (tp > 1, recompute full) and core TransformerConfig.__post_init__ (no SP)
            require(self.distribute_saved_activations is True, "distribute_saved_activations",
                    f"must be true or false, got {self.distribute_saved_activations!r}")
            require(self.tp > 1, "distribute_saved_activations",
                    f"splits the checkpointed inputs over the tensor-parallel ranks: needs tp > 1, got tp={self.tp}")
            require(self.recompute == "full", "distribute_saved_activations",
                    f"applies to full recomputation only, got recompute={self.recompute!r}")
            require(self.sequence_parallel is False, "distribute_saved_activations",
                    "must be false with sequence parallelism (the checkpointed input is already split over TP), "
                    f"got sequence_parallel={self.sequence_parallel!r}")
        if not (self.vpp == 1 or self.pp > 1):
            raise SpecError("vpp", f"vpp={self.vpp} needs pp > 1 (pp={self.pp})")
        for k in ("first_stage_layers", "last_stage_layers"):
            v = getattr(self, k)
            if v is not None:
                _pos(v, k)
                if not self.pp > 1:
                    raise SpecError(k, f"{k}={v} needs pp > 1 (pp={self.pp})")
        if self.recompute_modules:
            bad = [x for x in self.recompute_modules.split(",") if x not in RECOMPUTE_MODULES]
            require(not bad, "recompute_modules", f"must list {', '.join(RECOMPUTE_MODULES)}, got {bad!r}")
            require(self.recompute == "selective", "recompute_modules",
                    f"are selective recompute modules: need recompute selective, got {self.recompute!r}")
        if self.pipeline_layout is not None:
            lay = self.pipeline_layout
            require(isinstance(lay, tuple) and all(type(x) is int and x >= 0 for x in lay), "pipeline_layout",
                    f"must be a tuple of layer counts >= 0, got {lay!r}")
            require(self.pp > 1 and len(lay) == self.pp * self.vpp, "pipeline_layout",
                    f"{len(lay)} virtual stages for pp={self.pp} x vpp={self.vpp} = {self.pp * self.vpp}")
            require(self.first_stage_layers is None and self.last_stage_layers is None
                    and not self.account_for_embedding and not self.account_for_loss, "pipeline_layout",
                    "cannot be combined with first/last stage layers or the accounting flags (Megatron: one of them)")
        for k in ("account_for_embedding", "account_for_loss"):
            v = getattr(self, k)
            if v is False:        # the common case, without building a message (hot in the search)
                continue
            require(isinstance(v, bool), k, f"must be true or false, got {v!r}")
            if v:
                require(self.pp > 1, k, f"{k} needs pp > 1 (pp={self.pp})")
                require(self.first_stage_layers is None and self.last_stage_layers is None, k,
                        f"{k} cannot be combined with first/last stage layer counts (first={self.first_stage_layers}, "
                        f"last={self.last_stage_layers}); megatron-core refuses both (transformer_config.py)")

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def state_shards(self) -> int:
        """Ranks ZeRO shards the dense states over: all dp·cp ranks, or hybrid sharding's group (fsdp_shard)."""
        return self.fsdp_shard or self.dp * self.cp

    @property
    def edp(self) -> int:
        """Expert-data-parallel size: replicas of each expert's weights."""
        return self.tp * self.cp * self.dp // (self.ep * self.etp)

    def with_(self, **kw) -> StrategySpec:
        return replace(self, **kw)


# runtimes built on megatron-core's schedules, which have the combined 1F1B of overlap_moe_expert_parallel_comm
A2A_OVERLAP_RUNTIMES = ("megatron", "flagscale")


def a2a_overlap_refusal(*, model: ModelSpec | None = None, runtime: str | None = None, ep: int | None = None,
                        pp: int | None = None, vpp: int | None = None, recompute: str | None = None
                        ) -> tuple[str, str] | None:
    """(field, reason) megatron-core's EP all-to-all overlap cannot run with these values (TransformerConfig
    .__post_init__ for overlap_moe_expert_parallel_comm; the combined 1F1B is megatron-core's schedule), None when
    none refuses it. A value left None is not known yet and refuses nothing: StrategySpec passes its own fields,
    check_strategy the model and runtime, the search (space.a2a_choices) and `plan`'s pin check what they know."""
    if model is not None and model.moe is None:
        return "model", f"needs an MoE model; {model.name} is dense"
    if runtime is not None and runtime not in A2A_OVERLAP_RUNTIMES:
        return "runtime", (f"runtime {runtime} does not run megatron-core's EP all-to-all overlap (runtimes that do: "
                           f"{', '.join(A2A_OVERLAP_RUNTIMES)})")
    if ep is not None and ep <= 1:
        return "ep", f"needs expert parallelism (ep={ep})"
    if recompute == "full":
        return "recompute", "megatron-core refuses it with full recomputation"
    if pp is not None and pp > 1 and vpp == 1:
        return "vpp", f"with pp={pp} megatron-core needs a virtual pipeline (vpp={vpp})"
    return None


def check_strategy(s: StrategySpec, model: ModelSpec, job: JobSpec, devices: int | None = None) -> None:
    """Raise SpecError (field, reason naming the values) when `s` cannot run `model` for `job`."""
    # hot (every estimate of the search, chunk_layers below for every stage split): each message is built only
    # when its check fails
    if devices is not None:
        if not (s.world == devices):
            raise SpecError("dp", f"tp·pp·cp·dp = {s.tp}·{s.pp}·{s.cp}·{s.dp} = {s.world} must equal the cluster's "
                            f"{devices} devices")
    if not (model.heads % s.tp == 0):
        raise SpecError("tp", f"heads={model.heads} is not divisible by tp={s.tp}")
    if not (model.kv_heads % s.tp == 0):
        raise SpecError("tp", f"kv_heads={model.kv_heads} is not divisible by tp={s.tp} (Megatron needs query "
                        "groups % tp == 0)")
    if not (model.ffn_hidden % s.tp == 0):
        raise SpecError("tp", f"ffn_hidden={model.ffn_hidden} is not divisible by tp={s.tp}")
    stage_layers(s, model.layers)   # raises when the split is impossible
    if not (job.global_batch % (s.dp * s.micro_batch) == 0):
        raise SpecError("global_batch", f"global_batch={job.global_batch} is not divisible by dp·micro_batch = "
                        f"{s.dp}·{s.micro_batch}")
    if s.cp > 1:
        if not (job.seq_len % (2 * s.cp) == 0):
            raise SpecError("cp", f"seq_len={job.seq_len} is not divisible by 2·cp = {2 * s.cp} "
                            "(load-balanced causal CP)")
    if s.sequence_parallel:
        if not (job.seq_len // s.cp % s.tp == 0):
            raise SpecError("sequence_parallel", f"seq_len/cp = {job.seq_len // s.cp} is not divisible by tp={s.tp}")
    if model.moe is None:
        if not (s.ep == 1):
            raise SpecError("ep", f"ep={s.ep} needs an MoE model; {model.name} is dense")
        if not (s.etp == 1):
            raise SpecError("etp", f"etp={s.etp} needs an MoE model; {model.name} is dense")
    else:
        if not (model.moe.experts % s.ep == 0):
            raise SpecError("ep", f"experts={model.moe.experts} is not divisible by ep={s.ep}")
        # combined 1F1B (overlap_moe_expert_parallel_comm) is megatron-core's schedule (pipeline_parallel/combined_1f1b.py)
        why = a2a_overlap_refusal(runtime=s.runtime) if s.moe_a2a_overlap else None
        require(why is None, "moe_a2a_overlap", why and why[1])
        folded = s.tp * s.cp * s.dp
        if not (folded % s.etp == 0):
            raise SpecError("etp", f"etp={s.etp} does not divide tp·cp·dp = {folded}")
        if not ((folded // s.etp) % s.ep == 0):
            raise SpecError("ep",
                            f"ep={s.ep} does not divide tp·cp·dp/etp = {folded}/{s.etp} = {folded // s.etp}")
        if not (model.moe.expert_ffn_hidden % s.etp == 0):
            raise SpecError("etp", f"expert_ffn_hidden={model.moe.expert_ffn_hidden} is not divisible by etp={s.etp}")
    if s.vpp > 1:
        m = job.global_batch // (s.dp * s.micro_batch)
        if not (m % s.pp == 0):
            raise SpecError("vpp",
                            f"interleaved schedule needs micro-batches per replica ({m}) divisible by pp={s.pp}")


def stage_layers(s: StrategySpec, layers: int) -> tuple[int, ...]:
    """Transformer layers per pipeline stage, as Megatron builds them (`chunk_layers`, summed per stage)."""
    return tuple(sum(c) for c in chunk_layers(s, layers))


def chunk_layers(s: StrategySpec, layers: int) -> tuple[tuple[int, ...], ...]:
    """Transformer layers of each model chunk (vpp per stage) of each pipeline stage, exactly as
    megatron-core 0.19.2 builds them (core/transformer/transformer_block.py get_num_layers_to_build,
    checked by TransformerConfig.__post_init__); a SpecError names the values when Megatron refuses:
      even:        layers / (pp·vpp) per chunk; pp·vpp must divide layers.
      first/last:  the first (last) stage holds first (last) layers, the other stages share the rest
                   evenly; with vpp > 1 first, last and the per-middle-stage count must each be divisible
                   by vpp (every chunk of a stage holds count / vpp layers).
      account:     the embedding (loss) counts as one extra layer of the first (last) stage's first (last)
                   chunk: pp must divide layers + e + l, vpp the per-stage share, and that chunk builds one
                   transformer layer fewer (--account-for-embedding/loss-in-pipeline-split).
    The planner also wants at least one transformer layer per stage (Megatron allows an empty one with
    the accounting flags)."""
    pp, v = s.pp, s.vpp
    lay = getattr(s, "pipeline_layout", None)
    if lay is not None:
        # layout: chunk c of stage p is virtual stage c·pp + p
        if not (sum(lay) == layers):
            raise SpecError("pipeline_layout", f"holds {sum(lay)} transformer layers, the model {layers}")
        out = tuple(tuple(lay[c * pp + p] for c in range(v)) for p in range(pp))
        require(all(sum(c) >= 1 for c in out), "pipeline_layout", "leaves a pipeline stage without transformer layers")
        return out
    first, last = s.first_stage_layers, s.last_stage_layers
    e, lo = int(bool(s.account_for_embedding)), int(bool(s.account_for_loss))
    if e or lo:
        total = layers + e + lo
        if not (total % pp == 0):
            raise SpecError("pp", f"layers={layers} + embedding {e} + loss {lo} = {total} is not divisible by pp={pp} "
                            "(account_for_embedding/loss count them as pipeline layers)")
        per = total // pp
        if not (per % v == 0):
            raise SpecError("vpp",
                            f"{per} layers per pipeline stage (embedding/loss counted) are not divisible by vpp={v}")
        out = [[per // v] * v for _ in range(pp)]
        out[0][0] -= e
        out[-1][-1] -= lo
        if not all(sum(c) >= 1 for c in out):
            raise SpecError("pp", f"layers={layers} on pp={pp} with embedding/loss counted leaves a stage without "
                            "transformer layers")
        return tuple(tuple(c) for c in out)
    if first is None and last is None and s.balanced_partition and v == 1 and layers % pp:
        per, extra = divmod(layers, pp)
        if not (per >= 1):
            raise SpecError("pp", f"layers={layers} on pp={pp} leaves a stage without transformer layers")
        return tuple((per + 1,) if i < extra else (per,) for i in range(pp))
    if first is None and last is None:
        if not (layers % (pp * v) == 0):
            raise SpecError("pp", f"layers={layers} is not divisible by pp·vpp = {pp}·{v} = {pp * v}; "
                            "set first/last stage layers, account for embedding/loss, or give an explicit pipeline "
                            "layout (--pipeline-layout) for an uneven split")
        return ((layers // (pp * v),) * v,) * pp
    middle = pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    if not (rest >= middle and (middle == 0 and rest == 0 or middle > 0 and rest % middle == 0)):
        raise SpecError("pp", f"layers={layers} minus first={first} and last={last} leaves {rest} layers for "
                        f"{middle} middle stages (must divide evenly, at least 1 each)")
    each = rest // middle if middle else 0
    counts = [each] * pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    if v > 1:   # every chunk of a stage holds count / vpp layers
        for name, n in (("first_stage_layers", first), ("last_stage_layers", last)):
            if not (n is None or n % v == 0):
                raise SpecError(name, f"{name}={n} is not divisible by vpp={v} (Megatron splits "
                                "every stage into vpp equal model chunks)")
        if not (not middle or each % v == 0):
            raise SpecError("vpp", f"{each} layers per middle stage are not divisible by vpp={v} "
                            "(Megatron splits every stage into vpp equal model chunks)")
    return tuple((n // v,) * v for n in counts)


def split_fields(counts: tuple[int, ...] | list[int], vpp: int = 1, account: tuple[bool, bool] = (False, False)
                 ) -> dict | None:
    """The StrategySpec split fields (first_stage_layers, last_stage_layers, account_for_embedding,
    account_for_loss) under which Megatron builds exactly `counts` transformer layers per stage with `vpp`
    chunks each, or None when none does (a free-form split). Tried in order: the `account` flags given,
    the even split, first/last counts, then the accounting flags (loss and embedding, loss, embedding)."""
    pp, layers = len(counts), sum(counts)
    counts = tuple(counts)
    none = {"first_stage_layers": None, "last_stage_layers": None, "account_for_embedding": False,
            "account_for_loss": False}
    tries = []
    if any(account):
        tries.append(dict(none, account_for_embedding=bool(account[0]), account_for_loss=bool(account[1])))
    tries.append(dict(none))
    if pp > 1:
        mid = counts[1:-1]
        if not mid or len(set(mid)) == 1:
            m0 = mid[0] if mid else None
            tries.append(dict(none, first_stage_layers=counts[0] if counts[0] != m0 else None,
                              last_stage_layers=counts[-1] if counts[-1] != m0 else None))
        for acc in ((True, True), (False, True), (True, False)):
            tries.append(dict(none, account_for_embedding=acc[0], account_for_loss=acc[1]))
    for kw in tries:
        try:
            if stage_layers(StrategySpec(pp=pp, vpp=vpp, **kw), layers) == counts:
                return kw
        except SpecError:
            continue
    return None


def infer_dp(devices: int, tp: int, pp: int, cp: int) -> int:
    """dp = devices / (tp·pp·cp), or a SpecError naming the numbers."""
    denom = tp * pp * cp
    if devices % denom != 0:
        raise SpecError("dp", f"{devices} devices are not divisible by tp·pp·cp = {tp}·{pp}·{cp} = {denom}")
    return devices // denom
