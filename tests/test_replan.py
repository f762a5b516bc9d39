"""`baige-plan replan` (issue 12 item 3): elastic re-plan after losing nodes, a chip family or a bridge, or
adding nodes. The speed target (512 GPUs, one node lost, <= 2 s on 2 cores) is timed in
benchmarks/run_all.py (replan_gpt3_512_lose_one_node), not here."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.reports.replan_doc import load_old
from baige_plan.search import replan as R
from baige_plan.search import replan_candidates as C
from baige_plan.search import replan_holdings as H
from baige_plan.search import replan_world as W
from baige_plan.search.placement import placement as place

RUN = CliRunner()
GPT3 = ["plan", "gpt3-175b", "a100-sxm4-80g:64x8", "--global-batch", "1536", "--seq-len", "2048"]
MIXED = ["plan", "llama3-70b", "mixed-a100-910b-128", "--global-batch", "512", "--seq-len", "4096"]
G = "a100-sxm4-80g"


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("replan")
    out = {}
    for name, args in (("gpt3", GPT3), ("mixed", MIXED)):
        out[name] = d / f"{name}.yaml"
        r = RUN.invoke(app, args + ["--out", str(out[name])])
        assert r.exit_code == 0, r.output + r.stderr
    return out


def _replan(plan: Path, *args: str, out: Path | None = None, code: int = 0) -> dict:
    cmd = ["replan", str(plan), *args, "--format", "json"] + (["--out", str(out)] if out else [])
    r = RUN.invoke(app, cmd)
    assert r.exit_code == code, (cmd, r.exit_code, r.stdout, r.stderr)
    return json.loads(r.stdout) if code == 0 else {"stderr": r.stderr}


def _evaluate(path: Path) -> dict:
    r = RUN.invoke(app, ["evaluate", "--plan", str(path), "--format", "json"])
    assert r.exit_code == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def _valid(path: Path) -> None:
    r = RUN.invoke(app, ["validate", str(path)])
    assert r.exit_code == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def lose17(plans, tmp_path_factory) -> tuple[dict, Path]:
    new = tmp_path_factory.mktemp("lose17") / "new.yaml"
    return _replan(plans["gpt3"], "--drop", f"{G}:17", out=new), new


def test_lose_one_node_of_64(lose17):
    rep, new = lose17
    assert rep["schema"] == "baige-plan/replan/v1"
    assert rep["changes"]["dropped_nodes"] == [f"{G}:17"]
    n, f, o = rep["new"], rep["fresh"], rep["old"]
    # moves less than a fresh plan placed as `plan` places it, and stays within the tolerance of its throughput
    assert n["bytes_moved_gb"]["total"] < f["bytes_moved_gb"]["total"]
    assert n["tokens_per_s"] >= 0.97 * f["tokens_per_s"] * (1 - 1e-6)
    assert n["change"] == pytest.approx(n["tokens_per_s"] / o["tokens_per_s"] - 1, rel=1e-4)
    assert n["devices"] <= 504 and o["devices"] == 512
    # the bytes add up from the moves list, and the lost node is nowhere in the new plan
    moved = sum(m["parameters_gb"] + m["optimizer_gb"] for m in n["moves"])
    assert moved == pytest.approx(n["bytes_moved_gb"]["total"], rel=1e-3)
    names = [x for v in n["node_map"].values() for x in v] + n["spare_nodes"]
    assert not any(x == f"{G}:17" or x.startswith(f"{G}:17-") for x in names)
    # the file is a plan like `plan --out` writes: validates, and re-evaluates to the reported step time
    _valid(new)
    assert _evaluate(new)["step_time_s"] == pytest.approx(n["step_time_s"], rel=1e-5)
    doc = yaml.safe_load(new.read_text())
    assert doc["inputs"]["cluster"]["groups"][0]["nodes"] * 8 == n["devices"]
    assert len(doc["placement"]) == n["devices"]


def test_node_map_covers_the_survivors_once(plans, lose17):
    rep, _ = lose17
    old = load_old(plans["gpt3"])
    w = W.apply_changes(old.cluster, old.slots, [f"{G}:17"], [], [], [])
    res = R.replan(old.model, old.job, old.cluster, old.estimate, old.strategy, old.pipelines, old.slots, w,
                   frac=old.frac)
    c = res.chosen
    used = c.node_map[G]
    assert len(set(used)) == len(used) == c.cluster.groups[0].nodes
    assert sorted(used + c.spare, key=lambda x: int(x.split(":")[1])) == w.avail[G]
    assert rep["new"]["plan"] == c.label


def test_the_written_plan_names_its_physical_nodes(lose17):
    """The new plan file numbers its nodes 0..n-1: its `search.node_map` says which physical node (the old plan's
    name) each index is, one name per node, the lost node absent, every survivor named once (here or as a spare)."""
    _, new = lose17
    doc = yaml.safe_load(new.read_text())
    names = doc["search"]["node_map"][G]
    assert len(names) == doc["inputs"]["cluster"]["groups"][0]["nodes"]
    assert f"{G}:17" not in names and len(set(names)) == len(names)
    assert sorted(names + doc["search"]["spare_nodes"], key=lambda x: int(x.split(":")[1])) == \
        [f"{G}:{i}" for i in range(64) if i != 17]
    used_idx = {p["node"] for p in doc["placement"] if p["group"] == G}
    assert used_idx <= set(range(len(names)))


def test_keep_replicas_moves_no_parameter(plans, tmp_path):
    """With a loose tolerance the old layout is kept: whole replicas dropped, every surviving rank on its stage
    and layers (no parameter moves), the micro-batches per replica grow to keep the global batch."""
    new = tmp_path / "keep.yaml"
    rep = _replan(plans["gpt3"], "--drop", f"{G}:17", "--max-loss", "40%", out=new)
    n = rep["new"]
    assert n["family"] == "keep", rep["choice"]
    assert n["bytes_moved_gb"]["parameters"] == 0
    assert n["ranks"]["kept"] == n["ranks"]["total"] == n["devices"]
    old = yaml.safe_load(plans["gpt3"].read_text())["strategy"]
    for k in ("tp", "pp", "cp", "vpp"):
        assert n["strategy"][k] == old[k]
    assert n["strategy"]["dp"] < old["dp"] and n["strategy"]["global_batch"] == 1536
    _valid(new)
    assert _evaluate(new)["step_time_s"] == pytest.approx(n["step_time_s"], rel=1e-5)


def test_lose_a_whole_family(plans, tmp_path):
    new = tmp_path / "gpu.yaml"
    rep = _replan(plans["mixed"], "--drop", "npu", out=new)
    assert rep["changes"]["dropped_nodes"] == ["npu:0-7"]
    n = rep["new"]
    assert n["devices_by_group"] == {"gpu": 64} and n["tokens_per_s"] > 0 and n["change"] < 0
    doc = yaml.safe_load(new.read_text())
    assert [g["name"] for g in doc["inputs"]["cluster"]["groups"]] == ["gpu"]
    assert {p["group"] for p in doc["placement"]} == {"gpu"}
    assert n["bytes_moved_gb"]["total"] <= rep["fresh"]["bytes_moved_gb"]["total"]
    _valid(new)
    assert _evaluate(new)["step_time_s"] == pytest.approx(n["step_time_s"], rel=1e-5)


def test_lose_the_bridge(plans, tmp_path):
    new = tmp_path / "side.yaml"
    rep = _replan(plans["mixed"], "--drop-bridge", "gpu:npu", out=new)
    assert rep["changes"]["dropped_bridges"] == ["gpu:npu"]
    assert "one side" in rep["choice"] and "gpu:" in rep["choice"] and "npu:" in rep["choice"]
    n = rep["new"]
    assert len(n["devices_by_group"]) == 1          # no plan crosses the lost bridge
    side = next(iter(n["devices_by_group"]))
    other = "npu" if side == "gpu" else "gpu"
    assert rep["choice"].endswith(f": {side}")
    assert any(x.startswith(other) for x in n["spare_nodes"])
    # the better side: its plan is at least as fast as the other side's best, within the tolerance
    sides = dict(part.split(": ") for part in rep["choice"].split("(")[-1].split(")")[0].split(", "))
    tok = {k: float(v.split()[0].replace(",", "")) for k, v in sides.items()}
    assert tok[side] >= tok[other]
    _valid(new)
    assert _evaluate(new)["step_time_s"] == pytest.approx(n["step_time_s"], rel=1e-5)


def test_add_nodes(plans, tmp_path):
    new = tmp_path / "more.yaml"
    rep = _replan(plans["gpt3"], "--add", f"{G}:8x8", out=new)
    assert rep["changes"]["added_nodes"] == [f"{G}:64-71"]
    n, o = rep["new"], rep["old"]
    assert n["tokens_per_s"] >= o["tokens_per_s"] * (1 - 1e-9)   # never worse than keeping the old plan
    assert n["bytes_moved_gb"]["total"] <= rep["fresh"]["bytes_moved_gb"]["total"]
    _valid(new)
    assert _evaluate(new)["step_time_s"] == pytest.approx(n["step_time_s"], rel=1e-5)


def test_add_nothing_useful_keeps_the_plan(plans):
    """One extra node cannot host a replica of the old layout: the old plan stays, nothing moves."""
    rep = _replan(plans["gpt3"], "--add", f"{G}:1x8", "--max-loss", "5%")
    n = rep["new"]
    if n["family"] == "keep":
        assert n["bytes_moved_gb"]["total"] == 0 and n["spare_nodes"] == [f"{G}:64"]
    assert n["bytes_moved_gb"]["total"] <= rep["fresh"]["bytes_moved_gb"]["total"]


def test_drop_count_takes_whole_last_replicas(plans):
    old = load_old(plans["gpt3"])
    per_node = {}
    for s in old.slots:
        per_node[s.node] = max(per_node.get(s.node, -1), s.replica)
    rep = _replan(plans["gpt3"], "--drop-count", f"{G}:{old.strategy.pp}")
    dropped = [int(i) for x in rep["changes"]["dropped_nodes"] for i in _expand(x)]
    assert len(dropped) == old.strategy.pp
    assert {per_node[i] for i in dropped} == {old.strategy.dp - 1}


def _expand(rng: str) -> list[int]:
    idx = rng.rpartition(":")[2]
    lo, _, hi = idx.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


@pytest.mark.parametrize("args, code, words", [
    (["--drop", f"{G}:64"], 2, ["--drop", "out of range", "0-63"]),
    (["--drop", "tpu:3"], 2, ["--drop", "unknown node or group", "tpu"]),
    (["--drop", G], 1, ["no feasible plan", "every node"]),
    (["--drop", f"{G}:0-63"], 1, ["no feasible plan", "every node"]),
    ([], 2, ["nothing changes"]),
    (["--drop", f"{G}:1", "--max-loss", "120%"], 2, ["--max-loss"]),
    (["--add", "a100-sxm4-80g:2"], 2, ["--add", "CHIP:NODESxDEVICES"]),
    (["--add", "no-such-chip:2x8"], 2, ["no-such-chip"]),
    (["--drop-bridge", f"{G}:npu"], 2, ["--drop-bridge"]),
    (["--drop-count", f"{G}:65"], 2, ["--drop-count", "64 nodes left"]),
])
def test_bad_input_one_line(plans, args, code, words):
    r = RUN.invoke(app, ["replan", str(plans["gpt3"]), *args])
    assert r.exit_code == code, (args, r.exit_code, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("note:")]
    assert len(lines) == 1, r.stderr
    assert all(w in lines[0] for w in words), (args, lines[0])
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_not_enough_memory_is_infeasible(plans):
    """Losing 7 of 8 gpu nodes of the mixed plan and the bridge: llama3-70b does not fit on 8 A100s."""
    r = RUN.invoke(app, ["replan", str(plans["mixed"]), "--drop", "gpu:1-7", "--drop", "npu"])
    assert r.exit_code == 1, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("note:")]
    assert len(lines) == 1 and "no feasible plan" in lines[0] and "memory" in lines[0], r.stderr


def test_table_output(plans):
    r = RUN.invoke(app, ["replan", str(plans["gpt3"]), "--drop", f"{G}:17"])
    assert r.exit_code == 0, r.stderr
    for word in ("old", "new", "fresh", "tokens/s", "params GB", "choice", "node map", "state to move"):
        assert word in r.stdout


def test_byte_identical_plan_files(plans, tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    _replan(plans["mixed"], "--drop", "npu", out=a)
    _replan(plans["mixed"], "--drop", "npu", out=b)
    assert a.read_bytes() == b.read_bytes()


def test_state_model_overlaps():
    """The box model: identical layouts keep everything; halving tp keeps half of each shard; an interleaved
    stage holds its chunks c*pp + i."""
    from baige_plan.io.catalog import Catalog
    from baige_plan.specs.strategy import StrategySpec

    m = Catalog.create().model("llama3-70b")
    ax = H.Axis(m, "bf16")
    s = StrategySpec(tp=4, pp=4, dp=2, vpp=2)
    lay = H.layout_of_strategy(m, s, "g")
    assert lay[0].stages[1].chunks == ((10, 20), (50, 60))
    slots = place(4, 1, 2, 4, "g", 8)
    store = H.holdings(ax, lay, slots)
    A_p, A_o = H._pack(store, [("g", i) for i in range(4)], 8)
    full = H._overlap(A_p, A_p)
    assert full.diagonal() == pytest.approx(H._volume(A_p).sum(axis=1))
    # parameters: 80 layers + embedding + output, each device a 1/tp shard; 2 replicas hold a copy each
    total = H._volume(A_p).sum()
    assert total == pytest.approx(2 * float(ax.cd[-1]))
    # optimizer (ZeRO-1): one copy, sliced over the 2 replicas
    assert H._volume(A_o).sum() == pytest.approx(float(ax.cd[-1]))
    s2 = StrategySpec(tp=2, pp=4, dp=4, vpp=2)
    st2 = H.holdings(ax, H.layout_of_strategy(m, s2, "g"), place(2, 1, 4, 4, "g", 8))
    B_p, _ = H._pack(st2, [("g", i) for i in range(4)], 8)
    # same stages, tp 4 -> 2 with devices kept in place: device d held shard d%4 of 4, now d%2 of 2; only devices
    # 0, 3, 4, 7 keep a quarter-shard each, i.e. a quarter of the new state
    kept = H._overlap(B_p, A_p).diagonal().sum()
    assert kept == pytest.approx(0.25 * H._volume(B_p).sum())


# -- issue 19: replan that keeps ranks ---------------------------------------------------------------------------

def test_layout_distance_counts_each_change():
    """Hand-counted: one per change of tp, of cp, per doubling/halving of pp, for an uneven split where the old
    one was even (80 layers), for interleaving and for ZeRO-3 switched on or off."""
    from baige_plan.io.catalog import Catalog
    from baige_plan.specs.strategy import StrategySpec
    m = Catalog.create().model("llama3-70b")
    old = StrategySpec(tp=8, pp=1, dp=32, zero=3, micro_batch=2)

    def d(family, **kw):
        c = C.Candidate("x", family, None, None, strategy=StrategySpec(**kw))
        return R.layout_distance(c, old, (), m)
    assert d("keep", tp=8, dp=16, zero=3) == 0
    assert d("same tp", tp=8, pp=2, dp=16, zero=3) == 1                     # pp 1 -> 2
    assert d("fresh", tp=8, pp=7, dp=2, cp=2, zero=1) == 1 + 3 + 1 + 1       # cp; log2(7) ~ 3 doublings; uneven; zero
    assert d("fresh", tp=8, pp=14, dp=1, cp=2, zero=1) == 1 + 4 + 1 + 1
    assert d("fresh", tp=4, pp=1, dp=64, zero=3) == 1


@pytest.mark.slow
def test_lose_one_of_32_nodes_keeps_a_close_layout_and_says_why_nodes_idle(tmp_path):
    """The issue's case: llama3-70b on 32 DGX-H100 nodes, global batch 128, one node lost. 31 x 8 = 248 devices =
    8 x 31 and the data-parallel size must divide 128 (a power of two), so 31, 30 (240 = 16 x 15) and 29 nodes
    run no Megatron layout: 28 nodes at most, 3 healthy nodes idle -- said so, as hot spares. Among the plans
    within --max-loss the one kept is the closest to the old layout unless a farther one moves under half the
    bytes per step away, and its label says what it keeps."""
    p = tmp_path / "p.yaml"
    r = RUN.invoke(app, ["plan", "llama3-70b", "h100-sxm5-80g:32x8", "--global-batch", "128", "--out", str(p)])
    assert r.exit_code == 0, r.stderr
    rep = _replan(p, "--drop", "h100-sxm5-80g:17")
    n = rep["new"]
    assert n["devices"] == 224 and len(n["spare_nodes"]) == 3
    assert "hot spares" in rep["choice"] and "29-31 nodes" in rep["choice"]
    assert not n["plan"].startswith("fresh:") and n["plan"].split(":")[0] in (
        "old layout kept", "old stages, layers rebalanced", "old tp/cp kept, new pipeline", "new layout")
    old = yaml.safe_load(p.read_text())["strategy"]
    # the tensor shards keep their width; cp may change: on 28 nodes the data-parallel size must divide 128, and
    # since overlapped DP reductions cost their measured contention (cost/estimate.py DP_OVERLAP_CONTENTION) the
    # cp 1 layouts there (tp 8 pp 7 dp 4 ...) fall outside --max-loss, so the closest plan within it has cp 2
    assert n["strategy"]["tp"] == old["tp"]
    assert n["plan"].startswith("new layout") or n["strategy"]["cp"] == old["cp"]
    assert n["tokens_per_s"] >= 0.97 * rep["fresh"]["tokens_per_s"] * (1 - 1e-6)
