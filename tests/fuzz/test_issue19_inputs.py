"""The hostile inputs issue 19 lists, one by one (each cause named there): refused at once with one line naming
the option or file and the field (exit 2), never an internal error, a hang or a number accepted silently;
no raw terminal control code reaches the terminal."""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from baige_plan.cli.app import app

REPO = Path(__file__).resolve().parents[2]
RUN = CliRunner()
G = "a100-sxm4-80g"
HUGE = "9" * 5000
ESC = "\x1b[31mRED\x1b[0m"


def _run(args, code=2, within=10.0, env=None):
    t = time.monotonic()
    r = RUN.invoke(app, [str(a) for a in args], env=env)
    assert time.monotonic() - t < within, args
    assert r.exception is None or isinstance(r.exception, SystemExit), (args, repr(r.exception))
    assert r.exit_code == code, (args, r.exit_code, r.stdout[-500:], r.stderr[-500:])
    assert "Traceback" not in r.output and "\x1b" not in r.stdout + r.stderr
    if code == 2:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("note:")]
        assert len(lines) == 1 and lines[0].startswith("baige-plan: "), (args, r.stderr)
        return lines[0]
    return r


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("p") / "plan.yaml"
    _run(["plan", "llama3-8b", f"{G}:2x8", "--global-batch", "16", "--out", p], code=0, within=60)
    return p


@pytest.mark.parametrize("opt, value, words", [
    ("--drop-count", f"{G}:²", "--drop-count"),            # '²'.isdigit() is True, int('²') raises
    ("--drop-count", f"{G}:{HUGE}", "--drop-count"),
    ("--drop", f"{G}:{HUGE}", "out of range"),            # int() refuses 4,300+ digits
    ("--drop", f"{G}:0-{HUGE}", "out of range"),
    ("--add", f"{G}:{HUGE}x8", "limit"),
    ("--add", f"{G}:99999999x8", "limit"),                # was a MemoryError after a minute
    ("--add", f"{G}:131072x8", "limit"),                  # at the limit alone, over it with the plan's 2 nodes
    ("--max-loss", "nan", "--max-loss"),
])
def test_replan_numbers(plan, opt, value, words):
    line = _run(["replan", plan, opt, value, "--time-limit", "2"] + (["--drop", f"{G}:1"] if opt == "--max-loss" else []),
                within=5)
    assert opt in line and words in line, line


@pytest.mark.slow
def test_replan_onto_a_huge_cluster_keeps_its_time_limit(plan):
    """10^6 devices added: was minutes in the keep loop (every replica count) and a MemoryError in the node
    assignment (an n x n matrix); now the replica counts that divide the batch and the natural node order."""
    r = _run(["replan", plan, "--add", f"{G}:130000x8", "--time-limit", "2", "--format", "json"], code=0, within=60)
    rep = json.loads(r.stdout)
    assert rep["new"]["devices"] <= 16 * 2 and len(rep["new"]["spare_nodes"]) >= 1


def test_exclude_with_a_huge_index(plan):
    line = _run(["plan", "llama3-8b", f"{G}:2x8", "--global-batch", "16", "--exclude", f"{G}:{HUGE}"], within=5)
    assert "--exclude" in line and "out of range" in line


@pytest.mark.parametrize("folder, words", [("", "--out-dir"), ("/proc/x", "cannot create"),
                                           ("/proc/version/x", "Not a directory")])
def test_export_folder_that_cannot_be_made(plan, folder, words):
    line = _run(["export", plan, "--out-dir", folder])
    assert "--out-dir" in line and words in line, line


def test_profile_writes_atomically_and_names_fields(tmp_path):
    base = ["profile", "--model", "llama3-8b", "--chip", "h100-sxm5-80g", "--analytical"]
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    assert "named pipe" in _run(base + ["--out", fifo], within=5)        # was a hang: a plain write to a FIFO
    assert "does not exist" in _run(base + ["--out", tmp_path / "nodir" / "p.yaml"])
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:     # a 300-character --name: the default file name is cut to a length every file system takes
        _run(base + ["--name", "n" * 300], code=0)
        _run(base + ["--name", ESC], code=0)
    finally:
        os.chdir(cwd)
    names = sorted(p.name for p in tmp_path.glob("*.profile.yaml"))
    assert len(names) == 2 and all(len(n) <= 255 and "\x1b" not in n for n in names), names
    line = _run(["profile", "--model", "llama3-8b", "--chip", "h100", "--analytical", "--out", tmp_path / "x.yaml"])
    assert line.startswith("baige-plan: --chip: ") and "did you mean 'h100-pcie-80g'" in line   # was "error: CLUSTER"


