"""Exports as launch artifacts (issue 17, Deliver 2): data/tokenizer/run-length placeholders that fail clearly,
SLURM launchers, --hostfile hosts and IPs, nothing written inside site-packages, refused plans exit 2,
version checks that fail with the supported range, torchtitan 0.2.x for torch 2.11/2.12 stacks.

The scripts run under bash with stand-ins for the launchers (torchrun, deepspeed, python, scontrol, srun) on
PATH; expected values are derived by hand from the plan documents (tests/_plan_docs.py)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.errors import InputError
from baige_plan.exports import torchtitan
from baige_plan.exports.files import export_plan, read_hostfile
from tests._plan_docs import LLAMA3_8B, LLAMA3_70B, plan_doc

RUNTIMES = ("megatron", "deepspeed", "torchtitan", "paddle", "flagscale")
BASE_ENV = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}


def _doc(runtime, **kw):
    kw.setdefault("tp", 2)
    kw.setdefault("dp", 8)
    kw.setdefault("zero", 1 if runtime in ("megatron", "deepspeed", "paddle", "flagscale") else 3)
    kw.setdefault("nodes", 2)
    return plan_doc(LLAMA3_8B, runtime, **kw)


def _write(tmp: Path, runtime: str, doc=None, **opts) -> dict[str, str]:
    ex = export_plan(doc or _doc(runtime), runtime, **opts)
    tmp.mkdir(parents=True, exist_ok=True)
    for f in ex.files:
        (tmp / f.name).write_text(f.text)
    return {f.name: f.text for f in ex.files}


def _stub(folder: Path, name: str, body: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("#!/usr/bin/env bash\n" + body)
    (folder / name).chmod(0o755)


def _run(script: Path, env: dict, *args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script), *args], env={**BASE_ENV, **env}, capture_output=True, text=True,
                          timeout=60, cwd=cwd or script.parent)


def _capture_launcher(bindir: Path, name: str) -> Path:
    """A stand-in launcher that writes its argv (one per line) and NODE_RANK / MASTER_ADDR to bindir/NAME.N."""
    _stub(bindir, name, 'n=$(ls "$(dirname "$0")" | grep -c "^' + name + r'\.out") || true' + "\n"
          f'printf "%s\\n" "$@" > "$(dirname "$0")/{name}.out.$n"\n')
    return bindir


def _captured(bindir: Path, name: str) -> list[list[str]]:
    return [p.read_text().splitlines() for p in sorted(bindir.glob(f"{name}.out.*"))]


# ------------------------------------------------------------------------------------------ syntax
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_every_script_is_bash(tmp_path, runtime):
    files = _write(tmp_path, runtime)
    assert "slurm.sbatch" in files and "launch.sh" in files
    for name in ("launch.sh", "slurm.sbatch"):
        r = subprocess.run(["bash", "-n", str(tmp_path / name)], capture_output=True, text=True)
        assert r.returncode == 0, f"{runtime} {name}: {r.stderr}"


def test_torchtitan_0_2_scripts_are_bash(tmp_path):
    _write(tmp_path, "torchtitan", runtime_version="0.2")
    for name in ("launch.sh", "slurm.sbatch"):
        assert subprocess.run(["bash", "-n", str(tmp_path / name)]).returncode == 0


# ---------------------------------------------------------------------------------- data placeholders
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_data_placeholders_fail_clearly_when_unset(tmp_path, runtime):
    _write(tmp_path, runtime)
    r = _run(tmp_path / "launch.sh", {})
    assert r.returncode != 0
    assert "set BAIGE_DATA_PATH to " in r.stderr, r.stderr
    r = _run(tmp_path / "launch.sh", {"BAIGE_DATA_PATH": "/data/x"})
    assert r.returncode != 0 and "set BAIGE_TOKENIZER to " in r.stderr, r.stderr
    r = _run(tmp_path / "slurm.sbatch", {"SLURM_SUBMIT_DIR": str(tmp_path)})
    assert r.returncode != 0 and "set BAIGE_DATA_PATH to " in r.stderr, r.stderr


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_run_length_must_be_a_number(tmp_path, runtime):
    _write(tmp_path, runtime)
    r = _run(tmp_path / "launch.sh", {"BAIGE_DATA_PATH": "/d", "BAIGE_TOKENIZER": "/t", "BAIGE_TRAIN_ITERS": "1e3"})
    assert r.returncode == 2 and "BAIGE_TRAIN_ITERS must be a whole number" in r.stderr


def test_megatron_data_arguments_real_and_mock(tmp_path):
    """Real data: --data-path (a weighted list splits into words), HuggingFaceTokenizer, --train-iters from the
    variable; mock only when asked."""
    _write(tmp_path, "megatron")
    bindir = _capture_launcher(tmp_path / "bin", "torchrun")
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "MEGATRON_LM": "/m", "BAIGE_SKIP_VERSION_CHECK": "1"}
    r = _run(tmp_path / "launch.sh", {**env, "BAIGE_DATA_PATH": "0.7 /d/a 0.3 /d/b", "BAIGE_TOKENIZER": "/tok",
                                      "BAIGE_TRAIN_ITERS": "250"})
    assert r.returncode == 0, r.stderr
    argv = _captured(bindir, "torchrun")[-1]
    tail = argv[argv.index("/m/pretrain_gpt.py") + 1:]
    k = tail.index("--data-path")
    assert tail[k:k + 5] == ["--data-path", "0.7", "/d/a", "0.3", "/d/b"]
    assert tail[tail.index("--tokenizer-type") + 1] == "HuggingFaceTokenizer"
    assert tail[tail.index("--tokenizer-model") + 1] == "/tok"
    assert tail[tail.index("--train-iters") + 1] == "250" and "--mock-data" not in tail
    r = _run(tmp_path / "launch.sh", {**env, "BAIGE_MOCK_DATA": "1"})
    assert r.returncode == 0, r.stderr
    tail = _captured(bindir, "torchrun")[-1]
    assert "--mock-data" in tail and tail[tail.index("--tokenizer-type") + 1] == "NullTokenizer"
    assert tail[tail.index("--vocab-size") + 1] == "128256" and "--data-path" not in tail


def test_mock_data_export_option_makes_mock_the_default(tmp_path):
    files = _write(tmp_path, "megatron", mock_data=True)
    assert 'BAIGE_MOCK_DATA="${BAIGE_MOCK_DATA:-1}"' in files["launch.sh"]
    assert 'BAIGE_MOCK_DATA="${BAIGE_MOCK_DATA:-1}"' in files["slurm.sbatch"]
    assert 'BAIGE_MOCK_DATA="${BAIGE_MOCK_DATA:-0}"' in _write(tmp_path / "b", "megatron")["launch.sh"]
    with pytest.raises(InputError, match="--mock-data.*no mock data"):     # Megatron-DeepSpeed has none
        export_plan(_doc("deepspeed"), "deepspeed", mock_data=True)


def test_deepspeed_data_arguments_and_no_mock(tmp_path):
    _write(tmp_path, "deepspeed")
    bindir = _capture_launcher(tmp_path / "bin", "deepspeed")
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "MEGATRON_DS": str(tmp_path), "BAIGE_SKIP_VERSION_CHECK": "1"}
    r = _run(tmp_path / "launch.sh", {**env, "BAIGE_MOCK_DATA": "1"})
    assert r.returncode == 2 and "no mock data" in r.stderr
    r = _run(tmp_path / "launch.sh", {**env, "BAIGE_DATA_PATH": "/d/x", "BAIGE_TOKENIZER": "/tok"})
    assert r.returncode == 0, r.stderr
    argv = _captured(bindir, "deepspeed")[-1]
    tail = argv[[a.endswith("pretrain_gpt.py") for a in argv].index(True) + 1:]
    want = [w for ln in (tmp_path / "megatron_deepspeed_args.txt").read_text().splitlines()
            if ln.strip() and not ln.startswith("#") for w in shlex.split(ln)]
    assert tail[:len(want)] == want
    assert tail[len(want):] == ["--data-path", "/d/x", "--tokenizer-type", "HFTokenizer", "--tokenizer-model", "/tok",
                                "--train-iters", "100"]


def test_torchtitan_data_flags_name_no_bundled_dataset(tmp_path):
    """torchtitan no longer silently trains on the hub's c4 with a relative tokenizer path."""
    files = _write(tmp_path, "torchtitan")
    bindir = _capture_launcher(tmp_path / "bin", "torchrun")
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "BAIGE_SKIP_VERSION_CHECK": "1", "BAIGE_DATA_PATH": "/data/web",
           "BAIGE_TOKENIZER": "/tok", "BAIGE_OUTPUT_DIR": "/out"}
    assert _run(tmp_path / "launch.sh", env).returncode == 0
    argv = _captured(bindir, "torchrun")[-1]
    pairs = {argv[k]: argv[k + 1] for k in range(len(argv) - 1) if argv[k].startswith("--")}
    assert pairs["--dataloader.dataset"] == "c4_test" and pairs["--dataloader.dataset_path"] == "/data/web"
    assert pairs["--hf_assets_path"] == "/tok" and pairs["--dump_folder"] == "/out"
    assert pairs["--training.steps"] == "100"
    assert argv[-1].startswith("activation-checkpoint:")           # the subcommand stays last
    # mock data: torchtitan's own c4_test sample, only from a checkout it is told about
    r = _run(tmp_path / "launch.sh", {**env, "BAIGE_MOCK_DATA": "1", "BAIGE_DATA_PATH": ""})
    assert r.returncode != 0 and "TORCHTITAN_ROOT" in r.stderr
    assert "hf_assets_path" not in files[torchtitan.ARGS_FILE] or "./assets" not in files[torchtitan.ARGS_FILE]


