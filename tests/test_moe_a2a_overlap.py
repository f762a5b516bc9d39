"""Megatron-core's EP all-to-all overlap (overlap_moe_expert_parallel_comm; cost/moe.py a2a_overlap_pair_s) against
schedules worked by hand, the contention measured on real GPUs, Megatron-core's own validation, and the rows whose
recipes state it."""

import json
from pathlib import Path

import pytest

from baige_plan.cost.estimate import estimate
from baige_plan.cost.moe import A2A_OVERLAP_CONTENTION_SHARE, a2a_overlap_pair_s, a2a_overlap_unmerged
from baige_plan.errors import SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import load_runs
from baige_plan.specs.strategy import StrategySpec

REAL = Path(__file__).resolve().parents[1] / "benchmarks" / "real"


def test_one_layer_two_streams_by_hand():
    # pre_f 1, mlp_f 2, pre_b 2, mlp_b 4, each all-to-all 3 (schedule_layer_1f1b order):
    # comm: combine_bwd [0,3) | dispatch_fwd [3,6) (after pre_f ends at 1) | dispatch_bwd [7,10) (after mlp_b [3,7))
    # | combine_fwd [10,13) (after mlp_f [7,9)); comp: pre_b [10,12) after dispatch_bwd -> the pair ends at 13,
    # where one after the other takes 1 + 2 + 2 + 4 + 4 x 3 = 21
    assert a2a_overlap_pair_s(1, 2, 2, 4, 3, 1, share=0.0) == pytest.approx(13.0)
    # contention share 0.5 stretches compute by its overlap with a running all-to-all (x1): pre_f [0,2) (1 s of it
    # beside combine_bwd), mlp_b [3,10) (3 s beside dispatch_fwd), dispatch_bwd [10,13), mlp_f [10,14) (beside it
    # 2 s), combine_fwd [14,17), pre_b [14,18)
    assert a2a_overlap_pair_s(1, 2, 2, 4, 3, 1, share=0.5) == pytest.approx(18.0)


def test_bounds_no_comm_and_no_compute():
    # without all-to-alls the pair is its compute; without compute, four all-to-alls per layer in a row
    assert a2a_overlap_pair_s(1, 2, 2, 4, 0.0, 5) == pytest.approx(5 * 9.0)
    assert a2a_overlap_pair_s(0, 0, 0, 0, 1.5, 4) == pytest.approx(4 * 4 * 1.5)


def test_unmerged_share_follows_megatron_warmup():
    # pp 1: the first forward of m runs alone; interleaved: 2 (pp - r - 1) + (vpp - 1) pp + 1 warm-up chunk forwards
    assert a2a_overlap_unmerged(1, 1, 16, 0) == pytest.approx(1 / 16)
    assert a2a_overlap_unmerged(8, 3, 256, 7) == pytest.approx((2 * 8 + 1) / (256 * 3))
    assert a2a_overlap_unmerged(8, 3, 256, 0) == pytest.approx((14 + 16 + 1) / (256 * 3))
    assert a2a_overlap_unmerged(4, 2, 2, 0) == 1.0       # all in warm-up


def test_contention_constant_is_the_measured_median():
    # benchmarks/real/a2a_overlap.py on 2 and 4 H200: the share that reproduces each merged run, median over them
    import statistics

    from scipy.optimize import brentq

    fits = []
    for f in ("a2a_overlap_h200x2.raw.json", "a2a_overlap_h200x4.raw.json"):
        for r in json.loads((REAL / f).read_text()):
            p = {k: v / 1e3 for k, v in r["pieces_ms"].items()}
            n = r["layers"]
            comp = n * (p["pre_f"] + p["mlp_f"] + p["pre_b"] + p["mlp_b"])
            a2a = 4 * n * p["a2a"]
            scale = (r["serial_ms"] / 1e3 - a2a) / comp     # compute pieces as they ran in the serial schedule
            q = [p[k] * scale for k in ("pre_f", "mlp_f", "pre_b", "mlp_b")]
            fits.append(brentq(lambda s, q=q, p=p, n=n, r=r: a2a_overlap_pair_s(*q, p["a2a"], n, s)
                               - r["merged_ms"] / 1e3, 0.0, 0.95))
            # the overlap hid well under all of the all-to-all time
            assert (r["serial_ms"] - r["merged_ms"]) / (4 * n * r["pieces_ms"]["a2a"]) < 0.6
    assert len(fits) == 12
    assert A2A_OVERLAP_CONTENTION_SHARE == pytest.approx(statistics.median(fits), abs=0.01)


