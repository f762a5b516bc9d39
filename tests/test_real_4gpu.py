"""The planner's exported plans launched unchanged on 4x H200 with real runtimes (issue 17 acceptance): Megatron-core
0.19.2 without Transformer Engine (benchmarks/real/runs_megatron_local_h200x4.yaml: Llama 3.2 1B and Llama 3 8B, dp /
tp / pp with interleaving / tp4) and torchtitan 0.2.2 (runs_torchtitan_h200x4.yaml: Llama 2 7B and Llama 3 8B, FSDP
zero 2/3, tp2, cp2); runs_{megatron_local,torchtitan}_unseen_h200x4.yaml: Mistral 7B and Llama 2 13B, launched after
their predictions were written to plan files. The references are the measured step times and peaks (docs/VALIDATION.md, "Real runtimes on
4 GPUs"); the bars are the issue's: median |step-time error| <= 10%, predicted best = measured best in every model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from baige_plan.io.catalog import Catalog
from baige_plan.reports.backtest import backtest_file

REAL = Path(__file__).resolve().parents[1] / "benchmarks" / "real"


@pytest.mark.parametrize("name, runtime, rows, max_err, min_tau", [
    ("runs_megatron_local_h200x4.yaml", "megatron-local", 8, 0.07, 0.7),
    ("runs_torchtitan_h200x4.yaml", "torchtitan", 9, 0.16, 0.7),
    # models no earlier real run had measured (Mistral 7B, Llama 2 13B), plans chosen and predicted before launch
    ("runs_megatron_local_unseen_h200x4.yaml", "megatron-local", 8, 0.06, 0.7),
    ("runs_torchtitan_unseen_h200x4.yaml", "torchtitan", 8, 0.11, 0.6),
])
def test_4gpu_launches_backtest_within_the_issue_bars(name, runtime, rows, max_err, min_tau):
    doc = backtest_file(REAL / name, Catalog.create())
    s = doc["summary"]
    assert s["rows"] == rows and s["evaluated_rows"] == rows and s["refused_rows"] == 0
    assert s["median_abs_step_time_error"] <= 0.10
    assert s["max_abs_step_time_error"] <= max_err
    rk = s["ranking"]
    assert len(rk["groups"]) == 2
    assert all(g["predicted_best"] == g["measured_best"] for g in rk["groups"])
    assert rk["kendall_tau"] >= min_tau
    data = yaml.safe_load((REAL / name).read_text())["rows"]
    assert {r["parallel"]["runtime"] for r in data} == {runtime}
    assert all(r["hardware"]["num_gpus"] == 4 for r in data)


def test_interleaving_is_carried_into_the_runs_file():
    """The export's --num-virtual-stages-per-pipeline-rank must reach the backtest (a runs file without vpp was
    costed as plain 1F1B: +15% for the pp2 vpp8 plan)."""
    rows = yaml.safe_load((REAL / "runs_megatron_local_h200x4.yaml").read_text())["rows"]
    vpp = {r["id"]: r["parallel"].get("vpp") for r in rows}
    assert vpp["07_llama3-8b_tp1_pp2_dp2_z1_mb2_vpp8"] == 8 and vpp["04_llama3.2-1b_tp1_pp2_dp2_z1_mb4_vpp8"] == 8
    args = (REAL / "megatron_local_h200x4" / "07_llama3-8b_tp1_pp2_dp2_z1_mb2_vpp8" / "megatron_args.txt").read_text()
    assert "--num-virtual-stages-per-pipeline-rank 8" in args.splitlines()


def test_dp_reduction_with_pipelines_is_paid_once_per_step():
    """runs_h200x4_dp_pp.yaml (4x H200, GPT-3 2.7B shape, micro-batch 1): PP2 x DP2 at 2-16 micro-batches. What the
    model misses is a per-step cost (the last backward slowed under the DP all-reduce, docs/VALIDATION.md): the
    predicted step grows per micro-batch as measured (within 3%), the errors shrink as micro-batches are added, and
    the runs without a DP reduction inside a pipeline (PP4, DDP4) are within 4%."""
    doc = backtest_file(REAL / "runs_h200x4_dp_pp.yaml", Catalog.create())
    by = {r["id"]: r for r in doc["rows"]}
    pp2 = [by[f"h200_gpt2p7b_pp2_dp2_mb1_ga{g}_noac"] for g in (2, 4, 8, 16)]
    meas = [r["measured_step_time_s"] for r in pp2]
    pred = [r["predicted_step_time_s"] for r in pp2]
    assert (pred[3] - pred[2]) / (meas[3] - meas[2]) == pytest.approx(1.0, abs=0.03)
    errs = [abs(r["step_time_error"]) for r in pp2]
    assert errs == sorted(errs, reverse=True) and errs[-1] < 0.03
    for rid in ("h200_gpt2p7b_pp4_mb1_ga8_noac", "h200_gpt2p7b_pp4_mb1_ga16_noac", "h200_gpt2p7b_ddp4_mb1_ga4_noac"):
        assert abs(by[rid]["step_time_error"]) < 0.04, rid


def test_2gpu_unseen_shapes_head_dim_64_and_96():
    """runs_megatron_local_unseen2_h200x2.yaml (2026-11-28): Phi-3-mini (MHA, head_dim 96) and TinyLlama 1.1B
    (head_dim 64, GQA 8:1), shapes no earlier real run had, three plans each (the planner's top plan, the best tp2 and
    the best pp2 interleaved plan, the latter with Megatron's account-for-embedding/loss split), predicted and
    committed (947227a) before launch on 2x H200. Measured: step-time median 1.0 %, max 2.6 %; order as predicted in
    both models; allocated peak within 8 % (under-predicted, most for the interleaved plans)."""
    doc = backtest_file(REAL / "runs_megatron_local_unseen2_h200x2.yaml", Catalog.create())
    s = doc["summary"]
    assert s["rows"] == 6 and s["evaluated_rows"] == 6 and s["refused_rows"] == 0
    assert s["median_abs_step_time_error"] <= 0.03 and s["max_abs_step_time_error"] <= 0.04
    rk = s["ranking"]
    assert len(rk["groups"]) == 2 and rk["kendall_tau"] == pytest.approx(1.0)
    assert all(g["predicted_best"] == g["measured_best"] for g in rk["groups"])
    assert all(abs(r["memory_error"]) <= 0.09 for r in doc["rows"])


def test_op_sac_host_per_layer_is_the_measured_one():
    """torchtitan's op-level selective AC adds its TorchDispatchMode's host per layer (benchmarks/real/sac_host.py on
    two 2x H200 leases, raw_torchtitan_sac_h200x2/sac_host_h200_lease*.json): the model's extra per layer over the
    no-AC layer is the two leases' mean ratio of (selective - none) / none, times the no-AC layer's host."""
    import json

    from baige_plan.cost.execution import EAGER_HOST, eager_host_s
    ratios = []
    for lease in (1, 2):
        d = json.loads((REAL / "raw_torchtitan_sac_h200x2" / f"sac_host_h200_lease{lease}.json").read_text())
        pl = d["per_layer"]
        ratios.append((pl["selective"]["s"] - pl["none"]["s"]) / pl["none"]["s"])
    extra = eager_host_s(1, 0, 0.0, False, 2, 3, 1, op_sac=True) - eager_host_s(1, 0, 0.0, False, 2, 3, 1)
    want = sum(ratios) / len(ratios) * EAGER_HOST.ops_per_layer * EAGER_HOST.dense_us_per_op * 1e-6
    assert extra == pytest.approx(want, rel=0.01)


def test_torchtitan_selective_mb1_fsdp_on_2x_h200_within_its_band():
    """Llama 2 7B, dp 2 ZeRO-3, micro-batch 1, op SAC on 2x H200 (raw_torchtitan_sac_h200x2/summary_sweep.jsonl:
    1, 2 and 8 micro-batches a rank), evaluated as a user would: its host, not its device, sets the pace; the
    estimate is within 15 % and the measurement inside its step-time band (it was 19-22 % too fast and above the
    band before op SAC's host was costed)."""
    import json

    from typer.testing import CliRunner

    from baige_plan.cli.app import app
    rows = [json.loads(x) for x in (REAL / "raw_torchtitan_sac_h200x2" / "summary_sweep.jsonl").read_text().splitlines()]
    sel = [r for r in rows if r["id"].startswith("01_")]
    assert len(sel) == 3
    for r in sel:
        res = CliRunner().invoke(app, ["evaluate", "llama2-7b", "h200-sxm-141g:1x2", "--seq-len", "4096",
                                       "--global-batch", str(r["global_batch"]), "--runtime", "torchtitan", "--tp",
                                       "1", "--pp", "1", "--dp", "2", "--zero", "3", "--micro-batch", "1",
                                       "--recompute", "selective", "--format", "json"])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        e = doc.get("estimate", doc)
        lo, hi = e["step_time_band_s"]
        assert abs(e["step_time_s"] / r["step_time_s"] - 1) <= 0.15, r["id"]
        assert lo <= r["step_time_s"] <= hi, r["id"]


def test_torchtitan_moe_on_4x_h200_blind_launches():
    """Fine-grained MoE through torchtitan 0.2.2 (runs_torchtitan_moe_h200x4.yaml: OLMoE-1B-7B, 8 plans; Qwen3-30B-A3B,
    2 plans), planned, predicted and exported (5c2f4be) before launch. With torchtitan's measured eager routing and
    grouped-GEMM backward (cost/moe.py TORCHTITAN_ROUTE_*_BYTES, GROUPED_MM_BWD_OVER_FWD) the OLMoE plans are within
    a 15 % median (38.9 % before) and the predicted best is the measured best in both models. The two Qwen3-30B-A3B
    plans (tp 2 x dp 2 ZeRO-3, full AC, 8 micro-batches of 1) stay 66-76 % too fast: their steps are FSDP-collective
    bound (docs/VALIDATION.md), which this bar does not cover."""
    doc = backtest_file(REAL / "runs_torchtitan_moe_h200x4.yaml", Catalog.create([str(REAL / "catalog")]))
    rows = doc["rows"]
    assert len(rows) == 10 and doc["summary"]["evaluated_rows"] == 10
    olmoe = sorted(abs(r["step_time_error"]) for r in rows if "olmoe" in r["id"])
    assert len(olmoe) == 8
    assert (olmoe[3] + olmoe[4]) / 2 <= 0.15
    rk = doc["summary"]["ranking"]
    assert len(rk["groups"]) == 2
    assert all(g["predicted_best"] == g["measured_best"] for g in rk["groups"])
    # torchtitan's eager MoE saves more than a fused dispatcher (cost/memory.py moe_saved "torchtitan_eager"): the
    # reserved peaks of the OLMoE plans without EP or AC are within 5 % (19-40 % above the prediction before)
    plain = [r for r in rows if "olmoe" in r["id"] and "_ep" not in r["id"] and r["id"].endswith("_non")]
    assert len(plain) == 5
    assert all(abs(r["memory_error"]) <= 0.05 for r in plain), [(r["id"], r["memory_error"]) for r in plain]


def test_plan_says_torchtitan_moe_tp_host_is_not_costed():
    """The Qwen3-30B-A3B tp2 miss (host time of DTensor TP over the MoE layer, not costed) is said beside any
    torchtitan MoE plan with tp > 1, in the table and on stderr with --format json; not for dense models or tp 1."""
    from typer.testing import CliRunner

    from baige_plan.cli.app import app
    base = ["plan", "--catalog", str(REAL / "catalog"), "h200-sxm-141g:1x4", "--global-batch", "16", "--seq-len",
            "4096", "--runtime", "torchtitan", "--top", "2"]
    run = CliRunner().invoke
    tp2 = run(app, base[:1] + ["qwen3-30b-a3b"] + base[1:] + ["--tp", "2", "--zero", "3"])
    assert tp2.exit_code == 0, tp2.output
    assert "not costed" in " ".join(tp2.output.split()) and "4.1-4.6x" in tp2.output
    js = run(app, base[:1] + ["qwen3-30b-a3b"] + base[1:] + ["--tp", "2", "--zero", "3", "--format", "json"])
    assert js.exit_code == 0 and "DTensor" in js.stderr and "DTensor" not in js.stdout
    for other in (["olmoe-1b-7b", "--tp", "1"], ["llama3-8b", "--tp", "2", "--zero", "3"]):
        res = run(app, base[:1] + other[:1] + base[1:] + other[1:])
        assert res.exit_code == 0 and "DTensor" not in res.output, other