def _runs(tmp_path, edit) -> Path:
    doc = yaml.safe_load((REPO / "tests/data/published_calibration.yaml").read_text())
    rows = copy.deepcopy(doc["rows"][:2])
    edit(rows)
    p = tmp_path / "runs.yaml"
    p.write_text(yaml.safe_dump({"schema_version": 1, "rows": rows}))
    return p


@pytest.mark.parametrize("edit, field", [
    (lambda r: r[0]["parallel"].update(pp=0), "parallel.pp"),                 # was ZeroDivisionError
    (lambda r: r[0]["derived"].update(step_time_s=0), "derived.step_time_s"),   # was accepted
    (lambda r: r[0]["derived"].update(step_time_s=1e308), "derived.step_time_s"),
    (lambda r: r[1].update(id=r[0]["id"]), ".id"),                              # duplicate ids were accepted
])
def test_runs_rows(tmp_path, edit, field):
    p = _runs(tmp_path, edit)
    for args in (["backtest", p], ["validate", p]):
        line = _run(args)
        assert str(p) in line and field in line, line


@pytest.mark.parametrize("price", ["1e308", "-1", "nan", "inf"])
def test_price_must_be_a_plain_number(price):
    line = _run(["plan", "llama3-8b", f"{G}:1x8", "--global-batch", "16", "--tokens", "1e12", "--price",
                 f"{G}={price}", "--format", "json"])
    assert "--price" in line and "USD per device-hour" in line


def test_a_price_in_a_chip_file_has_a_ceiling(tmp_path):
    doc = yaml.safe_load((REPO / "chips" / f"{G}.yaml").read_text())
    doc["price"]["usd_per_device_hour"]["value"] = 1e308       # the JSON then held a bare Infinity
    p = tmp_path / "chip.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert "price.usd_per_device_hour" in _run(["validate", p])


@pytest.mark.parametrize("edit, words", [
    (lambda d: d.update(placement=[]), "placement: is empty"),
    (lambda d: d.update(placement=d["placement"][:5]), "placement: has 5 rows"),
    (lambda d: d["placement"].__setitem__(-1, dict(d["placement"][0])), "placed twice"),
    (lambda d: d["inputs"]["cluster"]["groups"][0].update(nodes=10 ** 6), "limit"),
    (lambda d: d["inputs"]["cluster"]["groups"][0].update(devices_per_node=10 ** 8, nodes=1), "devices_per_node"),
])
def test_plan_files_every_rank_placed_once(plan, tmp_path, edit, words):
    doc = yaml.safe_load(plan.read_text())
    edit(doc)
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    for cmd in (["validate", p], ["explain", p], ["export", p], ["evaluate", "--plan", p]):
        line = _run(cmd, within=5)
        assert str(p) in line and words in line, line


def test_profile_entries_with_zero_or_absurd_values(tmp_path):
    out = tmp_path / "prof.yaml"
    _run(["profile", "--model", "llama3-8b", "--chip", "h100-sxm5-80g", "--analytical", "--out", out], code=0)
    doc = yaml.safe_load(out.read_text())
    for key, value, words in (("forward_s", 0.0, "layer.forward_s"), ("activation_bytes", 1e308, "activation_bytes")):
        d = copy.deepcopy(doc)
        for e in d["entries"]:
            e["layer"][key] = value
        p = tmp_path / f"p-{key}.yaml"
        p.write_text(yaml.safe_dump(d, sort_keys=False))
        assert words in _run(["validate", p])


def test_escape_codes_never_reach_the_terminal(tmp_path):
    cfg = json.loads((REPO / "tests/data/hf/llama3-8b/config.json").read_text())
    cfg["_name_or_path"] = ESC
    d = tmp_path / "hf"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    r = _run(["evaluate", d / "config.json", f"{G}:1x8", "--global-batch", "16", "--tp", "8"], code=0)   # no ESC
    assert "\\x1b[31mRED" in r.stdout           # the config's name, escaped
    line = _run(["plan", ESC, f"{G}:1x8"])
    assert "\\x1b[31m" in line                        # shown escaped, never sent raw
    _run(["evaluate", "llama3-8b", f"{G}:1x8", "--precision", "bf\x1b[2J"])


@pytest.mark.parametrize("args, words", [
    (["plan", "llama3-8b", "h100:1x8"], "did you mean 'h100-pcie-80g' or 'h100-sxm5-80g'"),
    (["plan", "llama-8b", f"{G}:1x8"], "did you mean 'llama3-8b'"),
    (["catalog", "chips", "h100"], "did you mean 'h100-pcie-80g'"),
    (["catalog", "topologies", "mixed-a100-910b"], "did you mean 'mixed-a100-910b-128'"),
    (["plan", "llama3-8b", "mixed-a100-910b"], "did you mean 'mixed-a100-910b-128'"),
])
def test_did_you_mean(args, words):
    line = _run(args)
    assert words in line and "known:" not in line, line     # a suggestion, not 27 ids
