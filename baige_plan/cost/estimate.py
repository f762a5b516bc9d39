"""Step time, throughput and memory of one strategy (homogeneous cluster): the cost model.

Composition (docs/COST_MODEL.md has the derivation). For pipeline stage i with n_i layers, per
micro-batch:
    t_f,i = sum_layers [GEMMs + memory-bound ops + TP comm + EP all-to-all + exposed CP] (+ embedding / logits)
    t_b,i = 2 x GEMM FLOPs and 2 x memory-bound bytes of the forward + the same comm
            + recomputation (full: t_f again; selective: the attention core forward)
Pipeline (1F1B, unequal stages; Narayanan 2021 Sec. 2.2; SPEC §5):
    T_pipe = m * max_i t_i + (sum_i t_i - max_i t_i) / v        (v = 1: sum t + (m-1) max t)
Step:
    T = T_pipe + exposed DP/ZeRO communication + optimizer step
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cache
from operator import attrgetter
from types import MappingProxyType

from baige_plan.cost import collectives as C
from baige_plan.cost.compute import ChipRates, gemm_time_s, layer_memory_bytes
from baige_plan.cost.cp import TORCH_RING_HOST_FWD_SHARE, TORCH_RING_HOST_S, cp_attention
from baige_plan.cost.execution import (
    EAGER,
    EAGER_BF16,
    FUSED_LOSS_BYTES_PER_LOGIT,
    MEGATRON_UNFUSED_LOSS_BYTES_PER_LOGIT,
    TE_XENT_PASSES_PER_LOGIT,
    eager_host_s,
    host_contention,
    ranks_per_cpu,
)
from baige_plan.cost.flops import (
    SIXTEEN_BIT_KIND,
    Gemm,
    attention_gemms,
    linear_gemms,
    logits_gemm,
    megatron_model_flops,
)
from baige_plan.cost.fp8 import QUANTIZED_COPY_BYTES, fp8_quantize_bytes, keep_16bit, quant_recipe
from baige_plan.cost.memo import kept
from baige_plan.cost.memory import (
    BF16_GRAD_BYTES,
    FP32_PRECISIONS,
    GIB,
    bf16_grad_reduce,
    comm_groups,
    fp8_layer_weight_bytes,
    inflight_microbatches,
    layer_activation_bytes,
    loss_bytes_per_logit,
    outside_gib,
    precision_state_bytes,
    reserve_bytes,
    slack_bytes,
    state_bytes,
    weight_bytes,
)
from baige_plan.cost.moe import (
    TE_GROUPED_MLP_RUNTIMES,
    a2a_overlap_pair_s,
    a2a_overlap_unmerged,
    eager_torchtitan_routing,
    ep_node_split,
    expert_gemm_kind,
    host_bound_moe_layer_s,
    host_factor,
    moe_dispatch_syncs,
    moe_layer_launches,
    moe_layer_terms,
)
from baige_plan.cost.offload import activation_offload
from baige_plan.cost.params import attention_duplicated_params, layer_params_split
from baige_plan.cost.recompute import early_stop_skip_s, recompute_early_stop
from baige_plan.errors import SpecError
from baige_plan.specs import runtimes
from baige_plan.specs.calibration import COMMITTED, Calibration
from baige_plan.specs.frozen import make
from baige_plan.specs.job import QUANTIZED_PRECISIONS, JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.profile import LayerProfile
from baige_plan.specs.runtime import FUSED_KERNELS, UnfusedKernels
from baige_plan.specs.strategy import StrategySpec, check_strategy, stage_layers
from baige_plan.specs.topology import ClusterSpec, GroupSpec

GRAD_BYTES = 4            # Megatron fp32 main grads (accumulate/all-reduce in fp32)
ADAM_BYTES_PER_PARAM = 36  # optimizer step traffic: read fp32 grad, master, m, v; write master, m, v, 16-bit param
ADAM_BYTES_PER_PARAM_FP32 = 34  # fp32/tf32: the same step less the 2-byte 16-bit parameter write (weights are the master)


def adam_bytes_per_param(precision: str) -> int:
    """Optimizer-step HBM traffic per locally owned parameter for a training precision."""
    return ADAM_BYTES_PER_PARAM_FP32 if precision in FP32_PRECISIONS else ADAM_BYTES_PER_PARAM
ZERO3_COLLECTIVES_PER_LAYER = 1  # FSDP / Megatron-FSDP: one flat parameter per layer (what the search plans)
DEEPSPEED_COLLECTIVES_PER_LAYER = 4  # per-parameter gathers (qkv, proj, up, down) as DeepSpeed ZeRO-3 issues them


def zero3_collectives_per_layer(s: StrategySpec) -> int:
    return DEEPSPEED_COLLECTIVES_PER_LAYER if s.zero3_impl == "deepspeed" else ZERO3_COLLECTIVES_PER_LAYER
# Fraction of the shorter of (ZeRO-3 communication, compute) hidden under the longer: prefetching
# overlaps them, but NCCL kernels take SMs and HBM bandwidth from the GEMMs they overlap.
# Calibrated on Narayanan 2021 Table 2 (compute-bound 384/640-GPU rows); see COST_MODEL.md.
# The value is specs/calibration.py Calibration.zero3_overlap (DeepSpeed) / zero3_overlap_fsdp (refit by
# leave-one-source-out validation), per implementation (Calibration.zero3_overlap_for); this module default is
# the larger, so that anything bounding the exposed time with it stays a lower bound.
ZERO3_OVERLAP = max(COMMITTED.zero3_overlap, COMMITTED.zero3_overlap_fsdp)
TP_OVERLAP_RESIDUAL = 0.1   # with tp_comm_overlap, the first/last chunk of each TP collective stays exposed


@dataclass(frozen=True)
class StageCost:
    index: int
    layers: tuple[int, int]
    fwd_s: float
    bwd_s: float
    compute_s: float      # per micro-batch, fwd+bwd+recompute, GEMMs and memory-bound ops
    tp_s: float
    cp_s: float
    ep_s: float
    pp_s: float
    weights_gib: float
    grads_gib: float
    optimizer_gib: float
    activations_gib: float
    other_gib: float
    dense_params: float   # on this device
    expert_params: float
    hw_flops: float       # executed FLOPs per micro-batch on this device
    # seconds of the optimizer step per locally owned parameter (measured, or ADAM_BYTES_PER_PARAM / HBM)
    optimizer_s_per_param: float | None = None
    # (component, "analytical" | "measured:<profile>" | both joined by "+"): which numbers are measured
    sources: tuple[tuple[str, str], ...] = ()
    # the caching allocator's reserved - allocated at the peak (cost/memory.py slack_bytes); other_gib counts only
    # its unreclaimable part, + the memory outside the allocator (outside_gib: CUDA context, NCCL buffers)
    slack_gib: float = 0.0
    outside_gib: float = 0.0
    # eager PyTorch (execution "eager"): the host's dispatch time per micro-batch, the device time it was compared
    # with (a micro-batch takes the longer), or, with `host_serial`, added to (EP all-to-alls with data-dependent
    # splits serialise host and device); 0 for fused runtimes
    host_s: float = 0.0
    host_vs_s: float = 0.0
    host_serial: bool = False

    @property
    def time_s(self) -> float:
        return self.fwd_s + self.bwd_s

    def host_delta_s(self, k: float) -> float:
        """How much longer (or shorter) a micro-batch of this stage takes on a host k times as slow per op as the
        modelled one (EagerHost.host_fast_factor / host_slow_factor: the measured machines' range)."""
        if not self.host_s:
            return 0.0
        if self.host_serial:
            return (k - 1.0) * self.host_s
        return max(self.host_vs_s, k * self.host_s) - max(self.host_vs_s, self.host_s)

    @property
    def memory_gib(self) -> float:
        """What the stage needs of a device: allocated tensors + unreclaimable allocator fragmentation +
        context and NCCL buffers (`fits` compares this with capacity x --max-memory-frac)."""
        return self.weights_gib + self.grads_gib + self.optimizer_gib + self.activations_gib + self.other_gib

    @property
    def allocated_gib(self) -> float:
        """The allocated peak (torch.cuda.max_memory_allocated)."""
        return self.weights_gib + self.grads_gib + self.optimizer_gib + self.activations_gib

    @property
    def reserved_peak_gib(self) -> float:
        """What nvidia-smi shows at the peak: allocated + the allocator's whole reserve + context and NCCL."""
        return self.allocated_gib + self.slack_gib + self.outside_gib


@dataclass(frozen=True)
class Estimate:
    strategy: StrategySpec
    global_batch: int
    fits: bool
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_device: float
    model_tflops_per_device: float
    mfu: float
    hfu: float
    peak_memory_gib: float
    capacity_gib: float
    breakdown_s: dict[str, float]
    memory_gib: dict[str, float]
    stages: tuple[StageCost, ...]
    micro_batches: int
    devices: int
    bottleneck: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    # heterogeneous plans: per shape (replicas, micro-batches, stage costs, pipeline seconds)
    shapes: tuple[tuple[int, int, tuple[StageCost, ...], float], ...] = ()
    bridge_traffic: tuple[tuple[str, str, str, float], ...] = ()   # (group a, group b, kind, seconds per step)
    memory_frac: float = 1.0   # the fraction of device memory the plan may use (--max-memory-frac): `fits`' limit

    @property
    def memory_limit_gib(self) -> float:
        """Device memory the plan may use: capacity x --max-memory-frac."""
        return self.capacity_gib * self.memory_frac

    def host_scaled_step_s(self, k: float) -> float:
        """The step time on a host k times as slow per eager op as the modelled one: each stage's micro-batch
        time moved by StageCost.host_delta_s, the pipeline recombined as `estimate` does (m x the slowest stage +
        the others' fill / vpp). The step itself for fused runtimes and heterogeneous plans (no eager host)."""
        if self.shapes or not any(st.host_s for st in self.stages):
            return self.step_time_s
        m, v = self.micro_batches, self.strategy.vpp
        return (self.step_time_s - pipeline_s([st.time_s for st in self.stages], m, v)
                + pipeline_s([st.time_s + st.host_delta_s(k) for st in self.stages], m, v))

    @property
    def reserved_peak_gib(self) -> float:
        """The device memory in use at the peak as nvidia-smi shows it (StageCost.reserved_peak_gib, largest
        stage): peak_memory_gib + the cached blocks the allocator would release under pressure."""
        stages = [c for _, _, costs, _ in self.shapes for c in costs] if self.shapes else list(self.stages)
        return max((st.reserved_peak_gib for st in stages), default=self.peak_memory_gib)

    @property
    def memory_margin_gib(self) -> float:
        """memory_limit_gib - peak memory of the peak stage (negative: over by that much; fits <=> >= 0)."""
        return self.memory_limit_gib - self.peak_memory_gib

    @property
    def sources(self) -> dict[str, str]:
        """Which parts of the estimate come from a measured profile (specs/profile.py): per component
        "analytical", "measured:<profile name>", or several joined by "+" (e.g. a mixed cluster with one
        profiled group). Communication and model-state memory are always analytical."""
        stages = [c for _, _, costs, _ in self.shapes for c in costs] if self.shapes else list(self.stages)
        out = {}
        for comp in MEASURABLE:
            labels: set[str] = set()
            for st in stages:
                labels.update(dict(st.sources).get(comp, ANALYTICAL).split("+"))
            out[comp] = join_sources(labels or {ANALYTICAL})
        out["communication"] = ANALYTICAL
        out["model_states"] = ANALYTICAL
        return out


ANALYTICAL = "analytical"
MEASURABLE = ("compute", "activation_memory", "optimizer_step")


def runs_op_sac(s: StrategySpec, rt=None) -> bool:
    """Whether `s` recomputes with torchtitan's op-level selective AC (selective on a runtime whose selective
    recomputation is op SAC). `rt`: the runtime's spec when the caller holds it."""
    return s.recompute == "selective" and (rt or runtimes.get(s.runtime)).memory.selective == "op_sac"


def join_sources(labels: set[str]) -> str:
    """Measured labels first (sorted), "analytical" last."""
    if len(labels) == 1:            # the common case (every stage of an analytical estimate): that label
        for label in labels:
            return label
    return "+".join(sorted(labels, key=lambda x: (x == ANALYTICAL, x)))


def _gemm_set(model: ModelSpec, s: StrategySpec, seq_len: int, moe_layer: bool,
              window: bool = False) -> tuple[list[Gemm], list[Gemm]]:
    tokens = s.micro_batch * seq_len / s.cp
    # the local experts as the runtime launches them (cost/moe.py expert_gemm_kind): TE GroupedLinear's
    # multi-stream cuBLAS (Megatron --moe-grouped-gemm), torch._grouped_mm (torchtitan), eager loops
    lin = linear_gemms(model, tokens, s.tp, moe_layer, s.ep, s.etp, grouped=expert_gemm_kind(s),
                       sp=bool(s.sequence_parallel) and s.tp > 1)
    att = attention_gemms(model, s.micro_batch, seq_len, s.tp, s.cp, standard=s.attention == "standard",
                          window=model.sliding_window if window else None)
    if s.attention == "flash":
        att = [Gemm(g.name, g.m, g.n, g.k, g.count, "attention_flash") for g in att]
    return lin, att


def unfused_layer_bytes(model: ModelSpec, s: StrategySpec, seq: int, tokens: float, std: bool, act_bytes: int,
                        out_b: float, core_b: float, uf: UnfusedKernels, hbm_Bps: float) -> tuple[float, float, float]:
    """(attention-core forward bytes, forward s, backward s) of one layer's memory-bound work when the runtime
    runs some of it unfused (specs/runtime.py UnfusedKernels, sourced in specs/runtimes/megatron_local.py):
      standard attention: the torch scale-mask-softmax's bytes per score element (b * heads/tp * s/cp * s
        scores, as compute.layer_memory_bytes) replace the fused kernel's 2 x act bytes forward, 4 x backward;
        a dropout's part (2 x act + 1 B per score) stays as costed there;
      rotary embedding by eager ops on this rank's queries and keys, tokens x (q_dim + kv_dim) / tp elements;
    the rest (`out_b`) as fused: forward once, backward twice."""
    drop_b = 0.0
    if std and (uf.softmax_fwd_bytes or uf.softmax_bwd_bytes):
        scores = s.micro_batch * (model.heads / s.tp) * (seq / s.cp) * seq
        drop_b = scores * (2 * act_bytes + 1) if model.dropout > 0 else 0.0
        core_f, core_bw = scores * uf.softmax_fwd_bytes + drop_b, scores * uf.softmax_bwd_bytes + 2 * drop_b
    else:
        core_f, core_bw = core_b, 2 * core_b
    rope_f = rope_b = 0.0
    pe = getattr(model, "position_embedding", None) or ("rope" if model.activation == "swiglu" else "learned")
    if pe == "rope":
        qk = tokens * (model.q_dim + model.kv_dim) / s.tp
        rope_f, rope_b = qk * uf.rope_fwd_bytes, qk * uf.rope_bwd_bytes
    return core_f, (out_b + core_f + rope_f) / hbm_Bps, (2 * out_b + core_bw + rope_b) / hbm_Bps


def _placement_per_node(dpn: int, inner: int, size: int) -> int:
    """Ranks of a group per node when the group's stride is `inner` (Megatron order tp, cp, dp, pp)."""
    if inner >= dpn:
        return 1
    return max(1, min(size, dpn // inner))


def dp_ranks_per_node(dpn: int, s: StrategySpec, size: int) -> int:
    """Ranks of the data-parallel group (dp x cp, `size`) on one node. Megatron's default order tp-cp-ep-dp-pp puts
    them contiguous after tp; with --use-tp-pp-dp-mapping (tp-cp-ep-pp-dp) only the cp ranks are contiguous and the
    dp ranks stride over whole replicas (tp x cp x pp ranks). Worked example: 64-GPU NVLink domain, tp 4 cp 2 pp 8
    dp 8: default, the 16 ranks of a dp x cp group share the domain (stride 4: 64 // 4 = 16); tp-pp-dp, a replica
    fills the domain, so a group has its 2 cp ranks there and crosses the NIC to the other 7 replicas."""
    if not s.tp_pp_dp_mapping:
        return _placement_per_node(dpn, s.tp, size)
    cp_here = _placement_per_node(dpn, s.tp, s.cp)
    replicas_here = max(1, dpn // (s.tp * s.cp * s.pp))
    return max(1, min(size, cp_here * min(replicas_here, s.dp)))


def _gemm_timer(memo: dict | None, r: ChipRates) -> Callable[..., float]:
    """gemm_time_s(g, r, passes, bwd) as a function of (g, passes, bwd), memoised in `memo` (one search's) where
    given: the strategies of a search share a few rates objects (`_strategy_rates`) and repeat the same GEMMs
    (9 in 10 on the 512-GPU plan). Keyed by the rates object (kept alive in the entry), the GEMM and its fields'
    types (a GEMM equal to another in value but not in type is costed on its own), so a hit is the same float."""
    if memo is None:
        return lambda g, passes=1.0, bwd=False: gemm_time_s(g, r, passes, bwd)

    def timed(g: Gemm, passes: float = 1.0, bwd: bool = False) -> float:
        return kept(memo, (r,), ("gemm", g, type(g.m), type(g.n), type(g.k), type(g.count), passes, bwd),
                    lambda: gemm_time_s(g, r, passes, bwd))
    return timed


# Transformer Engine's userbuffers issue each overlapped GEMM in pieces along M, one per chunk of the collective
# (transformer_engine/pytorch/module/base.py @ d0067d0, initialize_ub defaults): "ring_exchange" for the qkv / fc1
# forward (all-gather) and the proj / fc2 dgrad (reduce-scatter), num_splits = tp; "pipeline" for the proj / fc2
# forward, num_splits = 4; "bulk" (qkv / fc1 dgrad and wgrad) runs whole GEMMs. Megatron-Bridge's presets
# (src/megatron/bridge/training/comm_overlap.py @ 067f987) keep those and run the proj / fc2 forward as ring exchange
# in every fp8 preset. A piece is a GEMM of its own size on the chip's curve: measured on 1x H200
# (benchmarks/real/tp_overlap_sm.py), 4 pieces cost +1..+3 % on Llama 3 70B's fc2 GEMMs, +10..+50 % on fc1 / proj / qkv
UB_PIPELINE_SPLITS = 4
_UB_AG_FPROP = ("qkv", "mlp_up")        # ring exchange forward
_UB_RS = ("attn_proj", "mlp_down")      # pipeline (16-bit) or ring exchange (fp8) forward; ring exchange dgrad


def _pieces(g: Gemm, c: int) -> Gemm:
    """g issued as c GEMMs of M/c rows each."""
    return Gemm(g.name, g.m / c, g.n, g.k, g.count * c, g.kind)


def ub_split_extra_s(lin: list[Gemm], tp: int, gemm_s: Callable[..., float],
                     quantized: bool = False) -> tuple[float, float]:
    """(forward, backward) seconds per layer and micro-batch that TP-overlap's GEMM pieces take beyond the whole GEMMs
    (`quantized`: an fp8 / fp4 job, whose presets ring-exchange the proj / fc2 forward too)."""
    xf = xb = 0.0
    for g in lin:
        if g.name in _UB_AG_FPROP:
            xf += gemm_s(_pieces(g, tp)) - gemm_s(g)
        elif g.name in _UB_RS:
            xf += gemm_s(_pieces(g, tp if quantized else UB_PIPELINE_SPLITS)) - gemm_s(g)
            d = Gemm(g.name, g.m, g.k, g.n, g.count, g.kind)      # its dgrad: M x in-features, over out-features
            xb += gemm_s(_pieces(d, tp), bwd=True) - gemm_s(d, bwd=True)
    return max(0.0, xf), max(0.0, xb)


def _layer_terms(model: ModelSpec, s: StrategySpec, r: ChipRates, seq: int, tokens: float, sp: bool, std: bool,
                 links: tuple, moe: bool, meas: LayerProfile | None = None, window: bool = False,
                 memo: dict | None = None) -> dict[str, float]:
    """Time, FLOPs, parameters and activations of one transformer layer on one device, per micro-batch.
    `meas`: a measured profile of this layer (specs/profile.py) whose forward/backward/recompute compute
    seconds and stored activation bytes replace the analytical ones where present; communication,
    FLOPs and parameters stay analytical. The compute parts are returned as lf, lb and rc (recompute).
    `memo`: stage_cost's (one search's), where GEMM times are kept (`_gemm_timer`); the same numbers without it."""
    gemm_s = _gemm_timer(memo, r)
    tp_link, cp_link, ep_link, etp_link = links[:4]
    ep_split = links[4] if len(links) > 4 else None     # cost/moe.py EpNodeSplit: an EP group across nodes
    act_bytes = r.act_bytes
    fwd = bwd = rec = comp = tp_t = ep_t = cp_t = hw_flops = 0.0
    dense_p = expert_p = act = act_layer_full = 0.0
    if memo is None:
        lin, att = _gemm_set(model, s, seq, moe, window)
    else:
        # the layer's GEMMs, kept in the search's memo by everything _gemm_set reads (the strategies of a search
        # repeat them: many differ only in knobs the GEMMs do not see); read-only there, fresh lists here
        gkey = ("gemm-set", model, seq, moe, window, s.micro_batch, s.cp, s.tp, s.ep, s.etp, s.runtime, s.execution,
                s.sequence_parallel, s.attention, s.moe_fused_mlp)
        kept = memo.get(gkey)
        if kept is None:
            kept = memo[gkey] = tuple(tuple(x) for x in _gemm_set(model, s, seq, moe, window))
        lin, att = list(kept[0]), list(kept[1])
    lin = keep_16bit(lin, s, r.chip, r.dtype)   # fp8: the output layer / router the runtime leaves in 16-bit
    # MoE: the layer's extra terms (cost/moe.py); the busiest EP rank sets the pace (mt.load)
    mt = moe_layer_terms(model, s, r, tokens, ep_link, etp_link, lin, ep_split) if moe and model.moe is not None \
        else None
    tt_routing = mt is not None and eager_torchtitan_routing(s)   # torchtitan's measured eager routing (cost/moe.py)
    load = mt.load if mt is not None else 1.0
    g_f = sum(gemm_s(g) * (load if g.name.startswith("expert_") else 1.0) for g in lin)
    a_f = sum(gemm_s(g) for g in att)
    a_b = sum(gemm_s(g, passes=2, bwd=True) for g in att)
    fused_mlp = s.moe_fused_mlp and mt is not None     # TE's fused grouped MLP (cost/moe.py fused_grouped_mlp)
    out_b, core_b = layer_memory_bytes(model, tokens, s.micro_batch, seq, s.tp, s.cp, sp, std, act_bytes, moe,
                                       fused_experts=fused_mlp)
    m_f = (out_b + core_b) / r.hbm_Bps
    m_b = 2 * m_f
    uf = runtimes.get(s.runtime).unfused
    if uf != FUSED_KERNELS:
        # work the runtime runs as separate torch ops (specs/runtime.py UnfusedKernels; specs/runtimes/megatron_local.py)
        core_b, m_f, m_b = unfused_layer_bytes(model, s, seq, tokens, std, act_bytes, out_b, core_b, uf, r.hbm_Bps)
    if mt is not None:
        # routing + token permutation of the fused dispatcher (cost/moe.py); eager
        # execution replaces m_f/m_b with its measured traffic below
        m_f += mt.dispatch_fwd_s
        m_b += mt.dispatch_bwd_s
    if r.dtype in QUANTIZED_PRECISIONS:
        # Transformer Engine quantises every GEMM input in the forward and the output gradients in the backward,
        # at the recipe's bytes per element (cost/fp8.py: fp8 recipes, NVFP4)
        qb = fp8_quantize_bytes(quant_recipe(s, r.chip, r.dtype))
        # TE's fused grouped MLP quantises FC2's input and FC1's output gradient in its GEMM epilogues
        q_f = sum(g.count * g.m * g.k for g in lin if g.kind != SIXTEEN_BIT_KIND
                  and not (fused_mlp and g.name == "expert_down")) * qb
        q_b = sum(g.count * g.m * g.n for g in lin if g.kind != SIXTEEN_BIT_KIND
                  and not (fused_mlp and g.name == "expert_up")) * qb
        m_f += q_f / r.hbm_Bps
        m_b += q_b / r.hbm_Bps
    core_f = a_f + core_b / r.hbm_Bps
    eager_rec = 0.0
    if s.execution == "eager":
        # measured eager-PyTorch traffic (cost/execution.py); its LayerNorm/residual/cast share is
        # replicated over TP ranks unless sequence parallelism shards it, the rest (GeLU, attention
        # layout copies) acts on this rank's ffn/tp, h/tp features
        d_params, e_params = layer_params_split(model, moe)
        rep = EAGER.tp_replicated_share
        tok_h = tokens * model.hidden * (rep / (s.tp if sp else 1) + (1 - rep) / s.tp)
        if (s.eager_traffic or runtimes.get(s.runtime).eager_traffic) == "bf16":
            # bf16 parameters without autocast, fused norms (cost/execution.py Bf16EagerTraffic)
            e16 = EAGER_BF16
            # bf16 kernels (fused RMSNorm, no fp32 casts) at the copy bandwidth: the eager bandwidth (cost/execution.py
            # EAGER_H100_OVER_H200_TIME) was measured on the autocast harness's kernels only
            e_Bps = r.hbm_Bps
            # the MLP's elementwise width: the dense FFN, or an MoE layer's routed (top-k) and shared experts
            ffn = model.ffn_hidden
            if moe and model.moe is not None:
                # torchtitan's routed experts' elementwise work is in its measured routing (added below)
                routed = 0 if tt_routing else model.moe.top_k
                ffn = model.moe.expert_ffn_hidden * (routed + model.moe.shared_experts)
            width = ffn * (3 if model.activation == "swiglu" else 1) / model.hidden
            per_layer = (e16.bytes_per_token_layer_hidden + e16.bytes_per_token_layer_mlp_width * width) * tok_h
            param_b = e16.bytes_per_param_per_micro_batch
            eager_rec = per_layer * EAGER.fwd_share / e_Bps
        else:
            e_Bps = r.eager_Bps or r.hbm_Bps
            per_layer = EAGER.bytes_per_token_layer_hidden * tok_h
            param_b = EAGER.bytes_per_param_per_micro_batch
            eager_rec = EAGER.recompute_bytes_per_token_layer_hidden * tok_h / e_Bps
        m_f = per_layer * EAGER.fwd_share / e_Bps + core_b / r.hbm_Bps
        m_b = (per_layer * (1 - EAGER.fwd_share) + param_b * (d_params / s.tp + e_params / (s.ep * s.etp))) / e_Bps \
            + 2 * core_b / r.hbm_Bps
        if tt_routing:
            # torchtitan's eager MoE routing, measured (cost/moe.py TORCHTITAN_ROUTE_*_BYTES); a recomputed forward
            # runs it again
            m_f += mt.dispatch_fwd_s
            m_b += mt.dispatch_bwd_s
            eager_rec += mt.dispatch_fwd_s
    lf = g_f + a_f + m_f
    lb = 2 * g_f + a_b + m_b
    # the forward's device time after an MoE dispatcher's host sync, by phase (cost/moe.py host_bound_moe_layer_s):
    # dispatch + experts (expert GEMMs, routing/permutation traffic, all-to-alls) and the router GEMM
    # mlp_f / mlp_b: the experts with their permutation per pass (the backward's weight gradients included), what
    # Megatron-core's EP overlap schedules apart from the rest of the layer (cost/moe.py a2a_overlap_pair_s)
    moe_dev_e = moe_dev_r = mlp_f = mlp_b = 0.0
    if mt is not None:
        experts_f = sum(gemm_s(g) for g in lin if g.name.startswith("expert_")) * load
        mlp_f = experts_f + mt.dispatch_fwd_s
        mlp_b = 2 * experts_f + mt.dispatch_bwd_s + mt.expert_bwd_extra_s
        moe_dev_e = mlp_f + mt.ep_s
        moe_dev_r = sum(gemm_s(g) for g in lin if g.name == "router")
        lb += mt.expert_bwd_extra_s   # torch._grouped_mm experts: backward beyond 2 x forward (cost/moe.py)
    timed = meas is not None and meas.has_times
    if timed:
        lf, lb = meas.forward_s, meas.backward_s
    # Tensor parallel: 2 all-reduces (or AG+RS pairs with SP) of the layer's activations per
    # pass (Shoeybi 2019 Sec. 3; Korthikanti 2022 Sec. 4.2.2). An MoE layer keeps the attention's.
    act_sz = tokens * model.hidden * act_bytes
    n_tp = 1 if moe else 2
    if sp:
        t_tp = t_tp_b = n_tp * (C.all_gather_s(act_sz, tp_link) + C.reduce_scatter_s(act_sz, tp_link))
    else:
        # without SP an MoE layer also all-reduces the combined expert output over the TP group
        n_ar = n_tp + (1 if moe and s.tp > 1 else 0)
        t_tp = n_ar * C.all_reduce_s(act_sz, tp_link)
        # eager autocast: the backward all-reduce carries the gradient of what entered `f`, in the
        # autocast dtype where the runtime casts before it (cost/execution.py tp_grad_comm_scale)
        t_tp_b = n_ar * C.all_reduce_s(act_sz * (EAGER.tp_grad_comm_scale if s.execution == "eager" else 1),
                                       tp_link)
    if s.tp_comm_overlap and s.tp > 1 and sp:   # userbuffer overlap needs sequence parallelism (validate_args)
        # TE userbuffers split each AG/RS into chunks pipelined with the GEMM they feed or follow:
        # only the part longer than those GEMMs, and the pipeline fill, stays exposed
        t_tp = max(t_tp - g_f, TP_OVERLAP_RESIDUAL * t_tp)
        t_tp_b = max(t_tp_b - 2 * g_f, TP_OVERLAP_RESIDUAL * t_tp_b)
        # and the GEMMs run in pieces (ub_split_extra_s), also beside a measured profile, whose layers ran whole
        # GEMMs; a recomputed forward splits again
        ub_f, ub_b = ub_split_extra_s(lin, s.tp, gemm_s, r.dtype in QUANTIZED_PRECISIONS)
        lf += ub_f
        lb += ub_b
    # Expert parallel: dispatch + combine all-to-all per pass (4 per layer per micro-batch).
    t_ep = mt.ep_s if mt is not None else 0.0
    # Context parallelism: the runtime's ring (or all-gather) of K/V blocks against the attention steps
    # it overlaps, each step a launch over 1/cp of the rank's attention (cost/cp.py)
    t_cp_f = t_cp_b = 0.0
    if s.cp > 1:
        kv_blk = 2 * s.micro_batch * seq / s.cp * model.kv_dim / s.tp * act_bytes
        att_step = [Gemm(g.name, g.m, g.n / s.cp if g.name == "attn_qk" else g.n,
                         g.k / s.cp if g.name == "attn_pv" else g.k, g.count, g.kind) for g in att]
        step_f = sum(gemm_s(g) for g in att_step)
        step_b = sum(gemm_s(g, passes=2, bwd=True) for g in att_step)
        comm = s.cp_comm or runtimes.get(s.runtime).cp_comm
        cpa = cp_attention(s.cp, comm, step_f, step_b, s.micro_batch * seq / s.cp * model.o_dim
                           / s.tp, kv_blk, act_bytes, r.hbm_Bps, cp_link)
        t_cp_f, t_cp_b = cpa.exposed_fwd_s, cpa.exposed_bwd_s
        if not timed:
            # the per-step merging is memory-bound compute; the ring's steps are launches over 1/cp of the
            # rank's attention each, less efficient than one launch over all of it
            stepped = comm in ("p2p", "torch_ring")
            lf += cpa.extra_fwd_s + (s.cp * step_f - a_f if stepped else 0.0)
            lb += cpa.extra_bwd_s + (s.cp * step_b - a_b if stepped else 0.0)
    fwd += lf + t_tp + t_ep + t_cp_f
    bwd += lb + t_tp_b + t_ep + t_cp_b
    comp += lf + lb
    tp_t += t_tp + t_tp_b
    ep_t += 2 * t_ep
    cp_t += t_cp_f + t_cp_b
    layer_hw = sum(g.flops for g in lin + att)
    rc = 0.0
    if s.recompute == "full":
        lr = lf if s.execution != "eager" else lf - m_f + eager_rec   # eager: measured recompute traffic
        t_rc_tp, skip_flops = t_tp, 0.0
        if recompute_early_stop(s) and not moe and not timed:
            # the recomputed forward stops before the layer's last GEMM and its TP collective (early_stop_skip_s)
            skip_g, skip_c, skip_flops = early_stop_skip_s(lin, r, C.reduce_scatter_s(act_sz, tp_link) if sp
                                                           else C.all_reduce_s(act_sz, tp_link), s.tp)
            lr -= skip_g
            t_rc_tp = max(t_tp - skip_c, 0.0)
        if timed:
            lr = meas.recompute_s
        rc = lr
        rec += lr + t_rc_tp + t_ep + t_cp_f
        comp += lr
        tp_t += t_rc_tp
        ep_t += t_ep
        cp_t += t_cp_f
        hw_flops += 4 * layer_hw - skip_flops
        if s.distribute_saved_activations:     # StrategySpec holds it to tp > 1, no SP (Megatron's rules)
            # --distribute-saved-activations / partition_activations: the forward copies this rank's 1/tp of the
            # checkpointed input into a new buffer (read + write act_sz/tp) and the backward all-gathers it over TP
            # before the layer runs again (on the compute stream: nothing to hide it under). Megatron-core
            # tensor_parallel/random.py CheckpointFunction; DeepSpeed checkpointing.py partition_activations /
            # gather_partitioned_activations, whose rebuild also writes a zero-filled buffer (act_sz), copies the
            # rank's part in (2 act_sz/tp) and copies the gathered parts out of torch.distributed's flat staging
            # buffer into the list of views (2 act_sz): specs/runtime.py RuntimeSpec.distribute_saved_activations
            t_split = 2 * act_sz / s.tp / r.hbm_Bps
            t_gather = C.all_gather_s(act_sz, tp_link)
            t_copy = (3 + 2 / s.tp) * act_sz / r.hbm_Bps \
                if runtimes.get(s.runtime).distribute_saved_activations == "zeros_list" else 0.0
            fwd += t_split
            comp += t_split + t_copy
            rec += t_gather + t_copy
            tp_t += t_gather
    elif runs_op_sac(s):
        # torchtitan's op-level selective AC (derived from its source in specs/runtimes/torchtitan.py
        # op_sac_recomputed): the backward re-runs every op of the layer's forward whose output is not
        # saved -- every second weight GEMM, the router and routed-expert GEMMs, the memory-bound ops
        # (norms, activation, residual adds, RoPE, casts, permutations: m_f; eager: its measured recompute
        # traffic) and the TP all-gathers (all-reduces without SP) and CP K/V gathers. The attention core,
        # reduce-scatters and EP all-to-alls are saved, so they do not run again.
        from baige_plan.specs.runtimes.torchtitan import op_sac_recomputed
        redo = op_sac_recomputed(lin, model.activation)
        rc = sum(gemm_s(g) * (load if g.name.startswith("expert_") else 1.0) for g in redo)
        rc = meas.recompute_s if timed else rc + (eager_rec if s.execution == "eager" else m_f)
        t_tp_rc = (n_tp * C.all_gather_s(act_sz, tp_link) if sp else t_tp) if s.tp > 1 else 0.0
        rec += rc + t_tp_rc + t_cp_f
        comp += rc
        tp_t += t_tp_rc
        cp_t += t_cp_f
        hw_flops += 3 * layer_hw + sum(g.flops for g in redo)
    elif s.recompute == "selective" and (std or r.chip.family in runtimes.get(s.runtime).selective_attention_recompute):
        # the checkpointed attention core runs again in the backward: standard attention (Korthikanti 2022
        # Sec. 5), or a fused kernel the runtime checkpoints on this chip family (specs/runtime.py
        # selective_attention_recompute; specs/runtimes/deepspeed.py: HabanaAI FusedSDPA), whose scores stay on chip
        rc = meas.recompute_s if timed else (core_f if std else a_f)
        rec += rc
        comp += rc
        hw_flops += 3 * layer_hw + sum(g.flops for g in att)
    else:
        if timed:   # a measured selective recomputation of fused attention (analytically free)
            rc = meas.recompute_s
            rec += rc
            comp += rc
        hw_flops += 3 * layer_hw
    if "mla_up_proj" in s.recompute_modules and s.recompute == "selective" and model.mla is not None:
        # Megatron recompute_modules mla_up_proj: the q and kv up projections run again in the backward
        redo_up = [g for g in lin if g.name in ("q_up", "q", "kv_up")]
        rc_up = sum(gemm_s(g) for g in redo_up)
        rec += rc_up
        comp += rc_up
        hw_flops += sum(g.flops for g in redo_up)
    d, e = layer_params_split(model, moe)
    dup = attention_duplicated_params(model)    # MLA's down projections: a full copy on every TP rank
    dense_p += (d - dup) / s.tp + dup
    if e:
        expert_p += e / (s.ep * s.etp)
    # what "selective" stores is the runtime's (Megatron core-attention recompute, torchtitan op-level SAC)
    op_sac = runs_op_sac(s)
    # torchtitan's eager MoE keeps more than a fused dispatcher (cost/memory.py layer_activation_bytes moe_saved)
    moe_saved = "torchtitan_eager" if tt_routing else "dispatcher"
    act += layer_activation_bytes(model, seq, s.micro_batch, s.tp, s.cp, sp, s.recompute, std, moe, act_bytes,
                                  etp=s.etp, selective=runtimes.get(s.runtime).memory.selective,
                                  fp8_gemm_inputs=(r.dtype in QUANTIZED_PRECISIONS
                                                   and runtimes.get(s.runtime).memory.fp8_gemm_inputs),
                                  quant_copy_bytes=QUANTIZED_COPY_BYTES.get(r.dtype, 1.0),
                                  modules=s.recompute_modules, distributed=s.distribute_saved_activations,
                                  moe_saved=moe_saved)
    mem = runtimes.get(s.runtime).memory
    if s.execution == "eager" and s.recompute != "full" and not op_sac and mem.autocast_fp32_params and s.zero < 3:
        # autocast over fp32 parameters leaves fp32 activations (measured, cost/execution.py); FSDP2's bf16
        # param_dtype (ZeRO-3, torchtitan) computes in bf16 throughout
        rep = EAGER.replicated_extra_activation_bytes
        act += ((EAGER.extra_activation_bytes_per_token_layer_hidden - rep) / s.tp + rep / (s.tp if sp else 1)) \
            * tokens * model.hidden
    if meas is not None and meas.activation_bytes is not None:
        act = meas.activation_bytes
    if s.recompute == "full" or op_sac:
        # the layer being recomputed in the backward holds its un-checkpointed activations
        working = layer_activation_bytes(model, seq, s.micro_batch, s.tp, s.cp, sp, "none", std, moe, act_bytes,
                                         etp=s.etp, moe_saved=moe_saved)
        if meas is not None and meas.working_bytes is not None:
            working = meas.working_bytes
        act_layer_full = max(act_layer_full, working)
    return {"fwd": fwd, "bwd": bwd, "rec": rec, "comp": comp, "tp": tp_t, "ep": ep_t, "cp": cp_t, "hw": hw_flops,
            "dense_p": dense_p, "expert_p": expert_p, "act": act, "act_full": act_layer_full,
            "lf": lf, "lb": lb, "rc": rc, "moe_dev_experts": moe_dev_e, "moe_dev_router": moe_dev_r,
            "ep_pass": t_ep, "mlp_f": mlp_f, "mlp_b": mlp_b}


class _Same:
    """An object as a cache key by identity (a GroupSpec holds dicts: it does not hash); the key holds the object,
    so its id is never reused while the entry is cached."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and self.obj is other.obj


class _StageContext:
    """What every stage of strategy s on `group` shares: the rates, the runtime, the TP/CP/EP/expert-TP links and EP
    node split, and its layers' terms (by model, sequence length, dense/MoE and measured profile), each computed
    once."""

    __slots__ = ("r", "rt", "links", "terms", "memo")

    def __init__(self, group: GroupSpec, precision: str, s: StrategySpec, calibration: Calibration | None,
                 moe: bool, memo: dict | None = None) -> None:
        self.r = _strategy_rates(memo, group.chip, engine_precision(group, precision, s.runtime), s, calibration)
        self.memo = memo
        self.rt = runtimes.get(s.runtime)
        dpn = group.devices_per_node
        tp_link = _group_link(memo, group, s.tp, min(s.tp, dpn))
        cp_link = _group_link(memo, group, s.cp, _placement_per_node(dpn, s.tp, s.cp))
        ep_per_node = _placement_per_node(dpn, s.etp, s.ep)
        ep_link = _group_link(memo, group, s.ep, ep_per_node)
        ep_split = ep_node_split(group, s.ep, ep_per_node) if moe else None
        etp_link = _group_link(memo, group, s.etp, min(s.etp, dpn))
        self.links = (tp_link, cp_link, ep_link, etp_link, ep_split)
        self.terms: dict = {}

    def layer_terms(self, model: ModelSpec, s: StrategySpec, seq: int, tokens: float, sp: bool, std: bool, moe: bool,
                    meas: LayerProfile | None, window: bool = False) -> Mapping[str, float]:
        """`_layer_terms` of this strategy (tokens, sp and std follow from s and seq), read-only, memoised.
        `window`: a sliding-window attention layer (ModelSpec.is_window_layer)."""
        try:
            lt = self.terms.get((model, seq, moe, meas, window))
        except TypeError:           # a hand-built spec that does not hash: cost it directly
            return _layer_terms(model, s, self.r, seq, tokens, sp, std, self.links, moe, meas, window, self.memo)
        if lt is None:
            lt = self.terms[(model, seq, moe, meas, window)] = MappingProxyType(
                _layer_terms(model, s, self.r, seq, tokens, sp, std, self.links, moe, meas, window, self.memo))
        return lt


# StrategySpec fields that neither _StageContext nor _layer_terms (nor what they call) read: how the layers are cut
# into stages and how many replicas and chunks run them, which stage_cost, dp_traffic and estimate read themselves.
# Strategies that differ only there share one context (a search tries many pp/dp/vpp per tp/cp/micro-batch), so
# _stage_context keys on every other field (a field added to StrategySpec is in the key unless listed here).
# tests/test_search_prune.py checks that the layer terms do not change with them.
_STAGE_ONLY_FIELDS = frozenset({"pp", "dp", "vpp", "first_stage_layers", "last_stage_layers", "account_for_embedding",
                                "account_for_loss", "balanced_partition", "pipeline_layout",
                                "tp_pp_dp_mapping"})   # the rank order moves only the pp and dp links


@cache
def _context_fields(cls: type) -> Callable[[object], tuple]:
    """The getter of the fields of strategy class `cls` a stage context depends on (all but _STAGE_ONLY_FIELDS)."""
    return attrgetter(*(f.name for f in fields(cls) if f.name not in _STAGE_ONLY_FIELDS))


def _stage_context(group: GroupSpec, precision: str, s: StrategySpec, calibration: Calibration | None, moe: bool,
                   memo: dict | None) -> _StageContext:
    """The strategy's shared stage terms, from `memo` (a cache its caller owns: one search) when it has them. Pure:
    they depend on these arguments only (of s, not on _STAGE_ONLY_FIELDS), read at the time they are first
    computed."""
    if memo is None:
        return _StageContext(group, precision, s, calibration, moe)
    # first by the objects themselves: the stages of one strategy (an estimate's, a template's) pass the same s, and
    # this skips building and hashing its field tuple below. The entry keeps s, group and calibration alive, so their
    # ids cannot name other objects while it exists (a hit is checked all the same)
    fast = ("stage-context-of", id(s), id(group), precision, id(calibration), moe)
    hit = memo.get(fast)
    if hit is not None and hit[0] is s and hit[1] is group and hit[2] is calibration:
        return hit[3]
    sk = _context_fields(StrategySpec)(s) if type(s) is StrategySpec else s
    key = ("stage-context", _Same(group), precision, sk, calibration, moe)
    try:
        ctx = memo.get(key)
    except TypeError:
        return _StageContext(group, precision, s, calibration, moe)
    if ctx is None:
        ctx = memo[key] = _StageContext(group, precision, s, calibration, moe, memo)
    memo[fast] = (s, group, calibration, ctx)
    return ctx


# The links below are pure functions of the group and a few integers (cost/collectives.py), asked for again and again
# by one search (every stage's p2p, every stage's data-parallel sync); with the caller's memo (one search's) each is
# built once (cost/memo.py kept: by the group object).

def _group_link(memo: dict | None, group: GroupSpec, n: int, per_node: int, buckets: int = 1) -> C.Link:
    """C.group_link(group, n, per_node, buckets=buckets), memoised in `memo` (None: computed)."""
    return kept(memo, (group,), ("group-link", n, per_node, buckets),
                lambda: C.group_link(group, n, per_node, buckets=buckets))


def _strategy_rates(memo: dict | None, chip, precision: str, s: StrategySpec, calibration: Calibration | None
                    ) -> ChipRates:
    """strategy_rates(chip, precision, s, calibration), memoised in `memo` by what it reads of s (its attention
    kernel, or its runtime's) and the chip and calibration objects (kept alive in the entry): the stage contexts of a
    search share these few rates objects, and with them the GEMM times `_gemm_timer` keeps."""
    if memo is None:
        return strategy_rates(chip, precision, s, calibration)
    return kept(memo, (chip, calibration),
                ("rates", precision, s.attention_kernel or runtimes.get(s.runtime).attention_kernel),
                lambda: strategy_rates(chip, precision, s, calibration))


def _homogeneous_pp_link(memo: dict | None, group: GroupSpec, s: StrategySpec) -> C.Link:
    """homogeneous_pp_link(group, s), memoised in `memo` by the pipeline stride it reads of s."""
    if memo is None:
        return homogeneous_pp_link(group, s)
    return kept(memo, (group,), ("pp-link", s.tp * s.cp * (1 if s.tp_pp_dp_mapping else s.dp)),
                lambda: homogeneous_pp_link(group, s))


def _p2p_s(memo: dict | None, msg: float, link: C.Link) -> float:
    """C.p2p_s(msg, link), memoised in `memo` by the link object (kept alive in the entry, as above) and the size."""
    return kept(memo, (link,), ("p2p-s", msg), lambda: C.p2p_s(msg, link))


def _embedding_act_bytes(model: ModelSpec, s: StrategySpec, tokens: float, act_bytes: int, sp: bool) -> float:
    """The embedding output the first stage holds (the analytical model charges no time for the lookup)."""
    return tokens * model.hidden * act_bytes / (s.tp if sp else 1)


def _logits_terms(model: ModelSpec, s: StrategySpec, r: ChipRates, tokens: float) -> tuple[float, float, float]:
    """(forward s, backward s, activation bytes) of the output layer + loss on one device, per micro-batch:
    the logits GEMM and fp32 cross-entropy over the logits: Megatron's vocab-parallel loss, fused or unfused
    (bytes per logit counted from its code, forward and backward apart: cost/execution.py), or eager PyTorch
    (measured; half its traffic in the forward, half in the backward)."""
    lg, = keep_16bit([logits_gemm(model, tokens, s.tp)], s, r.chip, r.dtype)
    t_lf = gemm_time_s(lg, r)
    logits = tokens * model.vocab / s.tp
    rt = runtimes.get(s.runtime)
    kernel = s.loss_kernel or rt.loss_kernel
    if kernel == "flash_xent":
        # flash_attn.losses.cross_entropy (one Triton kernel per pass over the 16-bit logits, fp32 math in registers):
        # the forward reads them (the per-row loss and log-sum-exp are all it writes), the backward reads them and
        # writes their 16-bit gradient; it holds the logits and, in the backward, that gradient
        return (t_lf + logits * r.act_bytes / r.hbm_Bps, 2 * t_lf + 2 * logits * r.act_bytes / r.hbm_Bps,
                logits * 2 * r.act_bytes)
    if kernel == "te_xent":
        # Transformer Engine 2.2-2.17 parallel_cross_entropy: the gradient overwrites the 16-bit logits, which are
        # all it keeps (cost/execution.py TE_XENT_PASSES_PER_LOGIT)
        f_p, b_p = TE_XENT_PASSES_PER_LOGIT
        return (t_lf + logits * f_p * r.act_bytes / r.hbm_Bps, 2 * t_lf + logits * b_p * r.act_bytes / r.hbm_Bps,
                logits * r.act_bytes)
    if s.execution == "eager":
        fwd_b = bwd_b = EAGER.loss_bytes_per_logit / 2
    else:
        fwd_b, bwd_b = (MEGATRON_UNFUSED_LOSS_BYTES_PER_LOGIT if kernel == "megatron_unfused"
                        else FUSED_LOSS_BYTES_PER_LOGIT)
    eager_extra = EAGER.extra_loss_activation_bytes_per_logit
    act = logits * loss_bytes_per_logit(rt.memory.loss, s.execution, s.tp, r.act_bytes, eager_extra)
    l_Bps = (r.eager_Bps or r.hbm_Bps) if s.execution == "eager" else r.hbm_Bps
    return t_lf + logits * fwd_b / l_Bps, 2 * t_lf + logits * bwd_b / l_Bps, act


def pp_neighbours_share_node(devices_per_node: int, stride: int) -> bool:
    """Whether neighbouring pipeline stages `stride` ranks apart (placed consecutively) are on one node: only when
    pairs of stages tile the node; otherwise some stage boundary straddles two nodes and that hop crosses the NIC
    (e.g. 36 devices per node, stride 8). The one rule of the homogeneous and the heterogeneous estimates."""
    return stride < devices_per_node and devices_per_node % (2 * stride) == 0


def homogeneous_pp_link(group: GroupSpec, s: StrategySpec) -> C.Link:
    """Link between neighbouring stages of one group: NVLink when the pipeline stride
    (tp*cp*dp ranks) keeps neighbours in a node, else the per-device NIC."""
    # pipeline neighbours are tp x cp x dp ranks apart in Megatron's default order, tp x cp with the tp-pp-dp order
    stride = s.tp * s.cp * (1 if s.tp_pp_dp_mapping else s.dp)
    if pp_neighbours_share_node(group.devices_per_node, stride):
        return C.scaleup_p2p_link(group, 2 * stride)
    return C.nic_p2p_link(group, per_node=min(stride, group.devices_per_node))


def engine_precision(group: GroupSpec, precision: str, runtime: str) -> str:
    """The precision a `precision` job's matrix products run in on `group` under `runtime` (issue 18).
    fp32 storage (fp32, tf32 jobs) maps per chip: the group's `fp32_matmul` when set, else tf32 for a tf32 job and
    the runtime's stack default for an fp32 job (RuntimeSpec.fp32_matmul: Megatron/FlagScale in NGC containers
    run TF32); a chip without TF32 (V100: Volta has no TF32, NVIDIA V100 whitepaper) runs IEEE fp32 instead of
    being dropped. Other precisions are unchanged. Storage, memory and traffic stay the job's (4-byte)."""
    if precision not in FP32_PRECISIONS:
        return precision
    want = group.fp32_matmul or ("tf32" if precision == "tf32" else runtimes.get(runtime).fp32_matmul)
    if want == "tf32" and group.chip.peak_tflops.get("tf32") is None:
        return "fp32"
    return want


def strategy_rates(chip, precision: str, s: StrategySpec, calibration: Calibration | None = None) -> ChipRates:
    """The chip's rates as strategy `s` runs on it: its calibrated GEMM efficiency (specs/calibration.py) and the
    fused-attention kernel of the strategy, or of its runtime."""
    r = ChipRates.of(chip, precision, (calibration or COMMITTED).gemm_scale_for(chip.id))
    return replace(r, attn_kernel=s.attention_kernel or runtimes.get(s.runtime).attention_kernel)


def _layer_kinds(model: ModelSpec, first: int, n: int, n_moe: int) -> tuple[tuple[bool, bool, int], ...]:
    """(MoE, sliding-window, count) of the layers [first, first + n), dense before MoE, full before windowed. An
    MoE stage's per-layer MoE adjustments below (EP overlap, host bound) read the last MoE kind's terms."""
    if model.sliding_window is None:
        return (False, False, n - n_moe), (True, False, n_moe)
    c = {(m, w): 0 for m in (False, True) for w in (False, True)}
    for i in range(first, first + n):
        c[(model.is_moe_layer(i), model.is_window_layer(i))] += 1
    return tuple((m, w, c[(m, w)]) for m, w in sorted(c))


def stage_cost(model: ModelSpec, group: GroupSpec, job: JobSpec, s: StrategySpec, index: int,
               first_layer: int, n_layers: int, m: int,
               p2p_links: tuple[C.Link | None, C.Link | None] | None = None,
               calibration: Calibration | None = None, memo: dict | None = None) -> StageCost:
    """Cost of pipeline stage `index` (layers [first_layer, first_layer + n_layers)) on `group`,
    per micro-batch, plus its memory. `p2p_links` = (link to the previous stage, link to the next)
    for heterogeneous pipelines; default: both from `homogeneous_pp_link`. `memo`: a dict the caller owns (one
    search) in which what every stage of strategy s on this group shares (rates, links, the layers' terms) is
    kept; the same numbers with or without it."""
    ctx = _stage_context(group, job.precision, s, calibration, model.moe is not None, memo)
    r = ctx.r
    tp_link, cp_link, ep_link, etp_link, ep_split = ctx.links
    seq = job.seq_len
    tokens = s.micro_batch * seq / s.cp
    act_bytes = r.act_bytes
    sp = bool(s.sequence_parallel)
    std = s.attention == "standard"

    fwd = bwd = rec = 0.0
    comp = tp_t = cp_t = ep_t = 0.0
    host = host_vs = 0.0
    host_serial = False
    hw_flops = 0.0
    dense_p = expert_p = 0.0
    act = 0.0
    act_layer_full = 0.0
    # a measured profile of this model on this chip (the group's), for this strategy: dense layers,
    # embedding, logits, optimizer; MoE layers and all communication stay analytical
    entry = group.profile.entry_for(model, seq, job.precision, s) if group.profile is not None else None
    label = group.profile.source_label if entry is not None else ANALYTICAL
    src_c: set[str] = set()
    src_a: set[str] = set()
    n_moe = model.moe_layers_in(first_layer, first_layer + n_layers)
    moe_kinds: list[tuple[dict, int]] = []     # each MoE layer kind's terms and its count in this stage
    for moe, window, count in _layer_kinds(model, first_layer, n_layers, n_moe):
        if count == 0:
            continue
        # all layers of a kind (dense or MoE, full or sliding-window attention) are identical: cost one, multiply
        meas = entry.layer if entry is not None and not moe else None
        lt = ctx.layer_terms(model, s, seq, tokens, sp, std, moe, meas, window)
        if moe:
            moe_kinds.append((lt, count))
        src_c.add(label if meas is not None and meas.has_times else ANALYTICAL)
        src_a.add(label if meas is not None and meas.activation_bytes is not None else ANALYTICAL)
        fwd += count * lt["fwd"]
        bwd += count * lt["bwd"]
        rec += count * lt["rec"]
        comp += count * lt["comp"]
        tp_t += count * lt["tp"]
        ep_t += count * lt["ep"]
        cp_t += count * lt["cp"]
        hw_flops += count * lt["hw"]
        dense_p += count * lt["dense_p"]
        expert_p += count * lt["expert_p"]
        act += count * lt["act"]
        act_layer_full = max(act_layer_full, lt["act_full"])
    bwd += rec
    for lt_moe, count in moe_kinds if s.moe_a2a_overlap else ():
        if lt_moe["ep_pass"] <= 0:
            continue
        # Megatron-core's EP all-to-all overlap: in the combined 1F1B a micro-batch's MoE layers run forward beside
        # another's backward (cost/moe.py a2a_overlap_pair_s); the forwards and backwards left unpaired (the first
        # forward, the last backward; interleaving's warm-up and cool-down) run as before
        t_a2a = lt_moe["ep_pass"] / 2
        f1, b1 = lt_moe["fwd"], lt_moe["bwd"] + lt_moe["rec"]
        pre_f = max(f1 - lt_moe["ep_pass"] - lt_moe["mlp_f"], 0.0)
        pre_b = max(b1 - lt_moe["ep_pass"] - lt_moe["mlp_b"], 0.0)
        pair = a2a_overlap_pair_s(pre_f, lt_moe["mlp_f"], pre_b, lt_moe["mlp_b"], t_a2a, count)
        alone = count * (f1 + b1)
        per_mb = pair + a2a_overlap_unmerged(s.pp, s.vpp, m, index) * (alone - pair)
        saved = alone - per_mb
        fwd -= saved * f1 / (f1 + b1)
        bwd -= saved * b1 / (f1 + b1)
        ep_t -= saved
    # the training processes sharing this stage's host CPU (execution.ranks_per_cpu): their launches slow each other
    cpu_ranks = ranks_per_cpu(group.chip.id, min(group.devices_per_node, s.world))
    if n_moe and s.execution == "fused" and s.runtime in TE_GROUPED_MLP_RUNTIMES and model.moe is not None:
        # Megatron-core MoE layers are issued eagerly from Python: the host time of their launches, and the
        # dropless dispatcher's per-layer host sync, can set the pace (cost/moe.py host_bound_moe_layer_s), each
        # layer kind (full or windowed attention) with its own device times
        launches = moe_layer_launches(model, s, quant_recipe(s, r.chip, r.dtype))
        factor, syncs, contention = host_factor(group.chip.id), moe_dispatch_syncs(s), host_contention(cpu_ranks)
        for lt_moe, count in moe_kinds:
            d_f, d_b = lt_moe["fwd"], lt_moe["bwd"]
            d_e = min(lt_moe["moe_dev_experts"], d_f)
            d_r = min(lt_moe["moe_dev_router"], d_f - d_e)
            t_f, t_b = host_bound_moe_layer_s(launches, factor, d_e, d_f - d_e - d_r, d_r, d_b, syncs, contention)
            fwd += count * (t_f - d_f)
            bwd += count * (t_b - d_b)
    if s.execution == "eager":
        # eager PyTorch: the host must dispatch every op; a host slower than the device sets the pace,
        # and expert all-to-alls with data-dependent splits serialise the two (cost/execution.py)
        # the per-expert loop's ops: none where the experts are one grouped launch (cost/moe.py expert_gemm_kind)
        local_e = model.moe.experts / s.ep if model.moe is not None and expert_gemm_kind(s) == "linear" else 0.0
        host = eager_host_s(n_layers, n_moe, local_e, s.recompute == "full", s.dp * s.cp, s.zero, s.tp,
                            ep=s.ep, expert_ddp=s.edp > 1, micro_batches=m,
                            ranks_per_host=cpu_ranks, op_sac=runs_op_sac(s, ctx.rt))
        if s.cp > 1 and (s.cp_comm or ctx.rt.cp_comm) == "torch_ring":
            # PyTorch's ring attention: DTensor dispatch and the ring's Python per layer (cost/cp.py TORCH_RING_HOST_S,
            # forward + backward); full recomputation issues the forward's share again (25 of its ~63 ops)
            host += n_layers * TORCH_RING_HOST_S * (1.0 + TORCH_RING_HOST_FWD_SHARE * (s.recompute == "full"))
        host_serial = bool(n_moe and s.ep > 1)
        host_vs = fwd + bwd
        bwd += host if host_serial else max(0.0, host - host_vs)

    last = index == s.pp - 1
    extra_act = 0.0
    emb_p = 0.0
    if s.activation_offload_layers:
        # Megatron-core activation offloading to host memory (cost/offload.py)
        chip = group.chip
        host_bw = chip.host_link_GBps or chip.pcie_GBps
        if host_bw is None:
            raise SpecError("activation_offload_layers",
                            f"chip {chip.id} states no host link (host_link or pcie): offloading cannot be costed")
        off = activation_offload(s.activation_offload_layers, n_layers, act, fwd, bwd, host_bw)
        fwd += off.exposed_fwd_s
        bwd += off.exposed_bwd_s
        act *= off.keep_fraction
        extra_act += off.buffer_bytes
    if index == 0:
        emb_p += model.vocab * model.hidden / s.tp
        emb = entry.embedding if entry is not None else None
        ea = _embedding_act_bytes(model, s, tokens, act_bytes, sp)
        if emb is not None and emb.activation_bytes is not None:
            ea = emb.activation_bytes
        extra_act += ea
        if emb is not None and emb.has_times:
            fwd += emb.forward_s
            bwd += emb.backward_s
            comp += emb.forward_s + emb.backward_s
        src_c.add(label if emb is not None and emb.has_times else ANALYTICAL)
        src_a.add(label if emb is not None and emb.activation_bytes is not None else ANALYTICAL)
    if last:
        if not (model.tie_embeddings and s.pp == 1):
            emb_p += model.vocab * model.hidden / s.tp
        lg_f, lg_b, lg_act = _logits_terms(model, s, r, tokens)
        out = entry.logits if entry is not None else None
        if out is not None and out.has_times:
            lg_f, lg_b = out.forward_s, out.backward_s
        if out is not None and out.activation_bytes is not None:
            lg_act = out.activation_bytes
        fwd += lg_f
        bwd += lg_b
        comp += lg_f + lg_b
        hw_flops += 3 * logits_gemm(model, tokens, s.tp).flops
        extra_act += lg_act
        src_c.add(label if out is not None and out.has_times else ANALYTICAL)
        src_a.add(label if out is not None and out.activation_bytes is not None else ANALYTICAL)
        if model.mtp_layers:
            # multi-token prediction (Megatron-core MultiTokenPredictionBlock, in the last stage's post-process):
            # per depth one more layer of the last layer's kind, fed by a 2h -> h projection of [norm(h);
            # norm(embedding)], and one more output layer and loss (analytical, without the MoE host terms
            # above); with pipelining this stage also holds the shared input embedding
            k = model.mtp_layers
            last_i = model.layers - 1
            lt = ctx.layer_terms(model, s, seq, tokens, sp, std, model.is_moe_layer(last_i), None,
                                 model.is_window_layer(last_i))
            eh_gemm = Gemm("mtp_eh_proj", tokens, model.hidden / s.tp, 2 * model.hidden)
            eh = gemm_time_s(eh_gemm, r)
            fwd += k * (lt["fwd"] + eh + lg_f)
            bwd += k * (lt["bwd"] + lt["rec"] + 2 * eh + lg_b)
            comp += k * (lt["comp"] + 3 * eh + lg_f + lg_b)
            tp_t += k * lt["tp"]
            ep_t += k * lt["ep"]
            cp_t += k * lt["cp"]
            hw_flops += k * (lt["hw"] + 3 * eh_gemm.flops + 3 * logits_gemm(model, tokens, s.tp).flops)
            dense_p += k * (lt["dense_p"] + 2 * model.hidden * model.hidden / s.tp)
            expert_p += k * lt["expert_p"]
            act += k * lt["act"]
            extra_act += k * lg_act
            if s.pp > 1:
                emb_p += model.vocab * model.hidden / s.tp
    dense_p += emb_p
    rt_exec = ctx.rt
    if rt_exec.grad_accum is not None:
        # gradient accumulation the runtime runs outside the weight-gradient GEMM, once per micro-batch over the
        # parameters the stage holds (specs/runtime.py GradAccum; specs/runtimes/deepspeed.py _grad_accum)
        ga = rt_exec.grad_accum(job.precision, s.zero, s.pp)
        if ga.bytes_per_param:
            t_ga = ga.bytes_per_param * (dense_p + expert_p) / r.hbm_Bps * (1.0 if ga.first else (m - 1) / m)
            bwd += t_ga
            comp += t_ga

    # Pipeline p2p: each stage boundary sends b*s*h (scatter-gather / SP: /tp) forward and backward.
    pp_t = 0.0
    if s.pp > 1:
        prev_link, next_link = p2p_links if p2p_links is not None else (_homogeneous_pp_link(memo, group, s),) * 2
        msg = tokens * model.hidden * act_bytes / s.tp
        if entry is not None and entry.layer.output_bytes is not None:
            msg = entry.layer.output_bytes / s.tp
        if index > 0 and prev_link is not None:
            pp_t += _p2p_s(memo, msg, prev_link) * s.vpp
        if index < s.pp - 1 and next_link is not None:
            pp_t += _p2p_s(memo, msg, next_link) * s.vpp
        fwd += pp_t / 2
        bwd += pp_t / 2
        if rt_exec.pipe_partitioned and s.tp > 1 and not sp:
            # the receiver rebuilds the 1/tp it got (PartitionedTensor.full(): zeros, all-gather over TP,
            # clone; specs/runtimes/deepspeed.py): the input in the forward of a non-first stage, the output and its
            # gradient in the backward of a non-last stage
            full = msg * s.tp
            rebuild = C.all_gather_s(full, tp_link) + 3 * full / r.hbm_Bps
            f_rb = rebuild if index > 0 else 0.0
            b_rb = 2 * rebuild if index < s.pp - 1 else 0.0
            fwd += f_rb
            bwd += b_rb
            pp_t += f_rb + b_rb

    # Memory: what the runtime allocates (specs/runtime.py MemorySemantics, declared with sources in
    # specs/runtimes/NAME.py; cost/memory.py; docs/COST_MODEL.md "Memory model"). ZeRO shards over the ranks
    # holding the same weights: dp x cp (the distributed optimizer's intra_dp_cp group), experts over edp.
    rt = ctx.rt
    mem = rt.memory
    if bf16_grad_reduce(s, job.precision):
        # the main-grad buffer is bf16 ("4 + 16/d" row of Megatron's dist_optimizer.md)
        mem = replace(mem, grad_bytes_bf16=BF16_GRAD_BYTES)
    dp_dense = s.dp * s.cp
    kb = getattr(s, "optimizer_bytes_per_param", 0.0) or None   # a recipe's optimizer state (cost/memory.py)
    # FSDP's SHARD_GRAD_OP (zero 2 where RuntimeSpec.fsdp_zero2): every state sharded as under zero 3, and the
    # gathered 16-bit parameters kept from each forward to its backward (below)
    shard_grad_op = s.zero == 2 and rt.fsdp_zero2
    zs = 3 if shard_grad_op else s.zero
    w_b, g_b, k_b, st_b = state_bytes(mem, job.precision, zs, s.state_shards, kb)   # HSDP: one replica's group
    we_b, ge_b, ke_b, ste_b = state_bytes(mem, job.precision, zs, s.edp, kb)
    weights = dense_p * w_b + expert_p * we_b
    grads = dense_p * g_b + expert_p * ge_b
    optim = dense_p * k_b + expert_p * ke_b
    step_copy = dense_p * st_b + expert_p * ste_b   # the step's fp32 gradient copy (not during fwd/bwd)
    fp32 = job.precision in FP32_PRECISIONS
    pb = 4 if fp32 else mem.zero3_param_bytes      # a gathered parameter (FSDP2 param_dtype)
    fsdp = s.zero >= 3 or mem.fsdp_always
    fp8_b = 0.0   # TE's fp8 bytes per layer parameter that is gathered (cost/memory.py fp8_layer_weight_bytes)
    if job.precision in QUANTIZED_PRECISIONS:
        # TE's cached fp8 (NVFP4) weight + transpose over bf16 weights, or fp8 primary weights (--fp8-param-gather)
        # replacing the 16-bit copy; embedding and output layer stay bf16. Sharded (ZeRO-3 / FSDP) weights have
        # their fp8 copy only while gathered: the units in use below
        primary = bool(getattr(s, "fp8_param_gather", False)) and s.zero < 3
        fp8_b = fp8_layer_weight_bytes(mem, primary, precision=job.precision)
        if not fsdp or shard_grad_op or rt.zero3_gather(s.pp) == "step":
            weights += fp8_b * max(dense_p + expert_p - emb_p, 0.0)
    if shard_grad_op:
        # reshard_after_forward=False (FSDP1 ShardingStrategy.SHARD_GRAD_OP, FSDP2 fully_shard(reshard_after_forward=
        # False)): every unit's 16-bit parameters stay gathered from its forward to its backward, so at the peak
        # (the last forward) the whole stage is resident, plus one unit's 16-bit grads + reduce-scatter input
        layer_full = max(dense_p + expert_p - emb_p, 0.0) / max(n_layers, 1)
        weights += pb * (dense_p + expert_p)
        grads += (pb + (4 if fp32 else mem.zero3_reduce_bytes)) * layer_full
    elif fsdp and rt.zero3_gather(s.pp) == "step":
        # pipelining + FSDP2 keeps the stage unsharded through the step: 16-bit parameters, and gradients
        # accumulated unsharded in reduce_dtype (torch.distributed.pipelining backward_maybe_with_nosync;
        # FSDPParam.to_accumulated_grad_if_needed)
        weights += pb * (dense_p + expert_p)
        grads += (4 if fp32 else mem.pipeline_grad_bytes) * (dense_p + expert_p)
    elif fsdp:
        # one unit (a layer; per weight matrix for DeepSpeed; the embedding or output layer) gathered in use and
        # the next prefetched (DeepSpeed: up to its prefetch bucket), and in its backward the unit's unsharded
        # 16-bit grads + the reduce-scatter input
        layer_full = max(dense_p + expert_p - emb_p, 0.0) / max(n_layers, 1)
        unit = max(layer_full / zero3_collectives_per_layer(s), model.vocab * model.hidden / s.tp if emb_p else 0.0)
        ahead = unit if mem.zero3_prefetch_params is None else min(unit, mem.zero3_prefetch_params)
        weights += pb * (unit + ahead) + fp8_b * min(unit + ahead, layer_full * 2)
        grads += (pb + (4 if fp32 else mem.zero3_reduce_bytes)) * unit
    inflight = inflight_microbatches(s.pp, s.vpp, m, index)
    if s.moe_a2a_overlap and s.pp > 1:
        # the EP overlap's extra warm-up forward (schedules.py get_pp_rank_microbatches): one more chunk held
        inflight = min(inflight + 1 / s.vpp, m)
    activations = act * inflight + extra_act + act_layer_full
    if s.execution == "eager" and s.zero == 0 and dp_dense == 1:
        # no DDP bucket: .grad tensors appear during backward as activations are freed; the peak is
        # the larger of (all activations, no grads) and (all grads, no activations)
        if activations >= grads:
            grads = 0.0
        else:
            activations = 0.0
    # the step's fp32 gradient copy exists from the step to the next zero_grad, when activations are freed
    optim += max(0.0, step_copy - activations)
    allocated = weights + grads + optim + activations
    groups = comm_groups(s.tp, s.cp, s.dp, s.pp, s.ep, s.etp)
    full_rc = s.recompute == "full"
    other = reserve_bytes(mem, allocated, groups)   # unreclaimable allocator fragmentation + context + NCCL
    # the fused Adam step's bytes, plus what an unfused optimizer moves beyond them (UnfusedKernels: torch AdamW)
    opt_rate = (adam_bytes_per_param(job.precision) + rt.unfused.optimizer_extra_bytes) / r.hbm_Bps
    if entry is not None and entry.optimizer_s_per_param is not None:
        opt_rate = entry.optimizer_s_per_param
    sources = (("compute", join_sources(src_c or {ANALYTICAL})),
               ("activation_memory", join_sources(src_a or {ANALYTICAL})),
               ("optimizer_step", label if entry is not None and entry.optimizer_s_per_param is not None
                else ANALYTICAL))
    # make: StageCost(...) without its frozen __init__'s 24 object.__setattr__ calls (every stage the search costs)
    return make(StageCost, index=index, layers=(first_layer, first_layer + n_layers), fwd_s=fwd, bwd_s=bwd,
                           compute_s=comp, tp_s=tp_t, cp_s=cp_t, ep_s=ep_t, pp_s=pp_t,
                           weights_gib=weights / GIB, grads_gib=grads / GIB, optimizer_gib=optim / GIB,
                           activations_gib=activations / GIB, other_gib=other / GIB,
                           dense_params=dense_p, expert_params=expert_p, hw_flops=hw_flops,
                           optimizer_s_per_param=opt_rate, sources=sources,
                           slack_gib=slack_bytes(mem, allocated, full_rc) / GIB, outside_gib=outside_gib(mem, groups),
                           host_s=host, host_vs_s=host_vs, host_serial=host_serial)


# What an overlapped data-parallel collective (the gradient reduction under the backward, the distributed optimizer's
# parameter all-gather under the next forward) costs the compute beside it, per second of the collective: the window
# takes max(collective, window + K min(collective, window)) (DpTraffic.exposed_s). Measured, not fitted:
# benchmarks/real/collective_contention.py, bf16 GEMM chains beside 512 MiB NCCL collectives on 2 and 4 H200 over
# NVLink, K = all-gather 0.566 / 0.583, reduce-scatter 1.682 / 0.859, all-reduce 0.346 / 0.411: the median of the
# six, 0.574. Applied across nodes as measured inside one (multi-node hierarchical collectives were not measured).
# Fitted jointly with specs/calibration.py's constants instead, leave-one-source-out moved those along their ridges
# (held-out median 7.0 %, p90 24.8 %, where this measured value gives 6.4 % / 22.3 %).
DP_OVERLAP_CONTENTION = 0.574


@dataclass(frozen=True)
class DpTraffic:
    """One stage's data-parallel / ZeRO traffic per step, as its runtime runs it (specs/runtime.py).

    grads_s: one gradient reduction (all-reduce, or reduce-scatter under ZeRO >= 1) of the stage;
    reductions: 1 (accumulate, reduce once per step) or m (reduce after every micro-batch: DeepSpeed
    ZeRO-2, FSDP2 without no_sync); grad_window_s: compute one reduction hides under (bucketed,
    launched as backward produces gradients: the backward of the micro-batch it follows, less the last
    bucket), 0 when the runtime issues it after the backward / pipeline flush; params_s: the 16-bit
    parameter all-gather of ZeRO >= 1, hidden under param_window_s (the next forward with Megatron's
    overlap_param_gather, 0 when gathered right after the optimizer step); last_bucket: the share of a
    reduction that cannot overlap (the last bucket: one layer of gradients); zero3_s: ZeRO-3 gathers
    and reduce-scatters issued per micro-batch (their own overlap model, `zero3_compute_s`);
    extra_s: once-per-step traffic callers add (cross-shape sync), in the last reduction's window.
    tail_s: time from the end of this stage's last backward to the end of the pipeline's (stage 0's):
    in 1F1B the last micro-batch's backward still runs on the stages before this one, so what the last
    reduction exposes past its own backward hides under that too (0 for stage 0, which finishes last).
    """

    grads_s: float = 0.0
    reductions: int = 1
    grad_window_s: float = 0.0
    params_s: float = 0.0
    param_window_s: float = 0.0
    last_bucket: float = 1.0
    zero3_s: float = 0.0
    zero3_compute_s: float = 0.0
    extra_s: float = 0.0
    zero3_overlap: float = ZERO3_OVERLAP   # Calibration.zero3_overlap
    tail_s: float = 0.0
    overlap_contention: float = DP_OVERLAP_CONTENTION

    @property
    def total_s(self) -> float:
        return self.reductions * self.grads_s + self.params_s + self.zero3_s + self.extra_s

    @property
    def exposed_s(self) -> float:
        """Exposed seconds. A reduction overlapped with backward exposes max(last bucket, what
        exceeds its window); one issued after the backward exposes all of it. ZeRO-3 per-micro-batch
        gathers overlap the whole step's compute C partially: max(C, M) + (1 - ZERO3_OVERLAP)
        min(C, M) - C."""
        def over(x: float) -> float:
            return max(x * self.last_bucket, x - self.grad_window_s) if self.grad_window_s > 0 else x
        last = over(self.grads_s + self.extra_s) if self.reductions else over(self.extra_s)
        g = (self.reductions - 1) * over(self.grads_s) + max(0.0, last - self.tail_s) if self.reductions \
            else max(0.0, last - self.tail_s)
        p = max(0.0, self.params_s - self.param_window_s)
        k = self.overlap_contention
        if k:
            # a collective beside the compute it overlaps slows it by k x their overlap (DP_OVERLAP_CONTENTION):
            # the window takes max(collective, window + k min(collective, window))
            if self.grad_window_s > 0 and self.reductions:
                g = max(g, k * self.reductions * min(self.grads_s, self.grad_window_s))
            if self.param_window_s > 0:
                p = max(p, k * min(self.params_s, self.param_window_s))
        z = 0.0
        if self.zero3_s > 0:
            c, m = self.zero3_compute_s, self.zero3_s
            z = max(c, m) + (1 - self.zero3_overlap) * min(c, m) - c
        return g + p + z

    def plus(self, extra_s: float) -> DpTraffic:
        return replace(self, extra_s=self.extra_s + extra_s)


def dp_traffic(st: StageCost, group: GroupSpec, s: StrategySpec, job: JobSpec, m: int,
               calibration: Calibration | None = None, tail_s: float = 0.0, memo: dict | None = None) -> DpTraffic:
    """DP/ZeRO traffic of one stage per step, with the runtime's schedule of it (specs/runtimes/NAME.py):
    when gradients are reduced (once per step or per micro-batch), what they overlap, and when ZeRO's
    parameter all-gather runs. `tail_s`: DpTraffic.tail_s (pipelines: the later stages' lead). `memo`: stage_cost's
    (one search's), where the group links are kept; the same numbers with or without it."""
    rt = runtimes.get(s.runtime)
    dpn = group.devices_per_node
    dp_n = s.dp * s.cp
    # measured link curves are read at the piece each collective moves: one layer's gradients (bucket),
    # one collective per layer (per weight matrix for DeepSpeed ZeRO-3); no effect without curves
    shard_grad_op = s.zero == 2 and rt.fsdp_zero2   # FSDP SHARD_GRAD_OP: ZeRO-3 traffic less the backward gather
    pieces = max(1, st.layers[1] - st.layers[0]) * (zero3_collectives_per_layer(s) if s.zero >= 3 or shard_grad_op
                                                    else 1)
    link = _group_link(memo, group, dp_n, dp_ranks_per_node(dpn, s, dp_n), buckets=pieces)
    # expert data parallelism strides over the expert grid (etp x ep), and with the tp-pp-dp order over the
    # pipeline too (Megatron's expert RankGenerator takes the same order)
    edp_inner = s.tp * s.cp * s.ep * s.etp // max(s.tp, 1) * (s.pp if s.tp_pp_dp_mapping else 1)
    edp_link = _group_link(memo, group, s.edp, _placement_per_node(dpn, edp_inner, s.edp), buckets=pieces)
    dense, expert = st.dense_params, st.expert_params
    n_layers = max(1, st.layers[1] - st.layers[0])
    if s.zero >= 3 or shard_grad_op:
        # ZeRO-3 / FSDP: gather 16-bit weights for forward and for backward (recomputation reuses the
        # backward gather) and reduce-scatter 16-bit gradients. FSDP issues one collective per layer
        # over NCCL's hierarchical rings (group_link); DeepSpeed ZeRO-3 one per weight matrix, which
        # across nodes ran as a flat ring at per-device NIC rate (Narayanan 2021 Table 2, COST_MODEL.md).
        nodes = -(-dp_n // max(1, dp_ranks_per_node(dpn, s, dp_n)))
        z_link = C.flat_ring_link(group, dp_n, pieces) if nodes > 1 and s.zero3_impl == "deepspeed" else link
        size = (dense + expert) * weight_bytes(job.precision)   # 16-bit (fp32 in fp32/tf32) weights and grads
        replicas_s = 0.0
        if s.fsdp_shard:
            # HSDP: every gather and reduce-scatter stays inside one replica's shard group of fsdp_shard consecutive
            # dp·cp ranks (torchtitan's dp_shard x cp mesh dimension, FSDP1 HYBRID_SHARD's node, Megatron-FSDP's
            # intra_dp_cp group), then each reduce-scattered shard (1/fsdp_shard of the gradients) is all-reduced
            # across the replicas, ranks fsdp_shard apart (FSDP2 foreach_reduce: reduce_scatter then all_reduce on
            # the replicate group, per unit, with the reduce-scatter; FSDP1 _post_backward_hook likewise)
            per_node = dp_ranks_per_node(dpn, s, dp_n)
            shard, reps = s.fsdp_shard, dp_n // s.fsdp_shard
            z_link = C.group_link(group, shard, min(shard, per_node), buckets=pieces)
            r_link = C.group_link(group, reps, max(1, per_node // shard), buckets=pieces)
            replicas_s = C.all_reduce_s(size / shard, r_link) + \
                max(0, pieces - 1) * C.latency_s(r_link, "all_reduce")
        if rt.zero3_gather(s.pp) == "step":
            # pipelining + FSDP2: one gather before the first forward, one reduce-scatter in the last
            # backward; the stage's parameters stay unsharded in between
            return make(DpTraffic, grads_s=C.reduce_scatter_s(size, z_link) + replicas_s,
                                   grad_window_s=st.bwd_s * (1 - 1 / n_layers),
                                   params_s=C.all_gather_s(size, z_link), param_window_s=st.fwd_s,
                                   last_bucket=1 / n_layers, tail_s=tail_s)
        # forward gather, backward gather, gradient reduce-scatter; SHARD_GRAD_OP keeps the forward's gather for
        # the backward (reshard_after_forward=False) and reshards after it: two collectives per micro-batch
        n_coll = 2 if shard_grad_op else 3
        per_mb = n_coll * C.all_gather_s(size, z_link)
        per_mb += n_coll * max(0, n_layers * zero3_collectives_per_layer(s) - 1) * C.latency_s(z_link, "all_gather")
        per_mb += replicas_s
        return make(DpTraffic, reductions=0, zero3_s=per_mb * m, zero3_compute_s=m * st.time_s,
                               zero3_overlap=(calibration or COMMITTED).zero3_overlap_for(s.zero3_impl))
    # the runtime's schedule of the sync, a pure function of (runtime, zero, pp): kept in the search's memo
    sync = memo.get(("grad-sync", s.runtime, s.zero, s.pp)) if memo is not None else None
    if sync is None:
        sync = rt.grad_sync(s.zero, s.pp)
        if memo is not None:
            memo[("grad-sync", s.runtime, s.zero, s.pp)] = sync
    gb = precision_state_bytes(job.precision, rt.grad_bytes)[1]   # main-grad bytes (4 in fp32/tf32)
    if bf16_grad_reduce(s, job.precision):
        gb = BF16_GRAD_BYTES
    wb = weight_bytes(job.precision)
    if s.zero == 0:
        grads = C.all_reduce_s(dense * gb, link) + C.all_reduce_s(expert * gb, edp_link)
        params = 0.0
    else:
        # distributed optimizer / ZeRO-1,2: reduce-scatter gradients (DeepSpeed: one all-reduce per bucket,
        # RuntimeSpec.zero_grad_allreduce), all-gather 16-bit params
        reduce = C.all_reduce_s if rt.zero_grad_allreduce else C.reduce_scatter_s
        grads = reduce(dense * gb, link) + reduce(expert * gb, edp_link)
        params = C.all_gather_s(dense * wb, link) + C.all_gather_s(expert * wb, edp_link)
    overlapped = sync.overlap == "backward" and s.overlap_grad_reduce
    return make(DpTraffic, grads_s=grads, reductions=m if sync.grads == "micro_batch" else 1,
                           grad_window_s=st.bwd_s * (1 - 1 / n_layers) if overlapped else 0.0,
                           params_s=params, param_window_s=st.fwd_s if sync.params == "next_forward" else 0.0,
                           last_bucket=1 / n_layers, tail_s=tail_s)


def estimate(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, s: StrategySpec,
             memory_frac: float = 1.0, calibration: Calibration | None = None, memo: dict | None = None) -> Estimate:
    """Estimate one homogeneous strategy. Raises SpecError when the strategy is invalid.
    `calibration`: the corpus-fitted constants (specs/calibration.py); None = the committed values. `memo`:
    stage_cost's, a cache the caller (one search) owns; the same numbers with or without it."""
    if cluster.is_heterogeneous:
        from baige_plan.errors import SpecError
        raise SpecError("cluster", f"{cluster.name!r} has {len(cluster.groups)} groups; homogeneous "
                        "strategies need one group (heterogeneous plans come from `baige-plan plan`)")
    group = cluster.groups[0]
    check_strategy(s, model, job, cluster.devices)
    m = job.global_batch // (s.dp * s.micro_batch)
    split = stage_layers(s, model.layers)
    stages = []
    first = 0
    sync0 = None    # stage 0's data-parallel traffic, when first_stage_cost has it
    for i, n in enumerate(split):
        if i == 0 and calibration is None and memo is not None:
            st0, sync0 = first_stage_cost(model, group, job, s, memo)
            stages.append(st0)
        else:
            stages.append(stage_cost(model, group, job, s, i, first, n, m, calibration=calibration, memo=memo))
        first += n
    times = [st.time_s for st in stages]
    t_max = max(times)
    crit = stages[times.index(t_max)]
    pipe = pipeline_s(times, m, s.vpp)
    bubble = pipe - m * t_max

    dp_total = dp_exposed = 0.0
    for st in stages:
        # 1F1B cool-down: the last micro-batch's backward runs on stage i, then on i-1, ... 0, so stage i
        # ends sum_{j<i} t_b,j / v before stage 0 (measured on 4x H200, docs/VALIDATION.md "TP and
        # micro-batch": gpt-1.3b pp2 x dp2 stage 1 reaches its optimizer 51-56 ms before stage 0)
        tail = sum(o.bwd_s for o in stages[:st.index]) / s.vpp
        traffic = sync0 if st.index == 0 and sync0 is not None else \
            dp_traffic(st, group, s, job, m, calibration, tail_s=tail, memo=memo)
        if traffic.exposed_s >= dp_exposed:
            dp_exposed, dp_total = traffic.exposed_s, traffic.total_s
    # Optimizer step: memory-bound Adam over the locally owned (ZeRO-sharded) parameters.
    r = ChipRates.of(group.chip, engine_precision(group, job.precision, s.runtime))
    opt_s = 0.0
    for st in stages:
        owned = st.dense_params / (s.state_shards if s.zero >= 1 else 1) + st.expert_params / (s.edp if s.zero >= 1 else 1)
        opt_s = max(opt_s, owned * optimizer_rate(st, r))
    step = pipe + dp_exposed + opt_s

    devices = cluster.devices
    tokens = job.global_batch * job.seq_len
    mflops = megatron_model_flops(model, job.global_batch, job.seq_len)
    peak = r.peak_flops
    hw = sum(st.hw_flops for st in stages) * m * s.tp * s.cp * s.dp
    mfu = mflops / (step * devices * peak)
    hfu = hw / (step * devices * peak)

    mem_stage = max(stages, key=lambda st: st.memory_gib)
    capacity = group.chip.need("memory_gib")
    peak_mem = mem_stage.memory_gib
    fits = peak_mem <= capacity * memory_frac
    breakdown = {
        "compute": m * crit.compute_s,
        "tp_comm": m * crit.tp_s,
        "cp_comm": m * crit.cp_s,
        "ep_comm": m * crit.ep_s,
        "pp_comm": m * crit.pp_s,
        "pp_bubble": bubble,
        "dp_comm_exposed": dp_exposed,
        "optimizer": opt_s,
    }
    breakdown.update(host_breakdown(crit, m))
    memory = {"weights": mem_stage.weights_gib, "grads": mem_stage.grads_gib, "optimizer": mem_stage.optimizer_gib,
              "activations": mem_stage.activations_gib, "other": mem_stage.other_gib}
    bottleneck = _bottleneck(breakdown, step, fits, peak_mem, capacity * memory_frac, dp_total)
    return make(Estimate, strategy=s, global_batch=job.global_batch, fits=fits, step_time_s=step,
                          tokens_per_s=tokens / step, tokens_per_s_per_device=tokens / step / devices,
                          model_tflops_per_device=mflops / step / devices / 1e12, mfu=mfu, hfu=hfu,
                          peak_memory_gib=peak_mem, capacity_gib=capacity, breakdown_s=breakdown, memory_gib=memory,
                          stages=tuple(stages), micro_batches=m, devices=devices, bottleneck=bottleneck,
                          memory_frac=memory_frac)


def first_stage_cost(model: ModelSpec, group: GroupSpec, job: JobSpec, s: StrategySpec, memo: dict | None
                     ) -> tuple[StageCost, DpTraffic]:
    """Stage 0 of strategy s as `estimate` costs it (its layers, m micro-batches, default links, the committed
    calibration) and its data-parallel traffic (no later stage's lead: tail 0, as estimate's stage 0), kept in `memo`
    (one search's) by the strategy, group, model and job objects, which the entry keeps alive: the search's
    data-parallel bound (search/bounds.py dp_lb_s) asks for both, then the row's estimate, with the same objects."""
    def compute() -> tuple[StageCost, DpTraffic]:
        m = job.global_batch // (s.dp * s.micro_batch)
        st0 = stage_cost(model, group, job, s, 0, 0, stage_layers(s, model.layers)[0], m, memo=memo)
        return st0, dp_traffic(st0, group, s, job, m, tail_s=0.0, memo=memo)
    return kept(memo, (s, group, model, job), ("first-stage",), compute)


def pipeline_s(stage_times_s: list[float], m: int, vpp: int) -> float:
    """A homogeneous pipeline's time for m micro-batches: m x the slowest stage's micro-batch, plus the other
    stages' fill and drain, divided by the model chunks per stage (interleaved 1F1B)."""
    t_max = max(stage_times_s)
    return m * t_max + (sum(stage_times_s) - t_max) / vpp


def optimizer_rate(st: StageCost, r: ChipRates) -> float:
    """Seconds of the optimizer step per locally owned parameter of a stage: measured (profile) or the
    memory-bound Adam step, ADAM_BYTES_PER_PARAM / achievable HBM bandwidth."""
    return st.optimizer_s_per_param if st.optimizer_s_per_param is not None else adam_bytes_per_param(r.dtype) / r.hbm_Bps


def host_breakdown(crit: StageCost, m: int) -> dict[str, float]:
    """{"host": s} when the slowest stage's micro-batch takes longer than its device parts (compute and its own
    communication): what the host adds by setting the pace -- eager PyTorch's dispatch beyond the device time, the
    host syncs of EP all-to-alls with data-dependent splits (stage_cost: host_serial), Megatron's host-bound MoE
    layers (cost/moe.py host_bound_moe_layer_s) -- so the breakdown adds up to the step; {} otherwise (the key is
    written only where it is not zero: plans without it are unchanged)."""
    excess = crit.time_s - (crit.compute_s + crit.tp_s + crit.cp_s + crit.ep_s + crit.pp_s)
    return {"host": m * excess} if excess > 1e-12 * max(crit.time_s, 1e-30) else {}


def _bottleneck(b: dict[str, float], step: float, fits: bool, peak: float, cap: float, dp_total: float) -> str:
    if not fits:
        return f"does not fit: peak memory {peak:.1f} GiB exceeds the {cap:.1f} GiB allowed by {peak - cap:.1f} GiB"
    name, val = max(b.items(), key=lambda kv: kv[1])
    words = {"compute": "compute (GEMMs and memory-bound kernels)", "tp_comm": "tensor-parallel communication",
             "cp_comm": "context-parallel communication", "ep_comm": "expert-parallel all-to-all",
             "pp_comm": "pipeline point-to-point traffic", "pp_bubble": "the pipeline bubble",
             "dp_comm_exposed": "exposed data-parallel gradient communication", "optimizer": "the optimizer step",
             "host": "the host (dispatching eager ops or syncing with the device; the device waits)"}
    return f"{words[name]} takes {val / step:.0%} of the step"
