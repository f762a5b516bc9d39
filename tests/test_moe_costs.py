"""MoE cost mechanisms (docs/COST_MODEL.md, "MoE") against numbers derived by hand here: expert GEMM
size, grouped-GEMM efficiency, routing/permutation bytes, dispatcher communication, straggler factor,
DDP all-reduce of replicated expert parameters and the eager host ops of an MoE layer."""

import json
import math
import statistics
from pathlib import Path

import pytest

from baige_plan.cost import collectives as C
from baige_plan.cost.compute import (
    GROUPED_GEMM_MEM_FRACTION,
    TE_GEMM_STREAMS,
    ChipRates,
    gemm_time_s,
    moe_dispatch_bytes,
)
from baige_plan.cost.estimate import dp_traffic, estimate
from baige_plan.cost.execution import EAGER_HOST, eager_host_s
from baige_plan.cost.flops import Gemm, expert_load_factor, linear_gemms, tokens_per_expert
from baige_plan.cost.moe import (
    GROUPED_MM_BWD_OVER_FWD,
    QUANT_KERNEL_DEVICE_S,
    all_to_all_across_nodes_s,
    ep_node_split,
    expert_gemm_kind,
    fp8_padding_bytes,
    fp8_quant_kernels,
    grouped_mm_bwd_extra_s,
    moe_dispatch_comm_s,
    moe_layer_terms,
    moe_load,
    moe_router,
    remote_nodes_per_token,
)
from baige_plan.io.catalog import Catalog
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec, MoESpec
from baige_plan.specs.strategy import StrategySpec

# Qwen3-30B-A3B (HF config): 48 layers, hidden 2048, 128 experts top-8 of width 768, SwiGLU
QWEN3 = ModelSpec("qwen3-30b-a3b", 48, 2048, 32, 6144, 151936, seq_len=4096, kv_heads=4, head_dim=128,
                  moe=MoESpec(experts=128, top_k=8, expert_ffn_hidden=768))
# the harness's moe-350m-8e: gpt-350m shape, 8 GeLU experts of 2048, top-2
HARNESS = ModelSpec("moe-350m-8e", 24, 1024, 16, 4096, 50304, seq_len=2048, activation="gelu",
                    tie_embeddings=True, moe=MoESpec(experts=8, top_k=2, expert_ffn_hidden=2048))


def _link(n: int, gbps: float = 100.0) -> C.Link:
    return C.Link(busbw_GBps=gbps, n=n, alpha_s=0.0)


def test_tokens_per_expert_by_hand():
    # micro-batch 2 x 4096 tokens, tp 1, ep 8: each rank routes 8192 x 8 assignments over 128 experts,
    # its 16 local experts receive them from all 8 ranks: 8192 * 8 / 128 * 8 = 4096 tokens each
    assert tokens_per_expert(QWEN3, 8192, tp=1, ep=8) == 4096
    # no EP: every expert on the rank sees 8192 * 8 / 128 = 512 -- the fine-grained small-M case
    assert tokens_per_expert(QWEN3, 8192, tp=1, ep=1) == 512
    # harness, micro-batch 4 x 2048, ep 1: 8192 * 2 / 8 = 2048; ep 2: 4096
    assert tokens_per_expert(HARNESS, 8192, tp=1, ep=1) == 2048
    assert tokens_per_expert(HARNESS, 8192, tp=1, ep=2) == 4096
    # tp 2 with SP: each rank routes 4096 tokens; etp 2 gathers both halves back: 8192*8/128*8 = 4096
    assert tokens_per_expert(QWEN3, 8192, tp=2, ep=8, etp=2) == 4096


def test_expert_gemms_sized_per_expert_and_grouped_by_execution():
    lin = {g.name: g for g in linear_gemms(QWEN3, 8192, tp=1, moe=True, ep=8, grouped=True)}
    up, down = lin["expert_up"], lin["expert_down"]
    assert (up.m, up.n, up.k, up.count) == (4096, 2 * 768, 2048, 16)      # SwiGLU gate+up
    assert (down.m, down.n, down.k, down.count) == (4096, 2048, 768, 16)
    assert up.kind == down.kind == "expert_grouped"
    assert up.flops_each == 2 * 4096 * 1536 * 2048                          # 25.8 GFLOP per expert
    assert up.flops == 16 * up.flops_each
    # FLOPs per rank equal a dense MLP of width top_k * 768 over the rank's 8192 tokens
    assert up.flops + down.flops == 2 * 8192 * 3 * 8 * 768 * 2048
    loop = {g.name: g for g in linear_gemms(QWEN3, 8192, tp=1, moe=True, ep=8)}
    assert loop["expert_up"].kind == "linear"


