"""Shared by the check_RUNTIME.py scripts (each runs in its runtime's own venv, imported from this folder):
the failure type, reading the plan file, running an export's launch.sh with a stand-in launcher that records
what it was given, reading launcher options, making plans with the project CLI, and the ok/FAIL report.
Standard library only (PyYAML is imported when a plan is read)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FAKE_LAUNCHER = """#!/usr/bin/env bash
printf '%s\\0' "$@" > "$BAIGE_CAPTURE.argv"
pwd > "$BAIGE_CAPTURE.cwd"
env -0 > "$BAIGE_CAPTURE.env"
"""
SHELL_VARS = ("PWD", "SHLVL", "_", "OLDPWD")


class CheckFailure(Exception):
    pass


def need(cond, msg):
    if not cond:
        raise CheckFailure(msg)


def load_plan(d: Path) -> dict:
    import yaml

    for name in ("plan.yaml", "plan.yml", "plan.json"):
        p = d / name
        if p.exists():
            return json.loads(p.read_text()) if p.suffix == ".json" else yaml.safe_load(p.read_text())
    raise CheckFailure("no plan.yaml / plan.json")


@dataclass(frozen=True)
class Launch:
    argv: list[str]             # what the launcher was given
    cwd: Path                   # where it ran
    env: dict[str, str]         # its whole environment
    changed: dict[str, str]     # variables launch.sh set or changed
    stderr: str                 # launch.sh's stderr


def capture_launch(d: Path, tmp: Path, launcher: str, env: dict[str, str], path_first: str = "",
                   timeout: int = 30) -> Launch:
    """Run d/launch.sh (cwd tmp, environment `env` + PATH/HOME/BAIGE_CAPTURE) with `launcher` on PATH
    replaced by a stand-in that records what it was given; `path_first`: folders put on PATH after it."""
    fake = tmp / launcher
    fake.write_text(FAKE_LAUNCHER)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    path = ":".join(x for x in (str(tmp), path_first, os.environ.get("PATH", "/usr/bin:/bin")) if x)
    base = {"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), **env, "BAIGE_CAPTURE": str(tmp / "cap")}
    r = subprocess.run(["bash", str(d / "launch.sh")], env=base, capture_output=True, text=True, timeout=timeout,
                       cwd=tmp)
    need(r.returncode == 0, f"launch.sh exited {r.returncode}: {r.stderr.strip()[-300:]}")
    argv = (tmp / "cap.argv").read_bytes().decode().split("\0")[:-1]
    cwd = Path((tmp / "cap.cwd").read_text().strip())
    got = dict(kv.split("=", 1) for kv in (tmp / "cap.env").read_bytes().decode().split("\0") if "=" in kv)
    changed = {k: v for k, v in got.items() if base.get(k) != v and k not in SHELL_VARS}
    return Launch(argv, cwd, got, changed, r.stderr)


def launcher_options(argv: list[str], stop: int) -> dict[str, str]:
    """`--key value` / `--key=value` options of argv[:stop], keys with '-' for '_'."""
    opts, k = {}, 0
    while k < stop:
        a = argv[k]
        if a.startswith("--") and "=" in a:
            key, val = a[2:].split("=", 1)
            opts[key] = val
            k += 1
        else:
            opts[a.lstrip("-")] = argv[k + 1]
            k += 2
    return {k.replace("_", "-"): v for k, v in opts.items()}


def cli(exe: str, *a: str) -> None:
    r = subprocess.run([exe, *a], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise CheckFailure(f"{' '.join(a[:3])}: exit {r.returncode}: {r.stderr.strip()[-300:]}")


def make_plans(out: Path, exe: str, runtime: str, cases) -> tuple[list[Path], list[str]]:
    """Plan and export every case (name, model, cluster, *options) into out/NAME with the project CLI `exe`;
    returns the folders made and a FAIL line for each case the CLI could not make."""
    made, failed = [], []
    for name, model, cluster, *opts in cases:
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        try:
            cli(exe, "plan", model, cluster, *opts, "--runtime", runtime, "--out", str(d / "plan.yaml"))
            cli(exe, "export", str(d / "plan.yaml"), "--to", runtime, "--out-dir", str(d))
            made.append(d)
        except CheckFailure as e:
            failed.append(f"FAIL {d}: {e}")
    return made, failed


def parse_cli(argv: list[str], valued: tuple[str, ...] = ("--make-plans", "--baige-plan")
              ) -> tuple[dict[str, str], list[Path], bool]:
    """(options among `valued` with their values, the DIR arguments, -v given)."""
    verbose = "-v" in argv
    argv = [a for a in argv if a != "-v"]
    opts, dirs, k = {}, [], 0
    while k < len(argv):
        if argv[k] in valued and k + 1 < len(argv):
            opts[argv[k]] = argv[k + 1]
            k += 2
        else:
            dirs.append(Path(argv[k]))
            k += 1
    return opts, dirs, verbose


def run_serial(dirs: list[Path], check: Callable[[Path], list[str]], verbose: bool) -> tuple[int, int]:
    """Check each DIR in turn: `ok DIR` (with check's notes and time when verbose) or `FAIL DIR: reason`,
    any other error reported with where it was raised. Returns (passed, failed)."""
    passed = failed = 0
    for d in dirs:
        t = time.time()
        try:
            notes = check(d)
            print(f"ok {d}" + (f"  ({'; '.join(notes)}; {time.time() - t:.1f} s)" if verbose else ""), flush=True)
            passed += 1
        except CheckFailure as e:
            print(f"FAIL {d}: {e}", flush=True)
            failed += 1
        except Exception as e:   # noqa: BLE001 - a bug here or an unexpected runtime error: still one line per DIR
            where = traceback.extract_tb(e.__traceback__)[-1]
            print(f"FAIL {d}: {type(e).__name__} at {Path(where.filename).name}:{where.lineno}: {e}", flush=True)
            failed += 1
    return passed, failed
