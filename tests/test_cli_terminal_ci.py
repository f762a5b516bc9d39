"""Comfortable at the terminal and in CI (issue 19): help that shows every default and reads at 80 columns,
tables that cut no cell at 80 columns or piped, `--format json` on every command that prints a result with one
estimate object for a plan wherever it appears, diff/check exit codes for CI, `check --update-baseline`, and
a progress line on every long command."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from typer.main import get_command
from typer.testing import CliRunner

from baige_plan.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
RUN = CliRunner()
SMALL = ["llama3-8b", "a100-sxm4-80g:1x8", "--global-batch", "16"]
HETERO = ["llama3-8b", "a100-sxm4-80g:1x8+ascend-910b:1x8", "--global-batch", "16"]
RUNS = ROOT / "tests/data/published_calibration.yaml"
ESTIMATE_KEYS = {"schema", "strategy", "fits", "step_time_s", "tokens_per_s", "tokens_per_s_per_device",
                 "model_tflops_per_device", "mfu", "hfu", "peak_memory_gib", "breakdown_s", "memory_gib",
                 "step_time_band_s"}


def _run(args, code, env=None):
    r = RUN.invoke(app, [str(a) for a in args], env=env)
    assert r.exit_code == code, (args, r.exit_code, r.stdout, r.stderr)
    assert "Traceback" not in r.stdout + r.stderr
    return r


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """A homogeneous plan, a slower one (a regression against it), and a plan on two chip families."""
    d = tmp_path_factory.mktemp("ci")
    best, slow, het = d / "best.yaml", d / "slow.yaml", d / "het.yaml"
    _run(["plan", *SMALL, "--out", best], 0)
    _run(["plan", *SMALL, "--tp", "8", "--recompute", "full", "--out", slow], 0)
    _run(["plan", *HETERO, "--out", het], 0)
    return best, slow, het


# -- 1. help ----------------------------------------------------------------------------------------------------

def _commands():
    root = get_command(app)
    yield "", root
    yield from root.commands.items()


def _options(cmd):
    return [p for p in cmd.params if p.param_type_name == "option"]


def test_every_option_shows_its_default_and_says_what_it_does():
    """Rendered help of every option (as --help prints it): a default unless it is a plain flag or required,
    help text beyond the default, and no rich markup eaten ("[default: ...]", "[plot]" are text)."""
    missing, bare = [], []
    for name, cmd in _commands():
        ctx = cmd.make_context(name or "baige-plan", [], resilient_parsing=True)
        for p in _options(cmd):
            names, text = p.get_help_record(ctx)
            if not (p.is_flag and not p.secondary_opts) and not p.required and "[default:" not in text:
                missing.append(f"{name} {names}")
            if not re.sub(r"\[default:[^\]]*\]|\[required\]", "", text).strip(" .\n"):
                bare.append(f"{name} {names}")
    assert not missing, "options whose default is not shown:\n" + "\n".join(missing)
    assert not bare, "options with no help beyond a default:\n" + "\n".join(bare)


@pytest.mark.parametrize("args,words", [
    (["plan"], ["Sequences per optimizer step [default: one per device]", "[default: devices per node]",
                "[default: the model's layers]", "[default: megatron; flagscale on clusters of several chip groups]",
                "--first-stage-layers", "--no-account-for-embedding", "[default: 0.9]"]),
    (["evaluate"], ["[default: devices / (tp x pp x cp)]", "[default: on when tp > 1]", "[default: 0.9]"]),
    (["explain"], ["pip install 'baige-plan[plot]'", "--format"]),
    (["backtest"], ["pip install 'baige-plan[plot]'"]),
    (["check"], ["--update-baseline, --accept", "--format"]),
    (["profile"], ["pip install 'baige-plan[profile]'"]),
])
def test_help_reads_at_80_columns(args, words):
    out = _run([*args, "--help"], 0, env={"COLUMNS": "80"}).stdout
    text = " ".join(out.split())
    for w in words:
        assert w in text, w
    assert "…" not in out and max(cell_len(ln) for ln in out.splitlines()) <= 80
    cmd = get_command(app).commands[args[0]]
    for p in _options(cmd):                                # every option name in full, never "--first-stage-la…"
        for o in p.opts + p.secondary_opts:
            assert re.search(re.escape(o) + r"(?![\w-])", out), o


def test_every_command_help_fits_80_columns():
    for name, _ in _commands():
        out = _run([*([name] if name else []), "--help"], 0, env={"COLUMNS": "80"}).stdout
        assert "…" not in out and max(cell_len(ln) for ln in out.splitlines()) <= 80, name


# -- 2. tables at 80 columns and piped -------------------------------------------------------------------------------

def _tables_commands(plans):
    best, _, het = plans
    return {
        "plan": ["plan", *SMALL, "--top", "5"],
        "plan-hetero": ["plan", *HETERO, "--top", "3"],
        "plan-moe-tokens": ["plan", "mixtral-8x7b", "a100-sxm4-80g:2x8", "--global-batch", "32", "--top", "3",
                            "--tokens", "1e11"],
        "evaluate": ["evaluate", *SMALL, "--tp", "2", "--pp", "2", "--first-stage-layers", "6"],
        "explain": ["explain", best],
        "explain-hetero": ["explain", het],
        "backtest": ["backtest", RUNS],
        "catalog-chips": ["catalog", "chips"],
        "catalog-models": ["catalog", "models"],
        "catalog-topologies": ["catalog", "topologies"],
        "diff": ["diff", best, het],
    }


@pytest.mark.parametrize("env", [{"COLUMNS": "80"}, {"COLUMNS": "60"}, {"COLUMNS": None}],
                         ids=["columns-80", "columns-60", "piped"])
def test_tables_cut_no_cell(plans, env):
    """COLUMNS=80 (and 60): every line fits, no cell ends in an ellipsis. Piped with no COLUMNS (not a
    terminal): no cut either, at the table's own width."""
    width = int(env["COLUMNS"] or 0)
    for name, args in _tables_commands(plans).items():
        r = RUN.invoke(app, [str(a) for a in args], env=env)
        assert r.exit_code in (0, 1), (name, r.stderr)
        assert r.stdout.strip() and "…" not in r.stdout, (name, r.stdout)
        if width:
            too_long = [ln for ln in r.stdout.splitlines() if cell_len(ln) > width]
            assert not too_long, (name, too_long)


