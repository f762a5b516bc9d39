"""The published-recipe index and the nearest recipe (issue 16 item 5, io/recipes.py), on hand-made indexes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.errors import InputError
from baige_plan.io.catalog import Catalog
from baige_plan.io.recipes import (
    COLUMNS,
    RECIPES_SCHEMA,
    adapt,
    candidates,
    layouts,
    load_recipes,
    nearest,
    parse_recipes,
    shipped_recipes_path,
)
from baige_plan.specs.job import JobSpec

ROOT = Path(__file__).resolve().parents[1]
CAT = Catalog.create()
LLAMA8 = CAT.model("llama3-8b")            # shape (32, 4096, 32, 8, 14336, 128256), 8,030,519,296 parameters
H100_16 = CAT.cluster("h100-sxm5-80g:2x8")[0]
LLAMA8_SHAPE = [32, 4096, 32, 8, 14336, 128256, 0, 0, 0]


def row(rid: str, shape=None, params=8030519296, chip="h100-sxm5-80g", family="nvidia", gpus=64, tp=1, pp=1, cp=1,
        mb=1, vpp=1, zero=1, recompute="selective", precision="bf16", runtime="megatron", step=1.0) -> list:
    vals = {"id": rid, "source": "src", "model": rid, **dict(zip(COLUMNS[3:12], shape or LLAMA8_SHAPE, strict=True)),
            "params": params, "chip": chip, "family": family, "gpus": gpus, "gpus_per_node": 8, "tp": tp, "pp": pp,
            "cp": cp, "ep": 1, "etp": 1, "vpp": vpp, "micro_batch": mb, "zero": zero, "recompute": recompute,
            "sequence_parallel": tp > 1, "first_stage_layers": None, "last_stage_layers": None,
            "account_for_embedding": False, "account_for_loss": False, "pipeline_layout": None,
            "recompute_modules": "", "tp_pp_dp_mapping": False, "fsdp_shard": 0, "moe_dispatcher": "",
            "moe_a2a_overlap": False, "precision": precision, "seq_len": 8192,
            "global_batch": 512, "runtime": runtime, "measured_step_time_s": step}
    return [vals[k] for k in COLUMNS]


def index(*rows) -> tuple:
    return parse_recipes({"schema": RECIPES_SCHEMA, "sources": {"src": "https://example.org/src"},
                          "columns": list(COLUMNS), "rows": list(rows)}, "hand.yaml")


# another model: 2 layers fewer than llama3-8b (another shape), 1.1x its parameters (within 2x)
OTHER = [30, 4096, 32, 8, 14336, 128256, 0, 0, 0]


def test_exact_shape_beats_a_closer_gpu_count_of_another_model():
    """The llama3-8b recipe ran on 64 GPUs, the other model's on exactly 16: the shape decides first. Adapted to
    16 devices: tp 2, pp 1, cp 1 kept, dp = 16 / (2·1·1) = 8; micro-batch, recompute and ZeRO kept."""
    idx = index(row("other16", shape=OTHER, params=8833571226, gpus=16, tp=4),
                row("exact64", gpus=64, tp=2, mb=2, recompute="full", zero=0))
    assert [r.id for r in candidates(idx, LLAMA8, "h100-sxm5-80g", "nvidia", 16)] == ["exact64", "other16"]
    job = JobSpec(128, 8192, "bf16")
    p = nearest(idx, LLAMA8, H100_16, job, "megatron", 0.9)
    s = p.strategy
    assert p.recipe.id == "exact64"
    assert (s.tp, s.pp, s.cp, s.dp, s.micro_batch, s.recompute, s.zero) == (2, 1, 1, 8, 2, "full", 0)
    assert p.recipe.url == "https://example.org/src" and p.estimate.devices == 16


def test_skip_when_the_batch_does_not_split():
    """Global batch 8 over dp 8 x micro-batch 2 = 16 does not split: exact64 is skipped, and the other model's
    recipe (tp 4: dp 4, micro-batch 1, 8 % 4 == 0) is taken."""
    idx = index(row("other16", shape=OTHER, params=8833571226, gpus=16, tp=4),
                row("exact64", gpus=64, tp=2, mb=2))
    job = JobSpec(8, 8192, "bf16")
    assert adapt(idx[1], LLAMA8, 16, job, "megatron") is None
    p = nearest(idx, LLAMA8, H100_16, job, "megatron", 0.9)
    assert p.recipe.id == "other16" and (p.strategy.tp, p.strategy.dp) == (4, 4)


def test_skip_when_the_devices_do_not_divide():
    idx = index(row("tp3", tp=1, pp=3))      # 16 % 3 != 0
    assert adapt(idx[0], LLAMA8, 16, JobSpec(128, 8192, "bf16"), "megatron") is None
    assert nearest(idx, LLAMA8, H100_16, JobSpec(128, 8192, "bf16"), "megatron", 0.9) is None


def test_chip_then_runtime_then_gpus_then_precision():
    idx = index(row("a100", chip="a100-sxm4-80g", gpus=16), row("h100-far", gpus=256), row("h100-near", gpus=32),
                row("h100-half", gpus=8), row("h100-fp8", gpus=32, precision="fp8"),
                row("h100-titan", gpus=16, runtime="torchtitan", zero=3))
    ids = [r.id for r in candidates(idx, LLAMA8, "h100-sxm5-80g", "nvidia", 16, "bf16", "megatron")]
    # 8 and 32 GPUs are 2x from 16: the smaller first; then fp8 after bf16 at 32; another runtime after ours
    assert ids == ["h100-half", "h100-near", "h100-fp8", "h100-far", "h100-titan", "a100"]


def test_none_near():
    """Another chip family, or a model beyond 2x the parameters: not near."""
    idx = index(row("mi300x", chip="mi300x", family="amd", gpus=16),
                row("big", shape=[80, 8192, 64, 8, 28672, 128256, 0, 0, 0], params=70555009024, gpus=16))
    assert candidates(idx, LLAMA8, "h100-sxm5-80g", "nvidia", 16) == []
    assert nearest(idx, LLAMA8, H100_16, JobSpec(128, 8192, "bf16"), "megatron", 0.9) is None


def test_moe_and_dense_are_not_near_each_other():
    """An MoE model of another shape within 2x the parameters is not near a dense one (nor the reverse): a dense
    run's layout says nothing about expert parallelism. The exact shape stays near whatever it is."""
    moe_shape = [16, 4096, 32, 8, 14336, 128256, 8, 2, 14336]     # 16 layers of 8 experts top-2: ~1.9x llama3-8b
    idx = index(row("moe", shape=moe_shape, params=15_000_000_000, gpus=16), row("dense", shape=OTHER,
                                                                                params=8833571226, gpus=16))
    assert [r.id for r in candidates(idx, LLAMA8, "h100-sxm5-80g", "nvidia", 16)] == ["dense"]
    mixtral = CAT.model("mixtral-8x7b")          # 46.7B: 16B-93B are within 2x
    idx = index(row("dense47", shape=[60, 6144, 48, 8, 24576, 128256, 0, 0, 0], params=40_000_000_000),
                row("moe40", shape=[40, 4096, 32, 8, 14336, 32000, 8, 2, 14336], params=38_000_000_000))
    assert [r.id for r in candidates(idx, mixtral, "h100-sxm5-80g", "nvidia", 16)] == ["moe40"]


