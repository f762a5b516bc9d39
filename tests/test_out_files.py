"""Output files (plan --out, export --out-dir, profile --out): regular files only, written atomically,
with the mode a new file would get from the umask (or the existing file's mode)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.errors import InputError
from baige_plan.io import outfile
from baige_plan.profile import writer

RUN = CliRunner()
SMALL = ["llama3-8b", "a100-sxm4-80g:1x8", "--global-batch", "16"]
DATA = Path(__file__).parent / "data"


def _plan(out: Path, code: int):
    r = RUN.invoke(app, ["plan", *SMALL, "--out", str(out)])
    assert r.exit_code == code, (r.exit_code, r.output, r.stderr)
    return r


def _refused(r, path: Path, what: str) -> None:
    assert r.exit_code == 2, (r.exit_code, r.output, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert f"{path}: refusing to write: it is {what}" in lines[-1], r.stderr
    assert "Traceback" not in r.output + r.stderr


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("plan") / "best.yaml"
    _plan(p, 0)
    return p


def test_fifo_is_refused(tmp_path):
    fifo = tmp_path / "out.yaml"
    os.mkfifo(fifo)
    _refused(_plan(fifo, 2), fifo, "a named pipe (FIFO)")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _leftovers(tmp_path) == []


def test_directory_is_refused(tmp_path):
    d = tmp_path / "plans"
    d.mkdir()
    _refused(_plan(d, 2), d, "a folder")
    assert d.is_dir() and list(d.iterdir()) == []


def test_symlink_to_fifo_is_refused(tmp_path):
    fifo, link = tmp_path / "pipe", tmp_path / "out.yaml"
    os.mkfifo(fifo)
    link.symlink_to(fifo)
    _refused(_plan(link, 2), link, "a symbolic link to a named pipe (FIFO)")
    assert link.is_symlink() and stat.S_ISFIFO(os.stat(link).st_mode)
    assert _leftovers(tmp_path) == []


def test_dev_null_is_refused_and_kept():
    null = Path("/dev/null")
    if not null.exists() or not stat.S_ISCHR(os.stat(null).st_mode):
        pytest.skip("no /dev/null character device here")
    _refused(_plan(null, 2), null, "a character device")
    assert stat.S_ISCHR(os.stat(null).st_mode)


def test_symlink_to_regular_file_writes_the_target(tmp_path):
    target, link = tmp_path / "real.yaml", tmp_path / "latest.yaml"
    target.write_text("old\n")
    link.symlink_to(target.name)
    _plan(link, 0)
    assert link.is_symlink() and target.read_text().startswith("schema: baige-plan/plan/v1")


def test_new_file_mode_follows_umask(tmp_path):
    old = os.umask(0o022)
    try:
        _plan(tmp_path / "a.yaml", 0)
        os.umask(0o077)
        outfile.write_atomic(tmp_path / "b.txt", "x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a.yaml").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "b.txt").st_mode) == 0o600


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o755])
def test_existing_file_keeps_its_mode(tmp_path, mode):
    p = tmp_path / "plan.yaml"
    p.write_text("old\n")
    p.chmod(mode)
    old = os.umask(0o077)
    try:
        _plan(p, 0)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(p).st_mode) == mode
    assert p.read_text().startswith("schema: baige-plan/plan/v1")


@pytest.mark.parametrize("fail_at", ["write", "fsync", "replace"])
def test_failed_write_leaves_nothing_behind(tmp_path, monkeypatch, fail_at):
    p = tmp_path / "plan.yaml"
    p.write_text("old\n")

    def boom(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(outfile.os, fail_at, boom)
    with pytest.raises(InputError, match="cannot write: No space left on device") as ei:
        outfile.write_atomic(p, "new text\n" * 1000)
    assert ei.value.source == str(p)
    monkeypatch.undo()
    assert p.read_text() == "old\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["plan.yaml"]


def test_failed_plan_write_exits_2_without_traceback(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(outfile.os, "replace", boom)
    r = _plan(tmp_path / "p.yaml", 2)
    assert "cannot write: Read-only file system" in r.stderr and "Traceback" not in r.output + r.stderr
    assert list(tmp_path.iterdir()) == []


def test_missing_folder_is_refused(tmp_path):
    r = _plan(tmp_path / "nope" / "p.yaml", 2)
    assert "does not exist" in r.stderr


def test_export_out_dir_refuses_before_writing_any_file(tmp_path, plan_file):
    d = tmp_path / "launch"
    d.mkdir()
    os.mkfifo(d / "launch.sh")
    r = RUN.invoke(app, ["export", str(plan_file), "--out-dir", str(d)])
    _refused(r, d / "launch.sh", "a named pipe (FIFO)")
    assert sorted(x.name for x in d.iterdir()) == ["launch.sh"]            # nothing else written
    assert stat.S_ISFIFO(os.lstat(d / "launch.sh").st_mode)


def test_export_out_dir_writes_regular_files(tmp_path, plan_file):
    d = tmp_path / "launch"
    old = os.umask(0o022)
    try:
        r = RUN.invoke(app, ["export", str(plan_file), "--out-dir", str(d)])
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.stderr
    modes = {x.name: stat.S_IMODE(os.stat(x).st_mode) for x in d.iterdir()}
    assert modes["launch.sh"] == 0o755 and modes["hostfile"] == 0o644
    assert _leftovers(d) == []


def test_profile_out_fifo_is_refused(tmp_path):
    fifo = tmp_path / "chip.yaml"
    os.mkfifo(fifo)
    r = RUN.invoke(app, ["profile", "--refit", str(DATA / "profile_raw_h200_small.json"),
                         "--base", str(DATA / "h200-sxm-141g.datasheet.yaml"), "--out", str(fifo)])
    assert r.exit_code == 2 and f"{fifo}: refusing to write: it is a named pipe (FIFO)" in r.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    with pytest.raises(InputError, match="named pipe"):      # the profile module's own writer, too
        writer.write_atomic(fifo, "x\n")
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("argv", [
    ["plan", *SMALL, "--out", "{d}/x.yaml/"],
    ["plan", *SMALL, "--out={d}/x.yaml/"],
    ["backtest", str(DATA / "published_calibration.yaml"), "--plot", "{d}/p.svg/"],
])
def test_file_option_ending_in_a_separator_is_refused(tmp_path, argv):
    """`--out x.yaml/` names a folder: refused (exit 2, one line naming the option and the value), nothing written
    (pathlib drops the trailing '/', so the parsed value alone would have written x.yaml)."""
    args = [a.format(d=tmp_path) for a in argv]
    r = RUN.invoke(app, args)
    assert r.exit_code == 2, (r.output, r.stderr)
    line = r.stderr.strip()
    assert "\n" not in line and "names a folder" in line and ("x.yaml/'" in line or "p.svg/'" in line)
    assert list(tmp_path.iterdir()) == []
