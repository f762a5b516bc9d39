"""Mixture-of-experts layer costs on one device (docs/COST_MODEL.md §2c): the terms an MoE layer adds to
a transformer layer's attention and memory-bound work, as Megatron-core runs them
(megatron/core/transformer/moe/: router.py, token_dispatcher.py, experts.py, moe_utils.py).

Pure functions of the model, strategy and chip rates; the expert GEMMs themselves are
cost/flops.py `linear_gemms` (sizes) and cost/compute.py `gemm_time_s` (grouped/looped rates), the
routing and permutation bytes cost/compute.py `moe_dispatch_bytes`, the load factor cost/flops.py
`expert_load_factor`, eager host operations cost/execution.py `eager_moe_layer_ops`.
"""

from __future__ import annotations

from dataclasses import dataclass

from baige_plan.cost import collectives as C
from baige_plan.cost.compute import ChipRates, moe_dispatch_bytes
from baige_plan.cost.flops import expert_load_factor, tokens_per_expert
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import StrategySpec

MOE_DISPATCHER = "alltoall"   # Megatron-Bridge/NeMo MoE recipes, the megatron export and the harness
MOE_ROUTER = "balanced"       # the measured runs force-balance routing; flops.expert_load_factor


def moe_load(model: ModelSpec, s: StrategySpec, tokens: float) -> float:
    """Busiest EP rank's expert load over the mean under MOE_ROUTER (flops.expert_load_factor)."""
    e = model.moe
    assert e is not None
    return expert_load_factor(MOE_ROUTER, tokens_per_expert(model, tokens, s.tp, s.ep, s.etp) / s.etp,
                              e.experts // s.ep, s.ep)


def moe_dispatch_comm_s(model: ModelSpec, tokens: float, tp: int, ep: int, etp: int, act_bytes: int,
                        ep_link: C.Link, etp_link: C.Link, dispatcher: str = MOE_DISPATCHER,
                        tp_ep_link: C.Link | None = None) -> float:
    """Token-dispatch communication of one MoE layer on one device per pass (forward; the backward
    sends the gradients the same way), Megatron-core token_dispatcher.py:
    - "alltoall" (MoEAlltoAllTokenDispatcher): dispatch + combine all-to-all over the ep group of the
      rank's A = (tokens/tp) * top_k routed tokens (x etp after the expert-TP gather), h x b bytes each:
          2 x all_to_all(A*etp*h*b)        (ep > 1)
      plus the expert-TP all-gather (dispatch) and reduce-scatter (combine) of the same bytes (etp > 1).
      ep = etp = 1 moves nothing: the local experts are looped/grouped in place.
    - "allgather" (MoEAllGatherTokenDispatcher): all-gather over the tp x ep group of every rank's
      N = tokens/tp unrouted tokens (h x b), of the N x E fp32 probabilities and the bool routing map,
      then a reduce-scatter of the combined output, cast to the fp32 probs dtype:
          all_gather(tp*ep*N*(h*b + 5E)) + reduce_scatter(tp*ep*N*h*4)      (tp*ep > 1)
    """
    e = model.moe
    assert e is not None
    n = tokens / tp
    routed = n * e.top_k * model.hidden * act_bytes
    if dispatcher == "alltoall":
        t = 2 * C.all_to_all_s(routed * etp, ep_link) if ep > 1 else 0.0
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
    raise ValueError(f"unknown MoE dispatcher {dispatcher!r}: alltoall | allgather")


@dataclass(frozen=True)
class MoeLayerTerms:
    """What one MoE layer adds on one device per micro-batch, beyond its attention and expert GEMMs.

    load: the busiest EP rank's expert load over the mean (scales the expert GEMMs and the all-to-alls);
    dispatch_fwd_s / dispatch_bwd_s: routing + token permutation of the fused dispatcher as HBM seconds
    (compute.moe_dispatch_bytes / achievable HBM; eager execution replaces the layer's memory-bound
    time with its measured traffic); ep_s: the token-dispatch communication of one pass, x load."""

    load: float
    dispatch_fwd_s: float
    dispatch_bwd_s: float
    ep_s: float


def moe_layer_terms(model: ModelSpec, s: StrategySpec, r: ChipRates, tokens: float,
                    ep_link: C.Link, etp_link: C.Link) -> MoeLayerTerms:
    """The MoE layer's extra terms (MoeLayerTerms) for `tokens` = micro_batch x seq / cp on this device."""
    load = moe_load(model, s, tokens)
    d_f, d_b = moe_dispatch_bytes(model, tokens, s.tp, s.ep, s.etp, r.act_bytes)
    t_ep = moe_dispatch_comm_s(model, tokens, s.tp, s.ep, s.etp, r.act_bytes, ep_link, etp_link) * load
    return MoeLayerTerms(load=load, dispatch_fwd_s=d_f / r.hbm_Bps, dispatch_bwd_s=d_b / r.hbm_Bps, ep_s=t_ep)