def test_grouped_gemm_efficiency_at_the_launch_size():
    r = ChipRates.of(Catalog.create().chip("h100-sxm5-80g"), "bf16")
    curve = r.chip.gemm_curve("bf16")
    # compute-bound: 16 experts x 4096 tokens, fc1 of Qwen3: the grouped launch runs at the curve's
    # efficiency at 16 x 25.8 GFLOP; the loop at one expert's 25.8 GFLOP
    g = Gemm("e", 4096, 1536, 2048, 16, "expert_grouped")
    f = 16 * 2 * 4096 * 1536 * 2048
    assert gemm_time_s(g, r) == pytest.approx(f / (r.peak_flops * curve.at(f) * r.gemm_scale), rel=1e-12)
    loop = Gemm("e", 4096, 1536, 2048, 16, "linear")
    assert gemm_time_s(loop, r) == pytest.approx(f / (r.peak_flops * curve.at(f / 16) * r.gemm_scale), rel=1e-12)
    assert gemm_time_s(g, r) < gemm_time_s(loop, r)
    # weight-bound: 64 tokens per expert; all 16 experts' bf16 operands once, at 0.77 of the HBM rate
    g = Gemm("e", 64, 1536, 2048, 16, "expert_grouped")
    bytes_ = 16 * (64 * 2048 * 2 + 2048 * 1536 * 2 + 64 * 1536 * 2)        # 107.0 MB
    assert gemm_time_s(g, r) == pytest.approx(bytes_ / r.hbm_Bps / GROUPED_GEMM_MEM_FRACTION, rel=1e-12)


def test_dispatch_bytes_by_hand():
    # Qwen3, 8192 tokens on the rank, ep 8 (16 local experts), bf16: A = R = 65,536 assignments
    h, b, n, a = 2048, 2, 8192, 65536
    fwd, bwd = moe_dispatch_bytes(QWEN3, 8192, tp=1, ep=8, etp=1, act_bytes=2)
    # permute (2A) + sort chunks (2R) + unsort (2R) + unpermute (A + N) rows of h, router 9 B/logit
    assert fwd == h * b * (2 * a + 2 * a + 2 * a + a + n) + 9 * n * 128 == 1_922_039_808
    assert bwd == h * b * (3 * a + 4 * a + a + n) + 13 * n * 128
    # one local expert per rank (ep = E): no chunk sorting
    f1, _ = moe_dispatch_bytes(QWEN3, 8192, tp=1, ep=128, etp=1, act_bytes=2)
    assert fwd - f1 == 4 * a * h * b


def test_dispatch_comm_alltoall_allgather_and_none():
    n_tok, h, b, k = 8192, 2048, 2, 8
    routed = n_tok * k * h * b                                      # 268 MB per rank
    link8 = _link(8)
    t = moe_dispatch_comm_s(QWEN3, n_tok, 1, 8, 1, b, link8, _link(1))
    assert t == pytest.approx(2 * routed * 7 / 8 / 100e9, rel=1e-12)     # dispatch + combine
    # ep 1, etp 1: the experts are local, nothing moves
    assert moe_dispatch_comm_s(QWEN3, n_tok, 1, 1, 1, b, _link(1), _link(1)) == 0.0
    # allgather dispatcher: gather 8 x N tokens (+ fp32 probs and bool map, 5 B per logit) and
    # reduce-scatter 8 x N fp32 outputs
    t = moe_dispatch_comm_s(QWEN3, n_tok, 1, 8, 1, b, link8, _link(1), dispatcher="allgather")
    want = (8 * n_tok * (h * b + 5 * 128) + 8 * n_tok * h * 4) * 7 / 8 / 100e9
    assert t == pytest.approx(want, rel=1e-12)
    with pytest.raises(ValueError):
        moe_dispatch_comm_s(QWEN3, n_tok, 1, 8, 1, b, link8, _link(1), dispatcher="deepep")


