"""`plan --top K` on a cluster of several chip groups: K distinct plans, fastest first, ties marked (SPEC §3:
`plans` best first, each with step_time_band_s and pipelines; issue 16: no two rows with the same time and memory)."""

import json

import pytest
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.search.ranking import HETERO_ORDER_RULE, Placed, fastest_first_ties

runner = CliRunner()
ARGS = ["--quiet", "plan", "llama3-8b", "a100-sxm4-80g:8x8+ascend-910b:8x8", "--global-batch", "512",
        "--seq-len", "4096"]
LAYERS = 32     # llama3-8b


def test_fastest_first_ties_by_hand():
    # bands: rows 0-1 overlap, 2-3 overlap each other but not row 0's band, row 4 alone
    times = [1.0, 1.05, 1.3, 1.32, 2.0]
    bands = [(0.9, 1.1), (0.95, 1.15), (1.2, 1.4), (1.25, 1.45), (1.8, 2.2)]
    assert fastest_first_ties(times, bands) == [Placed(0, 1), Placed(1, 1), Placed(2, 2), Placed(3, 2), Placed(4, 0)]
    # a row that overlaps the fastest row's band joins its group even past one that does not; order is kept
    times = [1.0, 1.1, 1.2]
    bands = [(0.9, 1.1), (1.15, 1.2), (1.0, 1.3)]
    assert fastest_first_ties(times, bands) == [Placed(0, 1), Placed(1, 0), Placed(2, 1)]
    assert fastest_first_ties(times, None) == [Placed(0), Placed(1), Placed(2)]


@pytest.fixture(scope="module")
def docs():
    r1 = runner.invoke(app, ARGS + ["--format", "json"])
    r5 = runner.invoke(app, ARGS + ["--top", "5", "--format", "json"])
    assert r1.exit_code == 0, r1.output
    assert r5.exit_code == 0, r5.output
    return json.loads(r1.stdout), json.loads(r5.stdout)


def test_top_k_gives_k_distinct_plans_fastest_first(docs):
    one, five = docs
    assert len(one["plans"]) == 1 and "ordering" not in one        # --top 1: unchanged document
    plans = five["plans"]
    assert len(plans) == 5
    times = [p["step_time_s"] for p in plans]
    assert times == sorted(times)
    assert len({(p["step_time_s"], p["peak_memory_gib"]) for p in plans}) == 5
    assert five["ordering"] == HETERO_ORDER_RULE
    for p in plans:
        lo, hi = p["step_time_band_s"]
        assert lo <= p["step_time_s"] <= hi
        assert p["template"]
        for sh in p["pipelines"]:     # every shape runs every layer once, in order
            assert [x for st in sh["stages"] for x in range(*st["layers"])] == list(range(LAYERS))
        assert sum(p["devices_used"].values()) <= 128
    # the first plan is the --top 1 plan (the plan file's), with the marks added
    first = {k: v for k, v in plans[0].items() if k not in ("template", "tie", "tie_group")}
    assert first == one["plans"][0]


def test_tie_marks_follow_the_bands(docs):
    plans = docs[1]["plans"]
    # independent oracle: group = rows whose band overlaps the band of the fastest row not yet grouped
    left = list(range(len(plans)))
    want = {}
    g = 0
    while left:
        lead = left[0]
        lo, hi = plans[lead]["step_time_band_s"]
        grp = [i for i in left if plans[i]["step_time_band_s"][0] <= hi and lo <= plans[i]["step_time_band_s"][1]]
        left = [i for i in left if i not in grp]
        if len(grp) > 1:
            g += 1
            want.update({i: g for i in grp})
    for i, p in enumerate(plans):
        assert p["tie"] == (i in want)
        assert p.get("tie_group") == want.get(i)


def test_table_lists_the_plans():
    r = runner.invoke(app, ARGS + ["--top", "3"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "top 3 plans" in r.stdout
    assert r.stdout.count("recompute") >= 3


def _evaluated(path) -> float:
    r = runner.invoke(app, ["--quiet", "evaluate", "--plan", str(path), "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["step_time_s"]


@pytest.mark.parametrize("args", [ARGS, ["--quiet", "plan", "llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "64",
                                         "--seq-len", "4096"]])
def test_pick_writes_the_nth_plan_shown(args, tmp_path):
    """--pick N writes the N-th plan of the list to --out: re-estimated from the file it is that plan (same step time,
    pipelines), and --pick 1 writes the file --out always wrote."""
    r = runner.invoke(app, args + ["--top", "3", "--pick", "3", "--out", str(tmp_path / "p3.yaml"), "--format", "json"])
    assert r.exit_code == 0, r.output
    shown = json.loads(r.stdout)["plans"]
    assert len(shown) == 3
    assert _evaluated(tmp_path / "p3.yaml") == pytest.approx(shown[2]["step_time_s"], rel=1e-5)
    assert shown[2]["step_time_s"] != pytest.approx(shown[0]["step_time_s"], rel=1e-5)
    assert runner.invoke(app, args + ["--top", "3", "--out", str(tmp_path / "a.yaml")]).exit_code == 0
    assert runner.invoke(app, args + ["--top", "3", "--pick", "1", "--out", str(tmp_path / "b.yaml")]).exit_code == 0
    assert (tmp_path / "a.yaml").read_bytes() == (tmp_path / "b.yaml").read_bytes()


def test_pick_bad_input_exits_2_naming_the_option(tmp_path):
    for extra, why in ((["--top", "2", "--pick", "3", "--out", str(tmp_path / "x.yaml")], "at most --top (2)"),
                       (["--top", "3", "--pick", "2"], "needs --out"),
                       (["--objective", "cost", "--tokens", "1e9", "--price", "ascend-910b=1.5", "--top", "2",
                         "--pick", "2", "--out", str(tmp_path / "x.yaml")], "finds one plan")):
        r = runner.invoke(app, ARGS + extra)
        assert r.exit_code == 2, r.output
        assert "--pick" in r.output and why in r.output
        assert not (tmp_path / "x.yaml").exists()


def test_top_past_the_plans_found_shows_them_all():
    r = runner.invoke(app, ARGS + ["--top", "40", "--format", "json"])
    assert r.exit_code == 0, r.output
    plans = json.loads(r.stdout)["plans"]
    assert 5 < len(plans) < 40       # every plan the search estimated exactly, each once
    assert len({(p["step_time_s"], p["peak_memory_gib"]) for p in plans}) == len(plans)
    assert [p["step_time_s"] for p in plans] == sorted(p["step_time_s"] for p in plans)
