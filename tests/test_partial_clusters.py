"""Plans on part of a homogeneous cluster (search/partial.py) and `--exclude` (issue 12 item 2)."""

from __future__ import annotations

import json
import random

import pytest
import yaml
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.cost.estimate import estimate
from baige_plan.io.catalog import Catalog
from baige_plan.search.partial import compute_floor_s, node_counts, node_list, search_partial
from baige_plan.search.placement import placement
from baige_plan.search.solver import search
from baige_plan.search.space import space_array, to_strategy
from baige_plan.specs.job import JobSpec

RUN = CliRunner()
G = "h100-sxm5-80g"
LLAMA_100 = ["llama3-70b", f"{G}:100x8", "--global-batch", "1024"]


def _run(args, code=0):
    r = RUN.invoke(app, [str(a) for a in args])
    assert r.exit_code == code, (args, r.exit_code, r.stdout, r.stderr)
    return r


def _errors(r) -> list[str]:
    return [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("note:")]


# -- the node counts -------------------------------------------------------------------------------------------
def test_node_counts_are_bounded():
    assert node_counts(100) == [100, 99, 96, 64]
    assert node_counts(64) == [64, 63]
    assert node_counts(2048) == [2048, 2047]
    assert node_counts(1) == [1]
    assert node_counts(3) == [3, 2]
    for n in range(1, 5000):
        c = node_counts(n)
        assert c[0] == n and c == sorted(set(c), reverse=True) and min(c) >= 1
        assert len(c) <= bin(n).count("1") + 1          # never one search per count
    assert node_list([99, 3, 7, 96, 97, 98]) == "3, 7, 96-99"


def test_placement_on_usable_nodes():
    slots = placement(2, 1, 2, 2, "g", 2, nodes=[0, 1, 3, 5])
    assert [s.node for s in slots] == [0, 0, 1, 1, 3, 3, 5, 5]
    assert [s.rank for s in slots] == list(range(8))
    plain = placement(2, 1, 2, 2, "g", 2)
    assert [(s.stage, s.replica, s.tp_rank, s.device) for s in slots] == \
        [(s.stage, s.replica, s.tp_rank, s.device) for s in plain]
    with pytest.raises(ValueError):
        placement(2, 1, 2, 2, "g", 2, nodes=[0, 1])


# -- 100 nodes: the batch does not split over 800 devices, 96 nodes run it --------------------------------------
@pytest.fixture(scope="module")
def llama_100(tmp_path_factory):
    d = tmp_path_factory.mktemp("partial")
    p = d / "p.yaml"
    r = _run(["plan", *LLAMA_100, "--out", p, "--format", "json"])
    return p, json.loads(r.stdout), r


def test_100_nodes_plans_on_96(llama_100):
    p, out, r = llama_100
    best = out["plans"][0]
    assert best["devices"] == 768
    idle = best["idle_devices"]
    assert len(idle) == 1 and idle[0]["group"] == G and idle[0]["devices"] == 32
    why = idle[0]["why"]
    assert "96-99" in why and "global batch 1024" in why and "100 nodes" in why and "96 nodes" in why
    assert "idle devices" in r.stderr
    doc = yaml.safe_load(p.read_text())
    assert doc["estimate"]["idle_devices"] == idle
    assert doc["inputs"]["cluster"]["groups"][0]["nodes"] == 100     # the cluster as given
    ranks = sorted(x["rank"] for x in doc["placement"])
    assert ranks == list(range(768))
    assert sorted({x["node"] for x in doc["placement"]}) == list(range(96))
    assert len({(x["node"], x["device"]) for x in doc["placement"]}) == 768


def test_100_nodes_plan_reevaluates_and_validates(llama_100):
    p, out, _ = llama_100
    stored = yaml.safe_load(p.read_text())["estimate"]
    r = _run(["evaluate", "--plan", p, "--format", "json"])
    e = json.loads(r.stdout)
    assert e["step_time_s"] == stored["step_time_s"] and e["devices"] == 768
    r = _run(["validate", p])
    assert "ok" in r.stdout
    _run(["explain", p])
    _run(["check", p, "--baseline", p])


def test_100_nodes_table_and_export(llama_100, tmp_path):
    r = _run(["plan", *LLAMA_100])
    assert "96 of its 100 nodes" in r.stdout and "idle devices" in r.stdout
    p, _, _ = llama_100
    _run(["export", p, "--out-dir", tmp_path / "x"])
    launch = (tmp_path / "x" / "launch.sh").read_text()
    assert "NNODES=96" in launch
    hosts = [ln for ln in (tmp_path / "x" / "hostfile").read_text().splitlines() if ln and not ln.startswith("#")]
    assert len(hosts) == 96 and hosts[-1].startswith(f"{G}-node0095")


