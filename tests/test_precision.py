"""Precisions fp32 and tf32 (issue 10, item 1): rates, bytes and exit codes against hand formulas.

fp32 = IEEE fp32 on CUDA cores (PyTorch's default, allow_tf32=False): peak_tflops.fp32 and the fp32
curve; tf32 = fp32 storage with TF32 tensor-core matmuls: peak_tflops.tf32 and the tf32 curve. Both keep
4-byte weights, gradients and activations, and no separate fp32 master copy (docs/COST_MODEL.md,
"Precisions"). Curve values below are read by hand from chips/a100-sxm4-40g.yaml.
"""

import json
import math

import pytest
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.cli.common import Precision
from baige_plan.cost import collectives as C
from baige_plan.cost.compute import ChipRates, gemm_time_s
from baige_plan.cost.estimate import estimate
from baige_plan.cost.flops import Gemm
from baige_plan.cost.memory import GIB
from baige_plan.io.catalog import Catalog
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.strategy import StrategySpec

runner = CliRunner()
CAT = Catalog.create()
A100_40 = CAT.chip("a100-sxm4-40g")

# chips/a100-sxm4-40g.yaml, read by hand
FP32_PEAK, TF32_PEAK = 19.5e12, 156e12
FP32_TOP, TF32_TOP = 0.814, 0.67                    # last points (8.73e11 and 9.96e11 FLOPs)
FP32_P4, FP32_P5 = (1.27e10, 0.789), (7.89e10, 0.814)   # fp32 points around 1e10..1e11 FLOPs
HBM_40 = 1555e9 * 0.854                              # hbm_GBps x measured hbm_efficiency
HBM_80 = 2039e9 * 0.854                              # chips/a100-sxm4-80g.yaml


def _loglin(f, p0, p1):
    (f0, e0), (f1, e1) = p0, p1
    return e0 + (e1 - e0) * math.log10(f / f0) / math.log10(f1 / f0)


# -- GEMM rates -----------------------------------------------------------------------------------

def test_large_gemm_fp32_runs_at_the_fp32_peak_not_tf32():
    g = Gemm("big", 8192, 8192, 8192)
    flops = 2 * 8192 ** 3                              # 1.10e12 >= the last curve point: top efficiency
    assert g.flops == flops
    t = gemm_time_s(g, ChipRates.of(A100_40, "fp32", 1.0))
    assert t == pytest.approx(flops / (FP32_PEAK * FP32_TOP), rel=1e-9)
    # compute-bound: three 8192^2 fp32 matrices over HBM take far less
    assert 3 * 8192 ** 2 * 4 / HBM_40 < t / 50
    assert t == pytest.approx(0.0693, rel=0.01)        # 1.10e12 / (19.5e12 x 0.814): ~69 ms, not ~10 ms (tf32)


def test_large_gemm_tf32_runs_at_the_tf32_peak():
    g = Gemm("big", 8192, 8192, 8192)
    t = gemm_time_s(g, ChipRates.of(A100_40, "tf32", 1.0))
    assert t == pytest.approx(2 * 8192 ** 3 / (TF32_PEAK * TF32_TOP), rel=1e-9)
    t32 = gemm_time_s(g, ChipRates.of(A100_40, "fp32", 1.0))
    assert t32 / t == pytest.approx(156 * 0.67 / (19.5 * 0.814), rel=1e-9)   # ~6.6x


def test_mid_size_gemm_interpolates_the_fp32_curve():
    g = Gemm("mid", 2048, 2048, 2048)                  # 1.72e10 FLOPs, between the 1.27e10 and 7.89e10 points
    eff = _loglin(2 * 2048 ** 3, FP32_P4, FP32_P5)
    assert gemm_time_s(g, ChipRates.of(A100_40, "fp32", 1.0)) == pytest.approx(2 * 2048 ** 3 / (FP32_PEAK * eff),
                                                                         rel=1e-9)


def test_fused_attention_in_fp32_and_tf32_is_the_mem_efficient_kernel_at_the_fp32_rate():
    # causal QK^T of 64 heads x micro-batches, s = 2048, head dim 128: one launch of 6.87e10 FLOPs
    g = Gemm("qk", 2048, 2048, 128, count=64, kind="attention_flash")
    flops = 2 * 2048 * 2048 * 128 * 64
    eff = _loglin(flops, FP32_P4, FP32_P5)
    for prec in ("fp32", "tf32"):                      # SDPA's kernel ignores allow_tf32: same time in both
        r = ChipRates.of(A100_40, prec, 1.0)
        assert gemm_time_s(g, r) == pytest.approx(flops / (FP32_PEAK * eff * 0.84), rel=1e-9)
        assert gemm_time_s(g, r, bwd=True) == pytest.approx(flops / (FP32_PEAK * eff * 0.53), rel=1e-9)