def test_straggler_factor():
    assert expert_load_factor("balanced", 4096, 16, 8) == 1.0
    # Raab & Steger: 65,536 assignments per rank on average over 8 ranks
    assert expert_load_factor("random", 4096, 16, 8) == pytest.approx(1 + math.sqrt(2 * math.log(8) / 65536))
    assert expert_load_factor("random", 4096, 16, 1) == 1.0               # no EP: nobody to wait for
    assert expert_load_factor("random", 4096, 16, 8, capacity_factor=1.25) == 1.25


def _harness_estimate(dp: int, ep: int, mb: int = 4):
    cl, _ = Catalog.create().cluster(f"h200-sxm-141g:1x{dp}")
    s = StrategySpec(dp=dp, ep=ep, zero=0, micro_batch=mb, recompute="none", execution="eager",
                     runtime="pytorch")
    job = JobSpec(dp * mb, 2048, "bf16")
    return estimate(HARNESS, cl, job, s), cl, s, job


def test_ddp_all_reduces_replicated_expert_grads():
    # expert parameters (no biases in the cost model): 24 layers x 8 experts x 2 x 1024 x 2048
    expert_params = 24 * 8 * 2 * 1024 * 2048
    assert expert_params == 805_306_368
    e1, cl, s1, job = _harness_estimate(dp=2, ep=1)
    e2, _, s2, _ = _harness_estimate(dp=2, ep=2)
    assert e1.stages[0].expert_params == expert_params
    assert e2.stages[0].expert_params == expert_params / 2
    g = cl.groups[0]
    t1 = dp_traffic(e1.stages[0], g, s1, job, e1.micro_batches)
    t2 = dp_traffic(e2.stages[0], g, s2, job, e2.micro_batches)
    link = C.group_link(g, 2, 2, buckets=24)
    dense = e1.stages[0].dense_params
    # ep 1: DDP all-reduces the dense and all 805 M expert fp32 gradients over the 2 replicas
    assert t1.grads_s == pytest.approx(C.all_reduce_s(dense * 4, link) + C.all_reduce_s(expert_params * 4, link))
    # ep 2: every expert lives on one rank (expert data parallelism 1): dense gradients only
    assert t2.grads_s == pytest.approx(C.all_reduce_s(dense * 4, link))


def test_eager_host_ops_of_moe_layers():
    # dense ops at 6.47 us, the MoE layers' added ops at 4.13 us (EagerHost docstring)
    d, m = 6.47e-6, 4.13e-6
    assert (EAGER_HOST.dense_us_per_op, EAGER_HOST.moe_us_per_op) == (6.47, 4.13)
    # the two rates reproduce the host-bound MoE step they come from: 24 x 290 dense + 24 x 792 MoE ops
    # (single GPU, 8 local experts: 120 + 84 x 8) issued in 0.12359 s (runs_h200.yaml h200_moe350m8e_single_mb2_noac)
    assert eager_host_s(24, 24, 8, False, 1, 0, 1) == pytest.approx(24 * 290 * d + 24 * 792 * m)
    assert 24 * 290 * d + 24 * 792 * m == pytest.approx(0.12359, rel=2e-3)
    # DDP, ep 1: 24 x (290 + 36) dense ops + 24 x (120 + 84 x 8 + 3 x (1 - 4 + 4 x 8)) MoE ops + 120
    moe = 120 + 84 * 8 + 3 * (1 - 4 + 32)
    assert 24 * (290 + 36) + 24 * moe + 120 == 29040        # measured 28,969 (runs_h200.yaml)
    assert eager_host_s(24, 24, 8, False, 2, 0, 1, ep=1, expert_ddp=True) == pytest.approx(
        24 * (290 + 36) * d + 24 * moe * m)
    # DDP, ep 2: experts not in DDP (3 x (1 - 4) hook ops), 4 local experts, 67 all-to-all ops
    moe = 120 + 84 * 4 + 67 - 9
    assert 24 * (290 + 36) + 24 * moe + 120 == 20280        # measured 20,281
    assert eager_host_s(24, 24, 4, False, 2, 0, 1, ep=2, expert_ddp=False) == pytest.approx(
        24 * (290 + 36) * d + 24 * moe * m)
    # full recomputation re-runs the MoE forward: 133/290 of its ops, as for a dense layer
    moe = (120 + 84 * 4 + 67) * (1 + 133 / 290) - 9
    assert round(24 * (290 + 133 + 36) + 24 * moe + 120) == 29229     # measured 28,585
    assert eager_host_s(24, 24, 4, True, 2, 0, 1, ep=2) == pytest.approx(24 * (290 + 133 + 36) * d + 24 * moe * m)


