"""`plan --runtime` (alias --framework) keeps to what the runtime runs: no plan it returns is refused
by that runtime's own rules (RuntimeSpec.refusal), over dense, GQA and MoE models."""

import json

import pytest
from typer.testing import CliRunner

from baige_plan.specs import runtimes
from baige_plan.specs.strategy import StrategySpec

runner = CliRunner()

CASES = [
    ["gpt3-175b", "a100-sxm4-80g:64x8", "--global-batch", "1536", "--seq-len", "2048"],
    ["llama3-70b", "h100-sxm5-80g:16x8", "--global-batch", "512", "--seq-len", "8192"],
    ["mixtral-8x7b", "h100-sxm5-80g:8x8", "--global-batch", "256", "--seq-len", "4096"],
    ["llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--seq-len", "8192"],
]


def _strategy(d: dict) -> StrategySpec:
    keys = ("tp", "pp", "dp", "cp", "ep", "etp", "zero", "micro_batch", "vpp", "recompute", "sequence_parallel",
            "attention", "first_stage_layers", "last_stage_layers")
    return StrategySpec(**{k: d[k] for k in keys if k in d})


@pytest.mark.parametrize("runtime", ["megatron", "deepspeed", "torchtitan", "paddle"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_plans_keep_to_the_runtime(runtime, case):
    flag = "--framework" if runtime == "torchtitan" else "--runtime"   # the alias is kept
    r = runner.invoke(app_(), ["plan", *case, flag, runtime, "--top", "5", "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    if r.exit_code == 1:
        return
    plans = json.loads(r.stdout)["plans"]
    rt = runtimes.get(runtime)
    for p in plans:
        assert p["strategy"]["runtime"] == runtime
        assert rt.refusal(_strategy(p["strategy"])) is None, p["strategy"]


def test_default_runtime_is_megatron_and_named():
    r = runner.invoke(app_(), ["plan", *CASES[0], "--format", "json"])
    assert r.exit_code == 0, r.output
    p = json.loads(r.stdout)["plans"][0]["strategy"]
    assert p["runtime"] == "megatron" and p["zero"] in (0, 1)


@pytest.mark.parametrize("runtime,pin,why", [
    ("megatron", ["--zero", "2"], "ZeRO stages [0, 1, 3]"),
    ("deepspeed", ["--vpp", "2"], "interleaved"),
    ("deepspeed", ["--pp", "4", "--zero", "2"], "with pipeline parallelism"),
    ("torchtitan", ["--zero", "1"], "ZeRO stages [0, 2, 3]"),
    ("deepspeed", ["--precision", "fp8"], "fp8"),
])
def test_pins_the_runtime_cannot_run_are_refused(runtime, pin, why):
    r = runner.invoke(app_(), ["plan", *CASES[0], "--runtime", runtime, *pin])
    assert r.exit_code == 2 and why in r.stderr, r.output


def test_mixed_cluster_needs_a_heterogeneous_runtime():
    r = runner.invoke(app_(), ["plan", "llama3-8b", "a100-sxm4-80g:2x8+ascend-910b:2x8", "--global-batch", "64",
                               "--runtime", "megatron"])
    assert r.exit_code == 2 and "flagscale" in r.stderr, r.output


def app_():
    from baige_plan.cli.app import app
    return app
