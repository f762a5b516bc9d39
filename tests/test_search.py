"""Search == exhaustive oracle on small spaces (the oracle walks the plain product + check_strategy)."""

from __future__ import annotations

import pytest

from baige_plan.cost.estimate import estimate
from baige_plan.io.catalog import Catalog
from baige_plan.search.bounds import Bounds as CostBounds
from baige_plan.search.oracle import oracle, oracle_space
from baige_plan.search.solver import search
from baige_plan.search.space import Bounds, Pins, enumerate_space, from_strategy, space_array, to_strategy
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import MLASpec, ModelSpec, MoESpec
from baige_plan.specs.topology import ClusterSpec, GroupSpec

CAT = Catalog.create()


def _cluster(chip: str, nodes: int, dpn: int) -> ClusterSpec:
    return ClusterSpec(name="t", groups=(GroupSpec(name="g", chip=CAT.chip(chip), nodes=nodes, devices_per_node=dpn),))


DENSE = ModelSpec(name="d6", layers=6, hidden=4096, heads=32, ffn_hidden=16384, vocab=32000, seq_len=2048,
                  activation="gelu", dropout=0.1)
GQA = ModelSpec(name="g8", layers=8, hidden=8192, heads=16, kv_heads=4, ffn_hidden=28672, vocab=64000,
                seq_len=4096)
MOE = ModelSpec(name="m4", layers=4, hidden=2048, heads=16, kv_heads=8, ffn_hidden=8192, vocab=32000, seq_len=1024,
                moe=MoESpec(experts=4, top_k=2, expert_ffn_hidden=4096, layer_freq=2, first_dense_layers=1))

# sliding-window attention on every other layer (gpt-oss's pattern) with experts: the bounds take the cheaper
# (windowed) layer of each kind, and the EP-overlap bound is dropped (bounds.py _layer_time)
SWA_MOE = ModelSpec(name="swa", layers=4, hidden=1024, heads=16, kv_heads=4, head_dim=64, ffn_hidden=2048, vocab=32000,
                    seq_len=2048, sliding_window=128, full_attention_every=2,
                    moe=MoESpec(experts=8, top_k=2, expert_ffn_hidden=1024))
# multi-head latent attention with a dense first layer and multi-token prediction on the last stage
MLA = ModelSpec(name="mla", layers=5, hidden=1024, heads=16, ffn_hidden=4096, vocab=32000, seq_len=2048,
                mla=MLASpec(kv_lora_rank=128, qk_head_dim=64, qk_rope_head_dim=32, v_head_dim=64, q_lora_rank=256),
                moe=MoESpec(experts=8, top_k=2, expert_ffn_hidden=512, shared_experts=1, first_dense_layers=1),
                mtp_layers=1)

