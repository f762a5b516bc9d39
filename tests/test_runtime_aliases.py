"""`--runtime` / `--framework` and a runs file's `parallel.runtime` take the framework names users and published
runs give (nemo, megatron-lm, llm-foundry, ...) and cost them with the runtime that executes them
(specs/runtimes ALIASES); unknown names and plans for backtest-only runtimes are one-line usage errors (exit 2)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.errors import InputError, SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import load_runs, runtime_of
from baige_plan.specs import runtimes

runner = CliRunner()
EVAL = ["evaluate", "llama3-8b", "h100-sxm5-80g:1x8", "--global-batch", "64", "--seq-len", "4096", "--tp", "1",
        "--dp", "8", "--zero", "1", "--recompute", "full", "--format", "json"]


def test_every_alias_names_a_runtime_and_no_runtime_name():
    for alias, (rt, why) in runtimes.ALIASES.items():
        assert rt in runtimes.NAMES + runtimes.BACKTEST_ONLY, alias
        assert alias not in runtimes.NAMES + runtimes.BACKTEST_ONLY and why


@pytest.mark.parametrize("alias", ["nemo", "megatron-lm", "megatron-bridge", "megatron-deepspeed", "llm-foundry",
                                   "fms-fsdp", "paddleformers", "nemo-automodel"])
def test_alias_agrees_with_the_runs_loader_reading_of_the_same_framework_text(alias):
    # the runs loader infers a run's runtime from its framework text (io/runs.py runtime_of): the name given on the
    # command line must cost it the same way
    assert runtimes.canonical(alias) == runtime_of(alias, None)


def test_canonical_reads_case_and_underscores():
    assert runtimes.canonical("Megatron_LM") == "megatron"
    assert runtimes.canonical(" NeMo ") == "megatron"
    assert runtimes.canonical("torchtitan") == "torchtitan"
    with pytest.raises(SpecError, match="unknown runtime 'maxtext'"):
        runtimes.canonical("maxtext")


def test_evaluate_with_a_framework_name_costs_as_its_runtime_and_says_so():
    a = runner.invoke(app, EVAL + ["--runtime", "nemo"])
    b = runner.invoke(app, EVAL + ["--runtime", "megatron"])
    assert a.exit_code == 0 and b.exit_code == 0, a.output
    da, db = json.loads(a.stdout), json.loads(b.stdout)
    assert da["strategy"]["runtime"] == "megatron"
    assert da["step_time_s"] == db["step_time_s"]
    assert "--runtime nemo: costed as megatron" in a.stderr


def test_unknown_runtime_is_one_line_exit_2():
    r = runner.invoke(app, EVAL + ["--framework", "maxtext"])
    assert r.exit_code == 2
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "unknown runtime 'maxtext'" in lines[0] and "Traceback" not in r.output


def test_plan_refuses_a_backtest_only_runtime():
    r = runner.invoke(app, ["plan", "llama3-8b", "h100-sxm5-80g:1x8", "--global-batch", "64", "--seq-len", "4096",
                            "--framework", "nemo-automodel"])
    assert r.exit_code == 2
    assert "automodel is costed by evaluate and backtest only" in r.stderr


def _runs_file(tmp_path, runtime: str):
    p = tmp_path / "runs.yaml"
    p.write_text(f"""schema_version: 1
rows:
- id: r1
  model: {{name: m, type: dense, layers: 32, hidden: 4096, heads: 32, kv_heads: 8, ffn_hidden: 14336, vocab: 128256,
          seq_len: 4096, activation: swiglu}}
  hardware: {{gpu_model: NVIDIA H100 SXM5 80GB, num_gpus: 8, gpus_per_node: 8}}
  parallel: {{tp: 1, pp: 1, dp: 8, micro_batch: 1, global_batch_seqs: 64, recompute: none, precision: bf16,
             zero: 1, runtime: {runtime}}}
  results: {{step_time_s: 3.0}}
""")
    return p


def test_runs_file_runtime_takes_a_framework_name(tmp_path):
    (case,) = load_runs(_runs_file(tmp_path, "Megatron-Bridge"), Catalog.create([]))
    assert case.strategy.runtime == "megatron"
    with pytest.raises(InputError, match="parallel.runtime"):
        load_runs(_runs_file(tmp_path, "maxtext"), Catalog.create([]))