def test_eager_ddp_without_ep_costs_more_host_time_than_with_ep():
    # the replicated experts' DDP hooks and 8 (not 4) local experts: ep 1 issues ~8.8 k more ops
    e1, *_ = _harness_estimate(dp=2, ep=1, mb=2)
    assert e1.step_time_s > (24 * (290 + 36) * EAGER_HOST.dense_us_per_op + 24 * (792 + 87) * EAGER_HOST.moe_us_per_op) * 1e-6


def test_fine_grained_moe_without_ep_is_slower_per_token_on_fused_megatron():
    """Qwen3-30B-A3B on 8 H100, Megatron (fused, grouped GEMM), micro-batch 1 x 4096: without EP each of
    the 128 local experts sees 4096 * 8 / 128 = 256 tokens (weight-bound grouped GEMMs: every expert's
    weights are read for 256 tokens); with ep 8 each of 16 experts sees 2048. Per micro-batch the expert
    GEMMs of ep 1 must cost more than those of ep 8, and both less than the old per-expert-size rule."""
    cl, _ = Catalog.create().cluster("h100-sxm5-80g:1x8")
    r = ChipRates.of(cl.groups[0].chip, "bf16")
    t = {}
    for ep in (1, 8):
        gs = [g for g in linear_gemms(QWEN3, 4096, 1, True, ep, grouped=True) if g.name.startswith("expert_")]
        t[ep] = sum(gemm_time_s(g, r) for g in gs)
        old = sum(gemm_time_s(Gemm(g.name, g.m, g.n, g.k, g.count), r) for g in gs)
        assert t[ep] < old
    assert t[1] > 1.2 * t[8]           # 0.70 ms vs 0.56 ms on the H100 chip file at the hopper calibration
    # and the whole estimate keeps that order (same FLOPs per device either way)
    job = JobSpec(64, 4096, "bf16")
    step = {ep: estimate(QWEN3, cl, job, StrategySpec(dp=8, ep=ep, zero=1, micro_batch=1, recompute="full"))
            for ep in (1, 8)}
    assert step[1].breakdown_s["compute"] > step[8].breakdown_s["compute"]


def test_forced_balance_router_is_random_on_megatron_and_exact_in_the_harness():
    # Megatron-core moe_router_force_load_balancing draws random logits (RandomSTE): per-expert counts are
    # multinomial; our harness's balanced router is exact
    assert moe_router("megatron") == moe_router("flagscale") == "random"
    assert moe_router("pytorch") == moe_router("torchtitan") == "balanced"
    s = StrategySpec(dp=8, ep=8, zero=1, micro_batch=2, recompute="none")          # megatron, fused
    # 8192 tokens: 4096 per expert, 16 local experts -> 65,536 assignments per rank, 8 ranks
    assert moe_load(QWEN3, s, 8192) == pytest.approx(1 + math.sqrt(2 * math.log(8) / 65536), rel=1e-12)
    assert moe_load(HARNESS, StrategySpec(dp=2, ep=2, zero=0, micro_batch=4, execution="eager",
                                          runtime="pytorch"), 8192) == 1.0


def test_fp8_padding_bytes_by_hand():
    # Qwen3, 8192 tokens, ep 8, bf16 rows: R = 8192 * 8 = 65,536 rows of 2048 reach the 16 local experts;
    # TE Fp8Padding + Fp8Unpadding each read and write them: 4 x 65,536 x 2048 x 2 B = 1 GiB per pass
    assert fp8_padding_bytes(QWEN3, 8192, 1, 8, 1, 2, "random") == 4 * 65536 * 2048 * 2 == 1_073_741_824
    # exact balance with 4096 (a multiple of 16) rows per expert: TE returns the input unpadded
    assert fp8_padding_bytes(QWEN3, 8192, 1, 8, 1, 2, "balanced") == 0.0
    # exact balance with 4104 tokens at ep 1: 4104 x 8 / 128 = 256.5 rows per expert, not a multiple of 16
    assert fp8_padding_bytes(QWEN3, 4104, 1, 1, 1, 2, "balanced") == 4 * 4104 * 8 * 2048 * 2
    # the layer terms charge it on fp8 Megatron (TEGroupedMLP) only, at the achievable HBM rate
    r8 = ChipRates.of(Catalog.create().chip("h100-sxm5-80g"), "fp8")
    s = StrategySpec(dp=8, ep=8, zero=1, micro_batch=2, recompute="none")
    link = _link(8)
    mt = moe_layer_terms(QWEN3, s, r8, 8192, link, _link(1))
    d_f, d_b = moe_dispatch_bytes(QWEN3, 8192, 1, 8, 1, 2)
    pad = 1_073_741_824 * mt.load
    # + the fixed device time of H100 current-scaling quantisation: 3 kernels x 16 experts x 2 GEMM inputs a pass
    quant = 96 * QUANT_KERNEL_DEVICE_S
    assert mt.dispatch_fwd_s == pytest.approx((d_f + pad) / r8.hbm_Bps + quant, rel=1e-12)
    assert mt.dispatch_bwd_s == pytest.approx((d_b + pad) / r8.hbm_Bps + quant, rel=1e-12)
    tt = moe_layer_terms(QWEN3, StrategySpec(dp=8, ep=8, zero=1, micro_batch=2, runtime="torchtitan"), r8, 8192,
                         link, _link(1))
    assert tt.dispatch_fwd_s == pytest.approx(d_f / r8.hbm_Bps, rel=1e-12)


