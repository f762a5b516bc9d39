"""Where the built-in catalog lives: inside the wheel (baige_plan/_catalog) or, in a source
checkout / editable install, at the repo's top level."""

from __future__ import annotations

import os
from pathlib import Path

KINDS = ("chips", "models", "topologies")


def builtin_root() -> Path:
    pkg = Path(__file__).resolve().parents[1]
    packaged = pkg / "_catalog"
    if (packaged / "chips").is_dir():
        return packaged
    return pkg.parent


def catalog_roots(extra: list[str] | tuple[str, ...] = ()) -> list[Path]:
    """User folders first (--catalog, then BAIGE_PLAN_CATALOG), built-ins last."""
    roots = [Path(p) for p in extra]
    env = os.environ.get("BAIGE_PLAN_CATALOG", "")
    roots += [Path(p) for p in env.split(os.pathsep) if p]
    roots.append(builtin_root())
    return roots
