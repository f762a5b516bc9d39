"""Measured per-layer profiles (issue 10): strict files, the analytical model's own numbers reproduce its
estimates and plans exactly, measured values replace the analytical ones (hand-derived), mismatches exit 2,
and the search stays exact with a profile faster or leaner than the model."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.cost.estimate import estimate
from baige_plan.cost.measured import analytical_profile, profile_bound_factors
from baige_plan.errors import InputError
from baige_plan.io.catalog import Catalog
from baige_plan.io.profiles import dump_profile, load_profile, profile_from_dict
from baige_plan.search.bounds import Bounds as CostBounds
from baige_plan.search.oracle import oracle
from baige_plan.search.solver import search
from baige_plan.search.space import Bounds, Pins, space_array, to_strategy
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.profile import ProfileSpec
from baige_plan.specs.strategy import StrategySpec
from baige_plan.specs.topology import ClusterSpec, GroupSpec

RUN = CliRunner()
CAT = Catalog.create()
ROOT = Path(__file__).resolve().parents[1]
OPT = CAT.model("opt-350m")
H100 = CAT.chip("h100-sxm5-80g")
MEASURED = "measured:"


def _run(args, code=0):
    r = RUN.invoke(app, [str(a) for a in args])
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    return r


def _write(tmp_path: Path, p: ProfileSpec, name: str = "p.yaml") -> Path:
    f = tmp_path / name
    f.write_text(dump_profile(p), encoding="utf-8")
    return f


def _with_profile(cluster: ClusterSpec, p: ProfileSpec) -> ClusterSpec:
    return replace(cluster, groups=tuple(replace(g, profile=p) if p.fits_chip(g.chip.id) else g
                                         for g in cluster.groups))


def _strip(doc):
    """A plan/estimate document without the parts a profile legitimately changes (sources, timing)."""
    if isinstance(doc, dict):
        return {k: _strip(v) for k, v in doc.items() if k not in ("sources", "seconds")}
    if isinstance(doc, list):
        return [_strip(v) for v in doc]
    return doc


def _scaled(p: ProfileSpec, compute: float = 1.0, act: float = 1.0, opt: float = 1.0) -> ProfileSpec:
    def part(x, keys, f):
        return replace(x, **{k: getattr(x, k) * f for k in keys if getattr(x, k) is not None}) if x else x
    entries = []
    for e in p.entries:
        layer = part(part(e.layer, ("forward_s", "backward_s", "recompute_s"), compute),
                     ("activation_bytes", "working_bytes"), act)
        entries.append(replace(e, layer=layer,
                               embedding=part(part(e.embedding, ("forward_s", "backward_s"), compute),
                                              ("activation_bytes",), act),
                               logits=part(part(e.logits, ("forward_s", "backward_s"), compute),
                                           ("activation_bytes",), act),
                               optimizer_s_per_param=e.optimizer_s_per_param * opt))
    return replace(p, name=f"{p.name}-x{compute:g}", entries=tuple(entries))


# -- the file format ------------------------------------------------------------------------------------
def test_round_trip_is_exact(tmp_path):
    p = analytical_profile(OPT, H100, 2048, "bf16", tps=(1, 2), micro_batches=(1, 2))
    assert load_profile(_write(tmp_path, p)) == p
    assert len(p.entries) == 2 * (1 + 2) * 3          # tp 2 adds the sequence-parallel variants


@pytest.mark.parametrize("path,key", [
    (("entries", 0, "layer"), "forward_ms"),
    (("entries", 0), "pipeline"),
    ((), "chip_id"),
    (("model",), "n_layers"),
    (("provenance",), "gpu"),
])
def test_unknown_keys_name_key_and_file(tmp_path, path, key):
    doc = yaml.safe_load(dump_profile(analytical_profile(OPT, H100, 2048, "bf16")))
    node = doc
    for k in path:
        node = node[k]
    node[key] = 1
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with pytest.raises(InputError) as ei:
        load_profile(f)
    assert str(f) in str(ei.value) and key in str(ei.value) and "unknown key" in str(ei.value)
    r = _run(["validate", f], 2)
    assert str(f) in r.stderr and key in r.stderr


def test_invalid_values_are_refused():
    doc = yaml.safe_load(dump_profile(analytical_profile(OPT, H100, 2048, "bf16")))
    doc["entries"][0]["layer"]["forward_s"] = -1.0
    with pytest.raises(InputError, match=r"entries\[0\]\.layer\.forward_s"):
        profile_from_dict(doc, "x.yaml")
    doc = yaml.safe_load(dump_profile(analytical_profile(OPT, H100, 2048, "bf16")))
    doc["entries"].append(doc["entries"][0])
    with pytest.raises(InputError, match="duplicate entry"):
        profile_from_dict(doc, "x.yaml")
    doc = yaml.safe_load(dump_profile(analytical_profile(OPT, H100, 2048, "bf16")))
    doc["provenance"] = {"method": "published"}
    with pytest.raises(InputError, match="provenance.source"):
        profile_from_dict(doc, "x.yaml")


def test_validate_accepts_the_shipped_profiles():
    files = sorted((ROOT / "benchmarks" / "profiles").glob("*.yaml"))
    assert len(files) >= 5
    r = _run(["validate", *files])
    assert r.stdout.count("(profile)") == len(files)


# -- the analytical model's own numbers reproduce it exactly -------------------------------------------
STRATEGIES = [
    StrategySpec(tp=1, pp=1, dp=8, micro_batch=2, recompute="none", zero=0),
    StrategySpec(tp=2, pp=2, dp=2, micro_batch=1, recompute="selective"),
    StrategySpec(tp=4, pp=2, dp=1, micro_batch=2, recompute="full", sequence_parallel=False),
    StrategySpec(tp=2, pp=4, dp=1, micro_batch=1, recompute="full", vpp=2),
    StrategySpec(tp=1, pp=2, dp=4, micro_batch=1, recompute="selective", attention="standard"),
    StrategySpec(tp=2, pp=1, dp=4, micro_batch=1, execution="eager"),
]


@pytest.mark.parametrize("s", STRATEGIES)
def test_analytical_profile_reproduces_the_estimate_exactly(s):
    cl, _ = CAT.cluster("h100-sxm5-80g:1x8")
    job = JobSpec(32, 2048, "bf16")
    p = analytical_profile(OPT, H100, 2048, "bf16", tps=(1, 2, 4), micro_batches=(1, 2), attention=s.attention,
                           execution=s.execution)
    a = estimate(OPT, cl, job, s)
    b = estimate(OPT, _with_profile(cl, p), job, s)
    for f in ("step_time_s", "mfu", "hfu", "peak_memory_gib", "breakdown_s", "memory_gib", "fits", "bottleneck"):
        assert getattr(a, f) == getattr(b, f), f
    assert [replace(x, sources=()) for x in a.stages] == [replace(x, sources=()) for x in b.stages]
    assert set(a.sources.values()) == {"analytical"}
    assert b.sources["compute"] == b.sources["activation_memory"] == b.sources["optimizer_step"] == \
        f"{MEASURED}{p.name}"
    assert b.sources["communication"] == "analytical"


def test_strategies_the_profile_lacks_stay_analytical():
    cl, _ = CAT.cluster("h100-sxm5-80g:1x8")
    p = _scaled(analytical_profile(OPT, H100, 2048, "bf16", tps=(1,), micro_batches=(1,)), compute=3.0)
    s = StrategySpec(tp=2, pp=1, dp=4, micro_batch=1)
    job = JobSpec(32, 2048, "bf16")
    assert estimate(OPT, _with_profile(cl, p), job, s).step_time_s == estimate(OPT, cl, job, s).step_time_s
    # another sequence length or precision: the profile does not apply
    job2 = JobSpec(32, 1024, "bf16")
    s1 = StrategySpec(tp=1, pp=1, dp=8)
    assert estimate(OPT, _with_profile(cl, p), job2, s1).sources["compute"] == "analytical"


def test_plan_with_the_analytical_profile_is_the_analytical_plan(tmp_path):
    args = ["opt-350m", "h100-sxm5-80g:1x8", "--global-batch", "64", "--max-micro-batch", "4", "--top", "4",
            "--format", "json"]
    f = _write(tmp_path, analytical_profile(OPT, H100, 2048, "bf16", tps=(1, 2, 4, 8), micro_batches=(1, 2, 4)))
    a = json.loads(_run(["plan", *args]).stdout)
    r = _run(["plan", *args, "--profile", f])
    b = json.loads(r.stdout)
    assert _strip(a) == _strip(b)
    measured = [pl for pl in b["plans"] if pl["strategy"]["cp"] == 1]
    assert measured and all(pl["sources"]["compute"].startswith(MEASURED) for pl in measured)
    assert "uses measured profile" in r.stderr
    # the plan file embeds the profile: re-evaluating it as written gives the same estimate
    out = tmp_path / "plan.yaml"
    _run(["plan", "opt-350m", "h100-sxm5-80g:1x8", "--global-batch", "64", "--cp", "1", "--micro-batch", "2",
          "--profile", f, "--out", out])
    doc = yaml.safe_load(out.read_text())
    assert doc["inputs"]["cluster"]["groups"][0]["profile"]["name"] == load_profile(f).name
    again = json.loads(_run(["evaluate", "--plan", out, "--format", "json"]).stdout)
    assert again["step_time_s"] == doc["estimate"]["step_time_s"]
    assert again["sources"]["compute"].startswith(MEASURED)
    _run(["validate", out])


def test_mixed_cluster_plan_is_reproduced_exactly(tmp_path):
    files = []
    for chip in ("a100-sxm4-40g", "v100-sxm2-16g"):
        p = analytical_profile(OPT, CAT.chip(chip), 2048, "fp16", tps=(1, 2, 4), micro_batches=(1, 2, 4))
        files += ["--profile", _write(tmp_path, p, f"{chip}.yaml")]
    args = ["plan", "opt-350m", "a100-sxm4-40g:2x4+v100-sxm2-16g:2x4", "--global-batch", "64", "--precision", "fp16",
            "--format", "json"]
    a = json.loads(_run(args).stdout)
    b = json.loads(_run([*args, *files]).stdout)
    assert _strip(a) == _strip(b)
    src = b["plans"][0]["sources"]["compute"]
    assert "a100-sxm4-40g" in src and "v100-sxm2-16g" in src and "analytical" not in src.split("+")


# -- measured values are used -----------------------------------------------------------------------------
def test_twice_slower_compute_doubles_compute():
    """One device (tp = pp = dp = 1): no communication, so step = m (t_f + t_b) + optimizer with
    t_f + t_b = compute per micro-batch; a profile twice the analytical compute doubles the compute
    breakdown exactly and adds the analytical compute to the step."""
    cl, _ = CAT.cluster("h100-sxm5-80g:1x1")
    job = JobSpec(8, 2048, "bf16")
    s = StrategySpec(tp=1, pp=1, dp=1, micro_batch=2, recompute="full", zero=0)
    base = analytical_profile(OPT, H100, 2048, "bf16", tps=(1,), micro_batches=(2,), recomputes=("full",))
    a = estimate(OPT, cl, job, s)
    b = estimate(OPT, _with_profile(cl, _scaled(base, compute=2.0)), job, s)
    assert b.breakdown_s["compute"] == 2 * a.breakdown_s["compute"]
    assert b.step_time_s == pytest.approx(a.step_time_s + a.breakdown_s["compute"], rel=1e-12)
    assert b.breakdown_s["optimizer"] == a.breakdown_s["optimizer"]
    # by hand: 24 layers x (forward + backward + recomputed forward) + the logits, per micro-batch, 4 micro-batches
    e = base.entries[0]
    per_mb = 24 * (e.layer.forward_s + e.layer.backward_s + e.layer.recompute_s) \
        + e.logits.forward_s + e.logits.backward_s
    assert b.breakdown_s["compute"] == pytest.approx(2 * 4 * per_mb, rel=1e-12)
    # activations and the optimizer step follow the profile too
    c = estimate(OPT, _with_profile(cl, _scaled(base, act=2.0, opt=3.0)), job, s)
    assert c.memory_gib["activations"] == pytest.approx(2 * a.memory_gib["activations"], rel=1e-12)
    assert c.breakdown_s["optimizer"] == pytest.approx(3 * a.breakdown_s["optimizer"], rel=1e-12)


DENSE = ModelSpec(name="d6", layers=6, hidden=4096, heads=32, ffn_hidden=16384, vocab=32000, seq_len=2048,
                  activation="gelu", dropout=0.1)


@pytest.mark.parametrize("factors", [(0.5, 0.3, 0.2), (1.5, 0.6, 2.0)])
def test_search_equals_oracle_with_a_faster_leaner_profile(factors):
    """The search's vectorised bounds are scaled by the profile's smallest measured/analytical ratios
    (cost/measured.profile_bound_factors), so they stay bounds and the search stays exact."""
    compute, act, opt = factors
    chip = CAT.chip("a100-sxm4-40g")
    p = _scaled(analytical_profile(DENSE, chip, 2048, "bf16", tps=(1, 2, 4), micro_batches=(1, 2),
                                   recomputes=("none", "selective")), compute, act, opt)
    g = GroupSpec(name="g", chip=chip, nodes=2, devices_per_node=4, profile=p)
    cl = ClusterSpec(name="t", groups=(g,))
    job, bounds, pins = JobSpec(16, 2048), Bounds(max_micro_batch=4, max_memory_frac=0.4), Pins()
    assert profile_bound_factors(DENSE, g, job) == pytest.approx((min(act, 1.0), min(opt, 1.0)))
    want = oracle(DENSE, cl, job, bounds, pins, top=5)
    got = search(DENSE, cl, job, bounds, pins, top=5)
    assert [k for _, k, _ in want] == list(got.keys)
    assert [t for t, _, _ in want] == [e.step_time_s for e in got.plans]
    a = space_array(DENSE, cl.devices, 4, job, bounds, pins)
    cb = CostBounds(DENSE, g, job)
    mem, lb = cb.memory_gib(a), cb.time_lb_s(a)
    for i in range(0, len(a), max(1, len(a) // 100)):
        e = estimate(DENSE, cl, job, to_strategy(tuple(int(x) for x in a[i])))
        assert lb[i] <= e.step_time_s
        assert mem[i] <= e.peak_memory_gib * (1 + 1e-9)


# -- the command line ---------------------------------------------------------------------------------
@pytest.mark.parametrize("field,edit", [
    ("model.hidden", lambda d: d["model"].update(hidden=2048)),
    ("model.activation", lambda d: d["model"].update(activation="swiglu")),
    ("seq_len", lambda d: d.update(seq_len=4096)),
    ("precision", lambda d: d.update(precision="fp16")),
    ("chip", lambda d: d.update(chip="mi300x")),
])
def test_mismatched_profile_exits_2_naming_file_and_field(tmp_path, field, edit):
    doc = yaml.safe_load(dump_profile(analytical_profile(OPT, H100, 2048, "bf16")))
    edit(doc)
    f = tmp_path / "mismatch.yaml"
    f.write_text(yaml.safe_dump(doc), encoding="utf-8")
    for cmd in (["evaluate", "opt-350m", "h100-sxm5-80g:1x8", "--format", "json"],
                ["plan", "opt-350m", "h100-sxm5-80g:1x8", "--global-batch", "16"]):
        r = _run([*cmd, "--profile", f], 2)
        assert str(f) in r.stderr and field in r.stderr and r.stdout == ""
        errors = [ln for ln in r.stderr.splitlines() if not ln.startswith("note:")]
        assert len(errors) == 1 and str(f) in errors[0]


def test_evaluate_json_says_which_parts_are_measured(tmp_path):
    f = _write(tmp_path, analytical_profile(OPT, H100, 2048, "bf16", tps=(2,), micro_batches=(1,)))
    args = ["evaluate", "opt-350m", "h100-sxm5-80g:1x8", "--tp", "2", "--format", "json"]
    plain = json.loads(_run(args).stdout)
    assert plain["sources"] == {"compute": "analytical", "activation_memory": "analytical",
                                "optimizer_step": "analytical", "communication": "analytical",
                                "model_states": "analytical"}
    r = _run([*args, "--profile", f])
    d = json.loads(r.stdout)
    assert d["sources"]["compute"] == f"{MEASURED}{load_profile(f).name}"
    assert "measured values used" in r.stderr
    assert _strip(d) == _strip(plain)
    _run(["evaluate", "--plan", f, "--profile", f], 2)


def test_profile_command_writes_the_analytical_profile(tmp_path):
    out = tmp_path / "a.yaml"
    _run(["profile", "--model", "opt-350m", "--analytical", "--chip", "a100-sxm4-40g", "--precision", "fp16",
          "--tp", "1,2", "--micro-batch", "1,4", "--recompute", "selective", "--out", out])
    p = load_profile(out)
    assert p.chip == "a100-sxm4-40g" and p.precision == "fp16" and p.provenance.method == "analytical"
    assert {(e.tp, e.micro_batch) for e in p.entries} == {(1, 1), (1, 4), (2, 1), (2, 4)}
    assert p == analytical_profile(OPT, CAT.chip("a100-sxm4-40g"), 2048, "fp16", (1, 2), (1, 4), ("selective",),
                                   name=p.name, command=p.provenance.command)
    r = _run(["profile", "--model", "opt-350m", "--analytical", "--out", tmp_path / "b.yaml"], 2)
    assert "--chip" in r.stderr
    _run(["profile", "--model", "opt-350m", "--analytical", "--chip", "a100-sxm4-40g", "--tp", "3"], 2)


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch installed: measuring may run")
def test_profile_command_without_torch_exits_2(tmp_path):
    r = _run(["profile", "--model", "opt-350m", "--out", tmp_path / "m.yaml"], 2)
    assert "PyTorch" in r.stderr and "--analytical" in r.stderr


def test_topology_files_may_name_a_profile(tmp_path):
    p = analytical_profile(OPT, H100, 2048, "bf16", tps=(1,), micro_batches=(1,))
    _write(tmp_path, p, "opt.yaml")
    topo = tmp_path / "t.yaml"
    topo.write_text(yaml.safe_dump({"schema": "baige-plan/topology/v1", "name": "t", "groups": [
        {"name": "gpu", "chip": "h100-sxm5-80g", "nodes": 1, "devices_per_node": 8, "profile": "opt.yaml"}]}))
    cl, _ = CAT.cluster(str(topo))
    assert cl.groups[0].profile == p
    topo.write_text(yaml.safe_dump({"schema": "baige-plan/topology/v1", "name": "t", "groups": [
        {"name": "gpu", "chip": "a100-sxm4-80g", "nodes": 1, "devices_per_node": 8, "profile": "opt.yaml"}]}))
    with pytest.raises(InputError, match="groups\\[0\\].profile"):
        CAT.cluster(str(topo))


@pytest.mark.parametrize("args,said", [
    (["--analytical", "--precision", "int4"], "must be bf16, fp16, fp32, tf32 or fp8, got 'int4'"),
    (["--precision", "fp8"], "fp8: only with --analytical"),
])
def test_profile_model_precision_is_checked_before_any_work(tmp_path, args, said):
    """`profile --model --precision` names the precisions it takes (a chip's missing int4 peak is not the reason)
    and writes nothing; the analytical profile also takes fp8 (the cost model costs it), the measuring one not."""
    out = tmp_path / "p.yaml"
    r = _run(["profile", "--model", "llama3-8b", "--chip", "h100-sxm5-80g", "--out", out, *args], code=2)
    assert said in r.stderr and r.stderr.count("\n") == 1
    assert not out.exists()
    _run(["profile", "--model", "llama3-8b", "--chip", "h100-sxm5-80g", "--analytical", "--precision", "fp8",
          "--tp", "1", "--micro-batch", "1", "--recompute", "none", "--out", out])
    assert load_profile(out).precision == "fp8"