def test_paddle_data_model_folder_and_steps(tmp_path):
    _write(tmp_path, "paddle", hosts=(("10.0.0.7", None), ("localhost", 8)))
    bindir = tmp_path / "bin"
    _stub(bindir, "py", 'if [ "$1" = -c ]; then echo /fake/paddleformers/cli/launcher.py; exit 0; fi\n'
          'printf "%s\\n" "$@" > "$(dirname "$0")/py.out"\n')
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    (tok / "config.json").write_text("{}")
    r = _run(tmp_path / "launch.sh", {"PYTHON": str(bindir / "py"), "BAIGE_SKIP_VERSION_CHECK": "1",
                                      "BAIGE_DATA_PATH": "/d/corpus", "BAIGE_TOKENIZER": str(tok),
                                      "BAIGE_TRAIN_ITERS": "7"})
    assert r.returncode == 0, r.stderr
    argv = (bindir / "py.out").read_text().splitlines()
    assert argv[argv.index("--ips") + 1] == "10.0.0.7,127.0.0.1"          # hostfile order, resolved to IPv4
    assert "input_dir=1.0 /d/corpus" in argv and "max_steps=7" in argv
    out = tmp_path / "output"
    assert f"model_name_or_path={out / 'model'}" in argv and f"output_dir={out / 'checkpoints'}" in argv
    assert (out / "model" / "config.json").read_text() == (tmp_path / "config.json").read_text()   # the plan's shape
    assert (out / "model" / "tokenizer.json").resolve() == (tok / "tokenizer.json").resolve()