def test_plan_table_keeps_every_value_at_80_columns(plans):
    """The narrow layout of `plan` still shows each plan's numbers whole."""
    doc = json.loads(_run(["plan", *SMALL, "--top", "5", "--format", "json"], 0).stdout)
    out = _run(["plan", *SMALL, "--top", "5"], 0, env={"COLUMNS": "80"}).stdout
    for p in doc["plans"]:
        assert f"{p['tokens_per_s_per_device']:,.0f}" in out and f"{p['mfu']:.1%}" in out
    assert "none|selective" in out and "published recipe:" in out


def test_piped_output_through_a_real_pipe():
    """The console script with its stdout a pipe (not a terminal) and COLUMNS=80."""
    env = dict(os.environ, COLUMNS="80")
    r = subprocess.run([sys.executable, "-m", "baige_plan", "catalog", "chips"], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "a100-sxm4-80g" in r.stdout and "…" not in r.stdout
    assert max(cell_len(ln) for ln in r.stdout.splitlines()) <= 80


def test_fit_never_cuts_where_rich_would():
    """Two wrappable columns, one a single long word: rich's own collapse cuts the word at 50 columns; the
    layout here wraps the other column instead, and falls back to one record per row when nothing fits."""
    from baige_plan.present.render import fit

    word = "korthikanti2022_t5_530b_seqsel_x"
    text = " ".join(["tp8 pp35 dp1 cp1"] * 3)

    def table():
        t = Table(box=box.SQUARE)
        t.add_column("run")
        t.add_column("strategy")
        t.add_row(word, text)
        return t

    def render(r, width):
        buf = io.StringIO()
        c = Console(file=buf, width=width, markup=False, color_system=None)
        for x in r:
            c.print(x)
        return buf.getvalue()

    assert "…" in render([table()], 50)                     # what rich alone does
    for width in (50, 40, 30, 20):
        out = render(fit(table(), width), width)
        assert "…" not in out and word in out.replace("\n", ""), (width, out)
        assert max(cell_len(ln) for ln in out.splitlines()) <= width


# -- 2. --format json everywhere, one estimate object --------------------------------------------------------------

def test_every_result_command_takes_format_json():
    skip = {"export", "profile"}         # export prints the launch file itself; profile writes files
    lacking = [n for n, cmd in get_command(app).commands.items()
               if n not in skip and not any("--format" in p.opts for p in _options(cmd))]
    assert not lacking


def _json(args, code=0):
    r = _run(args, code)
    return json.loads(r.stdout)                 # one document, nothing else on stdout


def test_json_documents_and_their_keys(plans, tmp_path):
    best, slow, het = plans
    assert _json(["explain", best, "--format", "json"]).keys() >= {"schema", "estimate", "stages", "runners_up",
                                                                    "pipelines", "summary"}
    assert _json(["explain", het, "--format", "json"])["estimate"]["heterogeneous_efficiency"] > 0
    c = _json(["check", best, "--baseline", best, "--format", "json"])
    assert c["schema"] == "baige-plan/check/v1" and c["ok"] is True and c["regressions"] == []
    c = _json(["check", slow, "--baseline", best, "--format", "json"], 3)
    assert c["ok"] is False and c["regressions"] and c["step_time_change"] > 0.2
    assert c["changes"]["strategy"]["tp"]["b"] == 8
    v = _json(["validate", best, "--format", "json"])
    assert v == {"schema": "baige-plan/validate/v1", "ok": True,
                 "files": [{"file": str(best), "ok": True, "kind": "plan", "error": None}]}
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: baige-plan/model/v1\nname: x\n")
    v = _json(["validate", best, bad, "--format", "json"], 2)
    assert [f["ok"] for f in v["files"]] == [True, False] and "hidden" in v["files"][1]["error"]
    for kind in ("chips", "models", "topologies"):
        assert _json(["catalog", kind, "--format", "json"])[kind]
    assert _json(["catalog", "chips", "h100-sxm5-80g", "--format", "json"])["id"] == "h100-sxm5-80g"


def test_a_plan_is_one_json_object_everywhere(plans, tmp_path):
    """plan output entries, the plan file's estimate, evaluate --plan, explain, check, diff and replan: the same
    estimate object (schema baige-plan/estimate/v1, the SPEC §3 keys), equal where it is the same plan."""
    best, _, _ = plans
    stored = yaml.safe_load(best.read_text())["estimate"]
    out = _json(["plan", *SMALL, "--format", "json"])["plans"][0]
    evaluated = _json(["evaluate", "--plan", best, "--format", "json"])
    explained = _json(["explain", best, "--format", "json"])["estimate"]
    checked = _json(["check", best, "--baseline", best, "--format", "json"])
    diffed = _json(["diff", best, best, "--format", "json"])
    two = tmp_path / "two.yaml"
    _run(["plan", "llama3-8b", "a100-sxm4-80g:2x8", "--global-batch", "32", "--out", two], 0)
    rep = _json(["replan", two, "--drop", "a100-sxm4-80g:1", "--format", "json"])
    objects = [stored, out, evaluated, explained, checked["plan"]["estimate"], checked["baseline"]["estimate"],
               diffed["a"]["estimate"], diffed["b"]["estimate"], rep["old"]["estimate"], rep["new"]["estimate"]]
    for o in objects:
        assert o["schema"] == "baige-plan/estimate/v1" and ESTIMATE_KEYS <= o.keys(), sorted(o)
    for o in (evaluated, explained, checked["plan"]["estimate"], checked["baseline"]["estimate"],
              diffed["a"]["estimate"]):
        assert o == stored
    assert {k: v for k, v in out.items() if k in stored} == stored
    assert rep["new"]["estimate"]["step_time_s"] == rep["new"]["step_time_s"]


# -- 3. CI semantics --------------------------------------------------------------------------------------------------

def test_diff_exit_codes(plans, tmp_path):
    best, slow, _ = plans
    assert _run(["diff", best, best], 0).stdout.strip() == "no differences"
    assert _json(["diff", best, best, "--format", "json"])["same"] is True
    r = _run(["diff", best, slow], 1)
    assert "strategy.tp" in r.stdout
    d = _json(["diff", best, slow, "--format", "json"], 1)
    assert d["same"] is False and d["schema"] == "baige-plan/diff/v1"
    missing = tmp_path / "missing.yaml"
    r = _run(["diff", best, missing], 2)
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1 and str(missing) in r.stderr


def test_diff_reports_a_changed_placement(plans, tmp_path):
    best, _, _ = plans
    doc = yaml.safe_load(best.read_text())
    doc["placement"][0]["device"], doc["placement"][1]["device"] = (doc["placement"][1]["device"],
                                                                    doc["placement"][0]["device"])
    moved = tmp_path / "moved.yaml"
    moved.write_text(yaml.safe_dump(doc, sort_keys=False))
    d = _json(["diff", best, moved, "--format", "json"], 1)
    assert d["placement"] == {"a_ranks": 8, "b_ranks": 8, "moved": 2}


def test_check_update_baseline(plans, tmp_path):
    best, slow, _ = plans
    base = tmp_path / "baseline.yaml"
    base.write_bytes(best.read_bytes())
    _run(["check", slow, "--baseline", base], 3)                             # a regression fails CI
    r = _run(["check", slow, "--baseline", base, "--update-baseline"], 0)    # ... until accepted
    assert "accepted regression" in r.stderr and "baseline updated" in r.stdout
    assert base.read_bytes() == slow.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["baseline.yaml"]   # atomic: no temp file left
    _run(["check", slow, "--baseline", base], 0)                             # the new baseline passes
    # --accept (alias) writes a baseline that does not exist yet; JSON says so
    new = tmp_path / "new-baseline.yaml"
    c = _json(["check", best, "--baseline", new, "--accept", "--format", "json"])
    assert c["baseline_updated"] is True and c["baseline"] is None and new.read_bytes() == best.read_bytes()
    # a JSON baseline gets the plan as JSON
    js = tmp_path / "baseline.json"
    _run(["check", best, "--baseline", js, "--accept"], 0)
    assert json.loads(js.read_text()) == yaml.safe_load(best.read_text())
    _run(["check", best, "--baseline", js], 0)


def test_check_update_baseline_refuses_bad_input(plans, tmp_path):
    best, _, _ = plans
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: baige-plan/plan/v1\n")
    base = tmp_path / "base.yaml"
    base.write_bytes(best.read_bytes())
    r = _run(["check", bad, "--baseline", base, "--accept"], 2)              # PLAN must be valid
    assert len(r.stderr.strip().splitlines()) == 1 and base.read_bytes() == best.read_bytes()
    folder = tmp_path / "dir.yaml"
    folder.mkdir()
    r = _run(["check", best, "--baseline", folder, "--accept"], 2)           # not a file: one line, exit 2
    assert str(folder) in r.stderr.strip().splitlines()[-1]


# -- 4. progress -----------------------------------------------------------------------------------------------------

@pytest.fixture
def terminal(monkeypatch):
    """stderr taken for a terminal, and progress lines shown at once."""
    import baige_plan.cli.common as common
    import baige_plan.present.render_plans as rp

    buf = io.StringIO()
    monkeypatch.setattr(rp, "_console", lambda stderr=False: Console(file=buf, force_terminal=True, width=100,
                                                                     markup=False))
    monkeypatch.setattr(common, "PROGRESS_AFTER_S", 0.0)
    return buf


def test_every_long_command_shows_progress_at_a_terminal(plans, tmp_path, terminal):
    best, slow, het = plans
    two = tmp_path / "two.yaml"
    _run(["plan", "llama3-8b", "a100-sxm4-80g:2x8", "--global-batch", "32", "--out", two], 0)
    commands = {
        "plan": ["plan", *SMALL], "plan-hetero": ["plan", *HETERO], "evaluate": ["evaluate", *SMALL, "--tp", "8"],
        "evaluate --plan": ["evaluate", "--plan", het], "explain": ["explain", het], "export": ["export", best],
        "check": ["check", slow, "--baseline", best, "--tolerance", "9"], "diff": ["diff", best, best],
        "validate": ["validate", best], "backtest": ["backtest", RUNS],
        "replan": ["replan", two, "--drop", "a100-sxm4-80g:1"],
        "whatif": ["whatif", "llama3-8b", "--pool", "a100-sxm4-80g:8:2", "--global-batch", "16", "--tokens", "1e9",
                   "--deadline", "1000"],
    }
    silent = []
    for name, args in commands.items():
        terminal.seek(0)
        terminal.truncate()
        r = RUN.invoke(app, [str(a) for a in args])
        assert r.exit_code == 0, (name, r.stderr)
        if not terminal.getvalue().strip():
            silent.append(name)
    assert not silent, f"no progress line: {silent}"


def test_no_progress_off_a_terminal_or_with_quiet(plans):
    best, _, het = plans
    for args in (["explain", het], ["evaluate", "--plan", het], ["export", best]):
        r = _run(args, 0)
        assert "explain:" not in r.stderr and "evaluate:" not in r.stderr and "export:" not in r.stderr