def test_full_cluster_best_reports_no_idle_devices(tmp_path):
    p = tmp_path / "p.yaml"
    r = _run(["plan", "llama3-70b", f"{G}:96x8", "--global-batch", 1024, "--out", p, "--format", "json"])
    best = json.loads(r.stdout)["plans"][0]
    assert best["devices"] == 768 and "idle_devices" not in best
    assert "idle_devices" not in yaml.safe_load(p.read_text())["estimate"]
    assert "idle devices" not in r.stderr


def test_the_skipped_count_cannot_win():
    """gpt3-175b on 100 x 8 A100 at batch 1600: the full cluster wins; the compute floor skips 64 nodes, and
    searching 64 nodes anyway confirms it is slower."""
    cat = Catalog.create()
    m, (cl, _), job = cat.model("gpt3-175b"), cat.cluster("a100-sxm4-80g:100x8"), JobSpec(1600, 2048, "bf16")
    r = search_partial(m, cl, job)
    assert r.nodes == 100 and r.idle == ()
    skipped = [c.nodes for c in r.counts if c.skipped]
    assert skipped == [64]
    from dataclasses import replace
    r64 = search(m, replace(cl, groups=(replace(cl.groups[0], nodes=64),)), job)
    assert r64.plans[0].step_time_s > r.result.plans[0].step_time_s
    assert r64.plans[0].step_time_s >= compute_floor_s(m, cl, job) / 64


@pytest.mark.parametrize("model,cluster,gb,seq,precision", [
    ("gpt3-175b", "a100-sxm4-80g:8x8", 256, 2048, "bf16"),
    ("llama3-70b", "h100-sxm5-80g:4x8", 128, 8192, "bf16"),
    ("llama3-8b", "h100-sxm5-80g:1x8", 64, 8192, "fp8"),
    ("opt-350m", "a100-sxm4-80g:1x8", 64, 2048, "fp32"),
    ("opt-350m", "v100-sxm2-32g:1x8", 64, 2048, "fp16"),
])
def test_compute_floor_bounds_sampled_strategies(model, cluster, gb, seq, precision):
    """The bound search/partial.py skips counts with: every strategy's step time >= the compute floor."""
    cat = Catalog.create()
    m, (cl, _), job = cat.model(model), cat.cluster(cluster), JobSpec(gb, seq, precision)
    floor = compute_floor_s(m, cl, job) / cl.groups[0].nodes
    a = space_array(m, cl.devices, cl.groups[0].devices_per_node, job)
    rng = random.Random(7)
    for i in rng.sample(range(len(a)), min(120, len(a))):
        e = estimate(m, cl, job, to_strategy(tuple(int(x) for x in a[i])), 1.0)
        assert e.step_time_s >= floor, (e.strategy, e.step_time_s, floor)


def test_objective_cost_may_leave_nodes_idle():
    """Idle nodes are not paid (cost/money.py): the cheaper count wins, and says so."""
    r = _run(["plan", "opt-350m", "a100-sxm4-80g:2x8", "--global-batch", 64, "--seq-len", 2048, "--tokens", 1e9,
              "--objective", "cost", "--format", "json"])
    best = json.loads(r.stdout)["plans"][0]
    fast = json.loads(_run(["plan", "opt-350m", "a100-sxm4-80g:2x8", "--global-batch", 64, "--seq-len", 2048,
                            "--tokens", 1e9, "--format", "json"]).stdout)["plans"][0]
    assert best["training"]["usd"] <= fast["training"]["usd"]
    if best["devices"] < 16:
        assert best["training"]["devices_paid"] == best["devices"]
        assert "--objective cost" in best["idle_devices"][0]["why"]


# -- --exclude -------------------------------------------------------------------------------------------------
def _placement_nodes(doc) -> list[int]:
    return sorted({x["node"] for x in doc["placement"]})


def test_exclude_keeps_ranks_off_the_nodes(tmp_path):
    p = tmp_path / "x.yaml"
    r = _run(["plan", *LLAMA_100, "--exclude", f"{G}:3,{G}:7", "--out", p, "--format", "json"])
    doc = yaml.safe_load(p.read_text())
    nodes = _placement_nodes(doc)
    assert 3 not in nodes and 7 not in nodes and len(nodes) == 96
    assert sorted(x["rank"] for x in doc["placement"]) == list(range(768))
    assert len({(x["node"], x["device"]) for x in doc["placement"]}) == 768
    idle = json.loads(r.stdout)["plans"][0]["idle_devices"]
    assert idle[0] == {"group": G, "devices": 16, "why": "2 nodes (3, 7) excluded by --exclude"}
    assert idle[1]["devices"] == 16 and "98-99" in idle[1]["why"]
    _run(["validate", p])
    e = json.loads(_run(["evaluate", "--plan", p, "--format", "json"]).stdout)
    assert e["step_time_s"] == doc["estimate"]["step_time_s"]
    # space-separated and repeated forms name the same nodes
    for form in (["--exclude", f"{G}:3 {G}:7"], ["--exclude", f"{G}:3", "--exclude", f"{G}:7"]):
        q = tmp_path / "y.yaml"
        _run(["plan", *LLAMA_100, *form, "--out", q])
        assert yaml.safe_load(q.read_text())["placement"] == doc["placement"]


