"""Issue 18 item 5 (search speed): what the faster search skips cannot change a plan.

- the homogeneous search's data-parallel bound (solver.search dp_bound, bounds.Bounds.dp_lb_s) is a lower bound of
  every strategy's estimate, and with it the search returns the oracle's plans (fewer full estimates);
- standalone_best(keep=k) is the first k of the full list;
- stage_cost with a search's memo gives the numbers it gives without one, also where strategies that differ only
  in their stages share a stage context;
- cost/memory.py's memoised scalar paths equal the numpy ones;
- the heterogeneous exact loop asks the runtime before estimating, and `_refusal` says what `_runtime_ok` decides;
- `baige-plan` builds only the command it runs, and `app` is the whole CLI.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from baige_plan.cost.estimate import estimate, stage_cost
from baige_plan.cost.memory import comm_groups, inflight_microbatches, outside_gib
from baige_plan.io.catalog import Catalog
from baige_plan.search.bounds import Bounds as CostBounds
from baige_plan.search.oracle import oracle
from baige_plan.search.solver import search
from baige_plan.search.space import Bounds, Pins, space_array, to_strategy
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec, MoESpec
from baige_plan.specs.strategy import StrategySpec, stage_layers
from baige_plan.specs.topology import ClusterSpec, GroupSpec

CAT = Catalog.create()


def _cluster(chip: str, nodes: int, dpn: int) -> ClusterSpec:
    return ClusterSpec(name="t", groups=(GroupSpec(name="g", chip=CAT.chip(chip), nodes=nodes, devices_per_node=dpn),))


DENSE = ModelSpec(name="d6", layers=6, hidden=4096, heads=32, ffn_hidden=16384, vocab=32000, seq_len=2048,
                  activation="gelu", dropout=0.1)
MOE = ModelSpec(name="m4", layers=4, hidden=2048, heads=16, kv_heads=8, ffn_hidden=8192, vocab=32000, seq_len=1024,
                moe=MoESpec(experts=4, top_k=2, expert_ffn_hidden=4096, layer_freq=2, first_dense_layers=1))
SAILOR = CAT.cluster("topologies/cloud-a100-v100-512.yaml")[0]
A100_GROUP = ClusterSpec(name="a100", groups=(SAILOR.group("a100"),))

CASES = [
    # model, cluster, job, bounds, pins
    (DENSE, _cluster("a100-sxm4-40g", 2, 4), JobSpec(16, 2048), Bounds(max_micro_batch=4), Pins()),
    (MOE, _cluster("a100-sxm4-80g", 2, 2), JobSpec(8, 1024), Bounds(max_micro_batch=2), Pins()),
    (DENSE, _cluster("v100-sxm2-16g", 4, 2), JobSpec(8, 2048, "fp16"), Bounds(max_micro_batch=2), Pins()),
    (DENSE, _cluster("a100-sxm4-40g", 4, 4), JobSpec(64, 2048), Bounds(max_micro_batch=2, runtime="deepspeed"),
     Pins()),
    (CAT.model("opt-350m"), A100_GROUP, JobSpec(1024, 2048, "fp32"), Bounds(runtime="flagscale"), Pins()),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_dp_bound_is_a_lower_bound(case):
    model, cluster, job, bounds, pins = CASES[case]
    g = cluster.groups[0]
    a = space_array(model, cluster.devices, g.devices_per_node, job, bounds, pins)
    cb = CostBounds(model, g, job, bounds.runtime)
    lb, _micro, t_max, total, t0, opt = cb.time_lb_parts(a)
    assert np.array_equal(lb, cb.time_lb_s(a))
    checked = 0
    for i in range(0, len(a), max(1, len(a) // 120)):
        s = to_strategy(tuple(int(x) for x in a[i]), bounds.runtime)
        if s.pp == 1:
            continue
        e = estimate(model, cluster, job, s)
        assert cb.dp_lb_s(s, float(t_max[i]), float(total[i]), float(t0[i]), float(opt[i])) <= e.step_time_s
        checked += 1
    assert checked > 5


@pytest.mark.slow          # the exhaustive oracle: seconds
@pytest.mark.parametrize("case", range(len(CASES) - 1))
def test_search_with_dp_bound_equals_oracle(case):
    model, cluster, job, bounds, pins = CASES[case]
    want = oracle(model, cluster, job, bounds, pins, top=5)
    got = search(model, cluster, job, bounds, pins, top=5, dp_bound=True)
    assert [k for _, k, _ in want] == list(got.keys)
    assert [t for t, _, _ in want] == [e.step_time_s for e in got.plans]


def test_dp_bound_skips_estimates_not_plans():
    """The cloud A100 group (fp32, 20 Gb/s VMs): the data-parallel sync dominates, so the bound decides most rows."""
    model, cluster, job, bounds, pins = CASES[-1]
    plain = search(model, cluster, job, bounds, pins, top=2)
    fast = search(model, cluster, job, bounds, pins, top=2, dp_bound=True)
    assert plain.keys == fast.keys and [e.step_time_s for e in plain.plans] == [e.step_time_s for e in fast.plans]
    assert fast.evaluated < plain.evaluated / 2


@pytest.mark.parametrize("recompute", ["selective", "full"])
def test_standalone_best_keep_is_the_head_of_the_list(recompute):
    from baige_plan.search.hetero_templates import standalone_best

    model, job = CAT.model("opt-350m"), JobSpec(1024, 2048, "fp32")
    base = StrategySpec(recompute=recompute, sequence_parallel=True, **runtimes.knobs("flagscale"))
    for g in SAILOR.groups:
        full = standalone_best(model, g, job, base, 0.9)
        assert len(full) > 2
        for k in (1, 2, 3):
            got = standalone_best(model, g, job, base, 0.9, keep=k)
            assert [(t, key) for t, key, _ in got] == [(t, key) for t, key, _ in full[:k]]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_stage_cost_with_a_memo_is_the_same(case):
    model, cluster, job, bounds, pins = CASES[case]
    g = cluster.groups[0]
    a = space_array(model, cluster.devices, g.devices_per_node, job, bounds, pins)
    memo: dict = {}
    for i in range(0, len(a), max(1, len(a) // 60)):
        s = to_strategy(tuple(int(x) for x in a[i]), bounds.runtime)
        m = job.global_batch // (s.dp * s.micro_batch)
        first = 0
        for idx, n in enumerate(stage_layers(s, model.layers)):
            for _ in range(2):      # the second call reads the memo
                assert stage_cost(model, g, job, s, idx, first, n, m, memo=memo) == \
                    stage_cost(model, g, job, s, idx, first, n, m)
            first += n
        assert estimate(model, cluster, job, s, memo=memo) == estimate(model, cluster, job, s)
    assert memo


@pytest.mark.parametrize("case", list(range(len(CASES))) + ["eager"])
def test_stage_context_shared_across_stage_only_fields(case):
    """Strategies that differ only in how the layers are cut into stages and replicated (estimate._STAGE_ONLY_FIELDS:
    pp, dp, vpp, first/last stage layers, accounting, balanced partition) share one stage context in a memo: every
    stage costed through the shared one equals the stage costed without a memo."""
    from baige_plan.cost.estimate import _STAGE_ONLY_FIELDS

    model, cluster, job, bounds, pins = CASES[0 if case == "eager" else case]
    if case == "eager":
        bounds = Bounds(max_micro_batch=4, runtime="torchtitan")
    g = cluster.groups[0]
    a = space_array(model, cluster.devices, g.devices_per_node, job, bounds, pins)
    by_ctx: dict = {}
    for row in a.tolist():
        s = to_strategy(tuple(row), bounds.runtime)
        ctx = tuple(v for k, v in vars(s).items() if k not in _STAGE_ONLY_FIELDS)
        if len(by_ctx.setdefault(ctx, [])) < 4:
            by_ctx[ctx].append(s)
    shared = [ss for ss in by_ctx.values() if len({(s.pp, s.dp, s.vpp) for s in ss}) > 1]
    assert shared       # the space has strategies that share a context
    memo: dict = {}
    for ss in shared[:40]:
        for s in ss:
            m = job.global_batch // (s.dp * s.micro_batch)
            split = stage_layers(s, model.layers)
            for idx in sorted({0, len(split) - 1}):
                first = sum(split[:idx])
                assert stage_cost(model, g, job, s, idx, first, split[idx], m, memo=memo) == \
                    stage_cost(model, g, job, s, idx, first, split[idx], m)


def test_memory_scalar_memos_equal_numpy():
    mem = runtimes.get("megatron").memory
    for tp, cp, dp, pp, ep, etp in [(1, 1, 1, 1, 1, 1), (8, 2, 4, 3, 2, 1), (2, 1, 16, 8, 1, 2)]:
        arr = comm_groups(*(np.array([x]) for x in (tp, cp, dp, pp, ep, etp)))
        assert comm_groups(tp, cp, dp, pp, ep, etp) == int(arr[0])
        g = comm_groups(tp, cp, dp, pp, ep, etp)
        assert outside_gib(mem, g) == float(outside_gib(mem, np.array([g]))[0])
    for pp, vpp, m, stage in [(1, 1, 4, 0), (4, 1, 8, 1), (4, 2, 8, 0), (8, 3, 2, 7)]:
        want = float(inflight_microbatches(np.array([pp]), np.array([vpp]), np.array([m]), np.array([stage]))[0])
        assert inflight_microbatches(pp, vpp, m, stage) == want
        assert isinstance(inflight_microbatches(pp, vpp, m, stage), float)


def test_refusal_is_what_runtime_ok_decides():
    from baige_plan.search import hetero as H

    model, job = CAT.model("opt-350m"), JobSpec(1024, 2048, "fp32")
    base = StrategySpec(sequence_parallel=True, **runtimes.knobs("flagscale"))
    temps, _ = H._templates(model, SAILOR, job, base, 0.9, 2, None)
    seen = {True: 0, False: 0}
    for t in temps[:80]:
        sol = H._solve_template(model, SAILOR, job, t, base, 0.9, 0.1)
        if sol is None:
            continue
        refused: list[str] = []
        ok = H._runtime_ok(SAILOR, model, sol[0], refused)
        why = H._refusal(SAILOR, model, sol[0])
        assert ok == (why is None) and refused == ([why] if why else [])
        seen[ok] += 1
    assert seen[True] and seen[False]


def test_split_free_refusal_is_the_refusal_of_every_solution():
    """A template FlagScale refuses whatever its layer split is not solved: its refusal is word for word the one
    `shape_refusal` gives each of its solutions (CP-SAT's and any other split), and it claims no template whose
    stages stay on one group at one tp (there the split decides)."""
    from baige_plan.search import hetero as H
    from baige_plan.specs.runtimes import flagscale as F

    model, job = CAT.model("opt-350m"), JobSpec(1024, 2048, "fp32")
    base = StrategySpec(sequence_parallel=True, **runtimes.knobs("flagscale"))
    temps, _ = H._templates(model, SAILOR, job, base, 0.9, 2, None)
    claims = checked = 0
    for t in temps:
        why = H._template_refusal(model, SAILOR, t, base)
        segs = t.shapes[0][1]
        if len({g for g, *_ in segs}) == 1 and len({tp for _, tp, _ in segs}) == 1:
            assert why is None
        if why is None:
            continue
        claims += 1
        sol = H._solve_template(model, SAILOR, job, t, base, 0.9, 0.1)
        if sol is not None:
            checked += 1
            assert H._refusal(SAILOR, model, sol[0]) == why
            shapes, defaults = H.pipelines_dicts(sol[0])
            st = shapes[0]["stages"]     # another split: one layer moved from the last stage to the first
            if st[-1]["layers"][1] - st[-1]["layers"][0] > 1:
                moved = [dict(x) for x in st]
                moved[0]["layers"] = [0, st[0]["layers"][1] + 1]
                for x in moved[1:-1]:
                    x["layers"] = [x["layers"][0] + 1, x["layers"][1] + 1]
                moved[-1]["layers"] = [st[-1]["layers"][0] + 1, st[-1]["layers"][1]]
                assert F.shape_refusal([dict(shapes[0], stages=moved)], defaults,
                                       **H._refusal_context(SAILOR, model)) == why
    assert claims and checked
    assert F.split_free_refusal({"replicas": 2, "segments": [("a", 1, 2)]}) is None
    assert F.meshes((("a", 0, 1, 1), ("a", 1, 2, 1), ("b", 2, 4, 2)), 2, {"cp": 1, "ep": 1}) == \
        F._meshes([("a", 1, 2), ("b", 2, 1)], 2, {"cp": 1, "ep": 1})
    assert F.meshes((("a", 0, 1, 1), ("a", 1, 2, 1)), 2, {"cp": 1, "ep": 1}, split=True)[1]["first_stage"] == 1


@pytest.mark.slow          # four solves: seconds
def test_no_plan_error_is_the_same_with_templates_refused_unsolved(monkeypatch):
    """With nothing the runtime runs, the templates refused whatever their split are solved after all, so the
    error names the same refusals in the same order as when every template is solved."""
    from baige_plan.errors import SpecError
    from baige_plan.search import hetero as H

    model, job = CAT.model("opt-350m"), JobSpec(1024, 2048, "fp32")
    base = StrategySpec(sequence_parallel=True, **runtimes.knobs("flagscale"))
    real = H._refusal
    monkeypatch.setattr(H, "_refusal", lambda cluster, m, p: real(cluster, m, p) or "refused: " + str(p.shapes))
    with pytest.raises(SpecError) as skipped:
        H.solve(model, SAILOR, job, base)
    monkeypatch.setattr(H, "_template_refusal", lambda *a, **k: None)
    with pytest.raises(SpecError) as solved_all:
        H.solve(model, SAILOR, job, base)
    assert skipped.value.reason == solved_all.value.reason


@pytest.mark.slow          # two solves and every template again: seconds
def test_no_plan_error_names_the_refusals_of_plans_that_fit(monkeypatch):
    """Nothing the runtime runs: the error counts the refused plans that fit in memory and names the first, in the
    order the search meets them, as before the runtime was asked ahead of the estimate."""
    from baige_plan.errors import SpecError
    from baige_plan.search import hetero as H

    model, job = CAT.model("opt-350m"), JobSpec(1024, 2048, "fp32")
    base = StrategySpec(sequence_parallel=True, **runtimes.knobs("flagscale"))
    monkeypatch.setattr(H, "_refusal", lambda cluster, m, p: f"refused {len(p.shapes[0].stages)} stages")
    with pytest.raises(SpecError) as ex:
        H.solve(model, SAILOR, job, base)
    # what the search met, in its order: every solved template (no plan is accepted, so no polish window
    # closes the walk), then each group's own best plans; those that fit are the refusals it names
    searched = {g.name: H._search_group(model, g, job, 0.9, 2, None, H.Limits(), "flagscale") for g in SAILOR.groups}
    solved, seen = [], set()
    for v in (base, StrategySpec(**{**base.__dict__, "recompute": "full"})):
        for t in H._templates(model, SAILOR, job, v, 0.9, 2, searched, H.Limits())[0]:
            if (all(kn.items() for _, _, kn in t.shapes) and t in seen) or len(t.shapes) > 1:
                continue        # FlagScale runs one pipeline: templates of several shapes are not solved
            seen.add(t)
            sol = H._solve_template(model, SAILOR, job, t, v, 0.9, 0.1)
            if sol is not None:
                solved.append((sol[3], f"{t.label()} recompute {v.recompute}", sol[0]))
    met = [p for _, _, p in sorted(solved, key=lambda x: (x[0], x[1]))]
    met += [hp for g in SAILOR.groups for e0 in searched[g.name]
            if (hp := H._homogeneous_pipelines(model, job, g.name, e0.strategy, "flagscale")) is not None]
    fit = [p for p in met if H._exact(model, SAILOR, job, p, 0.9) is not None]
    assert fit
    assert ex.value.reason == (f"flagscale runs none of the {len(fit)} plans that fit; first: "
                               f"refused {len(fit[0].shapes[0].stages)} stages")


def test_cli_builds_only_the_command_it_runs():
    from baige_plan.cli import app as A

    assert A.command_in(["plan", "x"]) == "plan"
    assert A.command_in(["-q", "--quiet", "evaluate"]) == "evaluate"
    assert A.command_in(["--help"]) is None and A.command_in([]) is None and A.command_in(["plna"]) is None
    assert A.command_in(["--version", "plan"]) is None
    assert [c.name for c in A.build_app(("plan",)).registered_commands] == ["plan"]
    assert [c.name for c in A.app.registered_commands] == list(A.COMMANDS)


def test_cli_plan_does_not_load_other_commands():
    import subprocess
    import sys

    code = ("import sys; from baige_plan.cli.app import main; sys.argv = ['baige-plan', 'plan', '--help']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('baige_plan.cli.')), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr
    assert "baige_plan.cli.plan" in out
    for other in ("backtest", "replan", "whatif", "profile", "explain", "check", "export"):
        assert f"baige_plan.cli.{other}'" not in out


class _Recorder:
    """A strategy whose attribute reads are recorded (what a runtime's extra_refusal looks at)."""

    def __init__(self, s: StrategySpec, seen: set[str]) -> None:
        self._s, self._seen = s, seen

    def __getattr__(self, name: str):
        self._seen.add(name)
        return getattr(self._s, name)


@pytest.mark.parametrize("runtime", [n for n in runtimes.NAMES if runtimes.get(n).extra_refusal and runtimes.get(n).extra_refusal_reads])
def test_declared_refusal_reads_are_what_the_rule_reads(runtime, monkeypatch):
    """A runtime that declares the fields its extra_refusal reads (RuntimeSpec.extra_refusal_reads; the search asks
    the rule once per distinct value of them) reads no other field, on every candidate of a dense and an MoE
    space, refused or not; and the space it enumerates is the same set as asking the rule for every candidate."""
    rt = runtimes.get(runtime)
    moe = ModelSpec(name="m", layers=8, hidden=1024, heads=16, kv_heads=8, ffn_hidden=4096, vocab=32000,
                    seq_len=2048, moe=MoESpec(experts=8, top_k=2, expert_ffn_hidden=2048))
    dense = ModelSpec(name="d", layers=8, hidden=1024, heads=16, kv_heads=8, ffn_hidden=4096, vocab=32000,
                      seq_len=2048)
    job = JobSpec(global_batch=32, seq_len=2048)
    seen: set[str] = set()
    undeclared = replace(rt, extra_refusal_reads=())
    real_get = runtimes.get
    for model in (moe, dense):
        a = space_array(model, 16, 8, job, Bounds(runtime=runtime))
        with monkeypatch.context() as mp:    # the same space with the rule asked for every candidate
            mp.setattr(runtimes, "get", lambda n: undeclared if n == runtime else real_get(n))
            every = space_array(model, 16, 8, job, Bounds(runtime=runtime))
        assert np.array_equal(a, every)
        for row in a:
            rt.extra_refusal(_Recorder(to_strategy(tuple(int(x) for x in row), runtime), seen), model, job)
    assert seen <= set(rt.extra_refusal_reads), f"{runtime} reads {sorted(seen - set(rt.extra_refusal_reads))}"
