"""`plan --framework` restricts the search to what the framework can run."""

import json

import pytest
from typer.testing import CliRunner

from baige_plan.cli.app import app

runner = CliRunner()


@pytest.mark.parametrize("framework,allowed", [("megatron", {0, 1}), ("torchtitan", {0, 3})])
def test_framework_limits_zero_stages(framework, allowed):
    r = runner.invoke(app, ["plan", "gpt3-175b", "a100-sxm4-80g:64x8", "--global-batch", "1536", "--seq-len", "2048",
                            "--framework", framework, "--top", "5", "--format", "json"])
    assert r.exit_code == 0, r.output
    plans = json.loads(r.stdout)["plans"]
    assert plans and {p["strategy"]["zero"] for p in plans} <= allowed
