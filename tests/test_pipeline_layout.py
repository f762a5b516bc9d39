"""Explicit pipeline layouts (Megatron --pipeline-model-parallel-layout; DeepSeek-V3's recipes put 4 layers on
every virtual stage and 1 with MTP and the loss on the last): chunks per stage, plan files, the Megatron export,
the runs-file and CLI forms, and runtimes without them."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.errors import SpecError
from baige_plan.exports.megatron import layout_string
from baige_plan.io.plans import _strategy
from baige_plan.io.runs import parse_layout
from baige_plan.io.serialize import strategy_dict
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.strategy import StrategySpec, chunk_layers, stage_layers

# Megatron-Bridge@7af9601c src/megatron/bridge/recipes/deepseek/deepseek_v3.py layout_map[(4, 4)]:
# [["embedding"] + ["decoder"] * 4] + [["decoder"] * 4] * 14 + [["decoder"] + ["mtp", "loss"]]
DSV3_44 = (4,) * 15 + (1,)


def _s(**kw):
    return StrategySpec(tp=1, pp=4, vpp=4, dp=64, ep=64, micro_batch=1, pipeline_layout=DSV3_44,
                        **runtimes.knobs("megatron"), **kw)


def test_chunks_are_virtual_stages_round_robin():
    # virtual stage k runs on rank k % pp as its chunk k // pp: rank 3 holds stages 3, 7, 11, 15
    assert chunk_layers(_s(), 61) == ((4, 4, 4, 4), (4, 4, 4, 4), (4, 4, 4, 4), (4, 4, 4, 1))
    assert stage_layers(_s(), 61) == (16, 16, 16, 13)
    with pytest.raises(SpecError, match="pipeline_layout"):
        chunk_layers(_s(), 62)
    with pytest.raises(SpecError, match="virtual stages"):
        StrategySpec(pp=4, vpp=2, pipeline_layout=DSV3_44)
    with pytest.raises(SpecError, match="cannot be combined"):
        StrategySpec(pp=4, vpp=4, pipeline_layout=DSV3_44, first_stage_layers=4)


def test_megatron_layout_string_round_trip():
    text = "Et*4|(t*4|)*14tmL"
    assert parse_layout(text) == DSV3_44
    assert parse_layout(layout_string(list(DSV3_44), mtp=1)) == DSV3_44
    assert layout_string([2, 1], mtp=0) == "Et*2|tL"
    with pytest.raises(ValueError):
        parse_layout("Et*4|x")


def test_plan_file_keeps_the_layout():
    s = _s()
    d = strategy_dict(s, 4096)
    assert d["pipeline_layout"] == list(DSV3_44)
    assert _strategy(d).pipeline_layout == DSV3_44


def test_runtimes_without_layouts_refuse_them():
    job = JobSpec(global_batch=4096, seq_len=4096)
    # vpp 1 (DeepSpeed runs no interleaving): Megatron-Bridge's (16, 1) layout, 4 layers a stage and 1 on the last
    s = StrategySpec(tp=1, pp=16, vpp=1, dp=16, zero=0, micro_batch=1, pipeline_layout=(4,) * 15 + (1,),
                     **runtimes.knobs("deepspeed"))
    assert "pipeline layout" in runtimes.get("deepspeed").refusal(s, None, job)


def test_evaluate_takes_the_layout_and_costs_the_stages_it_builds():
    base = ["evaluate", "deepseek-v3", "gb200:4x64", "--global-batch", "4096", "--seq-len", "4096", "--tp", "1",
            "--pp", "4", "--ep", "64", "--dp", "64", "--micro-batch", "1", "--precision", "fp8", "--recompute", "full",
            "--format", "json"]
    runner = CliRunner()
    r = runner.invoke(app, base + ["--vpp", "4", "--pipeline-layout", "Et*4|(t*4|)*14tmL"])
    assert r.exit_code == 0, r.output
    import json
    d = json.loads(r.stdout)
    assert [st["layers"] for st in d["stages"]] == [[0, 16], [16, 32], [32, 48], [48, 61]]
    # the same stage totals without interleaving (first 16 / last 13): the layout's bubble is a quarter of it
    r1 = runner.invoke(app, base + ["--first-stage-layers", "16", "--last-stage-layers", "13"])
    d1 = json.loads(r1.stdout)
    assert d["breakdown_s"]["pp_bubble"] < 0.3 * d1["breakdown_s"]["pp_bubble"]
    r2 = runner.invoke(app, base + ["--vpp", "4", "--pipeline-layout", "E|x"])
    assert r2.exit_code == 2 and "--pipeline-layout" in r2.stderr


def test_unstated_deepseek_layout_is_the_recipes():
    from baige_plan.io.runs import recipe_layout
    # NVIDIA-NeMo/Megatron-Bridge@7af9601c recipes/deepseek/deepseek_v3.py layout_map, transcribed (decoder layers of
    # each virtual stage; the MTP and loss entries carry no transformer layer)
    layout_map = {(4, 4): [4] * 15 + [1], (8, 2): [4] * 15 + [1], (16, 1): [4] * 15 + [1],
                  (4, 2): [8] * 7 + [5], (8, 1): [8] * 7 + [5]}
    for (pp, vp), want in layout_map.items():
        assert list(recipe_layout(61, pp, vp)) == want


def test_a_deepseek_row_without_a_layout_gets_the_recipes(tmp_path):
    import yaml

    from baige_plan.io.catalog import Catalog
    from baige_plan.io.runs import load_runs
    src = Path(__file__).resolve().parents[1] / "benchmarks" / "corpus" / "mbridge_perf_2511.yaml"
    rows = yaml.safe_load(src.read_text())["rows"]
    row = next(r for r in rows if r["id"] == "mbridge_perf_2511_deepseek_v3_gb200_256gpu_bf16")
    del row["parallel"]["pipeline_layout"]
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump({"schema_version": 1, "rows": [row]}))
    (case,) = load_runs(p, Catalog.create([]))
    assert case.strategy.pipeline_layout == DSV3_44
    assert any("pipeline layout unstated" in n for n in case.assumptions)
