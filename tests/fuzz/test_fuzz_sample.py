"""A sample of the input fuzzer (tests/fuzz/fuzzlib.py; the whole of it: `make fuzz`): a few hundred
malformed and hostile inputs through every command, each held to the CLI contract -- exit 0/1/2 (3 for
`check`), never an internal error, no traceback, one error line, no hang, and the same verdict on a file as
`validate`'s. Deterministic (seed 0, cases 0..N-1). The README's test command runs the first 40 cases (every
family twice); the 400-case sample is marked slow (`pytest -m slow`, run by .ci/run)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuzzlib  # noqa: E402

SAMPLE = int(os.environ.get("BAIGE_FUZZ_SAMPLE", "400"))
QUICK = 2 * len(fuzzlib.FAMILIES)          # every family twice


def _run_sample(tmp_path_factory, n: int):
    root = tmp_path_factory.mktemp("fuzz")
    fixtures = fuzzlib.make_fixtures(root / "fixtures")
    cases = fuzzlib.generate(0, n, fixtures)
    results, validated = fuzzlib.run_all(cases, workers=max(1, min(2, os.cpu_count() or 2)), root=root)
    return cases, results, validated


@pytest.fixture(scope="module")
def fuzz_results(tmp_path_factory):
    return _run_sample(tmp_path_factory, QUICK)


@pytest.fixture(scope="module")
def fuzz_results_big(tmp_path_factory):
    return _run_sample(tmp_path_factory, SAMPLE)


def _keeps_contract(cases, results, validated):
    summary, bad = fuzzlib.report(results, validated)
    print(summary)
    assert len(results) == len(cases)
    assert not bad, summary + "\n" + "\n".join(fuzzlib.describe(r, v) for r, v in bad[:30])


def test_quick_sample_keeps_the_cli_contract(fuzz_results):
    _keeps_contract(*fuzz_results)


@pytest.mark.slow
def test_sample_keeps_the_cli_contract(fuzz_results_big):
    _keeps_contract(*fuzz_results_big)


def test_sample_covers_every_family_and_outcome(fuzz_results, tmp_path):
    cases, results, _ = fuzz_results
    fams = {c.family.split("-")[0] for c in cases}
    assert {"model", "chip", "topology", "hf", "runs", "plan", "profile", "text", "garbage", "special", "cli",
            "catalog", "raw", "cmd", "badnum"} <= fams
    # every command of `baige-plan --help` is run (issue 19: fuzz every command)
    from typer.main import get_command

    from baige_plan.cli.app import app
    assert set(get_command(app).commands) <= {c.command for c in
                                               fuzzlib.generate(0, 400, _fixtures_for_generation(tmp_path))}
    codes = {r.code for r in results}
    assert {0, 1, 2} <= codes          # valid, infeasible and bad inputs all occur


def test_generation_is_deterministic(tmp_path):
    fx = {n: Path(__file__) for n in ("plan.yaml", "plan-moe.json", "plan-hetero.yaml", "profile.yaml")}
    # only the repo's own files are parsed here; fixture files are read by the plan/profile families
    a = [(c.args, c.files, c.env) for c in fuzzlib.generate(7, 40, _fixtures_for_generation(tmp_path))]
    b = [(c.args, c.files, c.env) for c in fuzzlib.generate(7, 40, _fixtures_for_generation(tmp_path))]
    assert a == b and fx


def _fixtures_for_generation(tmp_path: Path) -> dict[str, Path]:
    """Stand-in plan and profile documents (generation only parses them)."""
    import yaml
    d = tmp_path / "fx"
    d.mkdir(exist_ok=True)
    out = {}
    for name in ("plan.yaml", "plan-moe.json", "plan-hetero.yaml", "profile.yaml"):
        p = d / name
        if not p.exists():
            p.write_text(yaml.safe_dump({"schema": "x", "name": name, "list": [1, 2.5, "z"], "nested": {"a": 1}})
                         if not name.endswith(".json") else '{"schema": "x", "a": [1, 2]}')
        out[name] = p
    return out