def test_layouts_of_the_nearest_model():
    idx = index(row("a", tp=2, gpus=64), row("b", tp=1, pp=2, vpp=2, gpus=8),
                row("other", shape=OTHER, params=8833571226, tp=8))
    assert layouts(idx, LLAMA8, H100_16) == {(2, 1, 1, 1, 1), (1, 2, 1, 1, 2)}


def test_recipe_with_an_explicit_pipeline_layout_adapts():
    """DeepSeek-V3's 61 layers on pp 4 x vpp 4 split only with Megatron's explicit layout (61 is not a multiple of
    16): Megatron-Bridge's recipe puts ceil(61 / 16) = 4 layers on each of the first 15 virtual stages and the last
    one on the 16th (deepseek_v3.py layout_map). The index row carries that layout and the selective recompute's
    modules, and the recipe adapts with both; without the layout it cannot be built, so it is skipped."""
    dsv3 = CAT.model("deepseek-v3")
    e = dsv3.moe
    shape = [dsv3.layers, dsv3.hidden, dsv3.heads, dsv3.kv_heads, dsv3.ffn_hidden, dsv3.vocab, e.experts, e.top_k,
             e.expert_ffn_hidden]
    layout = [4] * 15 + [1]
    r = row("dsv3", shape=shape, params=671_000_000_000, chip="gb200", gpus=256, pp=4, vpp=4)
    r[COLUMNS.index("ep")] = 64
    r[COLUMNS.index("pipeline_layout")] = layout
    r[COLUMNS.index("recompute_modules")] = "mla_up_proj"
    job = JobSpec(4096, 4096, "bf16")
    s = adapt(index(r)[0], dsv3, 256, job, "megatron")
    assert s is not None and s.pipeline_layout == tuple(layout) and sum(s.pipeline_layout) == 61
    assert (s.tp, s.pp, s.vpp, s.ep, s.dp) == (1, 4, 4, 64, 64) and s.recompute_modules == "mla_up_proj"
    r[COLUMNS.index("pipeline_layout")] = None
    assert adapt(index(r)[0], dsv3, 256, job, "megatron") is None


