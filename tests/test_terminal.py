"""Comfortable at the terminal (issue 12): help on every option, one default for shared options, `--quiet`,
progress lines on stderr, `validate` parsing a plan once, the fast plan writer giving the very bytes of the
pure-Python one -- and the inputs the fuzzer found crashing, now one-line bad-input errors (exit 2)."""

from __future__ import annotations

import copy
import io
import json
import random
import time
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.main import get_command
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.cli.common import MAX_MEMORY_FRAC

ROOT = Path(__file__).resolve().parents[1]
RUN = CliRunner()
SMALL = ["llama3-8b", "a100-sxm4-80g:1x8", "--global-batch", "16"]
HETERO = ["llama3-8b", "a100-sxm4-80g:1x8+ascend-910b:1x8", "--global-batch", "16"]


def _run(args, code):
    r = RUN.invoke(app, [str(a) for a in args])
    assert r.exit_code == code, (args, r.exit_code, r.stdout, r.stderr)
    assert "Traceback" not in r.stdout + r.stderr
    return r


def _one_error(r, *words):
    """Exit 2 with exactly one error line naming every word (file, field, reason), nothing on stdout."""
    errs = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("note:")]
    assert len(errs) == 1, r.stderr
    for w in words:
        assert w in errs[0], (w, errs[0])
    return errs[0]


# -- help and shared defaults --------------------------------------------------------------------------

def _commands():
    root = get_command(app)
    yield "baige-plan", root
    yield from ((f"baige-plan {n}", c) for n, c in root.commands.items())


def test_every_option_and_argument_of_every_command_has_help():
    missing = [f"{name} {p.opts}" for name, cmd in _commands() for p in cmd.params
               if not (getattr(p, "help", None) or "").strip()]
    assert not missing, "options without help text:\n" + "\n".join(missing)
    names = {n for n, _ in _commands()}
    assert {"baige-plan plan", "baige-plan evaluate", "baige-plan whatif", "baige-plan replan"} <= names


def test_shared_options_share_one_default():
    defaults: dict[str, set] = {}
    for _, cmd in _commands():
        for p in cmd.params:
            if "--max-memory-frac" in getattr(p, "opts", ()):
                defaults.setdefault("--max-memory-frac", set()).add(p.default)
    assert defaults["--max-memory-frac"] == {MAX_MEMORY_FRAC} == {0.9}


def test_evaluate_defaults_to_the_memory_fraction_plan_uses():
    r = _run(["evaluate", *SMALL, "--tp", "8", "--format", "json"], 0)
    assert json.loads(r.stdout)["max_memory_frac"] == 0.9
    r = _run(["evaluate", *SMALL, "--tp", "8", "--format", "json", "--max-memory-frac", "1"], 0)
    assert json.loads(r.stdout)["max_memory_frac"] == 1.0


# -- --quiet -------------------------------------------------------------------------------------------------

def test_quiet_prints_no_notes_but_errors(tmp_path):
    loud = _run(["plan", *SMALL[:2]], 0)                       # notes: runtime, global batch, search
    assert "note:" in loud.stderr
    quiet = _run(["--quiet", "plan", *SMALL[:2], "--out", tmp_path / "p.yaml"], 0)
    assert quiet.stderr == "" and quiet.stdout == loud.stdout
    assert (tmp_path / "p.yaml").is_file()
    bad = _run(["-q", "evaluate", "no-such-model", "a100-sxm4-80g:1x8"], 2)
    _one_error(bad, "no-such-model")
    again = _run(["plan", *SMALL[:2]], 0)                      # --quiet is per invocation
    assert "note:" in again.stderr


# -- progress lines -------------------------------------------------------------------------------------------

@pytest.fixture
def terminal(monkeypatch):
    """Progress lines drawn into a buffer that rich takes for a terminal."""
    import baige_plan.present.render_plans as rp

    buf = io.StringIO()
    monkeypatch.setattr(rp, "_console", lambda stderr=False: Console(file=buf, force_terminal=True, width=100,
                                                                     markup=False))
    return buf


