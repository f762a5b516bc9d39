"""plan / evaluate --plan / explain / check / diff / export through the CLI (typer CliRunner)."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
import yaml
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.cost.estimate import estimate
from baige_plan.io.catalog import Catalog
from baige_plan.specs.job import JobSpec
from baige_plan.specs.strategy import StrategySpec

RUN = CliRunner()
GPT3 = ["gpt3-175b", "a100-sxm4-80g:64x8", "--global-batch", "1536", "--seq-len", "2048"]
SMALL = ["llama2-7b", "a100-sxm4-80g:2x8", "--global-batch", "64", "--seq-len", "4096"]


def _ok(args, code=0):
    r = RUN.invoke(app, args)
    assert r.exit_code == code, (r.exit_code, r.output, r.stderr if hasattr(r, "stderr") else "")
    return r


@pytest.fixture(scope="module")
def gpt3_plans(tmp_path_factory):
    d = tmp_path_factory.mktemp("plans")
    a, b = d / "a.yaml", d / "b.yaml"
    _ok(["plan", *GPT3, "--out", str(a)])
    _ok(["plan", *GPT3, "--out", str(b)])
    return a, b


def test_gpt3_plan_beats_published_megatron_config(gpt3_plans):
    a, b = gpt3_plans
    assert a.read_bytes() == b.read_bytes()                       # byte-identical across runs
    doc = yaml.safe_load(a.read_text())
    assert list(doc) == ["schema", "tool", "inputs", "strategy", "pipelines", "estimate", "placement", "search"]
    cat = Catalog.create()
    model, (cluster, _) = cat.model("gpt3-175b"), cat.cluster("a100-sxm4-80g:64x8")
    # Narayanan et al. 2021 Table 1: tp 8, pp 8, dp 8, micro-batch 1 (same attention setting as the plan)
    pub = estimate(model, cluster, JobSpec(1536, 2048),
                   StrategySpec(tp=8, pp=8, dp=8, micro_batch=1, recompute="selective",
                                attention=doc["strategy"]["attention"]), 0.9)
    assert doc["estimate"]["fits"] and doc["estimate"]["step_time_s"] <= pub.step_time_s
    # every one of the 512 ranks placed once, TP groups inside one node
    pl = doc["placement"]
    assert sorted(p["rank"] for p in pl) == list(range(512))
    assert len({(p["node"], p["device"]) for p in pl}) == 512
    nodes = defaultdict(set)
    for p in pl:
        nodes[(p["stage"], p["replica"], p["cp_rank"])].add(p["node"])
    assert all(len(v) == 1 for v in nodes.values())
    # inputs are self-contained: the chip document is embedded
    assert doc["inputs"]["cluster"]["groups"][0]["chip"]["id"] == "a100-sxm4-80g"
    assert doc["search"]["seconds"] == 0.0 and doc["search"]["status"] == "OPTIMAL"


def test_evaluate_plan_reproduces_estimate(gpt3_plans):
    a, _ = gpt3_plans
    r = _ok(["evaluate", "--plan", str(a), "--format", "json"])
    assert json.loads(r.stdout) == yaml.safe_load(a.read_text())["estimate"]


def test_plan_json_document():
    r = _ok(["plan", *SMALL, "--top", "3", "--format", "json"])
    doc = json.loads(r.stdout)
    assert doc["schema"] == "baige-plan/plans/v1" and len(doc["plans"]) == 3
    times = [p["step_time_s"] for p in doc["plans"]]
    # the shown order (search/ranking.py): ties (overlapping bands) simpler first, the rest by step time
    assert all(p["tie"] for p in doc["plans"][:2]) or times == sorted(times)
    untied = [p["step_time_s"] for p in doc["plans"] if not p["tie"]]
    assert untied == sorted(untied) and (doc["plans"][0]["tie"] or times[0] == min(times))
    assert all(p["schema"] == "baige-plan/estimate/v1" and p["pipelines"][0]["stages"] for p in doc["plans"])
    assert {"candidates", "feasible", "seconds", "solver", "status", "gap"} <= set(doc["search"])


def test_plan_nothing_fits_exits_1():
    r = RUN.invoke(app, ["plan", "gpt3-175b", "v100-sxm2-16g:1x8", "--global-batch", "8", "--precision", "fp16"])
    assert r.exit_code == 1
    assert "memory" in r.stderr and "GiB" in r.stderr and r.stdout == ""


def test_bad_pin_exits_nonzero_with_message():
    r = RUN.invoke(app, ["plan", *SMALL, "--tp", "3"])
    assert r.exit_code == 1 and "divisibility" in r.stderr and "3·1·1" in r.stderr


def test_check_and_diff(tmp_path, gpt3_plans):
    best, _ = gpt3_plans
    worse = tmp_path / "worse.json"
    _ok(["plan", *GPT3, "--tp", "8", "--pp", "8", "--micro-batch", "1", "--zero", "1", "--out", str(worse)])
    _ok(["check", str(best), "--baseline", str(best)], 0)
    r = _ok(["check", str(worse), "--baseline", str(best)], 3)
    assert "step time" in r.stderr
    _ok(["check", str(worse), "--baseline", str(best), "--tolerance", "0.5"], 0)
    r = _ok(["diff", str(best), str(worse), "--format", "json"], 1)             # they differ: exit 1, as diff(1)
    d = json.loads(r.stdout)
    assert d["strategy"]["tp"] == {"a": yaml.safe_load(best.read_text())["strategy"]["tp"], "b": 8}
    assert d["estimate"]["step_time_s"]["a"] < d["estimate"]["step_time_s"]["b"]
    r = _ok(["diff", str(best), str(worse)], 1)
    assert "strategy.tp" in r.stdout and "step_time_s" in r.stdout


def test_check_flags_changed_inputs(tmp_path, gpt3_plans):
    best, _ = gpt3_plans
    doc = yaml.safe_load(best.read_text())
    doc["inputs"]["job"]["seq_len"] = 1024
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(doc, sort_keys=False))
    r = _ok(["check", str(edited), "--baseline", str(best)], 3)
    assert "job.seq_len" in r.stderr


def test_hand_edited_plan_is_respected(tmp_path):
    p = tmp_path / "p.yaml"
    _ok(["plan", *SMALL, "--pp", "2", "--vpp", "1", "--out", str(p)])
    doc = yaml.safe_load(p.read_text())
    st = doc["pipelines"][0]["stages"]
    assert [s["layers"] for s in st] == [[0, 16], [16, 32]]
    st[0]["layers"], st[1]["layers"] = [0, 15], [15, 32]            # uneven: first stage 15, last 17
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    r = _ok(["evaluate", "--plan", str(p), "--format", "json"])
    e = json.loads(r.stdout)
    assert [s["layers"] for s in e["stages"]] == [[0, 15], [15, 32]]
    assert e["strategy"]["first_stage_layers"] == 15 and e["strategy"]["last_stage_layers"] == 17
    # an edited strategy (pipelines untouched) is respected too
    p2 = tmp_path / "p2.yaml"
    orig = yaml.safe_load(p.read_text())
    orig["pipelines"][0]["stages"][0]["layers"], orig["pipelines"][0]["stages"][1]["layers"] = [0, 16], [16, 32]
    orig["strategy"]["micro_batch"] = 2 * orig["strategy"]["micro_batch"]
    p2.write_text(yaml.safe_dump(orig, sort_keys=False))
    e = json.loads(_ok(["evaluate", "--plan", str(p2), "--format", "json"]).stdout)
    assert e["strategy"]["micro_batch"] == orig["strategy"]["micro_batch"]


def test_hostfile_export(gpt3_plans):
    # per-runtime exports are tested against the runtimes' own parsers (tests/integration) and in
    # tests/test_export_*.py; here: the plain hostfile, one line per node of the plan's cluster
    best, _ = gpt3_plans
    hf = _ok(["export", str(best), "--to", "hostfile"]).stdout
    hosts = [x for x in hf.splitlines() if x and not x.startswith("#")]
    assert len(hosts) == 64 and all(x.split()[1] == "slots=8" for x in hosts)


def test_explain(gpt3_plans):
    best, _ = gpt3_plans
    r = _ok(["explain", str(best)])
    assert "per stage" in r.stdout and "runners-up" in r.stdout and "Bottleneck" in r.stdout