def test_moe_recipe_keeps_its_dispatcher_and_a2a_overlap_where_they_apply():
    """A Megatron-Bridge MoE recipe's flex dispatcher and EP all-to-all overlap stay with its layout; on a layout
    where Megatron refuses the overlap (pp > 1 without interleaving: TransformerConfig.__post_init__) the recipe still
    adapts, with the defaults, as before the index carried them."""
    dsv3 = CAT.model("deepseek-v3")
    e = dsv3.moe
    shape = [dsv3.layers, dsv3.hidden, dsv3.heads, dsv3.kv_heads, dsv3.ffn_hidden, dsv3.vocab, e.experts, e.top_k,
             e.expert_ffn_hidden]
    r = row("dsv3", shape=shape, params=671_000_000_000, chip="gb200", gpus=256, pp=4, vpp=4)
    r[COLUMNS.index("ep")] = 64
    r[COLUMNS.index("pipeline_layout")] = [4] * 15 + [1]
    r[COLUMNS.index("moe_dispatcher")] = "flex"
    r[COLUMNS.index("moe_a2a_overlap")] = True
    job = JobSpec(4096, 4096, "bf16")
    s = adapt(index(r)[0], dsv3, 256, job, "megatron")
    assert s is not None and s.moe_dispatcher == "flex" and s.moe_a2a_overlap
    r[COLUMNS.index("vpp")] = 1
    r[COLUMNS.index("pipeline_layout")] = None
    r[COLUMNS.index("first_stage_layers")] = 16      # 16 + 15 + 15 + 15 = 61
    s = adapt(index(r)[0], dsv3, 256, job, "megatron")
    assert s is not None and s.first_stage_layers == 16 and s.moe_dispatcher == "" and not s.moe_a2a_overlap


def test_bad_index_is_one_error():
    doc = {"schema": RECIPES_SCHEMA, "sources": {"src": "u"}, "columns": list(COLUMNS), "rows": [row("x")[:-1]]}
    with pytest.raises(InputError, match=r"rows\[0\]"):
        parse_recipes(doc, "hand.yaml")
    bad = row("x")
    bad[COLUMNS.index("tp")] = 0
    with pytest.raises(InputError, match=r"rows\[0\]\.tp"):
        parse_recipes({**doc, "rows": [bad]}, "hand.yaml")


