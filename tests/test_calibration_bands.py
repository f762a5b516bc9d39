"""Corpus-fitted constants (specs/calibration.py) threaded through the cost model, the LOSO fit (reports/loso.py)
and step-time bands (cost/bands.py, io/bands.py) in every estimate the tool prints or writes."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import statistics
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.cost.bands import ClassBand, StepTimeBands, step_time_band_s
from baige_plan.cost.compute import ChipRates, gemm_time_s
from baige_plan.cost.estimate import DpTraffic, estimate
from baige_plan.cost.flops import Gemm
from baige_plan.errors import InputError, SpecError
from baige_plan.io.bands import load_bands, parse_bands, shipped_bands_path
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import load_runs
from baige_plan.reports import loso as L
from baige_plan.specs.calibration import COMMITTED, FITTED, Calibration, Fitted
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import MoESpec
from baige_plan.specs.strategy import StrategySpec

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "tests" / "data" / "published_calibration.yaml"
CAT = Catalog.create()
RUN = CliRunner()


# -- the calibration object ----------------------------------------------------------------------------
def test_registry_describes_every_field_and_committed_values_are_in_range():
    assert [f.name for f in FITTED] == [f.name for f in dataclasses.fields(Calibration)]
    for f in FITTED:
        assert f.lo <= getattr(COMMITTED, f.name) <= f.hi
        g = f.grid()
        assert len(g) == f.points and g[0] == f.lo and g[-1] == pytest.approx(f.hi)
    # the committed values as documented (docs/COST_MODEL.md §6, benchmarks/corpus/LOSO.md "fitted on all sources")
    assert COMMITTED == Calibration(gemm_scale=0.964, zero3_overlap=0.55, zero3_overlap_fsdp=0.885,
                                    gemm_scale_hopper=0.921, gemm_scale_blackwell=0.841, gemm_scale_ascend=0.755,
                                    gemm_scale_gaudi=1.017)
    with pytest.raises(SpecError, match="gemm_scale"):
        Calibration(gemm_scale=2.0)
    with pytest.raises(SpecError, match="zero3_overlap"):
        Calibration(zero3_overlap=-0.1)


def test_default_calibration_is_bit_identical():
    cases = load_runs(REF, CAT)
    for c in cases:
        a = estimate(c.model, c.cluster, c.job, c.strategy)
        b = estimate(c.model, c.cluster, c.job, c.strategy, calibration=Calibration())
        assert a == b, c.id


def test_gemm_scale_multiplies_the_curve():
    chip = CAT.chip("a100-sxm4-80g")
    g = Gemm("big", 16384, 16384, 16384, 1, "linear")     # compute-bound: 2*16384^3 FLOPs, 1.6 GB of operands
    eff = chip.gemm_curve("bf16").at(2 * 16384 ** 3)
    peak = chip.peak("bf16") * 1e12
    for scale in (0.8, 1.0, 1.1):
        t = gemm_time_s(g, ChipRates.of(chip, "bf16", scale))
        assert t == pytest.approx(2 * 16384 ** 3 / (peak * min(1.0, eff * scale)), rel=1e-12)


def test_zero3_overlap_exposes_the_unhidden_share():
    # compute 10 s, ZeRO-3 traffic 4 s: max(10, 4) + (1 - o) * 4 - 10
    for o, want in ((0.0, 4.0), (0.25, 3.0), (0.55, 1.8), (1.0, 0.0)):
        assert DpTraffic(reductions=0, zero3_s=4.0, zero3_compute_s=10.0, zero3_overlap=o).exposed_s == \
            pytest.approx(want, abs=1e-12)


def test_zero3_overlap_reaches_the_step_time_linearly():
    c = next(x for x in load_runs(REF, CAT) if x.id == "narayanan2021_t2_zero3_174b_384gpu")
    t = {o: estimate(c.model, c.cluster, c.job, c.strategy, calibration=Calibration(zero3_overlap=o)).step_time_s
         for o in (0.0, 0.5, 1.0)}
    assert t[0.0] > t[0.5] > t[1.0]
    assert t[0.5] == pytest.approx((t[0.0] + t[1.0]) / 2, rel=1e-12)     # exposed = ... + (1 - o) min(C, M)


# -- fitting ---------------------------------------------------------------------------------------------
def _synthetic_stack(true_scale: float, n: int = 9) -> list:
    """Rows whose predicted time is a + b / gemm_scale and whose measured time is that at true_scale."""
    f = FITTED[0]
    rng = random.Random(1)
    grids, meas = [], []
    for _ in range(n):
        a, b = rng.uniform(0.1, 1.0), rng.uniform(1.0, 5.0)
        grids.append([a + b / v for v in f.grid()])
        meas.append(math.log(a + b / true_scale))
    return [L._Stack(("gemm_scale",), np.arange(n), np.array(grids), np.array(meas))]


@pytest.mark.parametrize("true_scale", [0.87, 1.0, 1.137])
def test_fit_recovers_the_generating_constant(true_scale):
    values, counts = L.fit(_synthetic_stack(true_scale), np.ones(9, dtype=bool), (FITTED[0],))
    assert counts == {"gemm_scale": 9}
    assert values["gemm_scale"] == pytest.approx(true_scale, abs=1.5e-3)     # resolution 0.001


def test_fit_takes_the_range_middle_with_too_few_rows():
    """With fewer than MIN_FIT_ROWS training rows a constant takes the middle of its range (0.80-1.25 -> 1.025),
    not its committed value: the committed value is fitted on every source, the scored one included."""
    train = np.zeros(9, dtype=bool)
    train[:2] = True
    values, counts = L.fit(_synthetic_stack(1.2), train, (FITTED[0],))
    assert values == {"gemm_scale": pytest.approx((0.80 + 1.25) / 2)} and counts == {"gemm_scale": 2}
    assert values["gemm_scale"] != COMMITTED.gemm_scale


def test_fit_does_not_depend_on_the_committed_values(monkeypatch):
    """Two constants sharing rows on a flat ridge (time = a + b / (s1 * s2), measured at s1 * s2 = 1.1): the fit
    starts from the middle of each range, so what is committed (which leave-one-source-out must not see) cannot
    move it; the product it finds is the generating one."""
    f1, f2 = FITTED[0], dataclasses.replace(FITTED[0], name="gemm_scale_hopper", lo=0.6, points=9)
    rng = random.Random(2)
    grids, meas = [], []
    for _ in range(9):
        a, b = rng.uniform(0.1, 1.0), rng.uniform(1.0, 5.0)
        grids.append([[a + b / (u * v) for v in f2.grid()] for u in f1.grid()])
        meas.append(math.log(a + b / 1.1))
    stack = [L._Stack(("gemm_scale", "gemm_scale_hopper"), np.arange(9), np.array(grids), np.array(meas))]
    fits = []
    for c in (COMMITTED, COMMITTED.with_values({"gemm_scale": 1.2, "gemm_scale_hopper": 0.7})):
        monkeypatch.setattr(L, "COMMITTED", c)
        fits.append(L.fit(stack, np.ones(9, dtype=bool), (f1, f2))[0])
    assert fits[0] == fits[1]
    assert fits[0]["gemm_scale"] * fits[0]["gemm_scale_hopper"] == pytest.approx(1.1, rel=0.01)


def test_loso_refit_minimises_the_true_objective():
    """Held-out korthikanti2022: gemm_scale refit on the other sources' rows is (within interpolation) the
    minimum of median |log(predicted / measured)| computed by calling the cost model on a grid."""
    fitted = (FITTED[0],)
    doc = L.loso([REF], CAT, fitted=fitted)
    src = {s["source"]: s for s in doc["sources"]}
    v = src["korthikanti2022"]["refit"]["gemm_scale"]
    # training rows: every source but korthikanti2022 (BLOOM runs DeepSpeed's balanced partition, in its space)
    train = [c for c in load_runs(REF, CAT) if not c.id.startswith("korthikanti2022")]

    def objective(scale: float) -> float:
        cal = Calibration(gemm_scale=scale)
        return statistics.median(abs(math.log(estimate(c.model, c.cluster, c.job, c.strategy, calibration=cal)
                                              .step_time_s / c.measured_step_time_s)) for c in train)

    brute = min(objective(round(0.80 + 0.01 * i, 2)) for i in range(46))
    # within the grid interpolation's error (0.1-0.2 points of median |log| over these 17 rows)
    assert objective(v) <= brute + 2.5e-3
    # the held-out rows are scored with exactly that value
    rows = {r["id"]: r for r in doc["rows"]}
    for c in load_runs(REF, CAT):
        if c.id.startswith("korthikanti2022"):
            want = estimate(c.model, c.cluster, c.job, c.strategy, calibration=Calibration(gemm_scale=v)).step_time_s
            assert rows[c.id]["loso_predicted_step_time_s"] == pytest.approx(want, rel=1e-4)
    assert rows["bloom176b_tr11_384gpu"]["evaluated"] is True


def test_loso_document_is_deterministic_and_complete():
    a = L.loso([REF], CAT)
    b = L.loso([REF], CAT)
    assert json.dumps(a) == json.dumps(b)
    assert {s["source"] for s in a["sources"]} == {"narayanan2021", "korthikanti2022", "bigscience2022_bloom"}
    assert a["overall"]["runs"] == 25 and a["overall"]["evaluated_rows"] == 25
    assert {c["class"] for c in a["classes"]} >= {"dense", "fsdp", "memory"}
    assert a["bands"]["all"]["n"] == 25


def test_duplicate_ids_are_bad_input(tmp_path):
    doc = yaml.safe_load(REF.read_text())
    p = tmp_path / "dup.yaml"
    p.write_text(yaml.safe_dump({"rows": doc["rows"][:2]}))
    with pytest.raises(InputError, match="duplicate id"):
        L.load_corpus([REF, p], CAT)


# -- bands -----------------------------------------------------------------------------------------------
def _bands(**classes) -> StepTimeBands:
    return StepTimeBands(tuple((k, ClassBand(*v)) for k, v in classes.items()))


def _llama(moe: bool = False):
    m = CAT.model("llama3-8b")
    return dataclasses.replace(m, moe=MoESpec(experts=8, top_k=2, expert_ffn_hidden=14336)) if moe else m


def test_hand_computed_band():
    t = _bands(dense=(0.9, 1.0, 1.2, 10), fp8=(0.5, 1.0, 3.0, 3), moe=(0.7, 0.9, 1.1, 8), all=(0.8, 1.0, 1.5, 40))
    s = StrategySpec(tp=1, pp=1, dp=8)
    assert step_time_band_s(10.0, _llama(), JobSpec(64, 4096), s, t) == pytest.approx((9.0, 12.0))
    # fp8 has 3 < 8 rows: the corpus-wide quantiles
    assert step_time_band_s(10.0, _llama(), JobSpec(64, 4096, "fp8"), s, t) == pytest.approx((8.0, 15.0))
    # an MoE model in fp8: its primary class is moe (8 rows: its own band)
    assert step_time_band_s(10.0, _llama(moe=True), JobSpec(64, 4096, "fp8"), s, t) == pytest.approx((7.0, 11.0))
    # a class missing from the table: "all"
    assert step_time_band_s(2.0, _llama(), JobSpec(64, 4096), StrategySpec(tp=1, pp=1, dp=4, cp=2), t) == \
        pytest.approx((1.6, 3.0))


def test_band_contains_the_estimate_when_q10_le_1_le_q90():
    rng = random.Random(7)
    strategies = [StrategySpec(tp=1, pp=1, dp=8), StrategySpec(tp=1, pp=1, dp=8, zero=3),
                  StrategySpec(tp=1, pp=1, dp=4, cp=2)]
    for _ in range(200):
        table = {}
        for cls in ("dense", "fsdp", "cp", "fp8", "all"):
            q10, q90 = rng.uniform(0.3, 1.0), rng.uniform(1.0, 3.0)
            table[cls] = (q10, rng.uniform(q10, q90), q90, rng.randint(1, 30))
        t = _bands(**table)
        step = rng.uniform(1e-3, 1e3)
        for s in strategies:
            for prec in ("bf16", "fp8"):
                lo, hi = step_time_band_s(step, _llama(), JobSpec(64, 4096, prec), s, t)
                assert lo <= step <= hi


def test_shipped_table_loads_and_bad_tables_name_the_field(tmp_path):
    t = load_bands()
    assert t.band_of("all")[0] == "all"
    doc = yaml.safe_load(shipped_bands_path().read_text())
    assert doc["schema"] == "baige-plan/bands/v1"
    bad = json.loads(json.dumps(doc))
    bad["classes"]["all"]["q10"] = 9.0          # q10 > q50
    with pytest.raises(InputError, match=r"classes\.all\.q10"):
        parse_bands(bad, "x.yaml")
    bad = json.loads(json.dumps(doc))
    bad["classes"]["bogus"] = bad["classes"]["all"]
    with pytest.raises(InputError, match=r"classes\.bogus"):
        parse_bands(bad, "x.yaml")
    bad = json.loads(json.dumps(doc))
    del bad["classes"]["all"]
    with pytest.raises(InputError, match="'all'"):
        parse_bands(bad, "x.yaml")


def _shipped(cls: str) -> tuple[float, float]:
    doc = yaml.safe_load(shipped_bands_path().read_text())
    c = doc["classes"].get(cls)
    c = c if c is not None and c["n"] >= doc["min_rows"] else doc["classes"]["all"]
    return c["q10"], c["q90"]


def _class_of(strategy: dict, precision: str = "bf16", moe: bool = False) -> str:
    """The primary mechanism class by the rule of cost/classes.py (moe, cp, fsdp, fp8, eager, dense)."""
    for cls, used in (("moe", moe), ("cp", strategy["cp"] > 1), ("fsdp", strategy["zero"] >= 3),
                      ("fp8", precision == "fp8"), ("eager", strategy.get("execution") == "eager")):
        if used:
            return cls
    return "dense"


EVAL = ["evaluate", "gpt3-175b", "a100-sxm4-80g:8x8", "--tp", "8", "--pp", "8", "--dp", "1", "--micro-batch", "1",
        "--global-batch", "64", "--seq-len", "2048", "--recompute", "selective"]


def test_evaluate_json_yaml_and_table_carry_the_band():
    q10, q90 = _shipped("dense")
    r = RUN.invoke(app, [*EVAL, "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    lo, hi = d["step_time_band_s"]
    assert lo == pytest.approx(d["step_time_s"] * q10, rel=1e-5) and hi == pytest.approx(d["step_time_s"] * q90, rel=1e-5)
    y = yaml.safe_load(RUN.invoke(app, [*EVAL, "--format", "yaml"]).stdout)
    assert y["step_time_band_s"] == d["step_time_band_s"]
    assert "step time band" in RUN.invoke(app, EVAL).stdout


def test_plan_entries_and_plan_file_carry_the_band_and_are_byte_identical(tmp_path):
    args = ["plan", "llama3-8b", "a100-sxm4-80g:1x8", "--global-batch", "16", "--top", "3"]
    r = RUN.invoke(app, [*args, "--format", "json"])
    assert r.exit_code == 0, r.output
    plans = json.loads(r.stdout)["plans"]
    assert plans and all(len(p["step_time_band_s"]) == 2 for p in plans)
    for p in plans:
        q10, q90 = _shipped(_class_of(p["strategy"]))
        assert p["step_time_band_s"] == pytest.approx([p["step_time_s"] * q10, p["step_time_s"] * q90], rel=1e-5)
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    for out in (a, b):
        assert RUN.invoke(app, [*args, "--out", str(out)]).exit_code == 0
    assert a.read_bytes() == b.read_bytes()
    est = yaml.safe_load(a.read_text())["estimate"]
    q10, q90 = _shipped(_class_of(est["strategy"]))
    assert est["step_time_band_s"] == pytest.approx([est["step_time_s"] * q10, est["step_time_s"] * q90], rel=1e-5)
    assert RUN.invoke(app, ["validate", str(a)]).exit_code == 0
    r = RUN.invoke(app, ["evaluate", "--plan", str(a), "--format", "json"])
    assert json.loads(r.stdout)["step_time_band_s"] == est["step_time_band_s"]


# -- the CLI ---------------------------------------------------------------------------------------------
def test_loso_cli_writes_the_tables(tmp_path):
    bands = tmp_path / "bands.yaml"
    r = RUN.invoke(app, ["backtest", "--loso", str(REF), "--tables", str(tmp_path), "--bands", str(bands),
                         "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert json.loads((tmp_path / "loso.json").read_text()) == doc
    assert "| korthikanti2022 |" in (tmp_path / "LOSO.md").read_text()
    t = parse_bands(yaml.safe_load(bands.read_text()), str(bands))
    assert dict(t.classes)["all"].n == doc["bands"]["all"]["n"]
    assert RUN.invoke(app, ["backtest", "--loso", str(REF)]).exit_code == 0


@pytest.mark.parametrize("args", [["--tables", "x"], ["--bands", "x.yaml"], ["--loso", "--plot", "x.svg"]])
def test_loso_options_misused_exit_2(args):
    r = RUN.invoke(app, ["backtest", str(REF), *args])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_fitted_entries_validate():
    with pytest.raises(SpecError):
        Fitted("x", 1.0, 0.5, lambda run: True)
    with pytest.raises(SpecError):
        Fitted("x", 0.0, 1.0, lambda run: True, coordinate="reciprocal")


def test_mixed_cluster_plan_uses_the_class_of_its_strategy_summary(tmp_path):
    out = tmp_path / "mixed.yaml"
    r = RUN.invoke(app, ["plan", "llama3-8b", "a100-sxm4-80g:1x8+h100-sxm5-80g:1x8", "--global-batch", "64",
                         "--seq-len", "4096", "--format", "json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    p = json.loads(r.stdout)["plans"][0]
    q10, q90 = _shipped(_class_of(p["strategy"]))
    assert p["step_time_band_s"] == pytest.approx([p["step_time_s"] * q10, p["step_time_s"] * q90], rel=1e-5)
    assert yaml.safe_load(out.read_text())["estimate"]["step_time_band_s"] == p["step_time_band_s"]


def test_fsdp_zero2_runtimes_match_the_registry():
    from baige_plan.specs import runtimes
    from baige_plan.specs.calibration import FSDP_ZERO2_RUNTIMES
    assert set(FSDP_ZERO2_RUNTIMES) == {n for n in runtimes.NAMES if runtimes.get(n).fsdp_zero2}
