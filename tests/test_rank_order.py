"""Megatron's tp-pp-dp rank order (StrategySpec.tp_pp_dp_mapping, --use-tp-pp-dp-mapping): which groups share an
NVLink domain, against hand-derived placements, and the knob through runs files, plan files, the export and the
runtimes that do or do not have it."""

from __future__ import annotations

import json
import textwrap

import pytest
from _plan_docs import LLAMA3_70B
from _plan_docs import plan_doc as _plan_doc

from baige_plan.cost.estimate import dp_ranks_per_node, estimate, homogeneous_pp_link
from baige_plan.exports import megatron
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import load_runs
from baige_plan.io.serialize import strategy_dict
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.strategy import StrategySpec

CAT = Catalog.create()


def test_dp_ranks_per_node_by_order():
    # 64-GPU NVLink domain, tp 4 cp 2 pp 8 dp 8 (MLPerf v5.0 GB200 405B): the dp x cp group has 16 ranks.
    # default tp-cp-ep-dp-pp: they follow tp (stride 4), 64 // 4 = 16 share the domain;
    # tp-pp-dp: a replica (4 x 2 x 8 = 64 ranks) fills the domain, so only the group's 2 cp ranks share it
    s = StrategySpec(tp=4, cp=2, pp=8, dp=8)
    assert dp_ranks_per_node(64, s, 16) == 16
    assert dp_ranks_per_node(64, s.with_(tp_pp_dp_mapping=True), 16) == 2
    # 8-GPU nodes, tp 2 pp 2 dp 4 (cp 1): tp-pp-dp puts 8 // (2 x 2) = 2 replicas on a node -> 2 dp ranks there
    s = StrategySpec(tp=2, pp=2, dp=4)
    assert dp_ranks_per_node(8, s, 4) == 4
    assert dp_ranks_per_node(8, s.with_(tp_pp_dp_mapping=True), 4) == 2


def test_pipeline_neighbours_by_order():
    g = CAT.cluster("gb200:8x64")[0].groups[0]
    s = StrategySpec(tp=4, cp=2, pp=8, dp=8)
    # default: neighbours are tp x cp x dp = 64 ranks apart, another domain: the NIC
    assert homogeneous_pp_link(g, s).crosses == "nic"
    # tp-pp-dp: 8 ranks apart, inside the domain: NVLink
    assert homogeneous_pp_link(g, s.with_(tp_pp_dp_mapping=True)).crosses == "scaleup"


def test_estimate_moves_pipeline_traffic_onto_nvlink_and_dp_onto_the_nic():
    model = CAT.model("llama3-405b")
    cl = CAT.cluster("gb200:8x64")[0]
    job = JobSpec(global_batch=896, seq_len=8192, precision="fp8")
    s = StrategySpec(tp=4, cp=2, pp=8, dp=8, vpp=8, micro_batch=1, recompute="none",
                     account_for_embedding=True, account_for_loss=True)
    base, mapped = estimate(model, cl, job, s), estimate(model, cl, job, s.with_(tp_pp_dp_mapping=True))
    assert mapped.breakdown_s["pp_comm"] < base.breakdown_s["pp_comm"]
    assert mapped.breakdown_s["dp_comm_exposed"] > base.breakdown_s["dp_comm_exposed"]


def test_runtimes_with_and_without_the_order():
    s = StrategySpec(tp=2, pp=2, dp=2, tp_pp_dp_mapping=True)
    assert runtimes.get("megatron").refusal(s) is None
    assert "tp-pp-dp" in runtimes.get("flagscale").refusal(s.with_(**runtimes.knobs("flagscale")))
    assert "tp-pp-dp" in runtimes.get("torchtitan").refusal(s.with_(zero=3, **runtimes.knobs("torchtitan")))


def test_plan_file_and_export_carry_it():
    s = StrategySpec(tp=8, pp=4, dp=2, tp_pp_dp_mapping=True)
    assert strategy_dict(s, 64)["tp_pp_dp_mapping"] is True
    assert "tp_pp_dp_mapping" not in strategy_dict(s.with_(tp_pp_dp_mapping=False), 64)
    doc = _plan_doc(LLAMA3_70B, "megatron", tp=8, pp=4, dp=2, m=4, nodes=8, tp_pp_dp_mapping=True)
    args = {f.name: f.text for f in megatron.export(doc).files}["megatron_args.txt"]
    assert "--use-tp-pp-dp-mapping" in args.split()
    doc = _plan_doc(LLAMA3_70B, "megatron", tp=8, pp=4, dp=2, m=4, nodes=8)
    assert "--use-tp-pp-dp-mapping" not in {f.name: f.text for f in megatron.export(doc).files}["megatron_args.txt"]