# -- the shipped index ---------------------------------------------------------------------------------------------
def test_shipped_index_is_the_corpus(tmp_path):
    """baige_plan/data/recipes.yaml holds the rows `make recipes` writes from the corpus and its loader now (run
    it after editing either)."""
    shipped = shipped_recipes_path()
    recipes = load_recipes()
    assert len(recipes) > 200 and all(r.url for r in recipes)
    files = [ROOT / "tests/data/published_calibration.yaml", ROOT / "benchmarks/published_heldout.yaml",
             *sorted((ROOT / "benchmarks/corpus").glob("*.yaml"))]
    out = tmp_path / "r.yaml"
    cmd = [sys.executable, str(ROOT / "benchmarks/corpus/make_recipes.py"), "--out", str(out),
           *(str(f.relative_to(ROOT)) for f in files)]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    rows = [ln for ln in out.read_text().splitlines() if ln.startswith("- [")]
    assert rows == [ln for ln in shipped.read_text().splitlines() if ln.startswith("- [")], "run `make recipes`"


def test_plan_shows_the_nearest_recipe():
    """llama3-8b on 16 H100: a published llama3-8b run on H100 adapts; the JSON names it with its estimate."""
    r = CliRunner().invoke(app, ["plan", "llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "128", "--seq-len",
                                 "8192", "--format", "json"])
    assert r.exit_code == 0, r.stderr
    pub = json.loads(r.stdout)["published_recipe"]
    assert set(pub) >= {"source", "id", "url", "strategy", "estimate", "measured_step_time_s", "measured_gpus"}
    s = pub["strategy"]
    assert s["tp"] * s["pp"] * s["cp"] * s["dp"] == 16 and 128 % (s["dp"] * s["micro_batch"]) == 0
    assert pub["estimate"]["schema"] == "baige-plan/estimate/v1" and "step_time_band_s" in pub["estimate"]


def test_plan_says_when_none_is_near():
    r = CliRunner().invoke(app, ["plan", "opt-350m", "mi300x:1x8", "--global-batch", "64", "--seq-len", "2048"])
    assert r.exit_code == 0, r.stderr
    assert "published recipe: none near" in r.stdout


def test_hybrid_sharding_is_kept_where_it_divides_the_new_data_parallel_group():
    r = row("hsdp", zero=3, runtime="torchtitan")
    r[COLUMNS.index("fsdp_shard")] = 8          # FSDP HYBRID_SHARD over each 8-GPU node (ibm_fms_fsdp rows)
    job = JobSpec(128, 8192, "bf16")
    assert adapt(index(r)[0], LLAMA8, 16, job, "torchtitan").fsdp_shard == 8     # dp 16: 2 replicas of 8
    assert adapt(index(r)[0], LLAMA8, 8, job, "torchtitan").fsdp_shard == 0      # dp 8: one group, full sharding
    assert adapt(index(r)[0], LLAMA8, 16, job, "deepspeed") is None or \
        adapt(index(r)[0], LLAMA8, 16, job, "deepspeed").fsdp_shard == 0          # no hybrid sharding there


def test_shipped_index_names_the_device_of_runs_loaded_on_a_stand_in_chip():
    """A corpus run not scored because its device is outside the catalog (an H100 96GB HBM2e at 500 W loaded on
    h100-sxm5-80g) is indexed under the device its source names, read here
    from the corpus files themselves, so `plan` never says it was measured on the catalog chip; a run excluded
    for another reason (TPU runs, an incomplete configuration) keeps its catalog chip."""
    import yaml
    by_id = {r.id: r for r in load_recipes(shipped_recipes_path())}
    stand_in = other = 0
    for f in sorted((ROOT / "benchmarks" / "corpus").glob("*.yaml")) + [ROOT / "benchmarks" / "published_heldout.yaml"]:
        for raw in (yaml.safe_load(f.read_text()) or {}).get("rows") or []:
            why, r = raw.get("excluded"), by_id.get(raw["id"])
            if not why or r is None:
                continue
            if why.startswith(("hardware outside the catalog", "no chip file for")):
                stand_in += 1
                assert r.chip == raw["hardware"]["gpu_model"], raw["id"]
                assert r.chip not in set(CAT.names("chips")), raw["id"]
            else:
                other += 1
                assert r.chip in set(CAT.names("chips")), raw["id"]
    # Grand Teton H100 rows; TPU runs and incomplete configurations (GB300 and fp4 rows are scored)
    assert stand_in >= 24 and other >= 10
