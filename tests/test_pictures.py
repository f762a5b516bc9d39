"""Pictures (`explain --svg/--png`, `backtest --plot`; baige_plan/present/pictures.py), the pipeline schedule they
draw, and `explain` on mixed clusters printing the numbers `evaluate --plan` prints (issue 12).

The schedule, the node-row folding, the missing-extra message and the explain/evaluate agreement need no
matplotlib; the rendering tests skip when it is not installed (CI installs the `plot` extra)."""

from __future__ import annotations

import importlib.util
import json
import random
import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.io.plans import plan_inputs
from baige_plan.present import pictures
from baige_plan.present.pictures import INSTALL, _node_rows, fmt_s, simulate_schedule, stage_order

RUN = CliRunner()
HOMOG = ["llama2-7b", "a100-sxm4-80g:2x8", "--global-batch", "64", "--seq-len", "4096", "--tp", "2", "--pp", "2"]
MIXED = ["llama2-7b", "a100-sxm4-80g:2x8+ascend-910b:2x8", "--global-batch", "64", "--seq-len", "4096"]
SVG = "{http://www.w3.org/2000/svg}"
needs_mpl = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                               reason="matplotlib (the optional plot extra) is not installed")


def _ok(args, code=0):
    r = RUN.invoke(app, args)
    assert r.exit_code == code, (r.exit_code, r.output, r.stderr)
    return r


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    d = tmp_path_factory.mktemp("pictures")
    homog, mixed, edited, two = d / "homog.yaml", d / "mixed.yaml", d / "mixed-edited.yaml", d / "two-shapes.yaml"
    _ok(["plan", *HOMOG, "--out", str(homog)])
    _ok(["plan", *MIXED, "--out", str(mixed)])
    doc = yaml.safe_load(mixed.read_text())
    st = doc["pipelines"][0]["stages"]
    assert len(st) >= 2
    cut = st[0]["layers"][1] - 1                 # move one layer from stage 0 to stage 1: the stored numbers go stale
    st[0]["layers"][1], st[1]["layers"][0] = cut, cut
    edited.write_text(yaml.safe_dump(doc, sort_keys=False))
    # two pipeline shapes: half the replicas keep the planned split, half take the edited one
    doc2 = yaml.safe_load(mixed.read_text())
    a, b = doc2["pipelines"][0], doc["pipelines"][0]
    assert a["replicas"] % 2 == 0
    a["replicas"] = b["replicas"] = a["replicas"] // 2
    doc2["pipelines"] = [a, b]
    two.write_text(yaml.safe_dump(doc2, sort_keys=False))
    return SimpleNamespace(dir=d, homog=homog, mixed=mixed, edited=edited, two=two)


# -- the schedule --------------------------------------------------------------------------------
@pytest.mark.parametrize("pp,m,vpp", [(1, 5, 1), (2, 1, 1), (4, 4, 1), (4, 16, 1), (3, 30, 1), (4, 8, 2), (4, 4, 3),
                                      (8, 64, 6), (2, 10, 4)])
def test_equal_stages_give_the_closed_form(pp, m, vpp):
    f, b = 1.0, 2.0
    ops, total = simulate_schedule([f] * pp, [b] * pp, m, vpp)
    assert len(ops) == 2 * pp * m * vpp
    assert total == pytest.approx(m * (f + b) + (pp - 1) * (f + b) / vpp)


def test_schedule_runs_every_op_once_in_order_and_respects_dependencies():
    rng = random.Random(7)
    for _ in range(60):
        pp = rng.randint(1, 6)
        vpp = rng.choice([1, 1, 2, 3]) if pp > 1 else 1
        m = pp * rng.randint(1, 6) if vpp > 1 else rng.randint(1, 20)
        f = [rng.uniform(0.5, 1.5) for _ in range(pp)]
        b = [x * rng.uniform(1.5, 3.0) for x in f]
        ops, total = simulate_schedule(f, b, m, vpp)
        key = {(o.kind, o.stage, o.micro_batch, o.chunk): o for o in ops}
        assert len(key) == len(ops) == 2 * pp * m * vpp
        for i in range(pp):      # each stage runs its own 1F1B order, one op at a time
            mine = [o for o in ops if o.stage == i]
            assert [(o.kind, o.micro_batch, o.chunk) for o in mine] == stage_order(pp, i, m, vpp)
            assert all(a.end <= c.start + 1e-12 for a, c in zip(mine, mine[1:], strict=False))
        for (kind, i, j, c), o in key.items():
            if kind == "F":
                dep = key.get(("F", i - 1, j, c)) if i else key.get(("F", pp - 1, j, c - 1))
            else:
                dep = key.get(("B", i + 1, j, c)) if i < pp - 1 else key.get(("B", 0, j, c + 1))
                assert o.start >= key[("F", i, j, c)].end - 1e-12
            if dep is not None:
                assert o.start >= dep.end - 1e-12
        t = [x + y for x, y in zip(f, b, strict=True)]
        closed = m * max(t) + (sum(t) - max(t)) / vpp       # the estimate's pipeline time
        # the slowest stage's own work bounds it below; the closed form is close above (stages up to 3x apart here)
        assert m * max(t) - 1e-9 <= total <= closed * 1.07