CASES = [
    # model, cluster, job, bounds, pins
    (DENSE, _cluster("a100-sxm4-40g", 2, 4), JobSpec(16, 2048), Bounds(max_micro_batch=4), Pins()),
    (GQA, _cluster("h100-sxm5-80g", 1, 8), JobSpec(8, 4096), Bounds(max_micro_batch=2, max_memory_frac=0.5), Pins()),
    (MOE, _cluster("a100-sxm4-80g", 2, 2), JobSpec(8, 1024), Bounds(max_micro_batch=2), Pins()),
    (DENSE, _cluster("v100-sxm2-16g", 4, 2), JobSpec(8, 2048, "fp16"), Bounds(max_micro_batch=2), Pins()),
    (DENSE, _cluster("a100-sxm4-40g", 2, 4), JobSpec(16, 2048), Bounds(), Pins(zero=1, recompute="full")),
    (SWA_MOE, _cluster("h100-sxm5-80g", 2, 2), JobSpec(8, 2048), Bounds(max_micro_batch=1), Pins()),
    (MLA, _cluster("h100-sxm5-80g", 2, 2), JobSpec(8, 2048), Bounds(max_micro_batch=1), Pins()),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_space_equals_oracle_space(case):
    model, cluster, job, bounds, pins = CASES[case]
    g = cluster.groups[0]
    fast = sorted(enumerate_space(model, cluster.devices, g.devices_per_node, job, bounds, pins))
    slow = sorted(from_strategy(s) for s in oracle_space(model, cluster, job, bounds, pins))
    assert fast == slow
    assert len(fast) > 10


@pytest.mark.parametrize("case", range(len(CASES)))
def test_refusal_probe_is_the_strategy(case):
    """enumerate_space asks the runtime's own refusal of an unchecked probe (space._probe, no StrategySpec checks
    per candidate): it must be the very strategy to_strategy builds, field for field, and valid."""
    from baige_plan.search.space import _probe
    from baige_plan.specs import runtimes
    from baige_plan.specs.strategy import StrategySpec, check_strategy

    model, cluster, job, bounds, pins = CASES[case]
    base = StrategySpec(**runtimes.knobs(bounds.runtime))
    for c in enumerate_space(model, cluster.devices, cluster.groups[0].devices_per_node, job, bounds, pins):
        p, s = _probe(c, base), to_strategy(c, bounds.runtime)
        assert p == s and vars(p) == vars(s)
        check_strategy(p, model, job, cluster.devices)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_search_equals_oracle(case):
    model, cluster, job, bounds, pins = CASES[case]
    top = 5
    want = oracle(model, cluster, job, bounds, pins, top=top)
    got = search(model, cluster, job, bounds, pins, top=top)
    assert [k for _, k, _ in want] == list(got.keys)
    assert [t for t, _, _ in want] == [e.step_time_s for e in got.plans]
    assert got.status == "OPTIMAL" if want else got.status == "INFEASIBLE"


def test_some_case_has_infeasible_candidates():
    # the memory pre-check must actually prune something in the suite (else it is untested)
    model, cluster, job, bounds, pins = CASES[3]
    r = search(model, cluster, job, bounds, pins)
    assert r.feasible < r.candidates


@pytest.mark.parametrize("case", range(len(CASES)))
def test_bounds_are_bounds(case):
    model, cluster, job, bounds, pins = CASES[case]
    g = cluster.groups[0]
    a = space_array(model, cluster.devices, g.devices_per_node, job, bounds, pins)
    cb = CostBounds(model, g, job)
    mem, lb = cb.memory_gib(a), cb.time_lb_s(a)
    for i in range(0, len(a), max(1, len(a) // 150)):
        e = estimate(model, cluster, job, to_strategy(tuple(int(x) for x in a[i])))
        assert lb[i] <= e.step_time_s
        assert mem[i] <= e.peak_memory_gib * (1 + 1e-9)
        if model.layers % a[i][1] == 0 and model.moe is None:   # even dense split: the pre-check is exact
            assert mem[i] == pytest.approx(e.peak_memory_gib, rel=1e-9)


def test_nothing_fits_names_memory():
    model = ModelSpec(name="big", layers=8, hidden=16384, heads=128, ffn_hidden=65536, vocab=64000, seq_len=2048)
    r = search(model, _cluster("v100-sxm2-16g", 1, 2), JobSpec(4, 2048, "fp16"))
    assert r.status == "INFEASIBLE" and not r.plans
    assert "memory" in r.binding and "GiB" in r.binding


def test_pins_respected():
    model, cluster, job, bounds, _ = CASES[0]
    r = search(model, cluster, job, bounds, Pins(tp=2, pp=2, micro_batch=1), top=3)
    assert all(e.strategy.tp == 2 and e.strategy.pp == 2 and e.strategy.micro_batch == 1 for e in r.plans)


def test_time_limit_reports_gap():
    model, cluster, job, bounds, pins = CASES[0]
    full = search(model, cluster, job, bounds, pins)
    r = search(model, cluster, job, bounds, pins, time_limit_s=0.0)
    assert r.evaluated <= full.evaluated and r.plans
    if r.status == "FEASIBLE":
        assert 0.0 <= r.gap < 1.0 and r.best.step_time_s >= full.best.step_time_s
    else:
        assert r.status == "OPTIMAL" and r.keys[0] == full.keys[0]
