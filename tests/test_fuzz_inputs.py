"""Bad input a CLI fuzz pass found accepted or crashing (2026-11-27): each is one line naming the field, exit 2."""

from pathlib import Path

import yaml
from typer.testing import CliRunner

from baige_plan.cli.app import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def _validate(path: Path) -> tuple[int, str]:
    r = runner.invoke(app, ["validate", str(path)])
    return r.exit_code, r.stderr


def test_chip_peak_below_a_gflop_and_usable_above_capacity(tmp_path):
    src = yaml.safe_load((ROOT / "chips/h100-sxm5-80g.yaml").read_text())
    tiny = dict(src, peak_tflops=dict(src["peak_tflops"], bf16=dict(src["peak_tflops"]["bf16"], value=1e-300)))
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(tiny))
    code, err = _validate(tmp_path / "tiny.yaml")
    assert code == 2 and "peak_tflops.bf16: must be from 0.001 to 1e+07 or null, got 1e-300" in err
    big = dict(src, memory=dict(src["memory"], usable_gib=dict(src["memory"]["usable_gib"], value=500)))
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(big))
    code, err = _validate(tmp_path / "big.yaml")
    assert code == 2 and "memory.usable_gib.value: 500 GiB exceeds memory.capacity_GB 80" in err
    for f in sorted((ROOT / "chips").glob("*.yaml")):      # every catalog chip still passes (usable <= capacity)
        assert _validate(f)[0] == 0, f


def test_model_params_b_must_be_a_number(tmp_path):
    m = yaml.safe_load((ROOT / "models/llama3-8b.yaml").read_text())
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(dict(m, params_b="not a number")))
    code, err = _validate(tmp_path / "m.yaml")
    assert code == 2 and "params_b: must be a positive number of billions" in err


def test_runs_sequence_parallel_must_be_a_bool(tmp_path):
    src = (ROOT / "benchmarks/real/runs_h100.yaml").read_text().replace("../../chips/", f"{ROOT}/chips/")
    lines = src.splitlines()
    i = next(k for k, line in enumerate(lines) if line.strip().startswith("sequence_parallel:"))
    lines[i] = lines[i].split(":")[0] + ": 'no'"       # a string: bool('no') was True
    (tmp_path / "r.yaml").write_text("\n".join(lines) + "\n")
    r = runner.invoke(app, ["backtest", str(tmp_path / "r.yaml")])
    assert r.exit_code == 2 and "parallel.sequence_parallel: must be true, false or null, got 'no'" in r.stderr


def test_plan_stage_index_must_be_its_position(tmp_path):
    out = tmp_path / "p.yaml"
    r = runner.invoke(app, ["plan", "opt-350m", "h100-sxm5-80g:2x2", "--global-batch", "16", "--seq-len", "512",
                            "--pp", "2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(out.read_text())
    assert [st["index"] for st in doc["pipelines"][0]["stages"]] == [0, 1]
    doc["pipelines"][0]["stages"][1]["index"] = 9
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, err = _validate(out)
    assert code == 2 and "pipelines[0].stages[1].index: must be 1 (the stage's position), got 9" in err


def test_whatif_pool_count_message_says_the_range():
    for bad in ("h100-sxm5-80g:-4", "h100-sxm5-80g:99999999999", "h100-sxm5-80g:four"):
        r = runner.invoke(app, ["whatif", "llama3-8b", "--pool", bad, "--global-batch", "64", "--seq-len", "2048",
                                "--tokens", "1e11", "--deadline", "100"])
        assert r.exit_code == 2 and "MAX_DEVICES must be a whole number from 1 to 65,536" in r.stderr, r.output