def test_megatron_refuses_what_it_refuses():
    with pytest.raises(SpecError, match="moe_a2a_overlap"):
        StrategySpec(ep=1, moe_a2a_overlap=True)
    with pytest.raises(SpecError, match="full recomputation"):
        StrategySpec(ep=8, dp=8, recompute="full", moe_a2a_overlap=True)
    with pytest.raises(SpecError, match="virtual pipeline"):
        StrategySpec(ep=8, dp=8, pp=2, moe_a2a_overlap=True)
    StrategySpec(ep=8, dp=8, pp=2, vpp=2, moe_a2a_overlap=True)


def test_rows_that_state_it_and_the_published_on_off_ratio():
    cat = Catalog.create([])
    rows = {c.id: c for f in ("benchmarks/corpus/megatron_lm_moe_modelzoo.yaml", "benchmarks/corpus/mbridge_perf_2602.yaml",
                              "benchmarks/corpus/mbridge_perf_2606.yaml") for c in load_runs(f, cat)}
    on = rows["megatron_lm_moe_modelzoo_qwen3_235b_a22b_h100_256gpu_tp2pp8vpp4ep32_deepep_a2aoverlap"]
    off = rows["megatron_lm_moe_modelzoo_qwen3_235b_a22b_h100_256gpu_tp2pp8vpp4ep32_deepep"]
    assert on.strategy.moe_a2a_overlap and not off.strategy.moe_a2a_overlap
    # "no a2a overlap in the V2 preset" is not read as overlap; "(moe_a2a_overlap)" is
    assert not rows["mbridge_perf_2602_qwen3_235b_a22b_gb200_256gpu_mxfp8"].strategy.moe_a2a_overlap
    assert rows["mbridge_perf_2602_qwen3_235b_a22b_h100_256gpu_fp8"].strategy.moe_a2a_overlap
    assert rows["mbridge_perf_2606_qwen3_30b_a3b_gb200_8gpu_mxfp8"].strategy.moe_a2a_overlap
    # the Model Zoo's same layout with and without it: 17.6 vs 19.7 s measured (0.893); the mechanism, with the
    # contention measured on H200 NCCL (not on these rows), gives the ratio within 3 points
    t_on = estimate(on.model, on.cluster, on.job, on.strategy).step_time_s
    t_off = estimate(off.model, off.cluster, off.job, off.strategy).step_time_s
    assert t_on / t_off == pytest.approx(17.6 / 19.7, abs=0.03)
    # the ideal overlap (no contention) would have claimed far more
    assert t_on < t_off


def test_evaluate_flag_round_trips_and_refuses_other_runtimes():
    import json as _json

    from typer.testing import CliRunner

    from baige_plan.cli.app import app

    base = ["evaluate", "qwen3-235b-a22b", "h100-sxm5-80g:32x8", "--tp", "2", "--pp", "8", "--vpp", "4", "--ep", "32",
            "--global-batch", "2048", "--seq-len", "4096", "--account-for-embedding", "--account-for-loss",
            "--recompute", "selective", "--format", "json"]
    runner = CliRunner()
    off = runner.invoke(app, base)
    on = runner.invoke(app, base + ["--moe-a2a-overlap"])
    assert off.exit_code == 0 and on.exit_code == 0, on.output
    d_off, d_on = _json.loads(off.stdout), _json.loads(on.stdout)
    assert d_on["strategy"]["moe_a2a_overlap"] is True and "moe_a2a_overlap" not in d_off["strategy"]
    # the overlap hides part of the EP all-to-all: faster, never below the step without any all-to-all
    assert d_on["step_time_s"] < d_off["step_time_s"]
    assert d_on["step_time_s"] > d_off["step_time_s"] - d_off["breakdown_s"]["ep_comm"]
    assert d_on["breakdown_s"]["ep_comm"] < d_off["breakdown_s"]["ep_comm"]
    bad = runner.invoke(app, ["evaluate", "mixtral-8x7b", "h100-sxm5-80g:2x8", "--ep", "8", "--zero", "3", "--runtime",
                              "torchtitan", "--global-batch", "64", "--moe-a2a-overlap"])
    assert bad.exit_code == 2 and "moe_a2a_overlap" in bad.output


def _pair_reference(pre_f, mlp_f, pre_b, mlp_b, a2a_s, layers, share=A2A_OVERLAP_CONTENTION_SHARE):
    """The two-stream replay written out layer by layer (no steady-state shortcut): every op of every layer."""
    k = share / (1 - share)

    def run(start, work, busy):
        end = start + work
        return end + k * max(0.0, min(end, busy[1]) - max(start, busy[0]))

    comp = comm = 0.0
    for _ in range(layers):
        cb = (max(comm, comp), max(comm, comp) + a2a_s)
        af = run(max(comp, comm), pre_f, cb)
        df = (max(cb[1], af), max(cb[1], af) + a2a_s)
        mb = run(max(af, cb[1]), mlp_b, df)
        db = (max(df[1], mb), max(df[1], mb) + a2a_s)
        mf = run(max(mb, df[1]), mlp_f, db)
        cf = (max(db[1], mf), max(db[1], mf) + a2a_s)
        comp, comm = run(max(mf, db[1]), pre_b, cf), cf[1]
    return max(comp, comm)