def test_fp32_activations_are_4_bytes():
    assert ChipRates.of(A100_40, "fp32", 1.0).act_bytes == 4
    assert ChipRates.of(A100_40, "tf32", 1.0).act_bytes == 4
    assert ChipRates.of(A100_40, "bf16").act_bytes == 2


def test_precision_choices():
    assert {p.value for p in Precision} == {"bf16", "fp16", "fp8", "fp32", "tf32", "fp4"}
    assert JobSpec(8, 2048, "tf32").precision == "tf32"
    for name in ("megatron", "deepspeed", "torchtitan", "paddle", "flagscale", "pytorch"):
        assert "fp32" in runtimes.get(name).precisions, name
    # tf32 is a torch flag on an fp32 run; torchtitan stays fp32-only until its export maps tf32 to
    # float32 parameters (it would write bfloat16 today)
    for name in ("megatron", "deepspeed", "paddle", "flagscale", "pytorch"):
        assert "tf32" in runtimes.get(name).precisions, name


def test_nvidia_chips_with_an_fp32_peak_carry_sourced_curves():
    for chip_id in ("v100-sxm2-16g", "v100-sxm2-32g", "a100-sxm4-40g", "a100-sxm4-80g", "a100-pcie-80g",
                    "a800-sxm4-80g", "h100-sxm5-80g", "h100-pcie-80g", "h800-sxm5-80g", "h200-sxm-141g", "h20",
                    "b200", "gb200"):
        chip = CAT.chip(chip_id)
        assert chip.gemm_curve("fp32").max_efficiency < 1.0
        if chip.peak_tflops.get("tf32") is None:
            assert "tf32" not in chip.gemm_efficiency, chip_id
    # measured on our H100: CUDA-core SGEMM tops out at 53.3/67 = 0.795 of peak (x 0.828 training basis)
    assert CAT.chip("h100-sxm5-80g").gemm_curve("fp32").max_efficiency == pytest.approx(0.795 * 0.828, abs=1e-3)


# -- bytes per parameter, per element --------------------------------------------------------------

def _est(prec, zero, dp=8, pp=1, cluster="a100-sxm4-80g:1x8", model="opt-350m", gb=64):
    cl, _ = CAT.cluster(cluster)
    s = StrategySpec(tp=1, pp=pp, dp=dp, zero=zero, micro_batch=1, recompute="selective")
    return estimate(CAT.model(model), cl, JobSpec(gb, 2048, prec), s)


@pytest.mark.parametrize("prec", ["fp32", "tf32"])
def test_fp32_model_states_are_16_bytes_per_param_at_zero0(prec):
    st = _est(prec, zero=0).stages[0]
    p = st.dense_params
    assert st.weights_gib * GIB / p == pytest.approx(4.0)     # fp32 weights, which are the master copy
    assert st.grads_gib * GIB / p == pytest.approx(4.0)       # fp32 gradients
    assert st.optimizer_gib * GIB / p == pytest.approx(8.0)   # Adam m, v; no extra master
    assert (st.weights_gib + st.grads_gib + st.optimizer_gib) * GIB / p == pytest.approx(16.0)


def test_mixed_precision_states_unchanged_and_zero1_shards_only_adam():
    st = _est("bf16", zero=0).stages[0]
    assert (st.weights_gib + st.grads_gib + st.optimizer_gib) * GIB / st.dense_params == pytest.approx(2 + 4 + 12)
    st = _est("fp32", zero=1).stages[0]                      # ZeRO-1 over dp = 8: 4 + 4 + 8/8
    assert (st.weights_gib + st.grads_gib + st.optimizer_gib) * GIB / st.dense_params == pytest.approx(9.0)


def _record(monkeypatch, name):
    seen = []
    orig = getattr(C, name)

    def rec(size, link):
        seen.append((size, link.n))
        return orig(size, link)
    monkeypatch.setattr(C, name, rec)
    return seen


def test_fp32_dp_all_reduce_moves_4_bytes_per_param(monkeypatch):
    seen = _record(monkeypatch, "all_reduce_s")
    e = _est("fp32", zero=0)
    dp_sizes = [s for s, n in seen if n == 8 and s > 0]       # tp = 1: only the DP group has 8 ranks
    assert dp_sizes and all(s == pytest.approx(4 * e.stages[0].dense_params) for s in dp_sizes)


@pytest.mark.parametrize("prec,nbytes", [("fp32", 4), ("tf32", 4), ("bf16", 2)])
def test_zero1_parameter_all_gather_moves_the_weight_copy(monkeypatch, prec, nbytes):
    seen = _record(monkeypatch, "all_gather_s")
    e = _est(prec, zero=1)
    sizes = [s for s, n in seen if n == 8 and s > 0]
    assert sizes and all(s == pytest.approx(nbytes * e.stages[0].dense_params) for s in sizes)


