"""A heterogeneous plan is never slower than the best single-group plan the planner itself reports.

The solver re-decides each template's layer split; a split Megatron's first/last stages cannot express needs
FlagScale's heterogeneous mode, which has no context parallelism, so a single-group plan that needs cp was
lost: llama3-405b on A100 + H100 + Ascend 910B (16,384 devices) came out Ascend-only at 491,870 tokens/s while
the same output listed H100 alone at 803,431 tokens/s. The invariant below needs no reference numbers: the chosen
plan's throughput is at least every `standalone_tokens_per_s` entry of its own plan."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from baige_plan.cli.app import app


@pytest.mark.slow
def test_chosen_plan_is_at_least_the_best_group_alone():
    r = CliRunner().invoke(app, ["plan", "llama3-405b", "a100-sxm4-80g:512x8+h100-sxm5-80g:512x8+ascend-910b:1024x8",
                                 "--global-batch", "4096", "--seq-len", "8192", "--format", "json"])
    assert r.exit_code == 0, r.output
    p = json.loads(r.stdout)["plans"][0]
    assert p["tokens_per_s"] >= max(p["standalone_tokens_per_s"].values()) * (1 - 1e-6)
    # a guard, not a reference: the plan's efficiency (throughput over the groups' standalone sum) was 0.50 at 5f610b8
    # and 0.498 once the committed GEMM scales moved (fcc61c3); it is bubble-bound (issue 18), not a bound to meet
    assert p["heterogeneous_efficiency"] >= 0.45
