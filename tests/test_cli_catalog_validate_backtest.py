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
