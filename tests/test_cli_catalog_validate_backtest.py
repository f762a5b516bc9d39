"""catalog, validate and backtest commands through Typer's runner."""

import json
from pathlib import Path

from typer.testing import CliRunner

from baige_plan.cli.app import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def test_catalog_lists_required_chips_json():
    r = runner.invoke(app, ["catalog", "chips", "--format", "json"])
    assert r.exit_code == 0, r.output
    ids = {c["id"] for c in json.loads(r.stdout)["chips"]}
    assert {"v100-sxm2-16g", "v100-sxm2-32g", "a100-sxm4-40g", "a100-sxm4-80g", "h100-sxm5-80g", "h800-sxm5-80g",
            "h200-sxm-141g", "b200", "mi300x", "gaudi2", "ascend-910b", "kunlun-p800"} <= ids
    a100 = next(c for c in json.loads(r.stdout)["chips"] if c["id"] == "a100-sxm4-80g")
    assert a100["bf16_tflops"] == 312 and a100["hbm_GBps"] == 2039


def test_catalog_detail_and_unknown():
    r = runner.invoke(app, ["catalog", "models", "llama3-70b", "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["layers"] == 80
    r = runner.invoke(app, ["catalog", "chips", "nope"])
    assert r.exit_code == 2 and "nope" in r.stderr
    r = runner.invoke(app, ["catalog", "gizmos"])
    assert r.exit_code == 2


def test_validate_reports_each_problem(tmp_path):
    bad1 = tmp_path / "m.yaml"
    bad1.write_text("schema: baige-plan/model/v1\nname: x\nlayers: 2\n")
    bad2 = tmp_path / "t.yaml"
    bad2.write_text("schema: baige-plan/topology/v1\nname: t\ngroups:\n  - {name: g, chip: a100-sxm4-80g, nodes: 0, "
                    "devices_per_node: 8}\n")
    good = ROOT / "models" / "llama3-8b.yaml"
    r = runner.invoke(app, ["validate", str(good), str(bad1), str(bad2)])
    assert r.exit_code == 2
    assert "ok" in r.stdout and str(good) in r.stdout
    errs = r.stderr.strip().splitlines()
    assert len(errs) == 2 and "hidden" in errs[0] and "nodes" in errs[1]


def test_backtest_json_shape():
    r = runner.invoke(app, ["backtest", str(ROOT / "tests/data/published_calibration.yaml"), "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    row = d["rows"][0]
    for k in ("id", "measured_step_time_s", "predicted_step_time_s", "measured_peak_memory_gib",
              "predicted_peak_memory_gib"):
        assert k in row
    assert d["summary"]["rows"] == 25 and d["summary"]["median_abs_step_time_error"] <= 0.08


def test_backtest_zero_measured_memory_is_bad_input(tmp_path):
    # a measured memory of 0 GiB is no measurement: exit 2 naming the field (was a ZeroDivisionError, exit 70)
    src = (ROOT / "benchmarks/real/runs_h100.yaml").read_text().replace("../../chips/", f"{ROOT}/chips/")
    for key in ("reserved_memory_gib", "peak_memory_gib"):
        lines = src.splitlines()
        i = next(k for k, line in enumerate(lines) if line.strip().startswith(key + ":"))
        lines[i] = lines[i].split(":")[0] + ": 0"
        bad = tmp_path / f"{key}.yaml"
        bad.write_text("\n".join(lines) + "\n")
        r = runner.invoke(app, ["backtest", str(bad)])
        assert r.exit_code == 2, r.output
        assert f"results.{key}: must be > 0 GiB" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_unwritable_stdout_is_one_line_exit_2():
    # stdout on a full device: a one-line error naming it, exit 2 (was "internal error: OSError", exit 70)
    import os
    import subprocess
    import sys

    import pytest

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this platform")
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "baige_plan", "catalog", "chips"], stdout=full,
                           stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == "baige-plan: standard output: No space left on device"


def test_topology_link_rates_and_latency_have_physical_ranges(tmp_path):
    # 5e-324 Gb/s divided to infinity (internal error), 1.7e308 us overflowed: bad input, one line, exit 2
    cases = {"scaleout_Gbps: 5.0e-324": "groups[0].scaleout_Gbps: must be a rate from 0.001 to 1e+06",
             "scaleup_GBps: 2.0e+6": "groups[0].scaleup_GBps: must be a rate from 0.001 to 1e+06"}
    for line, msg in cases.items():
        t = tmp_path / "t.yaml"
        t.write_text("schema: baige-plan/topology/v1\nname: t\ngroups:\n  - name: g\n    chip: h100-sxm5-80g\n"
                     f"    nodes: 1\n    devices_per_node: 2\n    {line}\n")
        r = runner.invoke(app, ["validate", str(t)])
        assert r.exit_code == 2 and msg in r.stderr, r.output
    t = tmp_path / "b.yaml"
    t.write_text("schema: baige-plan/topology/v1\nname: b\ngroups:\n"
                 "  - {name: a, chip: a100-sxm4-80g, nodes: 1, devices_per_node: 8}\n"
                 "  - {name: n, chip: ascend-910b, nodes: 1, devices_per_node: 8}\n"
                 "bridges:\n  - {groups: [a, n], kind: cpu-forwarding, GBps_per_node: 25, latency_us: 1.7e+308}\n")
    r = runner.invoke(app, ["validate", str(t)])
    assert r.exit_code == 2 and "bridges[0].latency_us: must be from 0 to 1e+07 us" in r.stderr, r.output


def test_runs_step_time_below_a_microsecond_is_bad_input(tmp_path):
    src = (ROOT / "benchmarks/real/runs_h100.yaml").read_text().replace("../../chips/", f"{ROOT}/chips/")
    lines = src.splitlines()
    i = next(k for k, line in enumerate(lines) if line.strip().startswith("step_time_s:"))
    lines[i] = lines[i].split(":")[0] + ": 1.0e-320"
    bad = tmp_path / "r.yaml"
    bad.write_text("\n".join(lines) + "\n")
    r = runner.invoke(app, ["backtest", str(bad)])
    assert r.exit_code == 2 and "step_time_s: must be at least 1e-06 seconds" in r.stderr, r.output


def test_reader_closing_stdout_ends_quietly_by_sigpipe():
    # `baige-plan ... | head`: killed by SIGPIPE like Unix tools (141 in the shell), no message; it was exit 1,
    # which the contract reserves for "no feasible plan" (fuzz pass)
    import signal
    import subprocess
    import sys

    import pytest

    if not hasattr(signal, "SIGPIPE"):
        pytest.skip("no SIGPIPE on this platform")
    p = subprocess.Popen([sys.executable, "-m", "baige_plan", "-q", "plan", "opt-350m", "h100-sxm5-80g:1x2",
                          "--global-batch", "8", "--seq-len", "512", "--top", "50", "--format", "json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    p.stdout.read(1)
    p.stdout.close()          # the reader goes away before the 143 KB of JSON (over a 64 KiB pipe) are written
    err = p.stderr.read()
    assert p.wait() == -signal.SIGPIPE and err == b""