@pytest.mark.parametrize("value,expected", [("true", True), ("false", False), (None, False)])
def test_runs_file_reads_it(tmp_path, value, expected):
    extra = f"\n    tp_pp_dp_mapping: {value}" if value is not None else ""
    p = tmp_path / "r.yaml"
    p.write_text(textwrap.dedent("""\
        schema_version: 1
        rows:
        - id: r1
          source: {key: s, family: f, citation: c, url: u}
          model: {name: m, layers: 8, hidden: 1024, heads: 16, kv_heads: 16, ffn_hidden: 4096, vocab: 32000,
                  seq_len: 2048, activation: swiglu}
          hardware: {gpu_model: NVIDIA H100 80GB HBM3, num_gpus: 16, gpus_per_node: 8}
          parallel:
            tp: 2
            pp: 2
            dp: 4
            micro_batch: 1
            global_batch_seqs: 32
            precision: bf16
            runtime: megatron""") + extra + "\n  results: {step_time_s: 1.0}\n")
    (case,) = load_runs(p, CAT)
    assert case.strategy.tp_pp_dp_mapping is expected


def test_space_offers_both_orders_where_they_differ():
    from baige_plan.search.space import order_choices
    assert order_choices("megatron", 2, 2) == (0, 1)
    assert order_choices("megatron", 1, 4) == (0,)        # no pipeline: one placement
    assert order_choices("megatron", 2, 1) == (0,)        # no data parallelism: one placement
    assert order_choices("flagscale", 2, 2) == (0,)       # a runtime without the option
    assert order_choices("megatron", 2, 2, True) == (1,)
    assert order_choices("megatron", 1, 2, True) == ()


def test_plan_takes_the_faster_order():
    """405B on 512 GB200 in 64-GPU NVLink domains with tp 4 pp 8 cp 2 pinned: the search returns the faster of the
    two orders' estimates (evaluated directly here)."""
    from baige_plan.search.solver import search
    from baige_plan.search.space import Bounds, Pins
    model = CAT.model("llama3-405b")
    cl = CAT.cluster("gb200:8x64")[0]
    job = JobSpec(global_batch=896, seq_len=8192, precision="fp8")
    pins = Pins(tp=4, pp=8, cp=2, micro_batch=1, vpp=8, recompute="none", zero=1, account_for_embedding=True,
                account_for_loss=True, sequence_parallel=True)
    best = search(model, cl, job, Bounds(max_micro_batch=1), pins).best
    s = StrategySpec(tp=4, cp=2, pp=8, dp=8, vpp=8, micro_batch=1, recompute="none", sequence_parallel=True,
                     account_for_embedding=True, account_for_loss=True, **runtimes.knobs("megatron"))
    times = {o: estimate(model, cl, job, s.with_(tp_pp_dp_mapping=o)).step_time_s for o in (False, True)}
    assert best.strategy.tp_pp_dp_mapping == (times[True] < times[False])
    assert best.step_time_s == pytest.approx(min(times.values()))


def test_placement_follows_the_order():
    """search/placement.py's worked example (tp 2, dp 2, pp 2 on 2 nodes x 4): the default order puts replica 1 of
    stage 0 on ranks 2-3 and stage 1 on node 1; tp-pp-dp puts stage 1 of replica 0 on ranks 2-3 and replica 1 on
    node 1 (Megatron RankGenerator with order tp-cp-ep-pp-dp)."""
    from baige_plan.search.placement import placement
    d = placement(2, 1, 2, 2, "g", 4)
    m = placement(2, 1, 2, 2, "g", 4, tp_pp_dp=True)
    assert [(s.stage, s.replica) for s in d] == [(0, 0), (0, 0), (0, 1), (0, 1), (1, 0), (1, 0), (1, 1), (1, 1)]
    assert [(s.stage, s.replica) for s in m] == [(0, 0), (0, 0), (1, 0), (1, 0), (0, 1), (0, 1), (1, 1), (1, 1)]
    assert [s.tp_rank for s in m] == [0, 1] * 4 and [s.node for s in m] == [0] * 4 + [1] * 4


def test_plan_pin_keeps_one_order():
    """`plan --tp-pp-dp-mapping` pins the order: the plan file says so and the export passes the flag."""
    from typer.testing import CliRunner

    from baige_plan.cli.app import app
    args = ["plan", "llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--seq-len", "4096", "--tp", "2",
            "--pp", "2", "--format", "json"]
    on = json.loads(CliRunner().invoke(app, args + ["--tp-pp-dp-mapping"]).stdout)
    off = json.loads(CliRunner().invoke(app, args + ["--no-tp-pp-dp-mapping"]).stdout)
    assert on["plans"][0]["strategy"].get("tp_pp_dp_mapping") is True
    assert "tp_pp_dp_mapping" not in off["plans"][0]["strategy"]