def test_paddle_refuses_hosts_it_cannot_resolve(tmp_path):
    _write(tmp_path, "paddle", hosts=(("node-a.invalid", None), ("node-b.invalid", None)))
    r = _run(tmp_path / "launch.sh", {"BAIGE_SKIP_VERSION_CHECK": "1", "BAIGE_DATA_PATH": "/d", "BAIGE_TOKENIZER": "/t"})
    assert r.returncode == 2 and "cannot resolve node-a.invalid" in r.stderr and "--ips needs IPs" in r.stderr


def test_paddle_single_node_needs_no_hostfile(tmp_path):
    files = _write(tmp_path, "paddle", doc=_doc("paddle", dp=4, nodes=1))
    assert 'IPS="${IPS:-127.0.0.1}"' in files["launch.sh"]


# -------------------------------------------------------------------------------------------- hosts
def test_hostfile_hosts_in_order_for_every_runtime(tmp_path):
    hosts = (("gpu-a", 8), ("10.1.2.3", None))
    for rt in RUNTIMES:
        files = _write(tmp_path / rt, rt, hosts=hosts)
        lines = [ln.split()[0] for ln in files["hostfile"].splitlines() if ln.strip() and not ln.startswith("#")]
        assert lines == ["gpu-a", "10.1.2.3"], rt
        assert "placeholder" not in files["hostfile"], rt


