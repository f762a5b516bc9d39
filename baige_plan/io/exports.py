"""Plan -> launch files for a runtime. Each runtime's exporter lives in its own module
(baige_plan/runtimes/NAME.py, next to its space and pinned version); this module dispatches, adds the
plain hostfile target, and writes the files atomically.
"""

from __future__ import annotations

from pathlib import Path

from baige_plan import runtimes
from baige_plan.errors import InputError, SpecError
from baige_plan.runtimes._common import Export, hostfile_file, plan_info

TARGETS = runtimes.NAMES + ("hostfile",)


def hostfile(doc: dict) -> Export:
    i = plan_info(doc)
    caveats = []
    if len(i["cluster"].get("groups", [])) > 1:
        caveats.append("several groups: launch each family with its own launcher")
    f = hostfile_file(i, "one line per node: HOSTNAME slots=DEVICES (placeholder names: replace with yours);",
                      "ranks follow the plan's placement: node n holds ranks n*slots .. n*slots + slots - 1")
    return Export((f,), tuple(caveats))


def export_plan(doc: dict, target: str) -> Export:
    if target not in TARGETS:
        raise InputError("--to", "", f"unknown target {target!r} (one of {', '.join(TARGETS)})")
    try:
        if target == "hostfile":
            return hostfile(doc)
        return runtimes.module(target).export(doc)
    except SpecError as e:
        raise InputError("PLAN", e.field, e.reason) from None
    except (KeyError, TypeError, IndexError) as e:
        raise InputError("PLAN", "", f"plan is missing what the {target} export needs: {e}") from None


def write_export(ex: Export, out_dir: Path, write) -> list[Path]:
    """Write every file of `ex` into `out_dir` (created if missing) with `write(path, text)` (atomic)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(str(out_dir), "--out-dir", "exists and is not a folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in ex.files:
        p = out_dir / f.name
        write(p, f.text)
        if f.name.endswith(".sh"):
            p.chmod(0o755)
        paths.append(p)
    return paths
