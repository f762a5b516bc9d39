"""`baige-plan backtest` summary and CI gate (issue 11): error median / p90 / max, the share of runs
evaluated, the ranking check (Kendall tau, discordant pairs, regret of the predicted best) and
--fail-above-median / --fail-above-p90 (exit 3). Hand-computed on constructed rows: nothing here
depends on the cost model's numbers (the estimate is mocked where a row must be refused)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import baige_plan.cli.backtest as cli_backtest
import baige_plan.reports.backtest as B
from baige_plan.cli.app import app
from baige_plan.errors import SpecError

runner = CliRunner()


def _row(rid, group, meas, pred, gb=1, mem=None, fits=True):
    return {"id": rid, "strategy": "synthetic", "rank_group": group, "measured_step_time_s": meas,
            "predicted_step_time_s": pred,
            "step_time_error": (pred / meas - 1) if meas else None, "global_batch_seqs": gb,
            "measured_peak_memory_gib": 10.0 if mem is not None else None,
            "predicted_peak_memory_gib": 10.0 * (1 + mem) if mem is not None else 1.0,
            "memory_error": mem, "predicted_fits": fits}


def _rows():
    return [
        # group A: measured a1 < a2 < a3 < a4; predicted a1 < a3 < a2 < a4 -> one discordant pair (a2, a3)
        _row("a1", "A", 1.0, 1.1, mem=0.1),
        _row("a2", "A", 2.0, 1.5, mem=-0.2),
        _row("a3", "A", 3.0, 1.2, mem=0.3, fits=False),
        _row("a4", "A", 4.0, 4.4, mem=-0.4),
        # group B, by time per sequence: measured b1 1.0 < b2 1.5; predicted b2 0.75 < b1 0.8 -> discordant,
        # the model picks b2: regret 1.5 / 1.0 - 1 = 0.5
        _row("b1", "B", 2.0, 1.6, gb=2),
        _row("b2", "B", 1.5, 0.75, gb=1),
        _row("c1", "C", 1.0, 1.05),             # alone in its group: no ranking
        _row("d1", "D", None, 3.0),             # no measured time (published TFLOP/s only): no error, no rank
    ]


REFUSED = [{"id": "r1", "field": "strategy.tp", "reason": "tp=3 does not divide heads=16"}]


def test_percentile_is_nearest_rank():
    assert B._pct(list(range(1, 11)), 0.9) == 9              # ceil(0.9 * 10) = 9th
    assert B._pct(list(range(1, 21)), 0.9) == 18
    assert B._pct([5, 1, 3, 2, 4, 7, 6], 0.9) == 7           # ceil(6.3) = 7th
    assert B._pct([4.0], 0.9) == 4.0
    assert B._pct([1, 2, 3, 4], 0.5) == 2


def test_summary_errors_and_evaluated_share():
    s = B.summarize(_rows(), REFUSED)
    # |errors| .1 .25 .6 .1 .2 .5 .05 -> sorted .05 .1 .1 .2 .25 .5 .6
    assert s["rows"] == 8 and s["step_time_rows"] == 7
    assert s["median_abs_step_time_error"] == pytest.approx(0.2)
    assert s["p90_abs_step_time_error"] == pytest.approx(0.6)
    assert s["max_abs_step_time_error"] == pytest.approx(0.6)
    assert s["mean_signed_step_time_error"] == pytest.approx((0.1 - 0.25 - 0.6 + 0.1 - 0.2 - 0.5 + 0.05) / 7)
    # memory |errors| .1 .2 .3 .4: median .25, p90 = ceil(3.6) = 4th = .4
    assert s["memory_rows"] == 4
    assert s["median_abs_memory_error"] == pytest.approx(0.25)
    assert s["p90_abs_memory_error"] == pytest.approx(0.4)
    assert s["max_abs_memory_error"] == pytest.approx(0.4)
    # 8 rows + 1 refused = 9 runs; a3 predicted not to fit -> 7 evaluated
    assert s["runs_total"] == 9 and s["refused_rows"] == 1 and s["refused"] == REFUSED
    assert s["does_not_fit_rows"] == 1 and s["does_not_fit"] == ["a3"]
    assert s["evaluated_rows"] == 7 and s["evaluated_share"] == pytest.approx(7 / 9)


def test_ranking_tau_discordant_and_regret():
    rk = B.summarize(_rows())["ranking"]
    assert rk["group_count"] == 2
    a, b = rk["groups"]
    assert (a["group"], a["runs"], a["pairs"], a["concordant"], a["discordant"], a["tied"]) == ("A", 4, 6, 5, 1, 0)
    assert a["kendall_tau"] == pytest.approx(4 / 6)
    assert a["discordant_pairs"] == [["a2", "a3"]]
    assert a["predicted_best"] == a["measured_best"] == "a1" and a["regret"] == 0
    assert (b["group"], b["pairs"], b["discordant"]) == ("B", 1, 1)
    assert b["kendall_tau"] == pytest.approx(-1.0)
    assert (b["predicted_best"], b["measured_best"]) == ("b2", "b1")
    assert b["regret"] == pytest.approx(0.5)
    # over both groups: 7 pairs, 5 concordant, 2 discordant
    assert (rk["pairs"], rk["concordant"], rk["discordant"]) == (7, 5, 2)
    assert rk["kendall_tau"] == pytest.approx(3 / 7)
    assert rk["groups_with_best_picked"] == 1
    assert rk["median_regret"] == pytest.approx(0.25) and rk["max_regret"] == pytest.approx(0.5)


def test_ranking_ties_and_empty():
    rk = B.rank_check([_row("e2", "E", 2.0, 1.0), _row("e1", "E", 1.0, 1.0)])
    g = rk["groups"][0]
    assert (g["tied"], g["concordant"], g["discordant"], g["kendall_tau"]) == (1, 0, 0, 0.0)
    assert g["predicted_best"] == "e1" and g["regret"] == 0      # a tie goes to the first id
    assert B.rank_check([_row("x", "X", 1.0, 1.0)]) == {"groups": [], "group_count": 0}


def test_refused_run_is_listed_not_fatal(monkeypatch):
    def refuse(*a, **k):
        raise SpecError("strategy.tp", "tp=3 does not divide heads=16")

    monkeypatch.setattr(B, "estimate", refuse)
    case = SimpleNamespace(id="r1", model=None, cluster=None, job=None, strategy=None, excluded=None)
    rows, refused = B.backtest_cases([case])
    assert rows == [] and refused == [{"id": "r1", "field": "strategy.tp", "reason": "tp=3 does not divide heads=16"}]
    s = B.summarize(rows, refused)
    assert s["runs_total"] == 1 and s["evaluated_rows"] == 0 and s["evaluated_share"] == 0
    assert "median_abs_step_time_error" not in s


def _doc():
    rows = _rows()
    s = B.summarize(rows, REFUSED)
    return {"rows": rows, "summary": s, "sets": [{"file": "set.yaml", "summary": s}]}


def test_gate_limits_in_percent():
    d = _doc()                                   # median 20 %, p90 60 %
    assert B.gate(d, None, None) == []
    assert B.gate(d, 20, 60) == []               # at the limit passes (0.2 * 100 is 20.000000000000004)
    (p,) = B.gate(d, 19.9, None)
    assert p.startswith("set.yaml: median |step-time error| 20.0% > 19.9%")
    assert len(B.gate(d, 10, 50)) == 2
    empty = {"rows": [], "summary": B.summarize([]), "sets": [{"file": "e.yaml", "summary": B.summarize([])}]}
    assert "no run with a measured step time" in B.gate(empty, 10, None)[0]


@pytest.mark.parametrize("args, code", [
    ([], 0), (["--fail-above-median", "25"], 0), (["--fail-above-median", "15"], 3),
    (["--fail-above-p90", "60"], 0), (["--fail-above-p90", "59"], 3),
    (["--fail-above-median", "25", "--fail-above-p90", "10"], 3),
    (["--fail-above-median", "nan"], 2), (["--fail-above-p90", "-1"], 2), (["--fail-above-p90", "x"], 2),
])
def test_cli_gate_exit_codes(monkeypatch, args, code):
    monkeypatch.setattr(cli_backtest, "backtest_files", lambda paths, catalog, **kw: _doc())   # kw: progress
    r = runner.invoke(app, ["backtest", "set.yaml", "--format", "json", *args])
    assert r.exit_code == code, (r.stdout, r.stderr)
    if code == 3:
        assert "backtest gate: set.yaml:" in r.stderr and "Traceback" not in r.output
    if code in (0, 3):
        d = json.loads(r.stdout)
        assert d["summary"]["ranking"]["discordant"] == 2 and d["sets"][0]["file"] == "set.yaml"
    if code == 2:
        assert len(r.stderr.strip().splitlines()) == 1


def test_cli_table_prints_summary(monkeypatch):
    monkeypatch.setattr(cli_backtest, "backtest_files", lambda paths, catalog, **kw: _doc())   # kw: progress
    r = runner.invoke(app, ["backtest", "set.yaml"])
    assert r.exit_code == 0, r.output
    out = " ".join(r.stdout.split())
    assert "7 of 9 runs evaluated (78%); refused 1, predicted not to fit 1" in out
    assert "refused: r1: strategy.tp: tp=3 does not divide heads=16" in out
    assert "median |error| 20.0%, p90 60.0%, max 60.0%" in out
    assert "Kendall tau +0.43, 2 discordant pairs, predicted best = measured best in 1/2" in out