def test_node_rows_one_per_node_then_alike_nodes_merged_then_elided():
    def cluster(*groups):
        return SimpleNamespace(groups=[SimpleNamespace(name=n, nodes=k, devices_per_node=8) for n, k in groups])

    def place(group, nodes, stage_of):
        return [{"group": group, "node": n, "device": d, "pipeline": 0, "stage": stage_of(n), "tp_rank": d % 2,
                 "cp_rank": 0, "replica": d // 2} for n in range(nodes) for d in range(8)]

    rows, merged, elided = _node_rows(cluster(("gpu", 64)), place("gpu", 64, lambda n: n // 16))
    assert [r.first for r in rows] == list(range(64)) and merged == elided == 0       # every node drawn
    rows, merged, elided = _node_rows(cluster(("gpu", 80)), place("gpu", 80, lambda n: n // 20))
    assert [(r.first, r.count) for r in rows] == [(0, 20), (20, 20), (40, 20), (60, 20)] and elided == 0
    # 100 + 40 nodes, every node a different stage: nothing merges, at most 64 rows, both groups shown
    cl = cluster(("gpu", 100), ("npu", 40))
    rows, merged, elided = _node_rows(cl, place("gpu", 100, lambda n: n) + place("npu", 40, lambda n: 100 + n))
    assert len(rows) <= 64 and merged == 0 and {r.group for r in rows} == {"gpu", "npu"}
    assert sum(r.count for r in rows) == 140 and elided == sum(r.count for r in rows if r.first is None) > 0
    for g, n in (("gpu", 100), ("npu", 40)):          # each group keeps its first and last node
        firsts = [r.first for r in rows if r.group == g and r.first is not None]
        assert firsts[0] == 0 and firsts[-1] == n - 1


# -- without the extra ---------------------------------------------------------------------------
def test_without_matplotlib_exit_2_naming_the_extra(plans, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)      # `import matplotlib` raises ImportError
    for args in (["explain", str(plans.homog), "--svg", str(tmp_path / "a.svg")],
                 ["explain", str(plans.homog), "--png", str(tmp_path / "a.png")],
                 ["backtest", "benchmarks/real/runs_h100.yaml", "--plot", str(tmp_path / "b.svg")]):
        r = RUN.invoke(app, args)
        assert r.exit_code == 2, (r.output, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "'plot' extra" in lines[0] and INSTALL in lines[0], r.stderr
        assert r.stdout == "" and "Traceback" not in r.output
    assert not list(tmp_path.iterdir())


# -- explain on a mixed cluster prints evaluate's numbers (issue 12) --------------------------------
def _evaluate(path: Path) -> dict:
    r = RUN.invoke(app, ["evaluate", "--plan", str(path), "--format", "json"])
    assert r.exit_code in (0, 1), (r.output, r.stderr)
    return json.loads(r.stdout)


@pytest.mark.parametrize("which", ["mixed", "edited", "two"])
def test_explain_on_mixed_cluster_matches_evaluate_plan(plans, which):
    path = getattr(plans, which)
    ev = _evaluate(path)
    out = _ok(["explain", str(path)]).stdout
    want = [f"{fmt_s(ev['step_time_s'])}   MFU {ev['mfu']:.1%}   {ev['tokens_per_s']:,.0f} tokens/s",
            f"{ev['heterogeneous_efficiency']:.1%} of the sum of each group alone",
            f"{ev['peak_memory_gib']:.1f} GiB of {ev['memory_capacity_gib']:g} GiB",
            *(f"{v:,.0f}" for v in ev["standalone_tokens_per_s"].values()),
            *(f"{g} {n}" for g, n in ev["devices_used"].items()),
            *(f"{b['seconds_per_step']:.4g}" for b in ev["bridge_traffic"]),
            *(f"{v:.4g}" for v in ev["breakdown_s"].values()),
            *(f"{v:.2f}" for v in ev["memory_gib"].values()),
            *(f"{st['memory_gib']:.1f}" for st in ev["stages"])]          # the per-stage table (slowest shape)
    assert len(ev["shapes"]) == (2 if which == "two" else 1)
    for sh in ev["shapes"]:
        want.append(fmt_s(max(st["time_per_micro_batch_s"] for st in sh["stages"])))
    missing = [w for w in want if w not in out]
    assert not missing, (missing, out)
    for k, sh in enumerate(ev["shapes"]):          # the shapes table: shape, replicas, micro-batches
        assert re.search(rf"│\s+{k} │\s+{sh['replicas']} │\s+{sh['micro_batches']} │", out), out
    if which == "edited":     # the numbers stored in the edited file are stale: explain must not print them
        stored = yaml.safe_load(path.read_text())["estimate"]
        assert stored["heterogeneous_efficiency"] != pytest.approx(ev["heterogeneous_efficiency"], rel=1e-3)
        assert f"{stored['heterogeneous_efficiency']:.1%} of the sum" not in out


# -- the pictures ----------------------------------------------------------------------------------
def _svg(path: Path) -> tuple[ET.Element, str]:
    root = ET.parse(path).getroot()
    assert root.tag == SVG + "svg"
    text = "\n".join("".join(t.itertext()) for t in root.iter(SVG + "text"))
    return root, text


def _ids(root: ET.Element, prefix: str) -> list[str]:
    return [el.get("id") for el in root.iter() if (el.get("id") or "").startswith(prefix)]


@pytest.fixture(scope="module")
def drawn(plans):
    pytest.importorskip("matplotlib")
    out = {}
    for name in ("homog", "mixed"):
        svg, png = plans.dir / f"{name}.svg", plans.dir / f"{name}.png"
        out[name] = (svg, png, _ok(["explain", str(getattr(plans, name)), "--svg", str(svg), "--png", str(png)]))
    return out


@needs_mpl
def test_homogeneous_picture_shows_schedule_placement_and_memory(plans, drawn):
    svg, png, r = drawn["homog"]
    assert "per stage" in r.stdout                           # the tables are still printed
    root, text = _svg(svg)
    doc = yaml.safe_load(plans.homog.read_text())
    ev = _evaluate(plans.homog)
    assert fmt_s(ev["step_time_s"]) in text and f"MFU {ev['mfu']:.1%}" in text
    pp = doc["strategy"]["pp"]
    for st in ev["stages"]:
        assert f"{st['memory_gib']:.1f}" in text.splitlines()          # each stage's peak memory, as its own label
        assert f"stage {st['index']}" in text
    assert "capacity 80 GiB (a100-sxm4-80g)" in text
    assert "pipeline schedule" in text and "placement" in text and "memory per device by stage" in text
    # one coloured cell per device used, one outline per TP group
    place = doc["placement"]
    cells = _ids(root, "device-")
    assert len(cells) == len(set(cells)) == len(place) == 16
    assert set(cells) == {f"device-{p['group']}-{p['node']}-{p['device']}" for p in place}
    tp_groups = {(p["pipeline"], p["replica"], p["stage"], p["cp_rank"]) for p in place}
    assert doc["strategy"]["tp"] > 1 and len(_ids(root, "tpgroup-")) == len(tp_groups)
    assert len(_ids(root, "memory-")) == pp and not _ids(root, "idle-")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_mpl
def test_mixed_picture_shows_both_groups_and_evaluates_numbers(plans, drawn):
    svg, _, _ = drawn["mixed"]
    root, text = _svg(svg)
    ev = _evaluate(plans.mixed)
    doc = yaml.safe_load(plans.mixed.read_text())
    groups = [g["name"] for g in doc["inputs"]["cluster"]["groups"]]
    assert fmt_s(ev["step_time_s"]) in text
    assert f"peak memory {ev['peak_memory_gib']:.1f} GiB of {ev['memory_capacity_gib']:g} GiB" in text
    labels = text.splitlines()
    for sh in ev["shapes"]:
        for st in sh["stages"]:
            assert f"{st['memory_gib']:.1f}" in labels
    for g in groups:
        assert f"{g} node 0" in text                                  # placement rows of both groups
        assert any(c.startswith(f"device-{g}-") for c in _ids(root, "device-"))
    _, cluster, _ = plan_inputs(doc, str(plans.mixed))
    for g in cluster.groups:
        assert f"capacity {g.chip.need('memory_gib'):g} GiB ({g.name})" in text
    assert "bridge (cpu-forwarding)" in text                          # the stage boundary that crosses the bridge
    assert len(_ids(root, "device-")) == sum(ev["devices_used"].values()) == len(doc["placement"])


@needs_mpl
def test_pictures_are_byte_identical_across_runs(plans, drawn, tmp_path):
    for name in ("homog", "mixed"):
        svg, png, _ = drawn[name]
        svg2, png2 = tmp_path / f"{name}.svg", tmp_path / f"{name}.png"
        _ok(["explain", str(getattr(plans, name)), "--svg", str(svg2), "--png", str(png2)])
        assert svg2.read_bytes() == svg.read_bytes()
        assert png2.read_bytes() == png.read_bytes()


@needs_mpl
def test_many_micro_batches_break_the_time_axis(tmp_path, monkeypatch):
    plan, svg = tmp_path / "p.yaml", tmp_path / "p.svg"
    _ok(["plan", "llama2-7b", "a100-sxm4-80g:2x8", "--global-batch", "512", "--seq-len", "4096", "--pp", "4",
         "--vpp", "1", "--tp", "2", "--micro-batch", "1", "--out", str(plan)])
    m = yaml.safe_load(plan.read_text())["estimate"]["micro_batches"]
    _ok(["explain", str(plan), "--svg", str(svg)])
    _, text = _svg(svg)
    assert "axis broken:" in text and "more micro-batches of steady state" in text and "extrapolated" not in text
    assert f"{m} micro-batches per replica" in text
    # past MAX_SIM_OPS the steady state is extrapolated, and the picture says so
    monkeypatch.setattr(pictures, "MAX_SIM_OPS", 2 * 4 * 16)
    _ok(["explain", str(plan), "--svg", str(svg)])
    _, text = _svg(svg)
    assert "axis broken:" in text and "extrapolated) elided" in text and f"{m} micro-batches per replica" in text


@needs_mpl
def test_picture_arguments_are_checked(plans, drawn, tmp_path):    # `drawn`: matplotlib's font cache is built
    for args in (["--svg", str(tmp_path / "x.png")], ["--png", str(tmp_path / "x.svg")], ["--svg", str(tmp_path)],
                 ["--svg", str(tmp_path / "missing" / "x.svg")]):
        r = RUN.invoke(app, ["explain", str(plans.homog), *args])
        assert r.exit_code == 2, (args, r.output, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.output


@needs_mpl
def test_backtest_plot(tmp_path):
    runs = "benchmarks/real/runs_h100.yaml"
    doc = json.loads(_ok(["backtest", runs, "--format", "json"]).stdout)
    svg, again, png = tmp_path / "b.svg", tmp_path / "b2.svg", tmp_path / "b.png"
    _ok(["backtest", runs, "--plot", str(svg)])
    _ok(["backtest", runs, "--plot", str(again), "--format", "json"])
    _ok(["backtest", runs, "--plot", str(png)])
    assert svg.read_bytes() == again.read_bytes() and png.read_bytes()[:4] == b"\x89PNG"
    root, text = _svg(svg)
    rows = [r for r in doc["rows"] if r["measured_step_time_s"]]
    assert len(_ids(root, "run-")) == len(rows) > 0
    assert "y = x (predicted = measured)" in text and "±10 %" in text
    for r in rows:
        assert r["id"] in text and f"{r['step_time_error']:+.1%}" in text
    inside = sum(abs(r["step_time_error"]) <= 0.10 for r in rows)
    assert f"{inside} within ±10 %" in text
    r = RUN.invoke(app, ["backtest", runs, "--plot", str(tmp_path / "b.pdf")])
    assert r.exit_code == 2 and ".svg or .png" in r.stderr


def test_tp_groups_stay_whole_in_placement(plans):
    """The placement the picture outlines: each TP group sits inside one node, on consecutive devices."""
    doc = yaml.safe_load(plans.homog.read_text())
    groups = defaultdict(list)
    for p in doc["placement"]:
        groups[(p["pipeline"], p["replica"], p["stage"], p["cp_rank"])].append((p["group"], p["node"], p["device"]))
    for cells in groups.values():
        assert len({c[:2] for c in cells}) == 1
        ds = sorted(c[2] for c in cells)
        assert ds == list(range(ds[0], ds[0] + len(ds)))


@needs_mpl
def test_every_pipeline_shape_is_drawn(plans, tmp_path):
    svg = tmp_path / "two.svg"
    _ok(["explain", str(plans.two), "--svg", str(svg)])
    root, text = _svg(svg)
    ev = _evaluate(plans.two)
    assert "shape 0: 1F1B" in text and "shape 1: 1F1B" in text
    mem = _ids(root, "memory-")
    assert len(mem) == sum(len(sh["stages"]) for sh in ev["shapes"]) and {m.split("-")[1] for m in mem} == {"0", "1"}
    labels = text.splitlines()
    for sh in ev["shapes"]:
        assert all(f"{st['memory_gib']:.1f}" in labels for st in sh["stages"])