def test_expert_gemm_kind_by_runtime_and_te_multistream_rate():
    assert expert_gemm_kind(StrategySpec(dp=8, ep=8)) == "expert_streams"                      # megatron
    assert expert_gemm_kind(StrategySpec(dp=8, ep=8, runtime="torchtitan")) == "expert_grouped"
    assert expert_gemm_kind(StrategySpec(dp=2, execution="eager", runtime="pytorch")) == "linear"
    r = ChipRates.of(Catalog.create().chip("h100-sxm5-80g"), "bf16")
    curve = r.chip.gemm_curve("bf16")
    # 128 local experts x 512 tokens, Qwen3 fc1: TE runs 4 cuBLAS GEMMs at a time -> the curve at 4 x 3.2 GFLOP
    each = 2 * 512 * 1536 * 2048
    g = Gemm("e", 512, 1536, 2048, 128, "expert_streams")
    compute = 128 * each / (r.peak_flops * curve.at(TE_GEMM_STREAMS * each) * r.gemm_scale)
    memory = 128 * (512 * 2048 * 2 + 2048 * 1536 * 2 + 512 * 1536 * 2) / r.hbm_Bps / GROUPED_GEMM_MEM_FRACTION
    assert gemm_time_s(g, r) == pytest.approx(max(compute, memory), rel=1e-12)
    # slower than one grouped launch over all 128 experts, faster than a serial per-expert loop
    assert gemm_time_s(Gemm("e", 512, 1536, 2048, 128, "expert_grouped"), r) < gemm_time_s(g, r) \
        < gemm_time_s(Gemm("e", 512, 1536, 2048, 128, "linear"), r)
    # fewer experts than streams: all of them together
    g2 = Gemm("e", 4096, 1536, 2048, 2, "expert_streams")
    f2 = 2 * 2 * 4096 * 1536 * 2048                                   # compute-bound: 103 GFLOP, 25 MB
    assert gemm_time_s(g2, r) == pytest.approx(f2 / (r.peak_flops * curve.at(f2) * r.gemm_scale), rel=1e-12)


def test_grouped_mm_backward_beyond_twice_the_forward():
    r = ChipRates.of(Catalog.create().chip("h100-sxm5-80g"), "bf16")
    lin = linear_gemms(QWEN3, 8192, 1, True, 8, grouped=True)
    fwd = sum(gemm_time_s(g, r) for g in lin if g.kind == "expert_grouped")
    assert grouped_mm_bwd_extra_s(lin, r, 1.0) == pytest.approx((GROUPED_MM_BWD_OVER_FWD - 2) * fwd, rel=1e-12)
    # torchtitan (torch._grouped_mm) pays it; Megatron (TE multi-stream cuBLAS) does not
    s_tt = StrategySpec(dp=8, ep=8, zero=1, micro_batch=2, runtime="torchtitan")
    mt = moe_layer_terms(QWEN3, s_tt, r, 8192, _link(8), _link(1), lin)
    assert mt.expert_bwd_extra_s == pytest.approx((GROUPED_MM_BWD_OVER_FWD - 2) * fwd, rel=1e-12)
    s_mg = StrategySpec(dp=8, ep=8, zero=1, micro_batch=2)
    lin_mg = linear_gemms(QWEN3, 8192, 1, True, 8, grouped=expert_gemm_kind(s_mg))
    assert moe_layer_terms(QWEN3, s_mg, r, 8192, _link(8), _link(1), lin_mg).expert_bwd_extra_s == 0.0


