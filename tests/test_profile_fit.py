"""Profile fitting and chip-file writing from recorded measurements (no torch, no GPU).

Fixture: tests/data/profile_raw_h200_small.json, a subset of the raw samples of the real run on
2x NVIDIA H200 (chips/measured/h200-sxm-141g-profiled.raw.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from baige_plan.errors import InputError
from baige_plan.io.chips import load_chip_file
from baige_plan.profile import fit as F
from baige_plan.profile import writer as W

DATA = Path(__file__).parent / "data"
RAW = json.loads((DATA / "profile_raw_h200_small.json").read_text())
BASE = str(DATA / "h200-sxm-141g.datasheet.yaml")
PEAK = 989.4


def _tflops(m, n, k):
    return next(r["tflops"] for r in RAW["gemm"] if (r["m"], r["n"], r["k"]) == (m, n, k))


def test_busbw_factors_follow_nccl_tests():
    assert F.busbw_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert F.busbw_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert F.busbw_factor("reduce_scatter", 4) == pytest.approx(3 / 4)
    assert F.busbw_factor("all_to_all", 2) == pytest.approx(1 / 2)
    assert F.busbw_factor("sendrecv", 2) == 1.0
    with pytest.raises(ValueError):
        F.busbw_factor("broadcast", 2)


def test_gemm_curve_by_hand():
    rows = [r for r in RAW["gemm"] if r["dtype"] == "bf16"]
    pts = F.fit_gemm_curve([r["flops"] for r in rows], [r["tflops"] for r in rows], PEAK)
    # decade 1e8: 512^3 alone; 1e9: 1024^3 (2.15e9) and 2048x1024x1024 (4.29e9) -> upper half = the
    # better one; 1e10: 2048^3; 1e11: 4096^3 is below 2048^3 -> monotone keeps 2048^3's;
    # 1e12: 8192^3 and 8192x4096x16384 (same FLOPs) -> upper half = 8192^3, still below.
    e8 = round(_tflops(512, 512, 512) / PEAK, 4)
    e9 = round(_tflops(2048, 1024, 1024) / PEAK, 4)
    e10 = round(_tflops(2048, 2048, 2048) / PEAK, 4)
    assert pts == [[2.68e8, e8], [4.29e9, e9], [1.72e10, e10], [1.37e11, e10], [1.1e12, e10]]
    assert e10 == pytest.approx(0.7243, abs=1e-4)           # 716.7 TFLOP/s of 989.4
    assert _tflops(8192, 8192, 8192) / PEAK < e10


def test_gemm_curve_upper_envelope_median_and_monotone():
    # three samples in one decade: the upper half is the 2 best, median = their mean
    pts = F.fit_gemm_curve([2e9, 3e9, 5e9, 2e10], [100, 300, 500, 200], 1000)
    assert pts == [[pytest.approx(3.87e9), 0.4], [2e10, 0.4]]
    with pytest.raises(ValueError):
        F.fit_gemm_curve([], [], 1000)


def test_hbm_and_collectives_by_hand():
    gbps, eff = F.hbm_fit(RAW["hbm"], 4800)
    assert gbps == pytest.approx(2 * 2**30 / 0.0005056440989176433 / 1e9)
    assert eff == pytest.approx(0.8848, abs=1e-4)
    cf = F.collective_fit(RAW["collectives"])
    assert cf.world == 2
    assert cf.busbw_large_GBps["all_reduce"] == pytest.approx(2**30 / 0.0032946239471435546 / 1e9, abs=0.01)
    assert cf.busbw_large_GBps["all_gather"] == pytest.approx(2**30 / 0.002017368952433268 / 1e9 / 2, abs=0.01)
    assert cf.efficiency(450) == pytest.approx(325.91 / 450, abs=1e-4)
    # latency per ring step: all-reduce 44.29 us / 2 steps, all-gather 32.47 us / 1; p2p not in the median
    assert cf.latency_us["all_reduce"] == pytest.approx(22.15, abs=0.01)
    assert cf.step_latency_us == pytest.approx((22.15 + 32.47) / 2, abs=0.01)
    table = F.busbw_table(RAW["collectives"])
    assert [r["op"] for r in table][:2] == ["all_gather", "all_gather"]


def test_writer_valid_and_byte_identical(tmp_path):
    out1, out2 = tmp_path / "a" / "chip.yaml", tmp_path / "b" / "chip.yaml"
    W.write_profile(out1, RAW, BASE, chip_id="h200-test-profiled")
    W.write_profile(out2, RAW, BASE, chip_id="h200-test-profiled")
    assert out1.read_bytes() == out2.read_bytes()
    assert W.raw_path_for(out1).is_file()
    chip = load_chip_file(out1)
    assert chip.id == "h200-test-profiled"
    assert chip.peak_tflops["bf16"] == PEAK                       # datasheet kept
    assert chip.hbm_GBps == 4800
    assert chip.hbm_efficiency == pytest.approx(0.8848, abs=1e-4)
    assert chip.scaleup_efficiency == pytest.approx(0.7242, abs=1e-4)
    assert chip.gemm_efficiency["bf16"].max_efficiency == pytest.approx(0.7243, abs=1e-4)
    assert chip.memory_gib == pytest.approx(RAW["device"]["mem_total_bytes"] / 2**30, abs=0.01)
    text = out1.read_text()
    assert "PROFILE:" in text and "NVIDIA H200" in text and "driver 580" in text
    assert not list(out1.parent.glob(".*tmp"))                   # atomic write leaves no temp file


def test_committed_measured_chip_loads():
    root = Path(__file__).parents[1] / "chips" / "measured"
    files = sorted(root.glob("*.yaml"))
    assert files
    for p in files:
        chip = load_chip_file(p)
        assert chip.gemm_efficiency["bf16"].max_efficiency > 0.5


def test_unknown_base_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="unknown chip"):
        W.write_profile(tmp_path / "x.yaml", RAW, "no-such-chip")


def test_profile_cli_help_and_no_torch(tmp_path, monkeypatch):
    from baige_plan.cli.app import app  # the real app: plain help, "[profile]" is text, not rich markup

    r = CliRunner().invoke(app, ["profile", "--help"])
    assert r.exit_code == 0
    assert "baige-plan[profile]" in r.output
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "torch" else real(n, *a))
    r = CliRunner().invoke(app, ["profile", "--out", str(tmp_path / "c.yaml")])
    assert r.exit_code == 2
    assert "pip install 'baige-plan[profile]'" in r.output
    assert "Traceback" not in r.output
    # --refit needs no torch
    raw = tmp_path / "r.raw.json"
    raw.write_text(json.dumps(RAW))
    r = CliRunner().invoke(app, ["profile", "--refit", str(raw), "--out", str(tmp_path / "c.yaml"), "--base", BASE])
    assert r.exit_code == 0, r.output
    assert load_chip_file(tmp_path / "c.yaml").id == "h200-sxm-141g-profiled"
