"""The hostile inputs of issue 12, one by one: each is refused quickly with one line naming the file or
option, the field and the reason (exit 2), never a hang, a traceback or an internal error."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.cli.values import FLOAT_RULES, INT_RULES, check_value, number_params
from baige_plan.limits import MAX_DEVICES, MAX_GLOBAL_BATCH, MAX_INPUT_BYTES
from baige_plan.search.space import divisors

REPO = Path(__file__).resolve().parents[2]
RUN = CliRunner()
SMALL = ["llama3-8b", "a100-sxm4-80g:1x8"]


def _run(args, code=2, env=None, within=10.0):
    t = time.monotonic()
    r = RUN.invoke(app, [str(a) for a in args], env=env)
    assert time.monotonic() - t < within, args
    assert r.exception is None or isinstance(r.exception, SystemExit), (args, repr(r.exception))
    assert r.exit_code == code, (args, r.exit_code, r.output)
    assert "Traceback" not in r.output
    if code == 2:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("note:")]
        assert len(lines) == 1 and lines[0].startswith("baige-plan: "), (args, r.stderr)
        return lines[0]
    return r


def test_every_number_option_has_one_rule():
    from typer.main import get_command
    group = get_command(app)
    seen = set()
    for name, cmd in group.commands.items():
        for p in number_params(cmd):
            flag = next(o for o in p.opts if o.startswith("--"))
            assert flag in INT_RULES or flag in FLOAT_RULES, (name, flag)
            seen.add(flag)
    assert {"--tp", "--global-batch", "--time-limit", "--tolerance"} <= seen


@pytest.mark.parametrize("cmd", ["plan", "evaluate"])
@pytest.mark.parametrize("opt, value", [("--tp", "0"), ("--pp", "0"), ("--cp", "0"), ("--micro-batch", "0"),
                                        ("--tp", "-1"), ("--seq-len", "0"), ("--global-batch", "1000000000"),
                                        ("--max-memory-frac", "nan"), ("--vpp", "0"), ("--tp", "abc"),
                                        ("--tp", "99999999999999999999999")])
def test_cli_numbers_same_rule_in_every_command(cmd, opt, value):
    line = _run([cmd, *SMALL, opt, value])
    assert f"{opt}:" in line and value in line


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e7"])
def test_time_limit(value):
    line = _run(["plan", *SMALL, "--time-limit", value])
    assert "--time-limit" in line


def test_check_value_rules():
    assert check_value("--tp", 1) is None and check_value("--tp", MAX_DEVICES + 1)
    assert check_value("--global-batch", MAX_GLOBAL_BATCH) is None
    assert check_value("--max-memory-frac", 1.0) is None and check_value("--max-memory-frac", 0.0)
    assert check_value("--tolerance", 0.0) is None and check_value("--tolerance", float("nan"))


@pytest.mark.parametrize("cluster", ["a100-sxm4-80g:99999999x8", "a100-sxm4-80g:1x99999999",
                                     "a100-sxm4-80g:1x" + "9" * 5000, "+".join(["a100-sxm4-80g:1x8"] * 100)])
def test_absurd_clusters_are_refused_at_once(cluster):
    line = _run(["plan", "llama3-8b", cluster, "--global-batch", "16"], within=5)
    assert "CLUSTER" in line and "limit" in line


def test_largest_cluster_plans_in_seconds():
    _run(["plan", "llama3-8b", f"a100-sxm4-80g:{MAX_DEVICES // 8}x8", "--time-limit", "5"], code=0, within=30)


def test_usage_errors_are_one_line_and_help_is_intact():
    assert "No such option: --bogus" in _run(["plan", *SMALL, "--bogus"])
    assert "Missing argument" in _run(["plan", "llama3-8b"])
    assert "No such command" in _run(["nosuchcommand"])
    r = _run(["plan", "--help"], code=0)
    assert "Usage" in r.output and "--global-batch" in r.output


def test_catalog_environment_must_name_folders(tmp_path):
    line = _run(["explain", "x.yaml"], env={"BAIGE_PLAN_CATALOG": "/nonexistent"})
    assert "BAIGE_PLAN_CATALOG" in line and "/nonexistent" in line
    line = _run(["plan", *SMALL, "--catalog", str(tmp_path / "nope")])
    assert "--catalog" in line


def _model(tmp_path, text: str, name="m.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


LLAMA = (REPO / "models/llama3-8b.yaml").read_text()


@pytest.mark.parametrize("edit, words", [
    (("layers: 32", "layers: 1000000000000000000000000000000"), "out of range"),
    (("layers: 32", "layers: 1e30"), "layers"),
    (("layers: 32", "layers: 20000"), "limit of 10,000"),
    (("layers: 32", "layers: .nan"), "finite"),
    (("hidden: 4096", "hidden: .inf"), "finite"),
    (("layers: 32", "layers: 32\nlayers: 33"), "duplicate key"),
    (("layers: 32", "layers: 32\n? [a, b]\n: 1"), "complex mapping key"),
    (("layers: 32", "layers: !!binary aGVsbG8="), "!!binary"),
    (("layers: 32", "layers: &a [*a]"), "recursive alias"),
    (("layers: 32", "layers: " + "[" * 80 + "]" * 80), "nested deeper"),
])
def test_hostile_model_files(tmp_path, edit, words):
    p = _model(tmp_path, LLAMA.replace(*edit, 1))
    for args in (["validate", p], ["plan", p, "a100-sxm4-80g:1x8", "--global-batch", "16"]):
        line = _run(args)
        assert str(p) in line and words in line, line


def test_yaml_bomb_is_refused_by_validate_and_plan(tmp_path):
    bomb = "lol: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"l{i}: &a{i} [{', '.join(['*a' if i == 0 else f'*a{i - 1}'] * 9)}]\n" for i in range(9))
    p = _model(tmp_path, bomb + LLAMA.split("\n", 1)[1], "bomb.yaml")
    for args in (["validate", p], ["plan", p, "a100-sxm4-80g:1x8"]):
        assert "YAML bomb" in _run(args, within=5)


def test_big_and_special_files(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (MAX_INPUT_BYTES + 10) + "\n" + LLAMA)
    assert "8 MiB" in _run(["validate", big], within=5)
    assert "is a directory" in _run(["validate", tmp_path])
    assert "not a regular file" in _run(["validate", "/dev/zero"], within=5)
    import os
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    assert "not a regular file" in _run(["plan", fifo, "a100-sxm4-80g:1x8"], within=5)


def test_hf_config_duplicate_keys_and_nan(tmp_path):
    cfg = json.loads((REPO / "tests/data/hf/llama3-8b/config.json").read_text())
    p = tmp_path / "config.json"
    text = json.dumps(cfg)
    p.write_text(text.replace('"vocab_size"', '"vocab_size": 5, "vocab_size"', 1))
    assert "duplicate key" in _run(["validate", p])
    p.write_text(json.dumps(dict(cfg, rope_theta=float("nan"))))
    line = _run(["plan", p, "a100-sxm4-80g:1x8"])
    assert "rope_theta" in line and "finite" in line


def test_dates_stay_strings_and_merge_keys_work(tmp_path):
    from baige_plan.io.yamlio import read_document
    p = _model(tmp_path, "a: 2024-01-02\nbase: &b {x: 1}\nc: {<<: *b, y: 2}\n", "d.yaml")
    assert read_document(p) == {"a": "2024-01-02", "base": {"x": 1}, "c": {"x": 1, "y": 2}}


def test_divisors_by_trial_division_to_the_square_root():
    assert divisors(1) == [1] and divisors(12) == [1, 2, 3, 4, 6, 12] and divisors(49) == [1, 7, 49]
    t = time.monotonic()
    assert len(divisors(2 ** 40)) == 41
    assert time.monotonic() - t < 2


def test_validate_and_commands_judge_a_plan_file_alike(tmp_path):
    best = tmp_path / "best.yaml"
    _run(["plan", *SMALL, "--global-batch", "16", "--out", best], code=0)
    doc = yaml.safe_load(best.read_text())
    doc["estimate"] = "garbage"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc, sort_keys=False))
    lines = {_run(args) for args in (["validate", bad], ["explain", bad], ["export", bad], ["evaluate", "--plan", bad],
                                     ["diff", bad, best], ["check", bad, "--baseline", best])}
    assert len(lines) == 1 and f"{bad}: estimate:" in lines.pop()