# Qwen3-235B-A22B (HF config): 94 layers, hidden 4096, 128 experts top-8 of width 1536
QWEN3_235B = ModelSpec("qwen3-235b-a22b", 94, 4096, 64, 12288, 151936, seq_len=4096, kv_heads=4, head_dim=128,
                       moe=MoESpec(experts=128, top_k=8, expert_ffn_hidden=1536))


def test_all_to_all_across_nodes_by_hand():
    # DGX-H100 nodes: NVLink busbw 450 x 0.817 = 367.65 GB/s among 8 ranks, one 400 Gb/s NIC per GPU at 0.94 = 47 GB/s
    group = Catalog.create().cluster("h100-sxm5-80g:32x8")[0].groups[0]
    assert ep_node_split(group, 8, 8) is None                      # inside one node: the group's link as before
    split = ep_node_split(group, 32, 8)
    assert split is not None and split.per_node == 8
    assert split.intra.busbw_GBps == pytest.approx(450 * 0.817) and split.intra.n == 8
    assert split.nic.busbw_GBps == pytest.approx(50 * 0.94)
    # Qwen3-235B tp2 (SP) ep32, micro-batch 1 x 4096: a rank routes 2048 x 8 tokens of 4096 bf16 = 128 MiB
    s_ = 2048 * 8 * 4096 * 2
    assert s_ == 134_217_728
    # 24 of the 32 ranks are on other nodes: 96 MiB leave through the rank's NIC; 7 of 32 shares cross NVLink
    inter = (8 + 6) * 1e-6 + s_ * 24 / 32 / 47e9                  # alpha: launch + one NIC step
    intra = (8 + 1 * 2 * 7) * 1e-6 + s_ * 8 / 32 * 7 / 8 / (450 * 0.817e9)
    assert all_to_all_across_nodes_s(s_, 32, split) == pytest.approx(max(inter, intra), rel=1e-12)
    assert inter == pytest.approx(2.156e-3, rel=1e-3)
    # what the group's link charged: the hierarchical-ring busbw min(NVLink, 8 NICs) = 367.65 GB/s for all 31/32
    # (alpha: launch + 7 NVLink steps x 2 + 2 log2(4 nodes) NIC steps = 46 us): 0.40 ms, 5.4x less
    link = C.group_link(group, 32, 8)
    assert C.all_to_all_s(s_, link) == pytest.approx(46e-6 + s_ * 31 / 32 / (450 * 0.817e9), rel=1e-12)
    # the dispatcher: dispatch + combine per pass
    t = moe_dispatch_comm_s(QWEN3_235B, 4096, 2, 32, 1, 2, link, _link(1), ep_split=split)
    assert t == pytest.approx(2 * inter, rel=1e-12)
    # one rank per node: every peer is off the node, the NIC rate as the group link had it (latency apart)
    split1 = ep_node_split(group, 4, 1)
    assert all_to_all_across_nodes_s(s_, 4, split1) == pytest.approx(14e-6 + s_ * 3 / 4 / 47e9, rel=1e-12)


def test_flex_dispatcher_sends_a_token_once_per_remote_node():
    # 128 experts over 4 nodes (32 each), top-8 uniform without replacement: a node holds none of a token's
    # experts with probability C(96, 8) / C(128, 8); the other 3 nodes are hit 3 x (1 - that) times
    miss = math.comb(96, 8) / math.comb(128, 8)
    assert remote_nodes_per_token(128, 8, 4) == pytest.approx(3 * (1 - miss), rel=1e-12)
    assert remote_nodes_per_token(128, 8, 4) == pytest.approx(2.7218, rel=1e-4)   # "alltoall" sends 6 copies
    assert remote_nodes_per_token(128, 8, 2) == pytest.approx(1 - math.comb(64, 8) / math.comb(128, 8), rel=1e-12)
    assert remote_nodes_per_token(128, 8, 1) == 0.0
    group = Catalog.create().cluster("h100-sxm5-80g:32x8")[0].groups[0]
    split = ep_node_split(group, 32, 8)
    link = C.group_link(group, 32, 8)
    t = moe_dispatch_comm_s(QWEN3_235B, 4096, 2, 32, 1, 2, link, _link(1), dispatcher="flex", ep_split=split)
    inter = 14e-6 + 2048 * 4096 * 2 * 3 * (1 - miss) / 47e9
    assert t == pytest.approx(2 * max(inter, C.all_to_all_s(134_217_728, split.intra)), rel=1e-12)
    assert t < moe_dispatch_comm_s(QWEN3_235B, 4096, 2, 32, 1, 2, link, _link(1), ep_split=split)


