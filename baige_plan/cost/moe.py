"""Mixture-of-experts layer costs on one device (docs/COST_MODEL.md §2c): the terms an MoE layer adds to
a transformer layer's attention and memory-bound work, as Megatron-core runs them
(megatron/core/transformer/moe/: router.py, token_dispatcher.py, experts.py, moe_utils.py).

Pure functions of the model, strategy and chip rates; the expert GEMMs themselves are
cost/flops.py `linear_gemms` (sizes) and cost/compute.py `gemm_time_s` (grouped/looped rates), the
routing and permutation bytes cost/compute.py `moe_dispatch_bytes`, the load factor cost/flops.py
`expert_load_factor`, eager host operations cost/execution.py `eager_moe_layer_ops`.

What depends on the runtime (each from its source):
- the router of a benchmark run (`moe_router`): Megatron-core's `moe_router_force_load_balancing` (the
  switch NeMo / Megatron-Bridge MoE benchmarks set) replaces the router logits by random normal ones
  (megatron/core/transformer/moe/router.py TopKRouter.forward -> moe_utils.py apply_random_logits /
  RandomSTE, core_v0.15.0): each token takes top-k of random logits, i.e. k experts uniformly at random,
  so per-expert counts are random (flops.expert_load_factor "random"), not equal; our harness's
  `balanced` router is exact (i*k + j) % E;
- fp8 padding of the grouped GEMM inputs (`fp8_padding_bytes`): Megatron's TEGroupedMLP pads every
  expert's rows to a multiple of 16 (Transformer Engine Fp8Padding / Fp8Unpadding, TE 2.x
  pytorch/module/fp8_padding.py: a no-op only when every count already is one) unless
  `moe_router_padding_for_fp8` pads the routing map instead (off in the Megatron-Bridge 25.x recipes);
- the expert GEMM backward (`grouped_mm_bwd_extra_s`): torch._grouped_mm (torchtitan's
  `_run_experts_grouped_mm`) differentiates into a grouped dgrad and a K-grouped weight gradient that
  runs well below the forward's rate (GROUPED_MM_BWD_OVER_FWD, measured); Transformer Engine's
  GroupedLinear on Hopper issues one cuBLAS GEMM per expert over 4 streams (te_general_grouped_gemm ->
  nvte_multi_stream_cublas_gemm, "for now, we only have multi-stream cublas backend"), whose dgrad + wgrad
  take 2.0x the forward as a dense GEMM's do (the same measurement);
- the all-to-all of an EP group that spans nodes (`EpNodeSplit`, `all_to_all_across_nodes_s`): each rank's share
  for ranks on other nodes leaves through its own NIC -- an all-to-all aggregates nothing per node, unlike the
  hierarchical rings collectives.group_link prices (busbw = min(NVLink, g x NIC)) -- so the NIC part takes
  S (n-g)/n / NIC while the node's part takes S (g-1)/n over the scale-up link, concurrently;
- the device time of fp8 quantisation kernels (`QUANT_KERNEL_DEVICE_S`): TE quantises every local expert's GEMM
  input and output gradient with its own kernels (FP8_QUANT_KERNELS per expert), each taking a fixed device
  time beyond its bytes, measured on H100 (benchmarks/real/moe_device_pieces.py);
- the host (`moe_layer_launches`, `host_bound_moe_layer_s`): Megatron-family runtimes issue an MoE layer eagerly,
  TE module calls, eager kernels, per-expert GEMMs and quantisation kernels, NCCL calls, each at its measured host
  cost (execution.LaunchHost), and their dropless dispatchers read the expert counts back once per layer forward
  so the host cannot run ahead of it (`moe_dispatch_syncs`; token drop and full CUDA graphs do not).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from baige_plan.cost import collectives as C
from baige_plan.cost.compute import ChipRates, gemm_time_s, moe_dispatch_bytes
from baige_plan.cost.execution import GRACE_HOST_CHIPS, LAUNCH_HOST, LaunchHost
from baige_plan.cost.flops import Gemm, expert_load_factor, tokens_per_expert
from baige_plan.cost.fp8 import quant_recipe
from baige_plan.errors import SpecError
from baige_plan.specs.calibration import CHIP_FAMILY_OF
from baige_plan.specs.chip import ChipSpec
from baige_plan.specs.job import QUANTIZED_PRECISIONS
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import StrategySpec
from baige_plan.specs.topology import GroupSpec

MOE_DISPATCHER = "alltoall"   # Megatron-Bridge/NeMo MoE recipes, the megatron export and the harness
MOE_ROUTER = "balanced"       # exact balance (our harness's router); flops.expert_load_factor
# Runtimes whose benchmark runs force-balance routing with random logits (Megatron-core
# moe_router_force_load_balancing: router.py -> moe_utils.apply_random_logits, RandomSTE, core_v0.15.0)
RANDOM_FORCE_BALANCE_RUNTIMES = ("megatron", "flagscale")
# Megatron-core TEGroupedMLP (experts.py, core_v0.15.0) pads each expert's rows for fp8 GEMMs
TE_GROUPED_MLP_RUNTIMES = ("megatron", "flagscale")
# NVFP4 grouped GEMMs pad each expert's rows to 128 (Megatron-core fp4_utils.get_fp4_align_size @ d98e8a6: TMA's
# 16-byte rule gives 32, grouped quantise + Hadamard kernels want 64-128)
FP4_ROW_ALIGN = 128
FP8_ROW_ALIGN = 16           # Transformer Engine Fp8Padding align_size for per-tensor fp8 (MXFP8: 32; not told apart)
# Runtimes whose experts run through torch._grouped_mm (torchtitan models/moe: _run_experts_grouped_mm)
GROUPED_MM_RUNTIMES = ("torchtitan",)
# Runtimes whose local experts are one grouped launch per linear whether compiled or not: torchtitan
# (torch._grouped_mm), NeMo Automodel (`experts: gmm`: the grouped_gemm library's ops.gmm; its backward is not
# torch._grouped_mm's, so GROUPED_MM_BWD_OVER_FWD is not applied to it)
GROUPED_EXPERT_RUNTIMES = ("torchtitan", "automodel")
# torch._grouped_mm backward / forward time (autograd: grouped dgrad + K-grouped wgrad) inside torchtitan 0.2.2's own
# MoE module, gradients written as a first micro-batch writes them: median of the 12 points of
# benchmarks/real/tt_moe_layer_h200.raw.json (1x H200, torch 2.11; OLMoE-1B-7B, Qwen3-30B-A3B and Qwen3-235B-A22B
# layers at 4,096-32,768 tokens, 256-4,096 rows per expert; range 1.93-2.25), the CUTLASS grouped kernels' summed
# device time of one profiled backward over the forward's. The earlier 3.3 (moe_expert_streams_h100{_run1,}.raw.json,
# 4-4.9 where weight-bound) timed repeated backwards into gradients it never cleared, so each adds the weight
# gradient's accumulation (read + read + write of E x h x f) to the grouped GEMMs.
GROUPED_MM_BWD_OVER_FWD = 2.11
# torchtitan 0.2.2's eager MoE routing around the grouped GEMMs (models/moe/moe.py MoE.forward: router softmax and
# top-k, histc, stable argsort, the gather of the routed rows, indices_padding_wrapper's padded permutation and its
# inverse, the fp32 score scaling and bmm combine, scatter-add; their autograd, the sort-based index backward
# among them): device seconds per (token x top-k x hidden) element on one GPU, as HBM bytes at the chip's
# achievable rate (ChipRates.hbm_Bps, 4.30 TB/s for H200), the medians of the 9 points at >= 8,192 tokens of
# benchmarks/real/tt_moe_layer_h200.raw.json (every kernel but the CUTLASS grouped GEMMs; forward 83-87 B, backward
# 104-130 B; the same for hidden 2048 and 4096, 64 and 128 experts, expert widths 768-1536). The kernels run far
# below the copy rate (index kernels with 64-bit offsets, fp32 intermediates), so the fused dispatcher's 14-16 B
# per element (compute.moe_dispatch_bytes) is 6x short for this runtime. Measured eager, without EP; applied to
# torchtitan's eager plans (EP's all-to-alls stay in moe_dispatch_comm_s); compiled plans keep the fused bytes.
TORCHTITAN_ROUTE_FWD_BYTES = 85.4
TORCHTITAN_ROUTE_BWD_BYTES = 115.5
# Device seconds each fp8 quantisation kernel takes beyond its bytes at the achievable HBM rate: median over the 40
# (point, tensor) rows of benchmarks/real/moe_device_pieces_h100.raw.json (1x H100, torch 2.11; 10 expert layouts of
# Qwen3-30B-A3B / Qwen3-235B-A22B, 4-16 local experts x 512-8192 rows, the fc1/fc2 inputs and output gradients) of
# (measured per-expert amax + scale + fused cast-transpose, replayed from a CUDA graph, - 6 B x elements / HBM) / 3
# kernels: 3.74 us (3.47-4.20 us, flat from 0.8 to 17 M elements: a per-kernel cost, not a rate;
# benchmarks/real/moe_device_pieces_compare.py). TE's own kernels are not on the device machine: the amax there is
# torch's inf-norm reduction, the cast-transpose a Triton kernel at 2.2-2.6 TB/s.
QUANT_KERNEL_DEVICE_S = 3.74e-6


# Chip families whose compute capability is 10.x (sm100 / sm103), where Transformer Engine's CuTe-DSL fused grouped MLP
# runs (ops/fused/grouped_mlp.py is_supported: get_device_compute_capability()[0] == 10)
FUSED_GROUPED_MLP_FAMILIES = ("blackwell", "blackwell_ultra")
FUSED_GROUPED_MLP_RECIPES = ("mxfp8", "nvfp4")      # fuse_grouped_mlp_ops: recipe.mxfp8() or recipe.nvfp4()


def fused_grouped_mlp(model: ModelSpec, s: StrategySpec, chip: ChipSpec, recipe: str) -> bool:
    """Whether the MoE experts run as Transformer Engine's fused grouped MLP (StrategySpec.moe_fused_mlp): FC1 + SwiGLU +
    router-probability scaling + quantisation of FC2's input as one CuTe-DSL grouped GEMM kernel and FC2 as one grouped
    GEMM, the backward's FC2 dgrad + SwiGLU gradient + quantisation likewise (TE ops/fused/grouped_mlp.py @ d0067d0,
    through cuDNN frontend's grouped_gemm_*_wrapper_sm100). So the experts' activation pass, FC2's input and FC1's
    output-gradient quantisation passes, TE's per-expert Fp8Padding and per-expert quantisation kernels are not run,
    and the expert GEMMs are grouped launches. Raises where the runtime, chip, recipe or activation cannot run it."""
    if not s.moe_fused_mlp:
        return False
    why = None
    if s.runtime not in TE_GROUPED_MLP_RUNTIMES or s.execution != "fused":
        why = f"runtime {s.runtime} ({s.execution}) does not run Transformer Engine's op fuser"
    elif CHIP_FAMILY_OF.get(chip.id) not in FUSED_GROUPED_MLP_FAMILIES:
        why = f"chip {chip.id} is not compute capability 10 (Blackwell), which its CuTe-DSL kernels need"
    elif recipe not in FUSED_GROUPED_MLP_RECIPES:
        why = f"it runs block-scaled recipes (mxfp8, nvfp4), not {recipe or 'a 16-bit job'}"
    elif model.activation != "swiglu":
        why = f"it fuses a gated (SwiGLU-type) activation, not {model.activation}"
    if why:
        raise SpecError("moe_fused_mlp", f"Transformer Engine's fused grouped MLP: {why}")
    return True


def expert_gemm_kind(s: StrategySpec) -> str:
    """Gemm kind of the expert GEMMs as `s.runtime` launches them (flops.linear_gemms, compute.gemm_time_s):
    runtimes whose experts are one grouped launch (GROUPED_EXPERT_RUNTIMES: torchtitan's torch._grouped_mm,
    compiled or not) "expert_grouped"; other eager PyTorch loops ("linear"); Megatron-family runtimes run TE GroupedLinear
    ("expert_streams": one cuBLAS GEMM per expert over 4 streams, Megatron experts.py TEGroupedMLP); the others one
    grouped launch ("expert_grouped")."""
    if s.runtime in GROUPED_EXPERT_RUNTIMES:
        return "expert_grouped"
    if s.execution == "eager":
        return "linear"
    if s.moe_fused_mlp:
        return "expert_grouped"     # TE's fused grouped MLP: grouped CuTe-DSL GEMMs (fused_grouped_mlp)
    return "expert_streams" if s.runtime in TE_GROUPED_MLP_RUNTIMES else "expert_grouped"


def eager_torchtitan_routing(s: StrategySpec) -> bool:
    """Whether `s` runs torchtitan's MoE routing eagerly (TORCHTITAN_ROUTE_*_BYTES apply)."""
    return s.runtime in GROUPED_MM_RUNTIMES and s.execution == "eager"