def test_hostfile_file_parsing(tmp_path):
    p = tmp_path / "hosts"
    p.write_text("# cluster\nnode1 slots=8\n\n10.0.0.2 8   # a comment\nnode3\n")
    assert read_hostfile(p) == (("node1", 8), ("10.0.0.2", 8), ("node3", None))
    for text, why in (("node1 slots=x\n", "line 1"), ("a\na\n", "listed twice"), ("", "no hosts"),
                      ("bad/host\n", "not a host name")):
        p.write_text(text)
        with pytest.raises(InputError, match=why):
            read_hostfile(p)
    with pytest.raises(InputError, match="1 host\\(s\\) for a plan on 2 nodes"):
        export_plan(_doc("megatron"), "megatron", hosts=(("only", None),))
    with pytest.raises(InputError, match="slots=4, the plan uses 8 devices"):
        export_plan(_doc("megatron"), "megatron", hosts=(("a", 4), ("b", 8)))


def test_megatron_master_is_the_first_host(tmp_path):
    files = _write(tmp_path, "megatron", hosts=(("10.9.9.1", None), ("10.9.9.2", None)))
    bindir = _capture_launcher(tmp_path / "bin", "torchrun")
    r = _run(tmp_path / "launch.sh", {"PATH": f"{bindir}:/usr/bin:/bin", "BAIGE_SKIP_VERSION_CHECK": "1",
                                      "BAIGE_MOCK_DATA": "1", "NODE_RANK": "1"})
    assert r.returncode == 0, r.stderr
    argv = _captured(bindir, "torchrun")[-1]
    assert argv[argv.index("--master-addr") + 1] == "10.9.9.1" and argv[argv.index("--node-rank") + 1] == "1"
    assert files["hostfile"].splitlines()[-2:] == ["10.9.9.1 slots=8", "10.9.9.2 slots=8"]


def test_deepspeed_single_node_does_not_ssh_a_placeholder(tmp_path):
    one = _write(tmp_path / "one", "deepspeed", doc=_doc("deepspeed", dp=4, nodes=1))["launch.sh"]
    assert "HOSTS=(--hostfile /dev/null)" in one and "ssh" in one.split("\n")[3]   # no hostfile, says no ssh
    two = _write(tmp_path / "two", "deepspeed")["launch.sh"]
    assert "HOSTS=(--hostfile hostfile)" in two and "same paths on every node" in two


# -------------------------------------------------------------------------------------------- SLURM
def _sbatch_header(text: str) -> dict[str, str]:
    return dict(m.groups() for m in re.finditer(r"^#SBATCH --([a-z-]+)=(\S+)$", text, re.M))


