"""Megatron-core without Transformer Engine (runtime megatron-local, specs/runtimes/megatron_local.py; issue 17 items 3, 4):
its space (no cp, no SP, no fp8, no MoE), its export (the four TE-less switches, the attention choice), its costing
(differs from the TE runtime by exactly the unfused mechanisms, derived by hand for one layer) and the runs measured
with real Megatron on 2x H200 (benchmarks/real/runs_megatron_local_h200x2.yaml) backtested within the reported error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.cost.estimate import ADAM_BYTES_PER_PARAM, stage_cost, strategy_rates
from baige_plan.io.catalog import Catalog
from baige_plan.reports.backtest import backtest_file
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.runtime import FUSED_KERNELS
from baige_plan.specs.runtimes import megatron_local as ml
from baige_plan.specs.strategy import StrategySpec

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "benchmarks" / "real" / "runs_megatron_local_h200x2.yaml"
MODEL_1B = ROOT / "benchmarks" / "real" / "catalog" / "models" / "llama3.2-1b.yaml"
runner = CliRunner()
RT = runtimes.get("megatron-local")
LLAMA = ModelSpec(name="l", layers=4, hidden=2048, heads=32, kv_heads=8, ffn_hidden=8192, vocab=128256,
                  seq_len=4096, activation="swiglu", tie_embeddings=True)
JOB = JobSpec(global_batch=8, seq_len=4096, precision="bf16")


def test_registered_and_te_runtime_untouched():
    assert "megatron-local" in runtimes.NAMES and RT.name == "megatron-local"
    assert runtimes.module("megatron-local") is ml
    te = runtimes.get("megatron")
    # the TE runtime keeps the fused costing: no unfused work, gradient accumulation inside the GEMM
    assert te.unfused == FUSED_KERNELS and te.grad_accum is None and te.attention_kernel == "cudnn"
    assert RT.attention_kernel == "fa2" and not RT.tp_comm_overlap and not RT.context_parallel


def test_refuses_cp_sp_fp8_moe_with_reasons():
    why = RT.refusal(StrategySpec(tp=1, pp=1, dp=1, cp=2, zero=1), LLAMA, JOB)
    assert why is not None and "context parallelism" in why and "cp=2" in why
    why = RT.refusal(StrategySpec(tp=2, pp=1, dp=1, sequence_parallel=True), LLAMA, JOB)
    assert why is not None and "sequence parallelism" in why
    assert RT.refusal(StrategySpec(tp=2, pp=1, dp=1, sequence_parallel=False), LLAMA, JOB) is None
    why = RT.refusal(StrategySpec(tp=1, pp=1, dp=2), LLAMA, JobSpec(global_batch=8, seq_len=4096, precision="fp8"))
    assert why is not None and "fp8" in why
    moe = Catalog.create().model("mixtral-8x7b")
    why = RT.refusal(StrategySpec(tp=1, pp=1, dp=2), moe, JOB)
    assert why is not None and "MoE" in why
    r = runner.invoke(app, ["evaluate", "llama3-8b", "h100-sxm5-80g:1x4", "--global-batch", "8", "--seq-len", "4096",
                            "--runtime", "megatron-local", "--cp", "2", "--dp", "2"])
    assert r.exit_code == 2 and "context parallelism" in r.output


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    out = {}
    for att in ("flash", "standard"):
        d = tmp_path_factory.mktemp(att)
        plan = d / "plan.yaml"
        r = runner.invoke(app, ["plan", str(MODEL_1B), "h200-sxm-141g:1x2", "--global-batch", "32", "--seq-len",
                                "4096", "--runtime", "megatron-local", "--tp", "2", "--attention", att,
                                "--out", str(plan)])
        assert r.exit_code == 0, r.output
        assert yaml.safe_load(plan.read_text())["strategy"]["runtime"] == "megatron-local"
        r = runner.invoke(app, ["export", str(plan), "--out-dir", str(d / "x")])
        assert r.exit_code == 0, r.output
        out[att] = {p.name: p.read_text() for p in (d / "x").iterdir()}
    return out


def test_export_writes_the_switches_and_the_attention_choice(exports):
    for att, files in exports.items():
        lines = files["megatron_args.txt"].splitlines()
        for sw in ("--transformer-impl local", "--no-persist-layer-norm", "--no-gradient-accumulation-fusion",
                   "--no-rope-fusion"):
            assert sw in lines, (att, sw)
        assert "--tp-comm-overlap" not in lines and "--sequence-parallel" not in lines
        assert "--tensor-model-parallel-size 2" in lines
        # warm-up as a fraction of the run: a fixed 10 warm-up iterations stopped every 4-GPU launch at
        # BAIGE_TRAIN_ITERS=10 (Megatron asserts lr_warmup_steps < lr_decay_steps, optimizer_param_scheduler.py)
        assert "--lr-warmup-fraction 0.01" in lines and not any(ln.startswith("--lr-warmup-iters") for ln in lines)
        # costed as Megatron's unfused loss (runtime loss_kernel), so the fused one is not switched on
        assert "--cross-entropy-loss-fusion" not in lines
        assert not any("needs Transformer Engine" in ln for ln in lines)
    flash, std = exports["flash"], exports["standard"]
    assert "--spec baige_sdpa_spec layer_spec" in flash["megatron_args.txt"].splitlines()
    assert "scaled_dot_product_attention" in flash["baige_sdpa_spec.py"]
    assert 'export PYTHONPATH="$HERE' in flash["launch.sh"]
    compile(flash["baige_sdpa_spec.py"], "baige_sdpa_spec.py", "exec")
    assert "baige_sdpa_spec.py" not in std
    std_lines = std["megatron_args.txt"].splitlines()
    assert "--attention-backend unfused" in std_lines and "--no-masked-softmax-fusion" in std_lines
    assert not any(ln.startswith("--spec") for ln in std_lines)


def _stage(runtime: str, attention: str, m: int = 4):
    cl, _ = Catalog.create().cluster("h200-sxm-141g:1x2")
    g = cl.groups[0]
    s = StrategySpec(tp=1, pp=1, dp=1, zero=1, micro_batch=2, recompute="none", attention=attention,
                     runtime=runtime, attention_kernel="fa2")   # same kernel: isolate the unfused mechanisms
    return stage_cost(LLAMA, g, JobSpec(global_batch=2 * m, seq_len=4096, precision="bf16"), s, 0, 0, 1, m), \
        strategy_rates(g.chip, "bf16", s).hbm_Bps


@pytest.mark.parametrize("attention", ["flash", "standard"])
def test_costing_differs_by_exactly_the_unfused_mechanisms(attention):
    """One layer (plus the first/last stage's embedding, identical in both), micro-batch 2 x 4096 tokens, tp 1:
      forward  + rope 24 B x tokens x (q_dim + kv_dim)                        [+ standard: (28.3 - 4) B x scores]
      backward + rope 26 B x tokens x (q_dim + kv_dim) + 10 B x parameters / m x m  [+ standard: (46.9 - 8) B x scores]
      and the loss, Megatron's unfused vocab-parallel cross-entropy against the fused one: forward + (38 - 8) B,
      backward + (14 - 8) B x logits (one op per step over the fp32 logits, counted from cross_entropy.py)
    at the chip's achievable HBM rate; the optimizer step 52 B more per owned parameter."""
    m = 4
    te, hbm = _stage("megatron", attention, m)
    lo, hbm2 = _stage("megatron-local", attention, m)
    assert hbm == hbm2
    tokens = 2 * 4096
    qk = tokens * (32 * 64 + 8 * 64)                      # q_dim + kv_dim, head dim 2048 / 32 = 64
    scores = 2 * 32 * 4096 * 4096 if attention == "standard" else 0
    logits = tokens * 128256
    d_fwd = (24 * qk + (28.3 - 4) * scores + (38 - 8) * logits) / hbm
    params = te.dense_params
    d_bwd = (26 * qk + (46.9 - 8) * scores + (14 - 8) * logits) / hbm + 10 * params / hbm   # + grad accumulation
    assert lo.fwd_s - te.fwd_s == pytest.approx(d_fwd, rel=1e-9)
    assert lo.bwd_s - te.bwd_s == pytest.approx(d_bwd, rel=1e-9)
    assert te.optimizer_s_per_param == pytest.approx(ADAM_BYTES_PER_PARAM / hbm, rel=1e-12)
    assert lo.optimizer_s_per_param == pytest.approx((ADAM_BYTES_PER_PARAM + 80 - 28) / hbm, rel=1e-12)
    assert lo.activations_gib == pytest.approx(te.activations_gib, rel=1e-12)   # same stored tensors


def test_attention_kernel_is_sdpa_flash_fa2():
    cl, _ = Catalog.create().cluster("h100-sxm5-80g:1x2")
    chip = cl.groups[0].chip
    assert strategy_rates(chip, "bf16", StrategySpec(dp=2, runtime="megatron-local")).attn_kernel == "fa2"
    assert strategy_rates(chip, "bf16", StrategySpec(dp=2, runtime="megatron")).attn_kernel == "cudnn"


def test_real_runs_backtest_within_reported_error():
    """7 exported plans launched unchanged on 2x H200 (Megatron-core 0.19.2 without TE): median |error| 1.0%,
    max 3.8% (5.0% / 12.9% before the unfused loss was costed), peak memory within 5%; predicted order = measured
    order."""
    doc = backtest_file(RUNS, Catalog.create())
    s = doc["summary"]
    assert s["rows"] == 7 and s["evaluated_rows"] == 7 and s["refused_rows"] == 0
    assert s["median_abs_step_time_error"] <= 0.03
    assert s["max_abs_step_time_error"] <= 0.06
    assert s["max_abs_memory_error"] <= 0.06
    rk = s["ranking"]
    assert all(g["predicted_best"] == g["measured_best"] for g in rk["groups"])
    assert rk["discordant"] == 0 and rk["kendall_tau"] == 1.0
    rows = yaml.safe_load(RUNS.read_text())["rows"]
    assert {r["parallel"]["runtime"] for r in rows} == {"megatron-local"}
    assert all("no Transformer Engine" in r["parallel"]["framework"] for r in rows)


def test_te_export_switches_on_the_fused_loss_it_is_costed_with(tmp_path):
    """The Transformer Engine runtime is costed with the fused vocab-parallel loss (cost/execution.py
    FUSED_LOSS_BYTES_PER_LOGIT), so its export turns it on (Megatron's default is the unfused one)."""
    plan = tmp_path / "plan.yaml"
    r = runner.invoke(app, ["plan", str(MODEL_1B), "h200-sxm-141g:1x2", "--global-batch", "32", "--seq-len", "4096",
                            "--runtime", "megatron", "--tp", "2", "--out", str(plan)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["export", str(plan), "--out-dir", str(tmp_path / "x")])
    assert r.exit_code == 0, r.output
    assert "--cross-entropy-loss-fusion" in (tmp_path / "x" / "megatron_args.txt").read_text().splitlines()


def test_unfused_loss_bytes_by_hand():
    """Megatron's unfused loss on one device, per micro-batch, against the fused one: (38 - 8) B per logit more in
    the forward, (14 - 8) B in the backward (hand count of tensor_parallel/cross_entropy.py), nothing else."""
    from dataclasses import replace as dreplace

    from baige_plan.cost.estimate import _logits_terms
    cl, _ = Catalog.create().cluster("h200-sxm-141g:1x2")
    s = StrategySpec(tp=2, pp=1, dp=1, micro_batch=2, runtime="megatron")
    r = strategy_rates(cl.groups[0].chip, "bf16", s)
    tokens = 2 * 4096
    f0, b0, a0 = _logits_terms(LLAMA, s, r, tokens)
    f1, b1, a1 = _logits_terms(LLAMA, dreplace(s, loss_kernel="megatron_unfused"), r, tokens)
    logits = tokens * LLAMA.vocab / 2
    assert f1 - f0 == pytest.approx(30 * logits / r.hbm_Bps, rel=1e-9)
    assert b1 - b0 == pytest.approx(6 * logits / r.hbm_Bps, rel=1e-9)
    assert a1 == a0