def test_pair_extrapolation_equals_the_layer_by_layer_replay_and_per_layer_time_falls():
    # a2a_overlap_pair_s extrapolates once the streams' lead repeats; the search's lower bound (search/bounds.py
    # _layer_time) takes pair(L)/L as a per-layer floor for any stage of n <= L layers, which needs pair(n)/n
    # non-increasing in n
    import random

    rng = random.Random(7)
    for _ in range(3000):
        v = [rng.random() * rng.choice([1e-3, 1.0, 10.0]) for _ in range(5)]
        if rng.random() < 0.2:
            v[rng.randrange(5)] = 0.0
        per_layer = [a2a_overlap_pair_s(*v, n) / n for n in range(1, 41)]
        for n in (1, 2, 3, 17, 40):
            assert per_layer[n - 1] == pytest.approx(_pair_reference(*v, n) / n, rel=1e-12)
        assert all(b <= a * (1 + 1e-12) for a, b in zip(per_layer[:-1], per_layer[1:], strict=True))


# Qwen3-30B-A3B's shape (HF config.json: 48 layers, hidden 2048, 32 x 128 query heads, 4 KV heads, 128 experts top-8
# of width 768), 24 layers to keep the tests quick
Q30 = """schema: baige-plan/model/v1
name: q30-24l
layers: 24
hidden: 2048
heads: 32
kv_heads: 4
head_dim: 128
ffn_hidden: 6144
vocab: 151936
seq_len: 4096
activation: swiglu
moe: {experts: 128, top_k: 8, expert_ffn_hidden: 768}
"""


def _q30(tmp_path):
    from baige_plan.io.models import load_model_file

    p = tmp_path / "q30.yaml"
    p.write_text(Q30)
    return p, load_model_file(p)


def _cluster(nodes):
    from baige_plan.specs.topology import ClusterSpec, GroupSpec

    g = GroupSpec(name="g", chip=Catalog.create([]).chip("h100-sxm5-80g"), nodes=nodes, devices_per_node=8,
                  scaleout_Gbps=400)
    return ClusterSpec(name="t", groups=(g,))