@pytest.mark.parametrize("runtime,doc,nodes,gpus", [
    # 2 nodes x 8: tp 2 x dp 8 = 16 ranks
    ("megatron", _doc("megatron"), 2, 8),
    ("torchtitan", _doc("torchtitan"), 2, 8),
    ("paddle", _doc("paddle"), 2, 8),
    ("flagscale", _doc("flagscale"), 2, 8),
    # DeepSpeed: world tp 2 x pp 1 x dp 8 = 16 -> 2 nodes of 8
    ("deepspeed", _doc("deepspeed"), 2, 8),
    # llama3-70b tp 8 pp 4 dp 2 on 8 nodes of 8: 64 ranks
    ("megatron", plan_doc(LLAMA3_70B, "megatron", tp=8, pp=4, dp=2, m=8, nodes=8), 8, 8),
    # 4 devices per node, 4 nodes: tp 4 x dp 4 with FSDP
    ("torchtitan", plan_doc(LLAMA3_8B, "torchtitan", tp=4, dp=4, zero=3, nodes=4, per_node=4), 4, 4),
])
def test_sbatch_header_is_the_plans_allocation(tmp_path, runtime, doc, nodes, gpus):
    text = _write(tmp_path, runtime, doc=doc)["slurm.sbatch"]
    h = _sbatch_header(text)
    assert (h["nodes"], h["ntasks-per-node"], h["gpus-per-node"]) == (str(nodes), "1", str(gpus))
    assert h["job-name"].startswith(f"baige-{runtime}-")
    assert "scontrol show hostnames" in text


def test_sbatch_runs_launch_sh_on_every_node(tmp_path):
    """Under stand-ins for scontrol and srun, slurm.sbatch starts launch.sh once per node with NODE_RANK =
    SLURM_NODEID and MASTER_ADDR = the first host SLURM lists."""
    _write(tmp_path, "megatron")
    bindir = _capture_launcher(tmp_path / "bin", "torchrun")
    _stub(bindir, "scontrol", 'printf "gpu17\\ngpu18\\n"\n')
    _stub(bindir, "srun", 'while [ "${1#--}" != "$1" ]; do shift; done\n'
          'for id in 0 1; do SLURM_NODEID=$id "$@" || exit $?; done\n')
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_NODELIST": "gpu[17-18]",
           "BAIGE_SKIP_VERSION_CHECK": "1", "BAIGE_MOCK_DATA": "1", "MEGATRON_LM": "/m"}
    r = _run(tmp_path / "slurm.sbatch", env, cwd=tmp_path / "bin")
    assert r.returncode == 0, r.stderr
    runs = _captured(bindir, "torchrun")
    assert [a[a.index("--node-rank") + 1] for a in runs] == ["0", "1"]
    assert {a[a.index("--master-addr") + 1] for a in runs} == {"gpu17"}
    assert all(a[a.index("--nnodes") + 1] == "2" for a in runs)
    # the allocation must match the plan
    _stub(bindir, "scontrol", 'printf "gpu17\\n"\n')
    r = _run(tmp_path / "slurm.sbatch", env)
    assert r.returncode == 2 and "SLURM gave 1 nodes, the plan needs 2" in r.stderr


def test_flagscale_sbatch_writes_the_allocations_hostfile(tmp_path):
    files = _write(tmp_path, "flagscale")
    bindir = tmp_path / "bin"
    _stub(bindir, "scontrol", 'printf "n1\\nn2\\n"\n')
    _stub(bindir, "srun", 'while [ "${1#--}" != "$1" ]; do shift; done\necho "$BAIGE_HOSTFILE" > '
          '"$(dirname "$0")/hostfile.used"\n')
    r = _run(tmp_path / "slurm.sbatch", {"PATH": f"{bindir}:/usr/bin:/bin", "SLURM_SUBMIT_DIR": str(tmp_path),
                                         "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n[1-2]", "BAIGE_MOCK_DATA": "1"})
    assert r.returncode == 0, r.stderr
    used = Path((bindir / "hostfile.used").read_text().strip())
    slots = [ln.split(None, 1)[1] for ln in files["hostfile"].splitlines() if ln.strip() and not ln.startswith("#")]
    assert used.read_text().splitlines() == [f"n1 {slots[0]}", f"n2 {slots[1]}"]