def torchtitan_route_bytes(model: ModelSpec, tokens: float, tp: int, etp: int) -> tuple[float, float]:
    """(forward, backward) HBM-equivalent bytes of torchtitan's eager routing of one MoE layer on one device: the
    measured bytes per element (TORCHTITAN_ROUTE_*_BYTES) x the routed rows its experts see (tokens/tp x top-k x etp,
    as compute.moe_dispatch_bytes' R) x hidden."""
    e = model.moe
    assert e is not None
    elements = tokens / tp * e.top_k * etp * model.hidden
    return TORCHTITAN_ROUTE_FWD_BYTES * elements, TORCHTITAN_ROUTE_BWD_BYTES * elements


def moe_router(runtime: str) -> str:
    """The router a run of `runtime` is costed with (flops.expert_load_factor): "random" where its
    benchmark force-balance draws random logits (RANDOM_FORCE_BALANCE_RUNTIMES), else MOE_ROUTER."""
    return "random" if runtime in RANDOM_FORCE_BALANCE_RUNTIMES else MOE_ROUTER


def moe_load(model: ModelSpec, s: StrategySpec, tokens: float) -> float:
    """Busiest EP rank's expert load over the mean under the runtime's router (flops.expert_load_factor)."""
    e = model.moe
    assert e is not None
    return expert_load_factor(moe_router(s.runtime), tokens_per_expert(model, tokens, s.tp, s.ep, s.etp) / s.etp,
                              e.experts // s.ep, s.ep)


def fp8_padding_bytes(model: ModelSpec, tokens: float, tp: int, ep: int, etp: int, act_bytes: int,
                      router: str, align: int = 16) -> float:
    """HBM bytes of Transformer Engine's fp8 row padding around one MoE layer's grouped expert GEMMs on one
    device, per pass (forward: Fp8Padding of the R permuted input rows + Fp8Unpadding of the R output rows,
    each a read and a write of R x h; backward: the same two copies of the gradients): 4 R h b, where R =
    (tokens/tp) k etp rows reach the local experts. Zero when every expert's count is a multiple of
    `align` (FP8_ROW_ALIGN; NVFP4: FP4_ROW_ALIGN) (exact balance with m % align == 0): TE then returns the input as is; random counts
    (router "random") are essentially never all aligned. The fp32 probabilities padded beside them
    (R x 4 B) are left out."""
    e = model.moe
    assert e is not None
    m = tokens_per_expert(model, tokens, tp, ep, etp)
    if router == "balanced" and float(m).is_integer() and int(m) % align == 0:
        return 0.0
    rows = tokens / tp * e.top_k * etp
    return 4.0 * rows * model.hidden * act_bytes


def grouped_mm_bwd_extra_s(expert_gemms: list[Gemm], r: ChipRates, load: float) -> float:
    """Seconds the torch._grouped_mm backward of one MoE layer's expert GEMMs takes beyond the 2 x forward
    every GEMM is charged: (GROUPED_MM_BWD_OVER_FWD - 2) x their forward time (x the busiest rank's load)."""
    fwd = sum(gemm_time_s(g, r) for g in expert_gemms if g.kind == "expert_grouped")
    return (GROUPED_MM_BWD_OVER_FWD - 2.0) * fwd * load


@dataclass(frozen=True)
class EpNodeSplit:
    """An EP group whose n ranks span nodes, `per_node` of them on each: the scale-up link among a node's ranks and
    the per-device NIC link (every device of the node sending at once, collectives.nic_p2p_link)."""

    per_node: int
    intra: C.Link
    nic: C.Link


def ep_node_split(group: GroupSpec, ep: int, per_node: int) -> EpNodeSplit | None:
    """The node split of an EP group of `ep` ranks placed `per_node` per node of `group`; None inside one node."""
    if ep <= 1 or per_node >= ep:
        return None
    return EpNodeSplit(per_node, C.group_link(group, per_node, per_node),
                       C.nic_p2p_link(group, per_node=group.devices_per_node))


def all_to_all_across_nodes_s(size_bytes: float, n: int, split: EpNodeSplit) -> float:
    """All-to-all of `size_bytes` per rank (S) over n ranks, g = split.per_node per node: NCCL sends to every peer at
    once, the node's g - 1 peers over the scale-up link and the n - g others through the rank's own NIC (a node's g
    ranks have g NICs and g x S (n-g)/n bytes to send off the node: no per-node aggregation to gain, PXN only picks
    the rail), so t = max(all_to_all of S g/n among the node's g ranks, S (n-g)/n through the NIC)."""
    g = split.per_node
    intra = C.all_to_all_s(size_bytes * g / n, split.intra)
    inter = C.p2p_s(size_bytes * (n - g) / n, split.nic)
    return max(intra, inter)


def moe_dispatch_comm_s(model: ModelSpec, tokens: float, tp: int, ep: int, etp: int, act_bytes: int,
                        ep_link: C.Link, etp_link: C.Link, dispatcher: str = MOE_DISPATCHER,
                        tp_ep_link: C.Link | None = None, ep_split: EpNodeSplit | None = None) -> float:
    """Token-dispatch communication of one MoE layer on one device per pass (forward; the backward
    sends the gradients the same way), Megatron-core token_dispatcher.py:
    - "alltoall" (MoEAlltoAllTokenDispatcher): dispatch + combine all-to-all over the ep group of the
      rank's A = (tokens/tp) * top_k routed tokens (x etp after the expert-TP gather), h x b bytes each:
          2 x all_to_all(A*etp*h*b)        (ep > 1)
      (an ep group across nodes, `ep_split`: all_to_all_across_nodes_s), plus the expert-TP all-gather
      (dispatch) and reduce-scatter (combine) of the same bytes (etp > 1).
      ep = etp = 1 moves nothing: the local experts are looped/grouped in place.
    - "allgather" (MoEAllGatherTokenDispatcher): all-gather over the tp x ep group of every rank's
      N = tokens/tp unrouted tokens (h x b), of the N x E fp32 probabilities and the bool routing map,
      then a reduce-scatter of the combined output, cast to the fp32 probs dtype:
          all_gather(tp*ep*N*(h*b + 5E)) + reduce_scatter(tp*ep*N*h*4)      (tp*ep > 1)
    - "flex" (MoEFlexTokenDispatcher with DeepEP normal kernels or HybridEP): inside a node as "alltoall"; across
      nodes a token is sent once to each other node holding any of its k experts and forwarded over the scale-up
      link there (DeepEP docs/legacy.md: NVLink-to-RDMA forwarding), so the NIC carries N*etp*h*b x
      remote_nodes_per_token (k experts uniform over E: (nodes-1) (1 - C(E - E/nodes, k) / C(E, k)); Qwen3 EP32 over
      4 nodes 2.72 copies of a token where "alltoall" sends 6); the scale-up link at most every routed copy once.
      StrategySpec.moe_dispatcher selects it (runs rows: "flex dispatcher" in their recipe; io/runs.py).
    """
    e = model.moe
    assert e is not None
    n = tokens / tp
    routed = n * e.top_k * model.hidden * act_bytes
    if dispatcher == "alltoall":
        t = 0.0
        if ep > 1:
            t = 2 * (all_to_all_across_nodes_s(routed * etp, ep, ep_split) if ep_split is not None
                     else C.all_to_all_s(routed * etp, ep_link))
        if etp > 1:
            t += 2 * C.all_gather_s(routed * etp, etp_link)
        return t
    if dispatcher == "flex":
        t = 0.0
        if ep > 1 and ep_split is None:
            t = 2 * C.all_to_all_s(routed * etp, ep_link)
        elif ep > 1:
            nodes = ep / ep_split.per_node
            inter = C.p2p_s(n * etp * model.hidden * act_bytes * remote_nodes_per_token(e.experts, e.top_k, nodes),
                            ep_split.nic)
            t = 2 * max(C.all_to_all_s(routed * etp, ep_split.intra), inter)
        if etp > 1:
            t += 2 * C.all_gather_s(routed * etp, etp_link)
        return t
    if dispatcher == "allgather":
        g = tp * ep
        if g == 1:
            return 0.0
        link = tp_ep_link if tp_ep_link is not None else ep_link
        return (C.all_gather_s(g * n * (model.hidden * act_bytes + 5 * e.experts), link)
                + C.reduce_scatter_s(g * n * model.hidden * 4, link))
    raise ValueError(f"unknown MoE dispatcher {dispatcher!r}: alltoall | allgather | flex")


def remote_nodes_per_token(experts: int, top_k: int, nodes: float) -> float:
    """Expected number of other nodes holding at least one of a token's top_k experts, the k drawn uniformly
    without replacement from `experts` spread evenly over `nodes` nodes (random force-balanced routing):
    (nodes - 1) x (1 - C(E - E/nodes, k) / C(E, k))."""
    if nodes <= 1:
        return 0.0
    per_node = experts / nodes
    miss = 1.0
    for i in range(top_k):
        miss *= max(0.0, experts - per_node - i) / (experts - i)
    return (nodes - 1) * (1.0 - miss)


@dataclass(frozen=True)
class MoeLayerTerms:
    """What one MoE layer adds on one device per micro-batch, beyond its attention and expert GEMMs.

    load: the busiest EP rank's expert load over the mean (scales the expert GEMMs and the all-to-alls);
    dispatch_fwd_s / dispatch_bwd_s: routing + token permutation of the fused dispatcher, and the fp8 row
    padding of TE's grouped GEMMs, as HBM seconds (compute.moe_dispatch_bytes + fp8_padding_bytes, over the
    achievable HBM rate; eager execution replaces the layer's memory-bound time with its measured traffic, and
    torchtitan's eager routing is its own measured bytes, torchtitan_route_bytes, added to that traffic), plus
    the fixed device time of TE's per-expert fp8 quantisation kernels (fp8_quant_kernels x QUANT_KERNEL_DEVICE_S;
    their bytes are charged with every GEMM input's in cost/estimate.py);
    ep_s: the token-dispatch communication of one pass, x load; expert_bwd_extra_s: backward seconds of
    torch._grouped_mm experts beyond 2 x their forward (grouped_mm_bwd_extra_s; 0 for other runtimes)."""

    load: float
    dispatch_fwd_s: float
    dispatch_bwd_s: float
    ep_s: float
    expert_bwd_extra_s: float = 0.0


def fp8_quant_kernels(model: ModelSpec, s: StrategySpec, recipe: str) -> float:
    """Quantisation kernels TE launches per pass for one MoE layer's expert GEMMs on one device: the two GroupedLinear
    inputs (forward) or output gradients (backward) of every local expert (FP8_QUANT_KERNELS per expert and tensor),
    or one fused multi-cast-transpose per GroupedLinear under delayed scaling (moe_layer_launches counts the same)."""
    e = model.moe
    assert e is not None
    fused = 1.0 if recipe == "delayed" else 0.0
    return 2.0 * (FP8_QUANT_KERNELS.get(recipe, 0.0) * e.experts / s.ep + fused)


def moe_layer_terms(model: ModelSpec, s: StrategySpec, r: ChipRates, tokens: float,
                    ep_link: C.Link, etp_link: C.Link, lin: list[Gemm] | None = None,
                    ep_split: EpNodeSplit | None = None) -> MoeLayerTerms:
    """The MoE layer's extra terms (MoeLayerTerms) for `tokens` = micro_batch x seq / cp on this device;
    `lin`: the layer's weight GEMMs (flops.linear_gemms), whose grouped expert GEMMs set the torch._grouped_mm
    backward term; `ep_split`: the EP group's node split when it spans nodes (ep_node_split)."""
    load = moe_load(model, s, tokens)
    dispatcher = s.moe_dispatcher or MOE_DISPATCHER
    if eager_torchtitan_routing(s):
        d_f, d_b = torchtitan_route_bytes(model, tokens, s.tp, s.etp)
    else:
        d_f, d_b = moe_dispatch_bytes(model, tokens, s.tp, s.ep, s.etp, r.act_bytes, dispatcher)
    recipe = quant_recipe(s, r.chip, r.dtype) if r.dtype in QUANTIZED_PRECISIONS else ""
    te_grouped = r.dtype in QUANTIZED_PRECISIONS and s.execution != "eager" and s.runtime in TE_GROUPED_MLP_RUNTIMES
    fused = fused_grouped_mlp(model, s, r.chip, recipe)     # implies te_grouped (TE runtime, fused, block-scaled)
    # TE pads each expert's rows with Fp8Padding; the fused path (Megatron-core >= 0.18, experts.py) still does after
    # an alltoall dispatcher, not after HybridEP, which pads inside its dispatch (moe_utils.skip_routed_expert_padding)
    if te_grouped and not (fused and dispatcher == "flex"):
        align = FP4_ROW_ALIGN if r.dtype == "fp4" else FP8_ROW_ALIGN
        pad = fp8_padding_bytes(model, tokens, s.tp, s.ep, s.etp, r.act_bytes, moe_router(s.runtime), align) * load
        d_f += pad
        d_b += pad
    # fused: one grouped quantisation of FC1's input (forward) / FC2's output gradient (backward) a pass
    quant_s = (QUANT_KERNEL_DEVICE_S if fused
               else fp8_quant_kernels(model, s, recipe) * QUANT_KERNEL_DEVICE_S if te_grouped else 0.0)
    t_ep = moe_dispatch_comm_s(model, tokens, s.tp, s.ep, s.etp, r.act_bytes, ep_link, etp_link, dispatcher,
                               ep_split=ep_split) * load
    extra = 0.0
    if lin is not None and s.runtime in GROUPED_MM_RUNTIMES:
        extra = grouped_mm_bwd_extra_s(lin, r, load)
    return MoeLayerTerms(load=load, dispatch_fwd_s=d_f / r.hbm_Bps + quant_s, dispatch_bwd_s=d_b / r.hbm_Bps + quant_s,
                         ep_s=t_ep, expert_bwd_extra_s=extra)


# ---- Host-bound MoE layers on fused runtimes (docs/COST_MODEL.md §2c "Host-bound MoE layers") ----------------------
# A dropless token dispatcher needs the per-expert token counts on the host before it can size its all-to-all
# and TE GroupedLinear's per-expert GEMMs, so it reads them back once per MoE layer forward and the host waits for
# the device there: Megatron-core MoEAlltoAllTokenDispatcher.preprocess (core_v0.15.0 .. core_v0.17.0
# token_dispatcher.py) sets cuda_sync_point "before_ep_alltoall" (ep > 1 or tp > 1) or "before_finish",
# `_maybe_dtoh_and_synchronize` copies the counts on a side stream and `d2h_event.synchronize()`s; the flex
# dispatcher's HybridEP `dispatch_with_permute(non_blocking=False)` when num_permuted_tokens is None and DeepEP's
# dispatch wait on the host the same way (fused_a2a.py). With `moe_pad_expert_input_to_capacity` (token drop, the
# NeMo 25.02-25.09 / Megatron-Bridge 0.1 `apply_moe_token_drop` recipes) the splits are static: no sync. The backward
# reuses the forward's host-side splits (GroupedLinear ctx.m_splits; all-to-all with saved splits): no sync.
# After a sync the host must issue a layer's launches before the device can run them, so a sync'd segment takes
# max over its phases p of (host time of the phases before p + max(host of p + device after p, device from p)):
# measured on 24 synthetic layers (host_launch_h200.raw.json `sync`, benchmarks/real/host_launch_compare.py): six
# sync'd steps of 18.9-74.9 ms within -6.8 .. +6.1 % of this rule (host + device: +23 .. +44 %); unsynced, the same
# layers ran at max(host, device).
# fp8 quantisation kernels TE launches per expert per GEMM input (TE 2.9 cast.cpp multi_tensor_quantize_impl: one
# fused multi-cast-transpose for all experts only under delayed scaling; Float8CurrentScalingQuantizer: amax, scale,
# cast; MXFP8Quantizer: one block-scaled cast)
# NVFP4Quantizer: amax, then one cast writing both copies (quantizer.cpp @ d0067d0; cost/fp8.py)
FP8_QUANT_KERNELS = {"delayed": 0.0, "current": 3.0, "mxfp8": 1.0, "nvfp4": 2.0}
CUDA_GRAPH_SCOPES = ("attn", "moe_router", "moe_preprocess", "full")


@dataclass(frozen=True)
class Launches:
    """Host work of one phase of an MoE layer, in launches of each kind (execution.LaunchHost prices them)."""

    te_modules: float = 0.0     # Transformer Engine module calls (their Python and kernels)
    eager: float = 0.0          # eager PyTorch kernels issued from Python, autograd included
    gemms: float = 0.0          # cuBLAS GEMMs issued from TE's per-expert C++ loop
    small: float = 0.0          # quantisation kernels issued from C++ (with their allocations)
    collectives: float = 0.0    # NCCL collectives through c10d
    plumbing: float = 0.0       # kernels of Megatron-core's router / alltoall dispatcher, issued from its Python

    def host_s(self, h: LaunchHost = LAUNCH_HOST, contention: float = 1.0) -> float:
        return ((self.te_modules * h.te_module_s + self.eager * h.eager_kernel_s + self.gemms * h.gemm_s
                 + self.small * h.small_kernel_s + self.plumbing * h.moe_plumbing_kernel_s) * contention
                + self.collectives * h.collective_s)


@dataclass(frozen=True)
class MoeLayerLaunches:
    """One MoE layer's launches per micro-batch as Megatron-core (core_v0.15-0.17) + Transformer Engine (2.9-2.14)
    issue them, forward by phase in issue order after the dispatcher's sync -- `experts` (permute, all-to-alls,
    sort by local expert, TEGroupedMLP, combine), `attention` (the next layer's attention half), `router` (router,
    aux loss, preprocess + the count read-back) -- and the backward."""

    experts: Launches
    attention: Launches
    router: Launches
    backward: Launches


def moe_layer_launches(model: ModelSpec, s: StrategySpec, recipe: str = "") -> MoeLayerLaunches:
    """Launch counts of one MoE layer (counted from the sources, docs/COST_MODEL.md §2c table). `recipe`: the fp8
    recipe ("" = 16-bit GEMMs). CUDA-graphed scopes (`s.cuda_graph_scope`) cost one eager launch (the replay)."""
    e = model.moe
    assert e is not None
    local = e.experts / s.ep
    q = FP8_QUANT_KERNELS.get(recipe, 0.0)
    fp8 = 1.0 if recipe else 0.0
    per_linear_fused = 1.0 if recipe == "delayed" else 0.0    # one multi-cast-transpose per GroupedLinear call
    comm = 1.0 if s.ep * s.tp > 1 else 0.0
    scopes = set(filter(None, str(getattr(s, "cuda_graph_scope", "") or "").split(",")))
    # attention half: TELayerNormColumnParallelLinear (qkv), TEDotProductAttention, TERowParallelLinear (proj),
    # TENorm (pre-MLP norm of the MoE layer); fused RoPE on q and k and the bias-dropout-add, forward and backward;
    # with sequence parallelism, an all-gather before and a reduce-scatter after (TE issues them from C++)
    attn_f = Launches(te_modules=4, eager=3)
    attn_b = Launches(te_modules=4, eager=3)
    # router (TopKRouter: fp32 cast + gating GEMM, force-balance random logits, softmax/top-k/scatter into the
    # routing map and probs, switch load-balancing aux loss, its tracker and MoEAuxLossAutoScaler) 18 forward,
    # 10 backward; preprocess: count sums/slices 8 kernels, the all-gather of the counts over tp x ep, 4 device->host
    # copies of the splits on the side stream
    # the router's and the alltoall dispatcher's kernels cost Megatron's own Python around them (measured:
    # LaunchHost.moe_plumbing_over_eager); the flex / allgather dispatchers' Python was not measured, so their
    # preprocess and dispatch keep the plain eager rate (the router is the same TopKRouter whatever the dispatcher)
    alltoall = (s.moe_dispatcher or MOE_DISPATCHER) == "alltoall"

    def dispatcher(n: float, **kw) -> Launches:     # n kernels of the dispatcher's own Python
        return Launches(plumbing=n, **kw) if alltoall else Launches(eager=n, **kw)

    router_f = Launches(plumbing=18)
    router_b = Launches(plumbing=10)
    pre_f = dispatcher(8, small=4, collectives=comm)
    # dispatch + combine (fused permute, sort_chunks_by_idxs of tokens and probs, their inverses, fused unpermute,
    # bias-dropout-add): 7 kernels a pass; all-to-alls of the tokens and the probs, and the combine (ep > 1)
    a2a = 3.0 if s.ep > 1 else 0.0
    disp_f = dispatcher(7, collectives=a2a)
    disp_b = dispatcher(7, collectives=a2a)
    # TEGroupedMLP: two GroupedLinear calls; weighted activation; fp8 padding/unpadding (Fp8Padding); per local
    # expert and linear one GEMM (forward) or two (dgrad, wgrad) and the input / output-gradient quantisation
    exp_f = Launches(te_modules=2, eager=1 + 2 * fp8, gemms=2 * local, small=2 * (q * local + per_linear_fused))
    exp_b = Launches(te_modules=2, eager=1 + 2 * fp8, gemms=4 * local, small=2 * (q * local + per_linear_fused))
    if s.moe_fused_mlp:
        # TE's fused grouped MLP (fused_grouped_mlp): one op-fuser call, grouped kernels (FC1+SwiGLU+quantise, FC2;
        # backward FC2 dgrad+dSwiGLU+quantise, FC1 dgrad, two grouped wgrads), one grouped quantisation a pass
        exp_f = Launches(te_modules=1, gemms=2, small=1)
        exp_b = Launches(te_modules=1, gemms=4, small=1)
    if "full" in scopes:      # every layer (or the iteration) replayed from a graph: no per-kernel host work
        return MoeLayerLaunches(Launches(), Launches(), Launches(), Launches())
    if "attn" in scopes:
        attn_f = attn_b = Launches(eager=1)
    if "moe_router" in scopes:
        router_f, router_b = Launches(eager=1), Launches(eager=1)
    if "moe_preprocess" in scopes:
        pre_f = Launches(eager=1)
    return MoeLayerLaunches(experts=_sum(disp_f, exp_f), attention=attn_f, router=_sum(router_f, pre_f),
                            backward=_sum(attn_b, router_b, disp_b, exp_b))


def _sum(*ls: Launches) -> Launches:
    return Launches(*(sum(getattr(x, f.name) for x in ls) for f in fields(Launches)))


def host_factor(chip_id: str) -> float:
    """Host code speed relative to the measured x86 host: Grace CPUs run it execution.LaunchHost.grace_host_factor
    times slower."""
    return LAUNCH_HOST.grace_host_factor if chip_id.lower().startswith(GRACE_HOST_CHIPS) else 1.0


def moe_dispatch_syncs(s: StrategySpec) -> bool:
    """Whether the runtime's MoE dispatcher reads the expert counts back to the host each forward (dropless, not a
    full-iteration CUDA graph)."""
    return not getattr(s, "moe_token_drop", False) and "full" not in str(getattr(s, "cuda_graph_scope", "") or "")


def host_bound_moe_layer_s(launches: MoeLayerLaunches, factor: float, dev_experts_s: float, dev_attention_s: float,
                           dev_router_s: float, dev_bwd_s: float, sync: bool,
                           contention: float = 1.0) -> tuple[float, float]:
    """(forward, backward) seconds of one MoE layer per micro-batch with its host time: with the dispatcher's sync
    the forward segment [experts, attention, router] takes max over phases p of (host before p + max(host of p +
    device after p, device from p)) and the backward max(host, device) (no sync in it); without a sync the host runs
    ahead: the layer takes max(host, device) of forward and backward together, charged to the backward. `contention`:
    execution.host_contention of the ranks sharing the host CPU; it scales every launch but the NCCL calls, whose
    per-call cost was measured on 4-rank hosts already."""
    hs = [p.host_s(contention=contention) * factor for p in (launches.experts, launches.attention, launches.router)]
    ds = [dev_experts_s, dev_attention_s, dev_router_s]
    h_b = launches.backward.host_s(contention=contention) * factor
    d_f = sum(ds)
    if not sync:
        extra = max(0.0, sum(hs) + h_b - (d_f + dev_bwd_s))
        return d_f, dev_bwd_s + extra
    t_f = max(sum(hs[:i]) + max(hs[i] + sum(ds[i + 1:]), sum(ds[i:])) for i in range(3))
    return t_f, max(dev_bwd_s, h_b)


# ---- EP all-to-all overlap (Megatron-core overlap_moe_expert_parallel_comm) -----------------------------------------
# Megatron-core's combined 1F1B (pipeline_parallel/combined_1f1b.py; pp = 1: combined_1f1b_schedule_for_no_pipelining,
# "1st microbatch forward | 1st backward + 2nd forward | ... | last backward"; interleaved pipelines: the 1F1B steady
# state, with one extra warm-up forward) runs one micro-batch's forward beside another's backward, layer by layer:
# forward layer l with backward layer L-1-l (models/common/model_chunk_schedule_plan.py TransformerModelChunkSchedulePlan
# .run), each pair by TransformerLayerSchedulePlan.run on two CUDA streams:
#     comm stream: combine_bwd        | dispatch_fwd -> dispatch_bwd         | combine_fwd
#     comp stream: pre_dispatch_fwd   | mlp_bwd (+ dw) -> mlp_fwd            | pre_dispatch_bwd
# The communication kernels slow the compute they overlap (SMs, HBM): measured with benchmarks/real/a2a_overlap.py, which
# replays this schedule with NCCL all-to-alls and bf16 GEMMs on 2 and 4 H200 (a2a_overlap_h200x{2,4}.raw.json): across
# twelve shapes (all-to-all 5-45 % of the compute) the merged schedule hid only 20-55 % of the all-to-all time, and
# the two-stream schedule below matches each run when a compute kernel beside a communication kernel is stretched as
# if the latter held a share of 0.31-0.46 of the GPU (median 0.40, taken here). DeepEP / HybridEP kernels hold fewer
# SMs by design (20, megatron-core moe_deepep_num_sms) but were not measured: the NCCL figure is used for every
# dispatcher, so the overlap is not credited with more than was seen.
A2A_OVERLAP_CONTENTION_SHARE = 0.40


def a2a_overlap_pair_s(pre_f: float, mlp_f: float, pre_b: float, mlp_b: float, a2a_s: float, layers: int,
                       share: float = A2A_OVERLAP_CONTENTION_SHARE) -> float:
    """Seconds of `layers` MoE layers of one micro-batch's forward run beside another micro-batch's backward by
    Megatron-core's schedule_layer_1f1b (the two-stream order above), per layer: pre_f / pre_b the compute before the
    dispatch (norms, attention, router; forward / backward), mlp_f / mlp_b the experts with their permutation (the
    backward's weight gradients included), a2a_s one all-to-all (dispatch or combine; the backward's mirror them).
    In-order streams with the data dependencies of the code: forward layer l+1 starts after layer l's combine_fwd,
    backward layer after layer's pre_dispatch_bwd. A compute kernel beside a communication kernel runs on the SMs
    the latter leaves, so it is stretched by share / (1 - share) of their overlap (A2A_OVERLAP_CONTENTION_SHARE)."""
    k = share / (1.0 - share)

    def run(start: float, work: float, busy: tuple[float, float]) -> float:
        # end of `work` seconds of compute started at `start` beside a comm kernel busy over [busy[0], busy[1])
        end = start + work
        ov = max(0.0, min(end, busy[1]) - max(start, busy[0]))
        return end + k * ov

    comp = comm = 0.0          # the compute / comm stream's end; the next forward waits for comm, backward for comp
    lead = None                # comm - comp after the previous layer
    for i in range(layers):
        cb = (max(comm, comp), max(comm, comp) + a2a_s)                   # combine backward
        af = run(max(comp, comm), pre_f, cb)                              # pre-dispatch forward
        df = (max(cb[1], af), max(cb[1], af) + a2a_s)                     # dispatch forward
        mb = run(max(af, cb[1]), mlp_b, df)                               # experts backward (+ weight grads)
        db = (max(df[1], mb), max(df[1], mb) + a2a_s)                     # dispatch backward
        mf = run(max(mb, df[1]), mlp_f, db)                               # experts forward
        cf = (max(db[1], mf), max(db[1], mf) + a2a_s)                     # combine forward
        ab = run(max(mf, db[1]), pre_b, cf)                               # pre-dispatch backward
        step = ab - comp
        comp, comm = ab, cf[1]
        # a layer's times shift with its start (every step is a max or a sum): once the streams' lead repeats,
        # every later layer adds the same time, so the rest is extrapolated (94 layers cost 2-3 iterations)
        if lead is not None and abs((comm - comp) - lead) <= 1e-12 * max(1.0, comp):
            rest = layers - i - 1
            comp, comm = comp + rest * step, comm + rest * step
            break
        lead = comm - comp
    return max(comp, comm)


def a2a_overlap_unmerged(pp: int, vpp: int, m: int, stage: int) -> float:
    """Share of a stage's micro-batch forwards (and as many backwards) that run alone, not paired, under the combined
    1F1B: the first forward with pp = 1; with interleaving the warm-up forwards, 2 (pp - r - 1) + (vpp - 1) pp + 1
    (schedules.py get_pp_rank_microbatches, one more with this overlap), of the m x vpp chunk micro-batches."""
    warm = 1 if pp == 1 else 2 * (pp - stage - 1) + (vpp - 1) * pp + 1
    return min(warm, m * vpp) / (m * vpp)