def test_fp32_pipeline_p2p_moves_4_byte_activations(monkeypatch):
    seen = _record(monkeypatch, "p2p_s")
    _est("fp32", zero=1, dp=4, pp=2)
    tokens, hidden = 1 * 2048, 1024                           # micro-batch x seq; opt-350m hidden
    assert seen and all(s == pytest.approx(tokens * hidden * 4) for s, _ in seen)


def test_fp32_optimizer_step_has_no_16bit_copy_to_write():
    for prec, adam_bytes in (("fp32", 34), ("bf16", 36)):
        e = _est(prec, zero=1)
        owned = e.stages[0].dense_params / 8
        assert e.breakdown_s["optimizer"] == pytest.approx(owned * adam_bytes / HBM_80, rel=1e-9)


# -- exit codes ------------------------------------------------------------------------------------

def test_homogeneous_plan_without_the_figure_exits_2_naming_it():
    # fp8 on V100 (no fp8 figure); a tf32 job no longer fails there: its matmuls run IEEE fp32 (issue 18)
    r = runner.invoke(app, ["plan", "gpt-22b", "v100-sxm2-16g:4x8", "--global-batch", "64", "--precision", "fp8"])
    assert r.exit_code == 2, r.output
    assert "v100-sxm2-16g.peak_tflops.fp8" in r.output
    assert "Traceback" not in r.output and "internal error" not in r.output


def test_tf32_job_on_a_chip_without_tf32_runs_ieee_fp32():
    # issue 18: a tf32 job's matmuls run IEEE fp32 on V100 (Volta has no TF32) instead of failing on the missing
    # figure (cost/estimate.py engine_precision): the same estimate as the fp32 job
    out = {}
    for prec in ("tf32", "fp32"):
        r = runner.invoke(app, ["evaluate", "opt-350m", "v100-sxm2-16g:1x8", "--global-batch", "8", "--precision",
                                prec, "--format", "json"])
        assert r.exit_code == 0, r.output
        out[prec] = json.loads(r.stdout)["step_time_s"]
    assert out["tf32"] == out["fp32"]


def test_mixed_cluster_plans_in_fp32():
    # both A100 and V100 have an fp32 peak and curve (this crashed with "min() arg is an empty sequence")
    r = runner.invoke(app, ["plan", "opt-350m", "a100-sxm4-40g:2x4+v100-sxm2-16g:2x4", "--global-batch", "64",
                            "--precision", "fp32", "--top", "1", "--time-limit", "20"])
    assert r.exit_code == 0, r.output
    assert "left out" not in r.output


def test_mixed_cluster_without_any_fp32_figure_exits_2_naming_each_group():
    r = runner.invoke(app, ["plan", "opt-350m", "ascend-910b:2x8+gaudi2:2x8", "--global-batch", "64",
                            "--precision", "fp32", "--top", "1"])
    assert r.exit_code == 2, r.output
    assert "ascend-910b.peak_tflops.fp32" in r.output and "gaudi2.peak_tflops.fp32" in r.output
    assert "internal error" not in r.output


# -- the search's vectorised bounds follow the precision (exact search == oracle) -----------------

@pytest.mark.parametrize("prec", ["fp32", "tf32"])
def test_search_bounds_and_oracle_in_fp32(prec):
    from baige_plan.search.bounds import Bounds as CostBounds
    from baige_plan.search.oracle import oracle
    from baige_plan.search.solver import search
    from baige_plan.search.space import Bounds, Pins, space_array, to_strategy
    from baige_plan.specs.model import ModelSpec
    from baige_plan.specs.topology import ClusterSpec, GroupSpec

    model = ModelSpec(name="d6", layers=6, hidden=4096, heads=32, ffn_hidden=16384, vocab=32000, seq_len=2048,
                      activation="gelu", dropout=0.1)
    g = GroupSpec(name="g", chip=A100_40, nodes=2, devices_per_node=4)
    cluster = ClusterSpec(name="t", groups=(g,))
    job, bounds = JobSpec(16, 2048, prec), Bounds(max_micro_batch=2)
    a = space_array(model, cluster.devices, 4, job, bounds, Pins())
    cb = CostBounds(model, g, job)
    mem, lb = cb.memory_gib(a), cb.time_lb_s(a)
    zeros = set()
    for i in range(0, len(a), max(1, len(a) // 120) | 1):   # odd stride: zero is the innermost loop
        s = to_strategy(tuple(int(x) for x in a[i]))
        e = estimate(model, cluster, job, s)
        zeros.add(s.zero)
        assert lb[i] <= e.step_time_s
        if model.layers % s.pp == 0:   # even split: the memory pre-check equals the estimate
            assert mem[i] == pytest.approx(e.peak_memory_gib, rel=1e-9)
    assert zeros >= {0, 1}
    want = oracle(model, cluster, job, bounds, Pins(), top=3)
    got = search(model, cluster, job, bounds, Pins(), top=3)
    assert [k for _, k, _ in want] == list(got.keys)