def test_progress_shows_after_a_second_of_work_only(terminal):
    from baige_plan.cli.common import progress_line, set_quiet

    with progress_line("quick work", after_s=0.5):
        pass
    assert terminal.getvalue() == ""                           # done before the delay: nothing drawn
    with progress_line("parsing a large plan", after_s=0.05) as p:
        time.sleep(0.3)                                        # one long step, no update: the timer shows it
        p.update("re-estimating")
        time.sleep(0.2)
    out = terminal.getvalue()
    assert "parsing a large plan" in out and "re-estimating" in out
    n = len(out)
    set_quiet(True)
    try:
        with progress_line("quiet", after_s=0.0) as p:
            p.update("still quiet")
            time.sleep(0.1)
    finally:
        set_quiet(False)
    assert len(terminal.getvalue()) == n                       # --quiet: nothing


def test_search_progress_counts_candidates(terminal):
    from baige_plan.present.render_plans import Progress

    p = Progress(after_s=0.0)
    p(10, 100)
    time.sleep(0.1)
    p.close()
    assert "10 of 100 candidates" in terminal.getvalue()


def test_hetero_solve_reports_progress_and_stays_pure():
    from baige_plan.io.catalog import Catalog
    from baige_plan.search.hetero import solve
    from baige_plan.specs import runtimes
    from baige_plan.specs.job import JobSpec
    from baige_plan.specs.strategy import StrategySpec

    cat = Catalog.create([])
    m = cat.model("llama3-8b")
    cl, _ = cat.cluster("a100-sxm4-80g:1x8+ascend-910b:1x8")
    job = JobSpec(16, 4096)
    base = StrategySpec(**runtimes.knobs("flagscale"))
    calls = []
    told = solve(m, cl, job, base, progress=lambda stage, done, total: calls.append((stage, done, total)))
    plain = solve(m, cl, job, base)
    assert told.pipelines == plain.pipelines and told.estimate.step_time_s == plain.estimate.step_time_s
    stages = [c[0] for c in calls]
    assert stages[0] == "searching each chip group alone"
    assert "solving pipeline templates" in stages and stages[-1] == "the best plan of each chip group alone"
    assert all(0 <= d < t for _, d, t in calls)


def test_commands_with_progress_keep_stdout_clean(tmp_path):
    """Progress goes to stderr only, and not at all off a terminal: outputs parse as before."""
    p = tmp_path / "h.yaml"
    r = _run(["plan", *HETERO, "--out", p, "--format", "json"], 0)
    assert json.loads(r.stdout)["plans"]
    r = _run(["validate", p], 0)
    assert r.stdout.strip() == f"ok  {p} (plan)" and "searching" not in r.stderr
    _run(["check", p, "--baseline", p], 0)
    assert "no differences" in _run(["diff", p, p], 0).stdout
    r = _run(["backtest", ROOT / "tests/data/published_calibration.yaml", "--format", "json"], 0)
    assert json.loads(r.stdout)["rows"]


# -- validate reads a plan once ---------------------------------------------------------------------------------

def test_validate_parses_a_plan_file_once(tmp_path, monkeypatch):
    import baige_plan.io.yamlio as y

    p = tmp_path / "p.yaml"
    _run(["plan", *SMALL, "--out", p], 0)
    calls = []
    real = y.parse_text
    monkeypatch.setattr(y, "parse_text", lambda text, src, **kw: (calls.append(src), real(text, src, **kw))[1])
    _run(["validate", p], 0)
    assert calls == [str(p)]


# -- the plan writer: libyaml's emitter, the same bytes ----------------------------------------------------------

def _docs_written(monkeypatch, runs) -> list:
    """The documents the CLI hands to io/plans.dumps (with their Flow mappings) for each command in `runs`."""
    import baige_plan.io.plans as plans

    seen, real = [], plans.dumps
    monkeypatch.setattr(plans, "dumps", lambda doc, fmt: (seen.append(copy.deepcopy(doc)), real(doc, fmt))[1])
    for args in runs:
        _run(args, 0)
    return seen


