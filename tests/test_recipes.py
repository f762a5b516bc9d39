"""Flagship Megatron-Bridge recipes whose layer count does not divide pp·vpp (issue 11, item 1).

Published parallelism (NVIDIA-NeMo/Megatron-Bridge, src/megatron/bridge/perf_recipes/):
- Llama 3.1 405B, llama/h100/llama31.py llama31_405b_pretrain_1024gpu_h100_bf16_config: 1024 H100, tp 8, pp 8,
  vpp 8, cp 2, SP, micro-batch 1, global batch 1536, seq 8192, no recompute; on top of
  recipes/llama/h100/llama3.py llama31_405b_pretrain_256gpu_h100_bf16_config, which sets
  account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split (126 layers); the perf recipe sets
  ddp grad_reduce_in_fp32=False (bf16 main grads: Megatron --grad-reduce-in-bf16).
- Qwen3-235B-A22B, qwen/h100/qwen3_moe.py qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config: 256 H100, tp 2, pp 8,
  vpp 4, cp 1, ep 32, etp 1, SP, micro-batch 1, global batch 8192, seq 4096, no recompute; on top of
  recipes/qwen/h100/qwen3_moe.py qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config (account_for_embedding/loss;
  94 layers).
Megatron-core 0.19.2's rule (core/transformer/transformer_block.py get_num_layers_to_build): with the embedding
and the loss counted as layers, each of the pp stages holds (layers + 2) / pp, split into vpp equal chunks; the
first chunk of the first stage and the last chunk of the last stage build one transformer layer fewer.
"""

from __future__ import annotations

import json
import shlex

import pytest
import yaml
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.cost.estimate import estimate
from baige_plan.exports import megatron
from baige_plan.io.catalog import Catalog
from baige_plan.io.plans import dumps, plan_doc
from baige_plan.search.placement import placement
from baige_plan.search.solver import SearchResult
from baige_plan.search.space import from_strategy, split_family, uneven_splits
from baige_plan.specs.job import JobSpec
from baige_plan.specs.strategy import StrategySpec, chunk_layers, split_fields, stage_layers

runner = CliRunner()

RECIPES = {
    "llama31-405b": dict(model="llama3-405b", cluster="h100-sxm5-80g:128x8", global_batch=1536, seq=8192,
                         tp=8, pp=8, cp=2, vpp=8, ep=1, etp=1, micro_batch=1, recompute="none", grad_bf16=True),
    "qwen3-235b-a22b": dict(model="qwen3-235b-a22b", cluster="h100-sxm5-80g:32x8", global_batch=8192, seq=4096,
                            tp=2, pp=8, cp=1, vpp=4, ep=32, etp=1, micro_batch=1, recompute="none"),
}
LAYERS = {"llama31-405b": 126, "qwen3-235b-a22b": 94}


