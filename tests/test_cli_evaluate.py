"""`baige-plan evaluate` through Typer's runner: formats, exit codes, bad inputs."""

import json

import yaml
from typer.testing import CliRunner

from baige_plan.cli.app import app

runner = CliRunner()
ACCEPT = ["evaluate", "gpt3-175b", "a100-sxm4-80g:8x8", "--tp", "8", "--pp", "8", "--dp", "1", "--micro-batch", "1",
          "--global-batch", "64", "--seq-len", "2048", "--recompute", "selective"]
KEYS = ["schema", "strategy", "fits", "step_time_s", "tokens_per_s", "tokens_per_s_per_device",
        "model_tflops_per_device", "mfu", "hfu", "peak_memory_gib", "breakdown_s", "memory_gib"]


def run(args):
    return runner.invoke(app, args)


def test_json_contract():
    r = run(ACCEPT + ["--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert list(d)[: len(KEYS)] == KEYS
    assert d["schema"] == "baige-plan/estimate/v1"
    assert d["strategy"] == {**d["strategy"], "tp": 8, "pp": 8, "dp": 1, "cp": 1, "ep": 1, "zero": 1, "micro_batch": 1,
                             "global_batch": 64, "vpp": 1, "recompute": "selective", "sequence_parallel": True}
    assert 0 < d["mfu"] < 1 and 0 < d["hfu"] < 1
    assert set(d["breakdown_s"]) == {"compute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "pp_bubble",
                                     "dp_comm_exposed", "optimizer"}
    assert set(d["memory_gib"]) == {"weights", "grads", "optimizer", "activations", "other"}
    # tokens/s = global batch x seq / step time (hand check of the arithmetic)
    assert abs(d["tokens_per_s"] - 64 * 2048 / d["step_time_s"]) / d["tokens_per_s"] < 1e-4
    assert abs(sum(d["memory_gib"].values()) - d["peak_memory_gib"]) < 1e-3


def test_yaml_and_table():
    r = run(ACCEPT + ["--format", "yaml"])
    assert r.exit_code == 0 and yaml.safe_load(r.stdout)["fits"] is True
    r = run(ACCEPT)
    assert r.exit_code == 0 and "step time" in r.stdout and "MFU" in r.stdout


def test_deterministic_output():
    assert run(ACCEPT + ["--format", "json"]).stdout == run(ACCEPT + ["--format", "json"]).stdout


def test_175b_unsharded_on_8_gpus_does_not_fit():
    r = run(["evaluate", "gpt3-175b", "a100-sxm4-80g:1x8", "--zero", "0", "--global-batch", "8", "--format", "json"])
    assert r.exit_code == 1
    d = json.loads(r.stdout)
    assert d["fits"] is False and d["peak_memory_gib"] > 80
    assert "does not fit" in r.stderr and "GiB" in r.stderr


def test_bad_inputs_exit_2_one_line(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("schema: baige-plan/model/v1\nname: x\nlayers: 2\nhidden: 64\nheads: 4\nffn_hidden: 256\n"
                   "vocab: 100\nbogus: 1\n")
    broken = tmp_path / "b.yaml"
    broken.write_text("a: [1,\n")
    neg = tmp_path / "n.yaml"
    neg.write_text("schema: baige-plan/model/v1\nname: x\nlayers: -2\nhidden: 64\nheads: 4\nffn_hidden: 256\nvocab: 100\n")
    cases = [
        (["evaluate", str(bad), "a100-sxm4-80g:1x8"], "bogus"),
        (["evaluate", str(broken), "a100-sxm4-80g:1x8"], "invalid YAML"),
        (["evaluate", str(neg), "a100-sxm4-80g:1x8"], "layers"),
        (["evaluate", "gpt3-175b", "nochip:1x8"], "unknown chip"),
        (["evaluate", "no-such-model", "a100-sxm4-80g:1x8"], "unknown model"),
        (["evaluate", "gpt3-175b", "a100-sxm4-80g:1x8", "--tp", "3"], "tp"),
        (["evaluate", "llama3-8b", "a100-sxm4-80g:1x8", "--tp", "16", "--dp", "1"], "tp"),
        (["evaluate", "gpt3-175b", str(tmp_path / "missing.yaml")], "file not found"),
    ]
    for args, word in cases:
        r = run(args)
        assert r.exit_code == 2, (args, r.output)
        assert "Traceback" not in r.output
        lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("note:")]
        assert len(lines) == 1 and word in lines[0], (args, r.stderr)


def test_defaults_are_the_documented_ones_and_a_runtime_that_cannot_run_them_says_which():
    """SPEC: zero 1, recompute selective when not given. Without --runtime (megatron) they apply; a named runtime
    that does not run a default gets exit 2 naming the option, that it was not given, and the values it runs."""
    base = ["evaluate", "llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--seq-len", "2048", "--format", "json"]
    r = run(base)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)["strategy"]
    assert d["zero"] == 1 and d["recompute"] == "selective"
    for rt, flag, runs in (("torchtitan", "--zero", "[0, 2, 3]"), ("pytorch", "--zero", "[0, 3]"),
                           ("paddle", "--recompute", "['none', 'full']")):
        r = run(base + ["--runtime", rt] + (["--zero", "3"] if flag == "--recompute" and rt != "paddle" else []))
        assert r.exit_code == 2
        assert flag in r.output and "not given" in r.output and runs in r.output and "Traceback" not in r.output
    r = run(base + ["--runtime", "torchtitan", "--zero", "3"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["strategy"]["zero"] == 3
    # given explicitly, a value the runtime does not run is its refusal, as before
    r = run(base + ["--runtime", "torchtitan", "--zero", "1"])
    assert r.exit_code == 2 and "torchtitan runs ZeRO stages [0, 2, 3], not zero=1" in r.output
