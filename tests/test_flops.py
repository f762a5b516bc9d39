"""FLOP counts against Megatron-LM's formula and Narayanan 2021 Eq. (3), computed by hand here."""

import math

from baige_plan.cost.estimate import estimate
from baige_plan.cost.flops import megatron_model_flops, narayanan_eq3_flops
from baige_plan.io.catalog import Catalog
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec, MoESpec
from baige_plan.specs.strategy import StrategySpec


def megatron_reference(batch, s, L, h, heads, kv, ffn, V, swiglu, topk=None, kv_channels=None, shared=0):
    """Transcription of Megatron-LM training.py num_floating_point_operations (MHA/GQA branch)."""
    kvc = kv_channels or h // heads
    q = kvc * heads
    k = kvc * kv
    attn = 3 * 2 * (h * (q + k + k) + q * s / 2 * 2 + q * h)
    f = 3 if swiglu else 2
    mlp = 3 * 2 * (ffn * (topk or 1) + shared) * f * h
    return batch * s * (L * (attn + mlp) + 3 * 2 * h * V)


def test_llama3_8b_matches_megatron_formula():
    m = ModelSpec("llama3-8b", 32, 4096, 32, 14336, 128256, seq_len=8192, kv_heads=8)
    # hand value: per token 6*(4096*(4096+2*1024) + 4096*8192/2*2 + 4096*4096) per layer, etc.
    want = megatron_reference(4, 8192, 32, 4096, 32, 8, 14336, 128256, True)
    assert megatron_model_flops(m, 4, 8192) == want
    # 6 x GEMM weights touched per token (no input embedding) + causal attention 6 q s per layer
    gemm_weights = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336) + 4096 * 128256
    assert math.isclose(want / (4 * 8192), 6 * gemm_weights + 6 * 32 * 4096 * 8192, rel_tol=1e-12)


def test_gpt3_175b_gelu_and_moe():
    gpt = ModelSpec("gpt3", 96, 12288, 96, 49152, 51200, activation="gelu")
    assert megatron_model_flops(gpt, 1536, 2048) == megatron_reference(1536, 2048, 96, 12288, 96, 96, 49152, 51200, False)
    mix = ModelSpec("mixtral", 32, 4096, 32, 14336, 32000, kv_heads=8,
                    moe=MoESpec(experts=8, top_k=2, expert_ffn_hidden=14336))
    assert megatron_model_flops(mix, 2, 4096) == megatron_reference(2, 4096, 32, 4096, 32, 8, 14336, 32000, True, topk=2)


def test_eq3_hand_value():
    # Narayanan Table 1, 1.7B row: 96*512*2048*24*2304^2*(1 + 2048/(6*2304) + 51200/(16*24*2304))
    f = narayanan_eq3_flops(512, 2048, 24, 2304, 51200)
    hand = 96 * 512 * 2048 * 24 * 2304**2 * (1 + 2048 / 13824 + 51200 / 884736)
    assert math.isclose(f, hand, rel_tol=1e-12)
    # published 137 TFLOP/s on 32 GPUs -> 3.53 s (the calibration file's derived step time)
    assert math.isclose(f / (32 * 137e12), 3.53, rel_tol=0.01)


def test_executed_flops_equal_eq3_for_full_recompute_standard_attention():
    """Our per-layer GEMM list (QKV, scores, PV, proj, MLP, logits) executed 4x with full
    recomputation must add up to Eq. (3) exactly (ffn = 4h, MHA, full s x s scores)."""
    L, h, a, V, s, B = 8, 1024, 16, 51200, 2048, 32
    m = ModelSpec("gpt", L, h, a, 4 * h, V, activation="gelu", tie_embeddings=True)
    cl, _ = Catalog.create().cluster("a100-sxm4-80g:1x8")
    st = StrategySpec(tp=2, pp=2, dp=2, recompute="full", attention="standard", sequence_parallel=False)
    e = estimate(m, cl, JobSpec(B, s, "bf16"), st)
    executed = e.hfu * e.step_time_s * e.devices * 312e12
    # Eq. 3 counts logits 3x (no recompute) -- 96BslH^2 * V/(16lh) = 6BshV -- as we do.
    assert math.isclose(executed, narayanan_eq3_flops(B, s, L, h, V), rel_tol=1e-9)
