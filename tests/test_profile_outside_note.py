"""`plan --profile`: when the chosen plan runs where the group's profile does not apply, the planner says so and by
how much the profile and the analytical layer differ at the nearest measured point (2026-11-29: with Sailor's A100
profile, measured at cp 1 and 1.30x slower than the analytical TF32 layer, the homogeneous search chose cp 2,
costed analytically, without a word)."""

from typer.testing import CliRunner

from baige_plan.cli.app import app

runner = CliRunner()
PROFILE = "benchmarks/profiles/opt-350m.a100-sxm4-40g.fp32.sailor-alltp.yaml"
ARGS = ["plan", "opt-350m", "a100-sxm4-40g:32x4", "--precision", "fp32", "--global-batch", "1024", "--seq-len", "2048",
        "--attention", "standard", "--recompute", "none", "--profile", PROFILE]


def test_a_plan_outside_its_profile_is_named_with_the_measured_gap():
    r = runner.invoke(app, ARGS)
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stderr.splitlines() if "outside profile" in x)
    assert "cp 2 (measured at cp 1)" in line and "analytical" in line
    # Sailor's measured A100 layer at tp 1, micro-batch 2 over the analytical TF32 layer: between the 1.33x at
    # micro-batch 1 and 1.29x at micro-batch 4 that benchmarks/sailor/RESULTS.md derives from the same profile
    ratio = float(line.split("takes ")[1].split("x the analytical")[0])
    assert 1.2 < ratio < 1.4


def test_a_plan_inside_its_profile_gets_no_such_note():
    import json

    r = runner.invoke(app, ARGS + ["--cp", "1", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert "outside profile" not in r.stderr
    assert json.loads(r.stdout)["plans"][0]["sources"]["compute"].startswith("measured:")