def megatron_rule(layers: int, pp: int, vpp: int) -> list[list[int]]:
    """Layers per chunk per stage with embedding and loss counted as layers, computed by hand."""
    per = (layers + 2) // pp
    assert (layers + 2) % pp == 0 and per % vpp == 0
    out = [[per // vpp] * vpp for _ in range(pp)]
    out[0][0] -= 1
    out[-1][-1] -= 1
    return out


def _args(name: str) -> list[str]:
    r = RECIPES[name]
    return [r["model"], r["cluster"], "--global-batch", str(r["global_batch"]), "--seq-len", str(r["seq"]),
            "--tp", str(r["tp"]), "--pp", str(r["pp"]), "--cp", str(r["cp"]), "--vpp", str(r["vpp"]),
            "--ep", str(r["ep"]), "--etp", str(r["etp"]), "--micro-batch", str(r["micro_batch"]),
            "--recompute", r["recompute"], "--account-for-embedding", "--account-for-loss"] + \
        (["--grad-reduce-in-bf16"] if r.get("grad_bf16") else [])


def _evaluate(name: str):
    # the recipes ran on these devices: the fit question is against the whole device (--max-memory-frac 1)
    r = runner.invoke(app, ["evaluate", *_args(name), "--max-memory-frac", "1", "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.stdout)


def test_hand_rule():
    assert megatron_rule(126, 8, 8) == [[1] + [2] * 7] + [[2] * 8] * 6 + [[2] * 7 + [1]]
    assert [sum(c) for c in megatron_rule(126, 8, 8)] == [15] + [16] * 6 + [15]
    assert [sum(c) for c in megatron_rule(94, 8, 4)] == [11] + [12] * 6 + [11]


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_stage_counts_are_megatrons(name):
    r = RECIPES[name]
    code, d = _evaluate(name)
    want = megatron_rule(LAYERS[name], r["pp"], r["vpp"])
    assert [s["layers"][1] - s["layers"][0] for s in d["stages"]] == [sum(c) for c in want]
    assert d["strategy"]["account_for_embedding"] is True and d["strategy"]["account_for_loss"] is True
    assert d["strategy"]["vpp"] == r["vpp"] and "first_stage_layers" not in d["strategy"]
    s = StrategySpec(pp=r["pp"], vpp=r["vpp"], account_for_embedding=True, account_for_loss=True)
    assert [list(c) for c in chunk_layers(s, LAYERS[name])] == want
    # the even split and first/last counts cannot build these models on pp·vpp
    with pytest.raises(Exception, match="not divisible"):
        stage_layers(StrategySpec(pp=r["pp"], vpp=r["vpp"]), LAYERS[name])
    first = want[0] and sum(want[0])
    with pytest.raises(Exception, match="not divisible by vpp"):
        stage_layers(StrategySpec(pp=r["pp"], vpp=r["vpp"], first_stage_layers=first, last_stage_layers=first),
                     LAYERS[name])


@pytest.mark.parametrize("name", [
    "llama31-405b", "qwen3-235b-a22b"])
def test_recipe_fits_its_published_cluster(name):
    code, d = _evaluate(name)
    assert code == 0 and d["fits"], (d["peak_memory_gib"], d["memory_gib"])


def _plan_doc(name: str) -> dict:
    """The recipe as a plan document (built from its estimate, fitting or not), as `plan --out` writes it."""
    r = RECIPES[name]
    cat = Catalog.create()
    m = cat.model(r["model"])
    cl, _ = cat.cluster(r["cluster"])
    job = JobSpec(r["global_batch"], r["seq"])
    dp = cl.devices // (r["tp"] * r["pp"] * r["cp"])
    s = StrategySpec(tp=r["tp"], pp=r["pp"], dp=dp, cp=r["cp"], ep=r["ep"], etp=r["etp"], vpp=r["vpp"],
                     micro_batch=r["micro_batch"], recompute=r["recompute"], account_for_embedding=True,
                     account_for_loss=True, grad_reduce_bf16=bool(r.get("grad_bf16")))
    e = estimate(m, cl, job, s)
    res = SearchResult(plans=(e,), keys=(from_strategy(s),), candidates=1, feasible=int(e.fits), evaluated=1,
                       seconds=0.0, status="OPTIMAL", gap=0.0, binding="")
    g = cl.groups[0]
    slots = placement(s.tp, s.cp, s.dp, s.pp, g.name, g.devices_per_node)
    return yaml.safe_load(dumps(plan_doc(m, cl, job, e, res, {g.name: {"id": g.chip.id}}, 1.0, [], slots), "yaml"))


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_megatron_export_has_the_split_flags(name):
    r = RECIPES[name]
    doc = _plan_doc(name)
    ex = megatron.export(doc)
    assert ex.caveats == ()
    words = [w for ln in ex.files[0].text.splitlines() if not ln.startswith("#") for w in shlex.split(ln)]
    a = {w: (words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else None)
         for i, w in enumerate(words) if w.startswith("--")}
    assert a["--num-virtual-stages-per-pipeline-rank"] == str(r["vpp"])
    assert "--account-for-embedding-in-pipeline-split" in a and "--account-for-loss-in-pipeline-split" in a
    assert ("--grad-reduce-in-bf16" in a) == bool(RECIPES[name].get("grad_bf16"))
    for flag in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
                 "--pipeline-model-parallel-layout", "--num-layers-per-virtual-pipeline-stage"):
        assert flag not in a
    assert (a["--tensor-model-parallel-size"], a["--pipeline-model-parallel-size"], a["--context-parallel-size"]) \
        == (str(r["tp"]), str(r["pp"]), str(r["cp"]))
    assert a["--num-layers"] == str(LAYERS[name])
    assert a["--global-batch-size"] == str(r["global_batch"]) and a["--micro-batch-size"] == "1"
    assert "--recompute-granularity" not in a and "--sequence-parallel" in a
    if r["ep"] > 1:
        assert a["--expert-model-parallel-size"] == "32" and a["--expert-tensor-parallel-size"] == "1"


def test_qwen_recipe_plan_file_roundtrip(tmp_path):
    """plan (every dimension pinned but the split) finds the accounting split, writes it, and explain,
    evaluate --plan and export read it back."""
    out = tmp_path / "plan.yaml"
    args = [a for a in _args("qwen3-235b-a22b") if not a.startswith("--account")]
    r = runner.invoke(app, ["plan", *args, "--max-memory-frac", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(out.read_text())
    assert doc["strategy"]["account_for_embedding"] is True and doc["strategy"]["account_for_loss"] is True
    counts = [st["layers"][1] - st["layers"][0] for st in doc["pipelines"][0]["stages"]]
    assert counts == [11] + [12] * 6 + [11]
    r = runner.invoke(app, ["explain", str(out)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "0-11 (11: 2+3x3)" in r.stdout and "83-94 (11: 3x3+2)" in r.stdout
    assert "embedding counted as a pipeline layer" in r.stdout
    r = runner.invoke(app, ["evaluate", "--plan", str(out), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["strategy"] == doc["estimate"]["strategy"]
    r = runner.invoke(app, ["export", str(out), "--to", "megatron"])
    assert r.exit_code == 0, r.output
    assert "--account-for-embedding-in-pipeline-split" in r.stdout and "--account-for-loss-in-pipeline-split" in r.stdout


def test_default_plans_are_unchanged_by_the_new_keys(tmp_path):
    """Even splits write no new strategy keys (plan files of today stay byte-identical)."""
    r = runner.invoke(app, ["evaluate", "llama3-8b", "h100-sxm5-80g:1x8", "--tp", "2", "--pp", "2", "--vpp", "2",
                            "--global-batch", "64", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert not {"account_for_embedding", "account_for_loss"} & set(json.loads(r.stdout)["strategy"])


def test_search_space_holds_uneven_interleaved_splits():
    # 126 layers, pp 8: vpp 1 first/last as before; vpp 8 only through the accounting flags
    fam = split_family(126, 8, "megatron")
    assert (8, 0, 0, 3) in fam and (1, 15, 15, 0) in fam and (1, 0, 0, 3) not in fam   # same counts as 15/15
    assert all(v == 1 or f == la == 0 or (f % v == 0 and la % v == 0) for v, f, la, _ in fam)
    # 94 layers, pp 8, vpp 4: (94 + 2) / 8 = 12 per stage
    assert (4, 0, 0, 3) in split_family(94, 8, "megatron")
    # runtimes that do not declare them keep the old space: no accounting, first/last only with vpp 1
    for rt in ("torchtitan", "paddle", "flagscale", "deepspeed"):
        assert all(acc == 0 and (v == 1 or f == la == 0) for v, f, la, acc in split_family(126, 8, rt))
    # first/last with vpp: 126 = 14 + 7 x 16 on vpp 2
    assert (0, 14, 0) in uneven_splits(126, 8, 2)
    assert split_fields([14] + [16] * 7, 2) == {"first_stage_layers": 14, "last_stage_layers": None,
                                               "account_for_embedding": False, "account_for_loss": False}


def test_evaluate_refuses_what_megatron_refuses():
    base = ["evaluate", "llama3-405b", "h100-sxm5-80g:64x8", "--tp", "8", "--pp", "8", "--global-batch", "512"]
    r = runner.invoke(app, [*base, "--vpp", "2", "--first-stage-layers", "15", "--last-stage-layers", "15"])
    assert r.exit_code == 2 and "not divisible by vpp=2" in r.output
    r = runner.invoke(app, [*base, "--first-stage-layers", "15", "--account-for-loss"])
    assert r.exit_code == 2 and "cannot be combined" in r.output
    r = runner.invoke(app, [*base, "--account-for-loss"])   # 127 is not divisible by 8
    assert r.exit_code == 2 and "not divisible by pp=8" in r.output
    r = runner.invoke(app, [*base, "--vpp", "2", "--first-stage-layers", "14", "--runtime", "torchtitan"])
    assert r.exit_code == 2


@pytest.mark.parametrize("pins", [{}, {"account_for_loss": True}, {"first_stage_layers": 2}])
def test_search_equals_oracle_on_uneven_interleaved_splits(pins):
    """7 layers (prime): every pp > 1 needs an uneven split; the exhaustive oracle (search/oracle.py) and the
    search agree on the space and the ranking, pinned splits included."""
    from baige_plan.search.oracle import oracle, oracle_space
    from baige_plan.search.solver import search
    from baige_plan.search.space import Bounds, Pins, enumerate_space
    from baige_plan.specs.model import ModelSpec
    from baige_plan.specs.topology import ClusterSpec, GroupSpec

    model = ModelSpec(name="p7", layers=7, hidden=4096, heads=32, ffn_hidden=16384, vocab=32000, seq_len=2048)
    cl = ClusterSpec(name="t", groups=(GroupSpec(name="g", chip=Catalog.create().chip("a100-sxm4-80g"), nodes=1,
                                                 devices_per_node=4),))
    job, bounds, p = JobSpec(16, 2048), Bounds(max_micro_batch=2), Pins(**pins)
    fast = sorted(enumerate_space(model, 4, 4, job, bounds, p))
    slow = sorted(from_strategy(s) for s in oracle_space(model, cl, job, bounds, p))
    assert fast == slow and len(fast) > 10
    if "first_stage_layers" in pins:      # 7 = 2 + 5 on pp 2 only (5 does not interleave)
        assert {(c[1], c[8], c[11], c[12], c[14]) for c in fast} == {(2, 1, 2, 0, 0)}
    else:                                 # uneven splits with vpp > 1: 7 + 1 = 8 = 2 x 4 on pp 2, vpp 2 and 4
        assert any(c[8] > 1 and (c[11] or c[12] or c[14]) for c in fast)
    want = oracle(model, cl, job, bounds, p, top=5)
    got = search(model, cl, job, bounds, p, top=5)
    assert [k for _, k, _ in want] == list(got.keys)