def test_fp8_quant_kernels_per_pass():
    s = StrategySpec(dp=8, ep=8, zero=1, micro_batch=2, recompute="none")
    # 16 local experts x 2 GroupedLinear inputs (or output gradients) x kernels per tensor of the recipe
    assert fp8_quant_kernels(QWEN3, s, "current") == 2 * 16 * 3 == 96     # amax, scale, cast-transpose
    assert fp8_quant_kernels(QWEN3, s, "mxfp8") == 2 * 16 * 1             # one block-scaled cast
    assert fp8_quant_kernels(QWEN3, s, "delayed") == 2                    # one multi-cast-transpose per linear
    # bf16 pays none: the layer terms are bytes only
    r16 = ChipRates.of(Catalog.create().chip("h100-sxm5-80g"), "bf16")
    mt = moe_layer_terms(QWEN3, s, r16, 8192, _link(8), _link(1))
    d_f, _ = moe_dispatch_bytes(QWEN3, 8192, 1, 8, 1, 2)
    assert mt.dispatch_fwd_s == pytest.approx(d_f / r16.hbm_Bps, rel=1e-12)


def test_quant_kernel_device_time_is_the_recorded_measurement():
    # QUANT_KERNEL_DEVICE_S = median over the raw file's 40 (layout, tensor) rows of (amax + scale + cast-transpose
    # per expert - 6 B/element at the chip's achievable HBM rate) / 3 kernels
    raw = json.loads((Path(__file__).parents[1] / "benchmarks/real/moe_device_pieces_h100.raw.json").read_text())
    hbm = ChipRates.of(Catalog.create().chip("h100-sxm5-80g"), "fp8").hbm_Bps
    per = [(r[f"{k}_te_like_s"] / r["experts"] - 6 * r[f"{k}_elems"] / r["experts"] / hbm) / 3
           for r in raw["experts"] for k in ("fc1_qx", "fc2_qx", "fc1_qdy", "fc2_qdy")]
    assert len(per) == 40
    assert statistics.median(per) == pytest.approx(QUANT_KERNEL_DEVICE_S, abs=0.01e-6)
    assert 3.4e-6 < min(per) and max(per) < 4.3e-6                  # flat over 0.8-17 M elements per tensor


def _tt_moe_layer_rows():
    import json
    from pathlib import Path
    raw = Path(__file__).resolve().parents[1] / "benchmarks" / "real" / "tt_moe_layer_h200.raw.json"
    return json.loads(raw.read_text())["rows"]


def _grouped_and_rest_ms(kernels):
    grouped = sum(ms for name, _, ms in kernels if "enable_3x_kernel_for_sm9x" in name)   # CUTLASS grouped GEMMs
    return grouped, sum(ms for _, _, ms in kernels) - grouped


TT_HIDDEN = {"olmoe-1b-7b": 2048, "qwen3-30b-a3b": 2048, "qwen3-235b-a22b": 4096}


def test_torchtitan_moe_constants_are_the_measured_medians():
    """torchtitan 0.2.2's own MoE module on 1x H200 (benchmarks/real/tt_moe_layer.py): the grouped GEMMs' backward /
    forward and the routing's device time per (token x top-k x hidden) element, as bytes at H200's achievable HBM
    rate, are the medians of the raw file's profiled kernels (every kernel but the CUTLASS grouped GEMMs)."""
    import statistics

    from baige_plan.cost.moe import TORCHTITAN_ROUTE_BWD_BYTES, TORCHTITAN_ROUTE_FWD_BYTES
    hbm = ChipRates.of(Catalog.create().chip("h200-sxm-141g"), "bf16").hbm_Bps
    rows = _tt_moe_layer_rows()
    assert len(rows) == 12
    ratios, fwd_b, bwd_b = [], [], []
    for r in rows:
        g_all, rest_all = _grouped_and_rest_ms(r["kernels"])
        g_f, rest_f = _grouped_and_rest_ms(r["fwd_kernels"])
        ratios.append((g_all - g_f) / g_f)
        if r["tokens"] >= 8192:
            elements = r["tokens"] * 8 * TT_HIDDEN[r["model"]]
            fwd_b.append(rest_f * 1e-3 / elements * hbm)
            bwd_b.append((rest_all - rest_f) * 1e-3 / elements * hbm)
    assert GROUPED_MM_BWD_OVER_FWD == pytest.approx(statistics.median(ratios), abs=0.01)
    assert TORCHTITAN_ROUTE_FWD_BYTES == pytest.approx(statistics.median(fwd_b), abs=0.1)
    assert TORCHTITAN_ROUTE_BWD_BYTES == pytest.approx(statistics.median(bwd_b), abs=0.1)
    # the same rate for both hiddens and both expert counts: no shape sits 10 % off the median
    assert all(abs(b / statistics.median(fwd_b) - 1) < 0.1 for b in fwd_b)