def test_exclude_on_a_full_cluster_plan(tmp_path):
    """Excluding a node of a cluster that plans whole: the plan moves to the others (nodes 0-2, 4-8)."""
    p = tmp_path / "s.yaml"
    _run(["plan", "llama2-7b", "a100-sxm4-80g:9x8", "--global-batch", 64, "--seq-len", 4096,
          "--exclude", "a100-sxm4-80g:3", "--out", p])
    doc = yaml.safe_load(p.read_text())
    assert 3 not in _placement_nodes(doc) and _placement_nodes(doc) == [0, 1, 2, 4, 5, 6, 7, 8]


@pytest.mark.parametrize("value,words", [
    (f"{G}:100", ["--exclude", f"{G}:100", "out of range", "0-99"]),
    ("gpu:3", ["--exclude", "gpu:3", "unknown node or group", "gpu"]),
    (f"{G}:x", ["--exclude", f"{G}:x", "unknown node"]),
    (f"{G}:3,nope:1", ["--exclude", "nope"]),
])
def test_exclude_bad_names_exit_2(value, words):
    r = _run(["plan", *LLAMA_100, "--exclude", value], code=2)
    lines = _errors(r)
    assert len(lines) == 1 and all(w in lines[0] for w in words), lines
    assert r.stdout == "" and "Traceback" not in r.stderr


def test_exclude_everything_exits_1():
    """SPEC §3: nothing left to plan on is no feasible plan (exit 1), as `replan --drop` of every node."""
    for value in (G, f"{G}:0-99"):
        r = _run(["plan", *LLAMA_100, "--exclude", value], code=1)
        lines = _errors(r)
        assert len(lines) == 1 and "no feasible plan" in lines[0] and "--exclude" in lines[0]


def test_exclude_on_a_mixed_cluster(tmp_path):
    """Mixed clusters: the solver plans on the nodes left; the placement names the real nodes
    (search/hetero_placement.py order over each group's remaining nodes)."""
    p = tmp_path / "m.yaml"
    r = _run(["plan", "llama3-70b", "mixed-a100-910b-128", "--global-batch", 512, "--seq-len", 4096,
              "--exclude", "gpu:1,npu:0", "--out", p, "--format", "json"])
    doc = yaml.safe_load(p.read_text())
    used = {g: sorted({x["node"] for x in doc["placement"] if x["group"] == g}) for g in ("gpu", "npu")}
    assert 1 not in used["gpu"] and 0 not in used["npu"]
    assert sorted(x["rank"] for x in doc["placement"]) == list(range(len(doc["placement"])))
    assert len({(x["group"], x["node"], x["device"]) for x in doc["placement"]}) == len(doc["placement"])
    idle = json.loads(r.stdout)["plans"][0]["idle_devices"]
    assert {"group": "gpu", "devices": 8, "why": "1 node (1) excluded by --exclude"} in idle
    assert {"group": "npu", "devices": 8, "why": "1 node (0) excluded by --exclude"} in idle
    _run(["validate", p])
    e = json.loads(_run(["evaluate", "--plan", p, "--format", "json"]).stdout)
    assert e["step_time_s"] == doc["estimate"]["step_time_s"]
    # a whole group of a mixed cluster: bad input, naming it
    r = _run(["plan", "llama3-70b", "mixed-a100-910b-128", "--global-batch", 512, "--exclude", "npu"], code=2)
    assert "npu" in _errors(r)[0] and "every node" in _errors(r)[0]


def test_evaluate_exclude():
    base = ["evaluate", "llama3-70b", f"{G}:100x8", "--global-batch", 1024, "--tp", 1, "--pp", 12, "--cp", 8,
            "--first-stage-layers", 5, "--last-stage-layers", 5, "--format", "json"]
    e = json.loads(_run([*base, "--exclude", f"{G}:96-99"]).stdout)
    assert e["devices"] == 768 and e["strategy"]["dp"] == 8
    r = _run(["evaluate", "llama3-70b", f"{G}:2x8", "--exclude", G], code=2)
    assert "every node" in _errors(r)[0]


def test_replan_of_a_partial_plan(llama_100, tmp_path):
    """A plan leaving nodes idle re-plans: losing a used node, a spare one takes its place."""
    p, _, _ = llama_100
    q = tmp_path / "r.yaml"
    r = _run(["replan", p, "--drop", f"{G}:5", "--out", q, "--format", "json"])
    doc = yaml.safe_load(q.read_text())
    assert len(doc["placement"]) == 768 and json.loads(r.stdout)
    _run(["validate", q])
