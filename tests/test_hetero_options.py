"""Every `plan` option on a mixed cluster is honoured by every pipeline shape, or refused (issue 10):
caps and pins reach every stage, and the plan file never states a plan-wide value its pipelines
contradict."""

import json

import pytest
from typer.testing import CliRunner

from baige_plan.cli.app import app

runner = CliRunner()
# 32 A100-40GB + 32 V100-16GB in 4-GPU nodes, a 24-layer 1B-class model (fp16: V100 has no bf16)
ARGS = ["plan", "llama2-7b", "a100-sxm4-40g:8x4+v100-sxm2-16g:8x4", "--global-batch", "64", "--seq-len", "2048",
        "--precision", "fp16", "--format", "json"]


def _plan(*extra):
    r = runner.invoke(app, ARGS + list(extra))
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["plans"][0]


def _effective(plan, shape, name):
    return (shape.get("strategy") or {}).get(name, plan["strategy"][name])


@pytest.mark.parametrize("opts,check", [
    (["--max-tp", "1"], lambda p, sh, st: st["tp"] <= 1),
    (["--max-tp", "2"], lambda p, sh, st: st["tp"] <= 2),
    (["--tp", "4"], lambda p, sh, st: st["tp"] == 4),
    (["--max-pp", "4"], lambda p, sh, st: len(sh["stages"]) <= 4),
    (["--pp", "8"], lambda p, sh, st: len(sh["stages"]) == 8),
    (["--micro-batch", "2"], lambda p, sh, st: _effective(p, sh, "micro_batch") == 2),
    (["--max-micro-batch", "1"], lambda p, sh, st: _effective(p, sh, "micro_batch") == 1),
    (["--zero", "0"], lambda p, sh, st: _effective(p, sh, "zero") == 0),
    (["--recompute", "full"], lambda p, sh, st: _effective(p, sh, "recompute") == "full"),
])
def test_caps_and_pins_reach_every_stage(opts, check):
    p = _plan(*opts)
    for sh in p["pipelines"]:
        for st in sh["stages"]:
            assert check(p, sh, st), (opts, sh)


def test_plan_wide_values_agree_with_the_pipelines():
    for opts in ([], ["--micro-batch", "2", "--zero", "0"]):
        p = _plan(*opts)
        for name in ("micro_batch", "zero", "recompute"):
            vals = {_effective(p, sh, name) for sh in p["pipelines"]}
            if len(vals) == 1:
                # one value everywhere: stated once, plan-wide, equal to the summary
                assert vals == {p["strategy"][name]}, (name, opts)
                assert all(name not in (sh.get("strategy") or {}) for sh in p["pipelines"])


def test_runtime_that_runs_one_group_is_refused():
    r = runner.invoke(app, ARGS + ["--runtime", "deepspeed"])
    assert r.exit_code == 2 and "--runtime" in r.stderr


def test_bad_cap_is_exit_2():
    r = runner.invoke(app, ARGS + ["--max-tp", "0"])
    assert r.exit_code == 2 and "--max-tp" in r.stderr
