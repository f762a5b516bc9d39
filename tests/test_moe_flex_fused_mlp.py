"""Two MoE mechanisms read from Megatron-core / Transformer Engine source, against bytes derived by hand here:

- the flex dispatcher's local permutations (compute.moe_dispatch_bytes, dispatcher "flex"): HybridEP / DeepEP gather
  the source tokens and reduce a token's k copies inside their communication kernels, so one permutation of the
  R received rows and its inverse stay (4R rows of h), not the alltoall dispatcher's 3A + N + 4R;
- Transformer Engine's fused grouped MLP (StrategySpec.moe_fused_mlp, cost/moe.py fused_grouped_mlp): no SwiGLU pass
  over the routed experts' rows, no separate quantisation of FC2's input (forward) or FC1's output gradient
  (backward), one grouped quantisation kernel a pass instead of one per local expert, no Fp8Padding after HybridEP,
  grouped expert GEMMs; refused where TE cannot run it (not compute capability 10, not MXFP8 / NVFP4)."""

from dataclasses import replace

import pytest
import yaml

from baige_plan.cost import collectives as C
from baige_plan.cost.compute import ChipRates, layer_memory_bytes, moe_dispatch_bytes
from baige_plan.cost.estimate import estimate
from baige_plan.cost.moe import (
    QUANT_KERNEL_DEVICE_S,
    expert_gemm_kind,
    fp8_padding_bytes,
    moe_layer_terms,
)
from baige_plan.errors import SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import load_runs
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec, MoESpec
from baige_plan.specs.strategy import StrategySpec

QWEN3 = ModelSpec("qwen3-30b-a3b", 48, 2048, 32, 6144, 151936, seq_len=4096, kv_heads=4, head_dim=128,
                  moe=MoESpec(experts=128, top_k=8, expert_ffn_hidden=768))


def _link(n: int) -> C.Link:
    return C.Link(busbw_GBps=100.0, n=n, alpha_s=0.0)


def test_flex_dispatch_bytes_by_hand():
    # 8192 tokens on the rank, ep 8, bf16: A = R = 65,536 routed rows of h = 2048
    h, b, n, a = 2048, 2, 8192, 65536
    fwd, bwd = moe_dispatch_bytes(QWEN3, 8192, tp=1, ep=8, etp=1, act_bytes=2, dispatcher="flex")
    # the received rows permuted to expert order and back (read + write each), router 9 / 13 B per logit
    assert fwd == h * b * 4 * a + 9 * n * 128 == 1_083_179_008
    # backward: the same two permutations' gradients and one read of the A expert outputs (probability gradient)
    assert bwd == h * b * (4 * a + a) + 13 * n * 128
    # the alltoall dispatcher also gathers the A rows before its exchange, sorts chunks, unpermutes with merging
    f_a2a, _ = moe_dispatch_bytes(QWEN3, 8192, tp=1, ep=8, etp=1, act_bytes=2)
    assert f_a2a - fwd == h * b * (3 * a + n)


def test_fused_mlp_drops_the_routed_experts_activation_pass():
    # forward SwiGLU of the routed rows: reads 2f, writes f per (token, expert), f = 768, top-8, bf16
    plain, _ = layer_memory_bytes(QWEN3, 8192, 2, 4096, 1, 1, False, False, 2, True)
    fused, _ = layer_memory_bytes(QWEN3, 8192, 2, 4096, 1, 1, False, False, 2, True, fused_experts=True)
    assert plain - fused == 8192 * 8 * 768 * 3 * 2


def test_fused_mlp_dispatch_terms_on_gb200_mxfp8():
    r8 = ChipRates.of(Catalog.create().chip("gb200"), "fp8")
    s = StrategySpec(dp=8, ep=8, zero=1, micro_batch=2, recompute="none", moe_dispatcher="flex", fp8_recipe="mxfp8")
    fused = moe_layer_terms(QWEN3, replace(s, moe_fused_mlp=True), r8, 8192, _link(8), _link(1))
    d_f, d_b = moe_dispatch_bytes(QWEN3, 8192, 1, 8, 1, 2, "flex")
    # after HybridEP no Fp8Padding; one grouped quantisation kernel a pass (MXFP8: one cast each, 16 experts x 2
    # GroupedLinear inputs unfused)
    assert fused.dispatch_fwd_s == pytest.approx(d_f / r8.hbm_Bps + QUANT_KERNEL_DEVICE_S, rel=1e-12)
    assert fused.dispatch_bwd_s == pytest.approx(d_b / r8.hbm_Bps + QUANT_KERNEL_DEVICE_S, rel=1e-12)
    plain = moe_layer_terms(QWEN3, s, r8, 8192, _link(8), _link(1))
    pad = fp8_padding_bytes(QWEN3, 8192, 1, 8, 1, 2, "random") * plain.load
    assert plain.dispatch_fwd_s == pytest.approx((d_f + pad) / r8.hbm_Bps + 32 * QUANT_KERNEL_DEVICE_S, rel=1e-12)
    # after the alltoall dispatcher the fused path still pads each expert's rows
    a2a = moe_layer_terms(QWEN3, replace(s, moe_dispatcher="alltoall", moe_fused_mlp=True), r8, 8192, _link(8),
                          _link(1))
    d_f2, _ = moe_dispatch_bytes(QWEN3, 8192, 1, 8, 1, 2)
    assert a2a.dispatch_fwd_s == pytest.approx((d_f2 + pad) / r8.hbm_Bps + QUANT_KERNEL_DEVICE_S, rel=1e-12)
    # grouped CuTe-DSL GEMMs instead of TE GroupedLinear's per-expert cuBLAS streams
    assert expert_gemm_kind(s) == "expert_streams"
    assert expert_gemm_kind(replace(s, moe_fused_mlp=True)) == "expert_grouped"


