"""Per-runtime memory semantics (specs/runtime.py MemorySemantics, specs/runtimes/NAME.py) against formulas derived by
hand from each framework's source (docs/COST_MODEL.md "Memory model")."""

import math

import pytest

from baige_plan.cost import memory as M
from baige_plan.cost.estimate import estimate
from baige_plan.io.serialize import estimate_dict
from baige_plan.reports.plan_check import _check_estimate
from baige_plan.specs import runtime as R
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.runtimes import deepspeed, megatron, paddle, pytorch, torchtitan
from baige_plan.specs.strategy import StrategySpec
from baige_plan.specs.topology import ClusterSpec, GroupSpec
from tests.test_precision import A100_40

GIB = 2**30


def approx(t):
    return pytest.approx(t, rel=1e-12)


# -- model states, bytes per parameter --------------------------------------------------------------------------

@pytest.mark.parametrize("d", [1, 8, 16])
def test_megatron_distributed_optimizer_bytes_per_param(d):
    """Megatron-LM docs/user-guide/features/dist_optimizer.md: bf16 params + fp32 grads 6 + 12/d, fp16 params +
    fp16 grads 4 + 16/d (the 4/d: fp32 main grads of the step), ZeRO-0 18 and 20."""
    w, g, k, st = M.state_bytes(megatron.MEMORY, "bf16", 1, d)
    assert (w, g, k, st) == approx((2, 4, 12 / d, 0))       # grad buffer fp32: validate_args for --bf16
    assert w + g + k == approx(6 + 12 / d)
    w, g, k, st = M.state_bytes(megatron.MEMORY, "fp16", 1, d)
    assert (w, g, k, st) == approx((2, 2, 12 / d, 4 / d))   # fp16 grad buffer; fp32 main grads at the step
    assert w + g + k + st == approx(4 + 16 / d)
    assert sum(M.state_bytes(megatron.MEMORY, "bf16", 0, d)) == 18
    assert sum(M.state_bytes(megatron.MEMORY, "fp16", 0, d)) == 20
    assert sum(M.state_bytes(megatron.MEMORY, "fp8", 1, d)) == approx(6 + 12 / d)   # fp8 runs --bf16
    assert sum(M.state_bytes(megatron.MEMORY, "fp32", 0, d)) == 16                  # table row "fp32": 16


def test_deepspeed_zero_stages():
    """bf16 ZeRO-0/1: BF16_Optimizer's full-size fp32 gradient buffer + fp32 master partition: 2 + 4 + 12/d.
    ZeRO-2: model-dtype gradients partitioned, fp32 gradient partition at the step: 2 + 2/d + 12/d + 4/d.
    ZeRO-3: everything partitioned: (2 + 2 + 12 + 4)/d."""
    d = 16
    assert M.state_bytes(deepspeed.MEMORY, "bf16", 1, d) == approx((2, 4, 12 / d, 0))
    assert M.state_bytes(deepspeed.MEMORY, "bf16", 2, d) == approx((2, 2 / d, 12 / d, 4 / d))
    assert M.state_bytes(deepspeed.MEMORY, "bf16", 3, d) == approx((2 / d, 2 / d, 12 / d, 4 / d))


def test_fsdp2_master_params():
    """torchtitan / harness FSDP2: fp32 sharded params (the master), fp32 sharded grads, AdamW m, v: 16/d.
    Harness DDP under autocast: fp32 params + the kept bf16 cast (2) + fp32 grads + m, v = 18."""
    d = 8
    assert M.state_bytes(torchtitan.MEMORY, "bf16", 3, d) == approx((4 / d, 4 / d, 8 / d, 0))
    assert M.state_bytes(pytorch.MEMORY, "bf16", 3, d) == approx((4 / d, 4 / d, 8 / d, 0))
    assert M.state_bytes(pytorch.MEMORY, "bf16", 0, d) == approx((6, 4, 8, 0))
    assert M.state_bytes(pytorch.MEMORY, "fp32", 0, d) == approx((4, 4, 8, 0))
    assert M.state_bytes(paddle.MEMORY, "bf16", 1, d) == approx((2, 4, 12 / d, 0))   # amp_master_grad True


# -- the estimate applies them ------------------------------------------------------------------------------------