def test_torchtitan_eager_moe_layer_matches_its_measured_module():
    """The model's MoE work of one torchtitan layer (grouped expert GEMMs forward + backward, routing) against the
    measured module's device time (tt_moe_layer_h200.raw.json) at >= 8,192 tokens: within 15 % on every point of the
    three shapes (the fused dispatcher's bytes and the 3.3 backward left it 25-45 % short at 16,384+ tokens)."""
    from baige_plan.cost.compute import gemm_time_s as gt
    from baige_plan.cost.estimate import _gemm_set
    cat = Catalog.create(["benchmarks/real/catalog"])
    r = ChipRates.of(cat.chip("h200-sxm-141g"), "bf16")
    for row in _tt_moe_layer_rows():
        if row["tokens"] < 8192:
            continue
        m = cat.model(row["model"])
        t = row["tokens"]
        s = StrategySpec(micro_batch=t // 4096, runtime="torchtitan", execution="eager", zero=3)
        lin, _ = _gemm_set(m, s, 4096, True)
        mt = moe_layer_terms(m, s, r, t, _link(1), _link(1), lin)
        experts_f = sum(gt(g, r) for g in lin if g.name.startswith("expert_")) * mt.load
        model_s = 3 * experts_f + mt.expert_bwd_extra_s + mt.dispatch_fwd_s + mt.dispatch_bwd_s
        measured_s = sum(ms for _, _, ms in row["kernels"]) * 1e-3
        assert model_s / measured_s == pytest.approx(1.0, abs=0.15), (row["model"], t, model_s, measured_s)


def test_torchtitan_eager_moe_saved_bytes_by_hand():
    """torchtitan 0.2.2 MoE.forward's saved tensors per routed row (padded input 2h, four 2f expert intermediates,
    the fp32 unsorted outputs bmm keeps 4h, three int64 index sets) and the fp32 router softmax per token, against
    the fused dispatcher's expert activations (SwiGLU 6f per row) and permuted copies (2h per row): OLMoE-1B-7B,
    16,384 tokens, tp 1, bf16, no dropout."""
    from baige_plan.cost.memory import layer_activation_bytes
    m = Catalog.create(["benchmarks/real/catalog"]).model("olmoe-1b-7b")
    h, f, k, e, t = 2048, 1024, 8, 64, 16384
    fused = layer_activation_bytes(m, 4096, 4, 1, 1, False, "none", False, True, 2)
    tt = layer_activation_bytes(m, 4096, 4, 1, 1, False, "none", False, True, 2, moe_saved="torchtitan_eager")
    assert tt - fused == pytest.approx(t * (k * (2 * h + 8 * f + 4 * h + 24) + 4 * e - (6 * f * k + 2 * h * k)),
                                       rel=1e-12)
    # tp 2 with SP and the experts TP-sharded (etp = tp, torchtitan's ep = 1): every rank routes all tokens at full
    # width with half of each expert; the attention part is the dense layer's (its MLP taken out)
    tt2 = layer_activation_bytes(m, 4096, 4, 2, 1, True, "none", False, True, 2, etp=2, moe_saved="torchtitan_eager")
    dense2 = layer_activation_bytes(m, 4096, 4, 2, 1, True, "none", False, False, 2)
    attention2 = dense2 - t * ((2 * h + 2 * h) / 2 + (4 + 2) * f / 2)       # dense SwiGLU MLP of width f = 1024
    assert tt2 == pytest.approx(attention2 + t * ((2 * h + 2 * h) / 2 + k * (2 * h + 8 * f / 2 + 4 * h + 24) + 4 * e),
                                rel=1e-12)