@pytest.mark.parametrize("chip, precision, why", [
    ("h100-sxm5-80g", "fp8", "not compute capability 10"),
    ("gb200", "bf16", "block-scaled recipes"),
])
def test_fused_mlp_refused_where_te_cannot_run_it(chip, precision, why):
    cat = Catalog.create()
    cluster, _ = cat.cluster(f"{chip}:1x8")
    s = StrategySpec(dp=8, ep=8, zero=1, micro_batch=1, recompute="none", moe_fused_mlp=True)
    with pytest.raises(SpecError) as e:
        estimate(QWEN3, cluster, JobSpec(64, 4096, precision), s)
    assert e.value.field == "moe_fused_mlp" and why in e.value.reason


def test_runs_loader_reads_cutedsl_fused_grouped_mlp():
    f = "benchmarks/corpus/mbridge_perf_2606.yaml"
    rows = {r["id"]: r for r in yaml.safe_load(open(f))["rows"]}
    cases = {c.id: c for c in load_runs(f, Catalog.create([]))}
    row = "mbridge_perf_2606_qwen3_30b_a3b_gb200_8gpu_mxfp8"
    assert any("cutedsl_fused_grouped_mlp" in str(u.get("assumed")) for u in rows[row]["unstated"])
    assert cases[row].strategy.moe_fused_mlp and cases[row].strategy.moe_dispatcher == "flex"
    # the H100 row of the same table runs the unfused TEGroupedMLP
    assert not cases["mbridge_perf_2606_qwen3_30b_a3b_h100_16gpu_fp8"].strategy.moe_fused_mlp


def test_evaluate_plan_file_and_megatron_export_carry_the_knobs():
    """`evaluate --moe-dispatcher flex --moe-fused-mlp` costs both; the strategy's plan-file form round-trips; the
    Megatron export passes --use-transformer-engine-op-fuser and sets the variable TE reads before importing."""
    import json

    from _plan_docs import QWEN3 as QWEN3_DOC
    from _plan_docs import plan_doc
    from typer.testing import CliRunner

    from baige_plan.cli.app import app
    from baige_plan.exports import megatron
    from baige_plan.io.plans import _strategy
    from baige_plan.io.serialize import strategy_dict

    args = ["evaluate", "qwen3-235b-a22b", "gb200:32x8", "--tp", "1", "--pp", "8", "--ep", "32", "--global-batch",
            "8192", "--precision", "fp8", "--zero", "1", "--recompute", "none", "--account-for-embedding",
            "--account-for-loss", "--format", "json"]
    runs = {}
    for extra in ([], ["--moe-dispatcher", "flex"], ["--moe-dispatcher", "flex", "--moe-fused-mlp"]):
        r = CliRunner().invoke(app, args + extra)
        assert r.exit_code == 0, r.output
        runs[" ".join(extra)] = json.loads(r.stdout)
    plain, flex, fused = runs[""], runs["--moe-dispatcher flex"], runs["--moe-dispatcher flex --moe-fused-mlp"]
    assert "moe_dispatcher" not in plain["strategy"] and flex["strategy"]["moe_dispatcher"] == "flex"
    assert fused["strategy"]["moe_fused_mlp"] is True
    # EP 32 over 8-GPU nodes: flex sends a token once per remote node; the fused MLP drops memory passes
    assert fused["step_time_s"] < flex["step_time_s"] < plain["step_time_s"]
    bad = CliRunner().invoke(app, ["evaluate", "qwen3-235b-a22b", "h100-sxm5-80g:32x8", "--tp", "1", "--pp", "8",
                                   "--ep", "32", "--global-batch", "8192", "--precision", "fp8", "--moe-fused-mlp",
                                   "--account-for-embedding", "--account-for-loss"])
    assert bad.exit_code == 2 and "moe_fused_mlp" in bad.output and "Traceback" not in bad.output
    s = StrategySpec(dp=8, ep=8, zero=1, moe_dispatcher="flex", moe_fused_mlp=True)
    assert _strategy(strategy_dict(s, 64)).moe_fused_mlp is True
    assert "moe_fused_mlp" not in strategy_dict(replace(s, moe_fused_mlp=False), 64)     # plan files unchanged
    files = {f.name: f.text for f in megatron.export(plan_doc(QWEN3_DOC, "megatron", pp=2, dp=4, ep=4,
                                                               precision="fp8", moe_fused_mlp=True)).files}
    assert "--use-transformer-engine-op-fuser" in files["megatron_args.txt"].split()
    assert "NVTE_CUTEDSL_FUSED_GROUPED_MLP=1" in files["launch.sh"]
    plain_files = {f.name: f.text for f in megatron.export(plan_doc(QWEN3_DOC, "megatron", pp=2, dp=4, ep=4)).files}
    assert "--use-transformer-engine-op-fuser" not in plain_files["megatron_args.txt"].split()
