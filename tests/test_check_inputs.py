"""`check` and `diff` refuse what `validate` refuses (one shared validation, reports/plan_check.py), and `check`
refuses a tolerance that would make every comparison pass."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from baige_plan.cli.app import app

RUN = CliRunner()
SMALL = ["llama3-8b", "a100-sxm4-80g:1x8", "--global-batch", "16"]


def _run(args, code):
    r = RUN.invoke(app, [str(a) for a in args])
    assert r.exit_code == code, (args, r.exit_code, r.output, r.stderr)
    assert "Traceback" not in r.output + r.stderr
    return r


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("plans")
    best, slow = d / "best.yaml", d / "slow.yaml"
    _run(["plan", *SMALL, "--out", best], 0)
    # slower than the best plan by far: tp 8 with every layer recomputed
    _run(["plan", *SMALL, "--tp", "8", "--recompute", "full", "--out", slow], 0)
    return best, slow


def test_the_fixture_is_a_regression(plans):
    best, slow = plans
    t = [yaml.safe_load(p.read_text())["estimate"]["step_time_s"] for p in plans]
    assert t[1] > 1.2 * t[0]
    _run(["check", slow, "--baseline", best], 3)
    _run(["check", slow, "--baseline", best, "--tolerance", "0.5"], 0)
    _run(["check", best, "--baseline", best, "--tolerance", "0"], 0)


@pytest.mark.parametrize("tol", ["nan", "NaN", "inf", "-inf", "-5", "-0.01"])
def test_tolerance_must_be_finite_and_non_negative(plans, tol):
    best, slow = plans
    r = _run(["check", slow, "--baseline", best, "--tolerance", tol], 2)
    assert "--tolerance" in r.stderr and str(float(tol)) in r.stderr
    assert "ok" not in r.stdout


def _set(path, value):
    def f(doc):
        *head, last = path
        for k in head:
            doc = doc[k]
        doc[last] = value
    return f


def _drop(path):
    def f(doc):
        *head, last = path
        for k in head:
            doc = doc[k]
        del doc[last]
    return f


# (id, mutation, field named in the message, words of the reason)
MUTATIONS = [
    ("nan-step-time", _set(("estimate", "step_time_s"), math.nan), "estimate.step_time_s", "finite"),
    ("inf-step-time", _set(("estimate", "step_time_s"), math.inf), "estimate.step_time_s", "finite"),
    ("zero-step-time", _set(("estimate", "step_time_s"), 0.0), "estimate.step_time_s", "> 0"),
    ("negative-step-time", _set(("estimate", "step_time_s"), -4.2), "estimate.step_time_s", ">= 0"),
    ("negative-memory", _set(("estimate", "peak_memory_gib"), -1.0), "estimate.peak_memory_gib", ">= 0"),
    ("negative-breakdown", _set(("estimate", "breakdown_s", "compute"), -1.0), "estimate.breakdown_s.compute",
     ">= 0"),
    ("negative-tp", _set(("strategy", "tp"), -1), "strategy.tp", "positive"),
    ("nan-stage-time", _set(("pipelines", 0, "stages", 0, "time_per_micro_batch_s"), math.nan),
     "pipelines[0].stages[0].time_per_micro_batch_s", "finite"),
    ("nan-memory-frac", _set(("search", "max_memory_frac"), math.nan), "search.max_memory_frac", "finite"),
    ("memory-frac-above-1", _set(("search", "max_memory_frac"), 5.0), "search.max_memory_frac", "(0, 1]"),
    ("fits-not-bool", _set(("estimate", "fits"), "yes"), "estimate.fits", "true or false"),
    ("step-time-not-number", _set(("estimate", "step_time_s"), "fast"), "estimate.step_time_s", "number"),
    ("negative-rank", _set(("placement", 0, "rank"), -1), "placement[0].rank", ">= 0"),
    ("missing-step-time", _drop(("estimate", "step_time_s")), "estimate.step_time_s", "required key is missing"),
    ("missing-estimate", _drop(("estimate",)), "estimate", "required key is missing"),
    ("missing-strategy-key", _drop(("strategy", "micro_batch")), "strategy.micro_batch", "required key is missing"),
    ("missing-breakdown-key", _drop(("estimate", "breakdown_s", "compute")), "estimate.breakdown_s.compute",
     "required key is missing"),
    ("unknown-top-key", _set(("speed",), 1), "speed", "unknown key"),
    ("unknown-estimate-key", _set(("estimate", "speedup"), 2.0), "estimate.speedup", "unknown key"),
    ("unknown-search-key", _set(("search", "note"), "x"), "search.note", "unknown key"),
    ("unknown-strategy-key", _set(("strategy", "turbo"), True), "strategy.turbo", "unknown key"),
]


def _write(doc, path: Path) -> Path:
    if path.suffix == ".json":
        path.write_text(json.dumps(doc))                                   # NaN as JSON's NaN
    else:
        path.write_text(yaml.safe_dump(doc, sort_keys=False))              # NaN as .nan
    return path


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
@pytest.mark.parametrize(("name", "mutate", "field", "reason"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_check_and_diff_refuse_what_validate_refuses(tmp_path, plans, suffix, name, mutate, field, reason):
    best, slow = plans
    doc = copy.deepcopy(yaml.safe_load(best.read_text()))
    mutate(doc)
    bad = _write(doc, tmp_path / f"{name}{suffix}")
    want = f"{bad}: {field}:"
    msgs = []
    for args in (["validate", bad], ["check", slow, "--baseline", bad], ["check", bad, "--baseline", best],
                 ["diff", bad, best], ["diff", best, bad]):
        r = _run(args, 2)
        line = r.stderr.strip().splitlines()[-1]
        assert want in line and reason in line, (args, r.stderr)
        assert "ok" not in r.stdout
        msgs.append(line)
    assert len(set(msgs)) == 1                                              # one validation, one message


def test_valid_plans_pass_validate_check_and_diff(tmp_path, plans):
    best, slow = plans
    _run(["validate", best, slow], 0)
    _run(["diff", best, slow], 1)                                           # valid, and different: exit 1
    # a plan on two chip families carries the heterogeneous estimate keys: still valid as written
    het = tmp_path / "het.yaml"
    _run(["plan", "llama3-8b", "a100-sxm4-80g:1x8+ascend-910b:1x8", "--global-batch", "32", "--seq-len", "2048",
          "--out", het], 0)
    _run(["validate", het], 0)
    _run(["check", het, "--baseline", het], 0)
    _run(["diff", het, best], 1)
    # and the JSON form of a valid plan
    js = _write(yaml.safe_load(best.read_text()), tmp_path / "best.json")
    _run(["check", js, "--baseline", best], 0)