def _cluster(n=8):
    g = GroupSpec(name="g", chip=A100_40, nodes=max(1, n // 8), devices_per_node=min(8, n))
    return ClusterSpec(name="t", groups=(g,))


MODEL = ModelSpec(name="m", layers=8, hidden=2048, heads=16, ffn_hidden=8192, vocab=32000, seq_len=2048,
                  activation="swiglu")


def test_megatron_optimizer_shards_over_dp_times_cp():
    """The distributed optimizer's group is dp x cp (optimizer/__init__.py intra_dp_cp_group)."""
    s = StrategySpec(tp=1, pp=1, dp=2, cp=4, zero=1, micro_batch=1, recompute="full", runtime="megatron")
    e = estimate(MODEL, _cluster(8), JobSpec(8, 2048, "bf16"), s)
    st = e.stages[0]
    assert st.optimizer_gib * GIB == approx(st.dense_params * 12 / 8)
    assert st.weights_gib * GIB == approx(st.dense_params * 2)
    assert st.grads_gib * GIB == approx(st.dense_params * 4)


def test_torchtitan_fsdp_gathered_units():
    """FSDP2, pp = 1: sharded fp32 states + two gathered bf16 units (in use + prefetched) + in the backward the
    unit's bf16 grads and its fp32 reduce-scatter input; the largest unit is a layer (4h^2 + 3hf = 67.1M) or the
    embedding / output layer (vocab x h = 65.5M)."""
    s = StrategySpec(tp=1, pp=1, dp=8, zero=3, micro_batch=1, recompute="full", runtime="torchtitan",
                     execution="eager")
    e = estimate(MODEL, _cluster(8), JobSpec(8, 2048, "bf16"), s)
    st = e.stages[0]
    p = st.dense_params
    unit = max((p - 2 * MODEL.vocab * MODEL.hidden) / MODEL.layers, MODEL.vocab * MODEL.hidden)
    assert unit == approx(4 * 2048**2 + 3 * 2048 * 8192 + 4 * 2048)   # a layer (+ 4h norm params, cost/params.py)
    assert st.weights_gib * GIB == approx(p * 4 / 8 + 2 * 2 * unit)
    assert st.grads_gib * GIB == approx(p * 4 / 8 + (2 + 4) * unit)
    assert st.optimizer_gib * GIB == approx(p * 8 / 8)


def test_torchtitan_pipelined_fsdp_keeps_stage_unsharded():
    """pp > 1: reshard_after_forward off and gradient sync skipped until the last micro-batch: the stage's bf16
    params (2 B) and its unsharded grads upcast to reduce_dtype fp32 (4 B: FSDPParam.to_accumulated_grad_if_needed)."""
    s = StrategySpec(tp=1, pp=2, dp=4, zero=3, micro_batch=1, recompute="full", runtime="torchtitan",
                     execution="eager")
    e = estimate(MODEL, _cluster(8), JobSpec(16, 2048, "bf16"), s)
    for st in e.stages:
        p = st.dense_params
        assert st.weights_gib * GIB == approx(p * 4 / 4 + 2 * p)
        assert st.grads_gib * GIB == approx(p * 4 / 4 + 4 * p)


# -- in-flight micro-batches: Megatron schedules.py get_pp_rank_microbatches ---------------------------------------

@pytest.mark.parametrize("p,v,m,r,want", [
    (4, 1, 8, 0, 4), (4, 1, 8, 3, 1), (4, 1, 2, 0, 2),          # 1F1B: min(p - r, m)
    (4, 2, 8, 0, (2 * 3 + 1 * 4 + 1) / 2),                       # rank 0: warmup 10, + 1 = 11 chunks of 1/2 stage
    (4, 2, 8, 3, (0 + 1 * 4 + 1) / 2),                           # last rank: warmup (v-1) p = 4 -> 2.5, not 1
    (4, 2, 8, 1, (2 * 2 + 4 + 1) / 2),
    (4, 2, 2, 0, 2 * 2 / 2),                                     # capped at m v chunks
    (8, 6, 64, 0, (2 * 7 + 5 * 8 + 1) / 6),
])
def test_interleaved_inflight_by_hand(p, v, m, r, want):
    assert M.inflight_microbatches(p, v, m, r) == approx(want)


def test_interleaved_rank0_is_korthikanti():
    for p, v in ((4, 2), (8, 6), (35, 3), (16, 4)):
        assert M.inflight_microbatches(p, v, 10 * p, 0) == approx(p * (1 + (p - 1) / (p * v)))


# -- activations and loss -------------------------------------------------------------------------------------------

LLAMA8B = ModelSpec(name="llama3-8b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=128256,
                    seq_len=8192, activation="swiglu")


def test_torchtitan_op_sac_saves_by_hand():
    """Op-level SAC, Llama 3 8B, tp 1: block input 2h, mm 1, 3, 5, 7 = wq (q), wv (kv), w1 (f), w2 (h), SDPA out
    (q) + fp32 lse (4 a): per token 2*4096 + 2*(4096 + 1024 + 14336 + 4096) + 2*4096 + 4*32 = 63,616 B."""
    per_token = 2 * 4096 + 2 * (4096 + 1024 + 14336 + 4096) + 2 * 4096 + 4 * 32
    assert per_token == 63616
    got = M.layer_activation_bytes(LLAMA8B, 8192, 2, 1, 1, False, "selective", False, selective="op_sac")
    assert got == approx(per_token * 8192 * 2)
    # Megatron's "selective" (core attention) with flash keeps everything: more than op-SAC
    assert M.layer_activation_bytes(LLAMA8B, 8192, 2, 1, 1, False, "selective", False) > 2 * got


def test_fp8_te_saves_fp8_gemm_inputs():
    """TE fp8 linears save their fp8 input: 1 B less per element of the QKV, proj, MLP and second-MLP inputs."""
    bf = M.layer_activation_bytes(LLAMA8B, 4096, 1, 4, 1, True, "none", False)
    f8 = M.layer_activation_bytes(LLAMA8B, 4096, 1, 4, 1, True, "none", False, fp8_gemm_inputs=True)
    assert bf - f8 == approx(4096 * (4096 / 4 + 4096 / 4 + 4096 / 4 + 14336 / 4))


def test_loss_bytes_per_logit():
    assert M.loss_bytes_per_logit("fused", "fused", 8, 2, 3.0) == 6          # Megatron: fp32 copy (in place) + bf16
    assert M.loss_bytes_per_logit("fused", "eager", 1, 2, 3.0) == 9          # harness: measured extra 3
    assert M.loss_bytes_per_logit("eager_fp32", "fused", 1, 2, 3.0) == 9     # torchtitan's loss is never compiled
    assert M.loss_bytes_per_logit("eager_fp32", "fused", 8, 2, 3.0) == 14    # loss_parallel: 2 + 4 + 4 + 4


# -- outside the tensors, fit decision -------------------------------------------------------------------------------

def test_reserve_counts_context_nccl_and_unreclaimable_allocator_slack():
    mem = megatron.MEMORY
    assert M.comm_groups(1, 1, 1, 1) == 0
    assert M.comm_groups(2, 1, 2, 1) == 2                  # TP + DP
    assert M.comm_groups(8, 2, 4, 4, 8, 1) == 5             # TP, CP, dp x cp, PP, EP
    assert M.outside_gib(mem, 0) == approx(R.CUDA_CONTEXT_GIB)
    assert M.outside_gib(mem, 2) == approx(R.CUDA_CONTEXT_GIB + R.NCCL_FIRST_GIB + R.NCCL_GROUP_GIB)
    # what counts against capacity: 1 % of 10 GiB unreclaimable + the 0.743 GiB context = 0.843 GiB
    assert M.reserve_bytes(mem, 10 * GIB, 0) == approx((0.1 + 0.743) * GIB)
    # what the reserved peak adds: 4.35 % of 10 GiB
    assert M.slack_bytes(mem, 10 * GIB) == approx(0.435 * GIB)
    # with full recompute the reserved peak shows 14.9 % (the 13 full-recompute harness runs)
    assert M.slack_bytes(mem, 10 * GIB, full_recompute=True) == approx(1.49 * GIB)


def test_margin_and_fits_use_the_fraction():
    s = StrategySpec(tp=2, pp=1, dp=4, zero=1, micro_batch=1, recompute="full", runtime="megatron")
    job, cl = JobSpec(8, 2048, "bf16"), _cluster(8)
    full = estimate(MODEL, cl, job, s, memory_frac=1.0)
    frac = full.peak_memory_gib / full.capacity_gib
    lo = estimate(MODEL, cl, job, s, memory_frac=frac * 0.99)
    hi = estimate(MODEL, cl, job, s, memory_frac=min(1.0, frac * 1.01))
    assert not lo.fits and lo.memory_margin_gib < 0
    assert hi.fits and hi.memory_margin_gib >= 0
    assert lo.memory_margin_gib == approx(lo.capacity_gib * lo.memory_frac - lo.peak_memory_gib)
    st = full.stages[0]
    alloc = (st.weights_gib + st.grads_gib + st.optimizer_gib + st.activations_gib) * GIB
    assert st.other_gib * GIB == approx(M.reserve_bytes(megatron.MEMORY, alloc, 2))
    d = estimate_dict(lo)
    assert d["max_memory_frac"] == pytest.approx(frac * 0.99, rel=1e-4) and d["memory_margin_gib"] < 0
    _check_estimate(d, "t.yaml")           # a negative margin is a valid estimate
    assert math.isfinite(d["memory_margin_gib"])


def test_backtest_compares_reserved_with_the_allocator_slack():
    from baige_plan.io.runs import RunCase
    from baige_plan.reports.backtest import backtest_case
    s = StrategySpec(tp=1, pp=1, dp=8, zero=3, micro_batch=1, recompute="full", runtime="torchtitan",
                     execution="eager")
    base = dict(id="r", model=MODEL, cluster=_cluster(8), job=JobSpec(8, 2048, "bf16"), strategy=s,
                measured_step_time_s=1.0, measured_peak_memory_gib=10.0, measured_states_gib=None,
                measured_activations_gib=None, assumptions=())
    a = backtest_case(RunCase(**base))
    r = backtest_case(RunCase(**base, measured_memory_kind="reserved"))
    # reserved = allocated + the allocator's whole slack (14.9 % with full recompute, as this strategy runs)
    assert r["predicted_peak_memory_gib"] == approx(a["predicted_peak_memory_gib"] * 1.149)
    assert (a["memory_kind"], r["memory_kind"]) == ("allocated", "reserved")


# -- the search's vectorised memory pre-check follows every runtime's semantics ------------------------------------

@pytest.mark.parametrize("runtime,precision", [("megatron", "bf16"), ("megatron", "fp16"), ("megatron", "fp8"),
                                               ("deepspeed", "bf16"), ("torchtitan", "bf16"), ("paddle", "bf16")])
def test_search_bounds_follow_runtime_memory(runtime, precision):
    from tests.test_precision import CAT
    H100 = CAT.chip("h100-sxm5-80g")   # a chip with fp8
    from baige_plan.search.bounds import Bounds as CostBounds
    from baige_plan.search.space import Bounds, Pins, space_array, to_strategy
    from baige_plan.specs.topology import ClusterSpec, GroupSpec
    model = ModelSpec(name="llama-ish", layers=8, hidden=2048, heads=16, kv_heads=8, ffn_hidden=5632, vocab=32000,
                      seq_len=2048, activation="swiglu")
    if runtime == "torchtitan":
        model = LLAMA8B      # torchtitan plans only the model shapes it registers
    g = GroupSpec(name="g", chip=H100, nodes=1, devices_per_node=8)
    cluster = ClusterSpec(name="t", groups=(g,))
    job = JobSpec(32, 2048, precision)
    sb = Bounds(max_micro_batch=2, runtime=runtime)
    a = space_array(model, 8, 8, job, sb, Pins())
    if len(a) == 0:
        pytest.skip(f"{runtime} runs nothing here")
    mem = CostBounds(model, g, job, runtime).memory_gib(a)
    for i in range(0, len(a), max(1, len(a) // 60)):
        s = to_strategy(tuple(int(x) for x in a[i]), runtime)
        e = estimate(model, cluster, job, s)
        assert mem[i] <= e.peak_memory_gib * (1 + 1e-9), s
        # exact for fused runtimes on even splits; eager ones get max(grads, activations) in the bound
        if model.layers % s.pp == 0 and s.execution != "eager":
            assert mem[i] == pytest.approx(e.peak_memory_gib, rel=1e-9), s