# ------------------------------------------------------------------------------- nothing in site-packages
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_scripts_only_change_into_the_export_folder(tmp_path, runtime):
    files = _write(tmp_path, runtime)
    for name in ("launch.sh", "slurm.sbatch"):
        for line in files[name].splitlines():
            m = re.match(r'\s*cd\s+(\S+)', line)
            if m:
                assert m.group(1) in ('"$HERE"', '"$DIR"'), f"{runtime} {name}: {line}"
        assert "site-packages" not in files[name] and 'cd "$FLAGSCALE_ROOT"' not in files[name]


def test_flagscale_outputs_go_to_the_export_folder(tmp_path):
    files = _write(tmp_path, "flagscale")
    sh = files["launch.sh"]
    assert 'experiment.exp_dir="$OUT"' in sh and 'hydra.run.dir="$OUT/hydra"' in sh
    assert 'OUT="${BAIGE_OUTPUT_DIR:-$DIR/outputs/' in sh and '"$FLAGSCALE_ROOT/run.py"' in sh


# ---------------------------------------------------------------------------------- refused plans: exit 2
def test_refused_export_exits_2_with_one_line(tmp_path):
    runner = CliRunner()
    plan = tmp_path / "plan.yaml"
    r = runner.invoke(app, ["plan", "llama3-8b", "h100-sxm5-80g:1x8", "--global-batch", "64", "--seq-len", "4096",
                            "--runtime", "megatron", "--recompute", "selective", "--out", str(plan)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["export", str(plan), "--to", "paddle", "--out-dir", str(tmp_path / "x")])
    assert r.exit_code == 2, r.output
    err = [ln for ln in r.stderr.splitlines() if not ln.startswith("note:")]
    assert len(err) == 1 and "Traceback" not in r.stderr
    assert "strategy.recompute" in err[0] and "paddle refuses this plan" in err[0]
    assert not (tmp_path / "x").exists()
    r = runner.invoke(app, ["export", str(plan), "--to", "megatron", "--hostfile", str(tmp_path / "none")])
    assert r.exit_code == 2 and "cannot read" in r.stderr
    r = runner.invoke(app, ["export", str(plan), "--to", "torchtitan", "--runtime-version", "0.1"])
    assert r.exit_code == 2 and "0.3.0, 0.2.2" in r.stderr


def test_deepspeed_balanced_partition_is_not_an_uneven_split():
    """DeepSpeed's PipelineModule gives the first layers % pp stages one layer more: a plan with those counts is
    what it runs (balanced_partition), not a first/last split it refuses."""
    export_plan(_doc("deepspeed", pp=3, dp=2, counts=[11, 11, 10], nodes=1, per_node=6, zero=1), "deepspeed")
    with pytest.raises(InputError, match="strategy.pp"):
        export_plan(_doc("deepspeed", pp=3, dp=2, counts=[10, 11, 11], nodes=1, per_node=6, zero=1), "deepspeed")


@pytest.mark.parametrize("runtime,doc,field", [
    ("deepspeed", _doc("deepspeed", pp=2, zero=2, counts=[16, 16], nodes=4), "strategy.zero"),
    ("torchtitan", _doc("torchtitan", zero=1), "strategy.zero"),
    ("paddle", _doc("paddle", recompute="selective"), "strategy.recompute"),
    ("deepspeed", _doc("deepspeed", pp=2, counts=[15, 17], nodes=4), "strategy.pp"),
])
def test_every_runtime_refusal_names_the_field(runtime, doc, field):
    with pytest.raises(InputError) as e:
        export_plan(doc, runtime)
    assert e.value.field == field and f"{runtime} refuses this plan" in e.value.reason


# ------------------------------------------------------------------------------------------- versions
def _site(tmp: Path, **versions) -> Path:
    site = tmp / "site"
    for name, v in versions.items():
        d = site / f"{name.replace('-', '_')}-{v}.dist-info"
        d.mkdir(parents=True)
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {v}\n")
    return site


def _version_run(tmp: Path, runtime: str, site: Path, env=(), **opts) -> subprocess.CompletedProcess:
    _write(tmp, runtime, **opts)
    bindir = _capture_launcher(tmp / "bin", {"deepspeed": "deepspeed"}.get(runtime, "torchrun"))
    return _run(tmp / "launch.sh", {"PATH": f"{bindir}:/usr/bin:/bin", "PYTHON": sys.executable,
                                    "PYTHONPATH": str(site), "BAIGE_DATA_PATH": "/d", "BAIGE_TOKENIZER": "/t",
                                    "MEGATRON_LM": str(tmp / "no-checkout"), **dict(env)})


def test_version_check_accepts_the_supported_range(tmp_path):
    r = _version_run(tmp_path / "a", "megatron", _site(tmp_path / "a", **{"megatron-core": "0.19.2", "torch": "2.11.0"}))
    assert r.returncode == 0, r.stderr
    r = _version_run(tmp_path / "b", "torchtitan", _site(tmp_path / "b", torchtitan="0.3.0", torch="2.14.1+cu130"),
                     env={"BAIGE_SKIP_VERSION_CHECK": "0"})
    # torchtitan 0.3.0's sources are not in the stand-in site: the probe for its flag names fails
    assert r.returncode == 3 and "renamed training.local_batch_size" in r.stderr
    src = tmp_path / "b" / "site" / "torchtitan" / "config"
    src.mkdir(parents=True)
    (src / "configs.py").write_text("class TrainingConfig:\n    local_batch_size: int = 8\n")
    r = _run(tmp_path / "b" / "launch.sh", {"PATH": f"{tmp_path / 'b' / 'bin'}:/usr/bin:/bin", "PYTHON": sys.executable,
                                             "PYTHONPATH": str(tmp_path / "b" / "site"), "BAIGE_DATA_PATH": "/d",
                                             "BAIGE_TOKENIZER": "/t"})
    assert r.returncode == 0, r.stderr


def test_version_check_fails_with_the_supported_range(tmp_path):
    r = _version_run(tmp_path / "a", "megatron", _site(tmp_path / "a", **{"megatron-core": "0.19.2", "torch": "2.5.1"}))
    assert r.returncode == 3
    assert "torch 2.5.1 is outside the supported range torch>=2.6.0" in r.stderr
    assert not list((tmp_path / "a" / "bin").glob("torchrun.out.*"))       # nothing started
    r = _version_run(tmp_path / "b", "deepspeed", _site(tmp_path / "b", deepspeed="0.18.0", torch="2.13.0"))
    assert r.returncode == 3 and "deepspeed 0.18.0 is outside the supported range deepspeed>=0.19.0,<0.20" in r.stderr
    r = _version_run(tmp_path / "c", "torchtitan", _site(tmp_path / "c", torchtitan="0.3.0", torch="2.11.0"))
    assert r.returncode == 3 and "torch 2.11.0 is outside the supported range torch>=2.14" in r.stderr
    r = _version_run(tmp_path / "d", "torchtitan", _site(tmp_path / "d", torchtitan="0.2.2", torch="2.14.1"),
                     runtime_version="0.2")
    assert r.returncode == 3 and "torch 2.14.1 is outside the supported range torch>=2.11,<2.13" in r.stderr
    r = _version_run(tmp_path / "e", "megatron", _site(tmp_path / "e", torch="2.11.0"))
    assert r.returncode == 3 and "megatron-core is not installed" in r.stderr


def test_megatron_version_from_the_checkout(tmp_path):
    """Megatron-LM run from a checkout (MEGATRON_LM): its megatron/core/package_info.py is the version."""
    site = _site(tmp_path, torch="2.11.0")
    for minor, rc in ((20, 0), (18, 3)):
        info = tmp_path / f"mlm{minor}" / "megatron" / "core"
        info.mkdir(parents=True)
        (info / "package_info.py").write_text(f"MAJOR = 0\nMINOR = {minor}\nPATCH = 0\nPRE_RELEASE = ''\n")
        r = _version_run(tmp_path / f"x{minor}", "megatron", site, env={"MEGATRON_LM": str(tmp_path / f"mlm{minor}")})
        assert r.returncode == rc, r.stderr


# ------------------------------------------------------------------------------------- torchtitan 0.2.x
def _tt_args(files) -> dict:
    out = {}
    for ln in files[torchtitan.ARGS_FILE].splitlines():
        w = ln.split()
        if w and w[0].startswith("--"):
            out[w[0]] = w[1] if len(w) > 1 else None
    return out


def test_torchtitan_0_2_flag_names(tmp_path):
    files = _write(tmp_path, "torchtitan", runtime_version="0.2")
    a = _tt_args(files)
    assert (a["--model.name"], a["--model.flavor"]) == ("llama3", "8B") and "--module" not in a
    assert a["--training.local_batch_size"] == "1" and a["--training.global_batch_size"] == "64"
    assert a["--parallelism.data_parallel_shard_degree"] == "8" and a["--parallelism.tensor_parallel_degree"] == "2"
    assert a["--activation_checkpoint.mode"] == "none" and "--compile.no_enable" not in a
    assert "activation-checkpoint:" not in files[torchtitan.ARGS_FILE]
    sh = files["launch.sh"]
    assert "torchtitan==0.2.2" in sh and "--training.dataset_path" in sh and "--model.hf_assets_path" in sh


def test_torchtitan_0_2_custom_dense_model_module(tmp_path):
    model = dict(LLAMA3_8B, name="my-7b", layers=30, ffn_hidden=11008)
    files = _write(tmp_path, "torchtitan", doc=plan_doc(model, "torchtitan", tp=2, dp=8, zero=3, nodes=2),
                   runtime_version="0.2.2")
    a = _tt_args(files)
    assert a["--experimental.custom_import"] == torchtitan.CONFIG_MODULE and a["--model.flavor"] == "baige_my_7b"
    mod = files[f"{torchtitan.CONFIG_MODULE}.py"]
    compile(mod, "m.py", "exec")
    assert "multiple_of=11008, ffn_dim_multiplier=11008 / 10922" in mod      # int(8 * 4096 / 3) = 10922
    hidden = 4 * 4096
    hidden = int(2 * hidden / 3)
    hidden = int(11008 / 10922 * hidden)
    assert 11008 * ((hidden + 11008 - 1) // 11008) == 11008                   # FeedForward's rule gives the width


@pytest.mark.parametrize("kw,why", [
    (dict(tp=2, dp=4, zero=0), "DDP has not supported > 1D parallelism"),          # issue 17's #1 plan
    (dict(tp=4, dp=1, zero=3, nodes=1, per_node=4), "would train in fp32"),       # TP without FSDP
    (dict(tp=1, dp=8, zero=0, nodes=1), "through torch.autocast"),                 # DDP: AMP, not MPP
])
def test_torchtitan_0_2_refusals(kw, why):
    kw.setdefault("nodes", 1)
    doc = plan_doc(LLAMA3_8B, "torchtitan", **kw)
    with pytest.raises(InputError, match=re.escape(why)):
        export_plan(doc, "torchtitan", runtime_version="0.2")
    export_plan(doc, "torchtitan")        # 0.3.0 runs them: FSDP2's mixed precision with every layout


def test_torchtitan_0_3_writes_what_is_costed():
    a = _tt_args({torchtitan.ARGS_FILE: export_plan(_doc("torchtitan"), "torchtitan").files[0].text})
    assert "--training.disable_cuda_graphs" in a and "--compile.no_enable" in a
    assert "--profiler.no_enable_profiling" in a and a["--training.mixed_precision_param"] == "bfloat16"


def test_megatron_without_transformer_engine_shares_the_launch_artifacts(tmp_path):
    from baige_plan.specs import runtimes
    if "megatron-local" not in runtimes.NAMES:
        pytest.skip("no megatron-local runtime")
    files = _write(tmp_path, "megatron-local", doc=_doc("megatron-local", zero=1, sp=False))
    assert "slurm.sbatch" in files and "set BAIGE_DATA_PATH to " in files["launch.sh"]
    assert subprocess.run(["bash", "-n", str(tmp_path / "launch.sh")]).returncode == 0