def _flowify(x, rng):
    from baige_plan.io.serialize import Flow
    if isinstance(x, dict):
        d = {k: _flowify(v, rng) for k, v in x.items()}
        return Flow(d) if rng.random() < 0.3 and not any(isinstance(v, (dict, list)) for v in d.values()) else d
    if isinstance(x, list):
        return [_flowify(v, rng) for v in x]
    return x


def test_fast_and_pure_python_writers_give_identical_bytes(tmp_path, monkeypatch):
    from baige_plan.io import plans
    from baige_plan.io.yamlio import read_document

    if plans._CDumper is None:
        pytest.skip("PyYAML without libyaml: plans are written by the pure-Python emitter only")
    docs = _docs_written(monkeypatch, [
        ["plan", *SMALL, "--out", tmp_path / "a.yaml", "--tokens", "1e9"],
        ["plan", "mixtral-8x7b", "a100-sxm4-80g:2x8", "--global-batch", "32", "--out", tmp_path / "b.yaml",
         "--format", "yaml"],
        ["plan", *HETERO, "--out", tmp_path / "c.yaml"],
    ])
    assert len(docs) >= 4
    rng = random.Random(12)
    files = sorted((ROOT / "chips").rglob("*.yaml")) + sorted((ROOT / "topologies").glob("*.yaml")) \
        + sorted((ROOT / "models").glob("*.yaml"))
    docs += [_flowify(read_document(f), rng) for f in files]
    words = ["", " ", "x", "yes", "null", "1e3", "0x10", ": a", "a: b", "#c", "a #c", "'q'", '"d"', "[x]", "{y}",
             "*a", "&b", "!t", "%p", "@", "`", "- a", "é", "層", "ﬁ", "\u200b", "\xa0", "word " * 60, "x" * 250]
    for _ in range(300):
        s = "".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
        docs.append({"k": s, "l": [s, 1], "f": [_flowify({"a": s, "b": 2}, random.Random(0))], s or "e": {"n": s}})
    # strings the two emitters quote differently: the fast path leaves them to the pure-Python one
    for s in ("tab\there", "two\nlines", "nel\x85", "bom\ufeff", "emoji \U0001F600", "sep\u2028", "a" * 300 + "\t"):
        docs.append({"name": s, "rows": [{"x": s}] * 3})
    for d in docs:
        for width in (200, 120):
            assert plans.plan_yaml(d, width) == plans.plan_yaml(d, width, fast=False)


def test_row_by_row_placement_gives_the_emitters_bytes():
    """plan_yaml writes a long top-level list of one-line rows (a placement) row by row from each value's text as the
    emitter writes it: the same bytes as PyYAML's emitter for ints and any string (quoted, escaped, long enough to
    fold, or not), any key, and rows too long for one line."""
    from baige_plan.io import plans
    from baige_plan.io.serialize import Flow

    if plans._CDumper is None:
        pytest.skip("PyYAML without libyaml: plans are written by the pure-Python emitter only")
    rng = random.Random(7)
    words = ["", " ", "x", "yes", "No", "null", "~", "1e3", "0x10", "12", "-3", ": a", "a: b", "#c", "a #c", "'q'",
             '"d"', "[x]", "{y}", "*a", "&b", "!t", "%p", "@", "`", "- a", "é", "層", ",", "a,b", "}", "x" * 90,
             "tab\there", "two\nlines"]
    for n in range(40):
        rows = []
        for r in range(rng.choice([64, 65, 130])):
            w = rng.choice(words) if n % 3 else "h100-sxm5-80g"
            row = {"rank": r, "group": w, "node": rng.randint(-2, 10**12), "stage": r % 7}
            if n % 5 == 0:
                row[rng.choice(words) or "k"] = rng.choice(words)
            if n % 7 == 0:
                row["flag"] = bool(r % 2)       # not an int: the emitter writes these rows
            rows.append(Flow(row))
        key = rng.choice(["placement", "yes", "a: b", "rows"])
        doc = {"schema": "s", key: rows, "after": {"x": [1, 2], "y": Flow(a=1)}} if n % 2 else {key: rows}
        for width in (200, 120, 60):
            assert plans.plan_yaml(doc, width) == plans.plan_yaml(doc, width, fast=False)