def test_space_offers_the_overlap_where_megatron_core_runs_it(tmp_path):
    from baige_plan.search.space import COL, Bounds, Pins, space_array, to_strategy
    from baige_plan.specs.job import JobSpec

    cl = _cluster(4)
    model, job = _q30(tmp_path)[1], JobSpec(256, 4096)
    a = space_array(model, cl.devices, 8, job, Bounds(max_micro_batch=2), Pins())
    on = a[a[:, COL["a2a"]] == 1]
    assert len(on) > 0
    for row in on[:: max(1, len(on) // 300)]:
        s = to_strategy(tuple(int(x) for x in row))
        assert s.moe_a2a_overlap and s.ep > 1 and s.recompute != "full" and (s.pp == 1 or s.vpp > 1)
    # every valid row without the overlap has its twin with it
    def rest(r):   # the row without its a2a column
        return tuple(int(x) for j, x in enumerate(r) if j != COL["a2a"])

    off = {rest(r) for r in a[a[:, COL["a2a"]] == 0]
           if r[COL["ep"]] > 1 and r[COL["recompute"]] != 2 and (r[COL["pp"]] == 1 or r[COL["vpp"]] > 1)}
    assert off == {rest(r) for r in on}
    # pins, and runtimes without megatron-core's combined 1F1B
    assert (space_array(model, cl.devices, 8, job, Bounds(max_micro_batch=2), Pins(moe_a2a_overlap=False))
            [:, COL["a2a"]] == 0).all()
    assert (space_array(model, cl.devices, 8, job, Bounds(max_micro_batch=2), Pins(moe_a2a_overlap=True))
            [:, COL["a2a"]] == 1).all()
    tt = space_array(model, cl.devices, 8, job, Bounds(max_micro_batch=2, runtime="torchtitan"), Pins())
    assert len(tt) and (tt[:, COL["a2a"]] == 0).all()


def test_search_bound_holds_for_overlapped_rows_and_search_finds_the_exact_best(tmp_path):
    # the time lower bound of a2a rows (search/bounds.py) against the full estimate of each sampled row, and the
    # search's best against every candidate of a pinned layout estimated (an exhaustive ranking)
    from baige_plan.search.bounds import Bounds as CostBounds
    from baige_plan.search.solver import search
    from baige_plan.search.space import COL, Bounds, Pins, space_array, to_strategy
    from baige_plan.specs.job import JobSpec

    cl = _cluster(4)
    model, job = _q30(tmp_path)[1], JobSpec(256, 4096)
    bounds = Bounds(max_micro_batch=2)
    a = space_array(model, cl.devices, 8, job, bounds, Pins())
    lb = CostBounds(model, cl.groups[0], job).time_lb_s(a)
    idx = [i for i in range(len(a)) if a[i, COL["a2a"]] == 1]
    for i in idx[:: max(1, len(idx) // 120)]:
        e = estimate(model, cl, job, to_strategy(tuple(int(x) for x in a[i])))
        assert lb[i] <= e.step_time_s
    pins = Pins(tp=1, pp=2, ep=16)
    rows = space_array(model, cl.devices, 8, job, bounds, pins)
    ests = [estimate(model, cl, job, to_strategy(tuple(int(x) for x in r)), bounds.max_memory_frac) for r in rows]
    want = min((e.step_time_s, tuple(int(x) for x in r)) for e, r in zip(ests, rows, strict=True) if e.fits)
    got = search(model, cl, job, bounds, pins)
    assert (got.plans[0].step_time_s, got.keys[0]) == want
    assert got.plans[0].strategy.moe_a2a_overlap     # EP 16 over 2 nodes' NICs: hiding part of it wins here


def test_plan_shows_and_exports_the_overlap(tmp_path):
    import json as _json

    import yaml
    from typer.testing import CliRunner

    from baige_plan.cli.app import app

    runner = CliRunner()
    args = ["plan", str(_q30(tmp_path)[0]), "h100-sxm5-80g:4x8", "--global-batch", "256", "--seq-len", "4096",
            "--tp", "1", "--pp", "2", "--ep", "16", "--max-micro-batch", "2"]
    r = runner.invoke(app, args + ["--format", "json"])
    assert r.exit_code == 0, r.output
    top = _json.loads(r.stdout)["plans"][0]
    assert top["strategy"]["moe_a2a_overlap"] is True
    table = runner.invoke(app, args + ["--top", "3"])
    assert "ep 16+ov" in table.stdout and "overlap_moe_expert_parallel_comm" in table.stdout
    pinned = runner.invoke(app, args + ["--no-moe-a2a-overlap", "--format", "json"])
    assert "moe_a2a_overlap" not in _json.loads(pinned.stdout)["plans"][0]["strategy"]
    # the plan file carries it and the exports pass it to the runtimes that run it
    plan = tmp_path / "p.json"
    assert runner.invoke(app, args + ["--out", str(plan)]).exit_code == 0
    assert _json.loads(plan.read_text())["strategy"]["moe_a2a_overlap"] is True
    mg = runner.invoke(app, ["export", str(plan), "--to", "megatron"])
    assert mg.exit_code == 0 and "--overlap-moe-expert-parallel-comm" in mg.stdout
    fs = runner.invoke(app, ["export", str(plan), "--to", "flagscale"])
    assert fs.exit_code == 0, fs.output
    cfg = yaml.safe_load(fs.stdout)
    assert cfg["train"]["system"]["overlap_moe_expert_parallel_comm"] is True
    assert cfg["experiment"]["envs"]["CUDA_DEVICE_MAX_CONNECTIONS"] == 32      # tp 1, cp 1: no TP ordering to keep
    # torchtitan does not run megatron-core's combined 1F1B: refused, exit 2
    assert runner.invoke(app, ["export", str(plan), "--to", "torchtitan"]).exit_code == 2


@pytest.mark.parametrize("args,why", [
    (["llama3-8b", "h100-sxm5-80g:1x8", "--global-batch", "64"], "is dense"),
    (["mixtral-8x7b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--runtime", "torchtitan"], "runtime torchtitan"),
    (["mixtral-8x7b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--recompute", "full"], "full recomputation"),
    (["mixtral-8x7b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--ep", "1"], "--ep 1"),
    (["mixtral-8x7b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--pp", "2", "--vpp", "1"], "virtual pipeline"),
])
def test_plan_refuses_an_overlap_pin_no_plan_can_take(args, why):
    # a pin megatron-core's rules refuse is bad input (exit 2, one line naming the option), not "no feasible plan"
    from typer.testing import CliRunner

    from baige_plan.cli.app import app

    r = CliRunner().invoke(app, ["plan", *args, "--seq-len", "4096", "--moe-a2a-overlap"])
    assert r.exit_code == 2 and "--moe-a2a-overlap" in r.output and why in r.output, r.output
    assert "Traceback" not in r.output