def test_big_plan_file_is_unchanged_by_the_fast_writer(tmp_path, monkeypatch):
    """A plan of 1,024 devices written both ways (the CLI's own documents)."""
    from baige_plan.io import plans

    docs = _docs_written(monkeypatch, [["plan", "gpt3-175b", "a100-sxm4-80g:128x8", "--global-batch", "1024",
                                        "--seq-len", "2048", "--out", tmp_path / "big.yaml"]])
    text = (tmp_path / "big.yaml").read_text(encoding="utf-8")
    assert text == plans.plan_yaml(docs[0], fast=False)
    assert len(yaml.safe_load(text)["placement"]) == 1024


# -- inputs the fuzzer found crashing (tests/fuzz: `--seed 1 --repro N`): one line, exit 2 ---------------------

@pytest.fixture(scope="module")
def plan_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("fz")
    homo, het = d / "homo.yaml", d / "het.yaml"
    _run(["plan", *SMALL, "--out", homo], 0)
    _run(["plan", *HETERO, "--out", het], 0)
    return yaml.safe_load(homo.read_text()), yaml.safe_load(het.read_text())


def _write(tmp_path, doc, name="p.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


@pytest.mark.parametrize("which,path,value,field", [
    (0, ("pipelines", 0, "stages", 0, "layers"), [], "pipelines[0].stages[0].layers"),             # repro 545
    (0, ("pipelines", 0, "stages", 0, "layers"), [0, [32]], "pipelines[0].stages[0].layers"),      # repro 3905
    (1, ("pipelines", 0, "stages", 0, "layers"), [0, "2"], "pipelines[0].stages[0].layers"),       # repro 530
    (1, ("pipelines", 0, "stages", 0, "tp"), [1], "pipelines[0].stages[0].tp"),
    (1, ("pipelines", 0, "replicas"), "2", "pipelines[0].replicas"),
    (1, ("pipelines", 0, "strategy"), {"vpp": 0}, "pipelines[0].strategy.vpp"),
    (0, ("strategy", "tp"), [1], "strategy.tp"),
    (0, ("strategy", "recompute"), 5, "strategy.recompute"),
    (0, ("strategy", "sequence_parallel"), "yes", "strategy.sequence_parallel"),
    (0, ("search", "runners_up"), 5, "search.runners_up"),
    (0, ("search", "runners_up"), [{"strategy": 1}], "search.runners_up[0]"),
    (0, ("search", "runners_up", 0, "step_time_s"), "slow", "search.runners_up[0].step_time_s"),
    (0, ("search", "runners_up", 0, "strategy", "tp"), None, "search.runners_up[0].strategy.tp"),
    (0, ("search", "runners_up", 0, "bottleneck"), ["x"], "search.runners_up[0].bottleneck"),
])
@pytest.mark.parametrize("command", ["validate", "explain", "evaluate", "diff"])
def test_malformed_plan_values_are_one_line_errors(tmp_path, plan_files, which, path, value, field, command):
    doc = copy.deepcopy(plan_files[which])
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    p = _write(tmp_path, doc)
    args = {"validate": ["validate", p], "explain": ["explain", p], "evaluate": ["evaluate", "--plan", p],
            "diff": ["diff", p, p]}[command]
    line = _one_error(_run(args, 2), str(p), field)
    assert "malformed value" not in line and "object" not in line and "unsupported operand" not in line


def test_explain_shows_runners_up_as_text(tmp_path, plan_files):
    doc = copy.deepcopy(plan_files[0])
    doc["search"]["runners_up"][0]["bottleneck"] = "[/x] not markup"
    doc["inputs"]["model"]["name"] = "[/bold] model"
    r = _run(["explain", _write(tmp_path, doc)], 0)
    assert "[/x] not markup" in r.stdout and "[/bold] model" in r.stdout


def test_chip_source_keys_must_be_strings(tmp_path):                                              # repro 166
    doc = yaml.safe_load((ROOT / "chips/a100-sxm4-80g.yaml").read_text())
    doc["memory"]["hbm_GBps"]["sources"] = [["KEY"]]
    p = _write(tmp_path, doc, "chip.yaml")
    for args in (["validate", p], ["plan", "llama3-8b", f"{p}:1x8", "--global-batch", "16"]):
        _one_error(_run(args, 2), str(p), "memory.hbm_GBps.sources[0]", "string")


@pytest.mark.parametrize("bridges", [5, "x", {"groups": ["a", "b"]}, True])
def test_topology_bridges_must_be_a_list(tmp_path, bridges):
    doc = yaml.safe_load((ROOT / "topologies/mixed-a100-910b-128.yaml").read_text())
    doc["bridges"] = bridges
    p = _write(tmp_path, doc, "topo.yaml")
    for args in (["validate", p], ["evaluate", "llama3-8b", p]):
        _one_error(_run(args, 2), str(p), "bridges", "list")


RAW = ROOT / "chips/measured/h200-sxm-141g-links.raw.json"
RAW_GEMM = ROOT / "chips/measured/h100-sxm5-80g-profiled.raw.json"


def _raw_cases():
    def gemm(f):
        return (RAW_GEMM, f)

    def coll(f):
        return (RAW, f)

    def delete(key):
        return lambda d: d["gemm"][0].pop(key)

    return [
        ("gemm[0].dtype", gemm(delete("dtype"))),                                                     # repro 14
        ("gemm[0].flops", gemm(lambda d: d["gemm"][0].update(flops=0))),
        ("gemm[0].tflops", gemm(lambda d: d["gemm"][0].update(tflops=-3))),
        ("gemm[0].m", gemm(lambda d: d["gemm"][0].update(m=[256]))),
        ("gemm", gemm(lambda d: d.update(gemm={"dtype": "bf16"}))),
        ("hbm[0].time_s", gemm(lambda d: d["hbm"][0].update(time_s=1e-320))),
        ("hbm[0].bytes", gemm(lambda d: d["hbm"][0].update(bytes="big"))),
        ("device", gemm(lambda d: d.update(device=5))),
        ("device.mem_total_bytes", gemm(lambda d: d["device"].update(mem_total_bytes=-1))),
        ("schema", gemm(lambda d: d.pop("schema"))),
        ("unknown_key", gemm(lambda d: d.update(unknown_key=1))),
        ("collectives[0].world", coll(lambda d: d["collectives"][0].update(world=1))),
        ("collectives[0].results[0].op", coll(lambda d: d["collectives"][0]["results"][0].update(op="bcast"))),
        ("collectives[0].results", coll(lambda d: d["collectives"][0].update(
            results=[r for r in d["collectives"][0]["results"] if r["op"] != "all_reduce"]))),
        ("collectives", coll(lambda d: d.update(collectives=7))),
    ]


@pytest.mark.parametrize("field,case", _raw_cases(), ids=[c[0] for c in _raw_cases()])
def test_profile_refit_checks_the_raw_file(tmp_path, field, case):
    src, mutate = case
    raw = json.loads(src.read_text())
    raw["collectives"] = [raw["collectives"]] if isinstance(raw.get("collectives"), dict) else raw.get("collectives")
    if raw["collectives"] is None:
        raw.pop("collectives")
    mutate(raw)
    p = tmp_path / "chip.raw.json"
    p.write_text(json.dumps(raw))
    r = _run(["profile", "--refit", p, "--out", tmp_path / "refit.yaml"], 2)
    _one_error(r, str(p), field)
    assert "Warning" not in r.stderr and not (tmp_path / "refit.yaml").exists()


def test_profile_refit_of_the_shipped_raw_files_still_works(tmp_path):
    for src, base in ((RAW_GEMM, "h100-sxm5-80g"), (RAW, "h200-sxm-141g")):
        out = tmp_path / f"{base}.yaml"
        r = _run(["profile", "--refit", src, "--out", out, "--base", base], 0)
        assert "Warning" not in r.stderr and out.is_file()
