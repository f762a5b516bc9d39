"""Options and helpers shared by the command modules (thin layer over io/ and cost/)."""

from __future__ import annotations

import os
import sys
import tempfile
from enum import Enum
from pathlib import Path

import typer

from baige_plan.errors import InputError, SpecError
from baige_plan.runtimes import NAMES as RUNTIME_NAMES

CatalogOpt = typer.Option(None, "--catalog", help="Extra catalog folder (chips/, models/, topologies/); repeatable. "
                          "Also BAIGE_PLAN_CATALOG.")


class Fmt(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


class Recompute(str, Enum):
    none = "none"
    selective = "selective"
    full = "full"


class Precision(str, Enum):
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    fp32 = "fp32"


Runtime = Enum("Runtime", {n: n for n in RUNTIME_NAMES}, type=str)

RuntimeOpt = typer.Option(None, "--runtime", "--framework",
                          help="Runtime the plan targets: " + ", ".join(RUNTIME_NAMES) + ". The search keeps to "
                          "what it runs and the cost follows how it executes (when gradients are reduced, what "
                          "overlaps). [default: megatron; flagscale on clusters of several chip groups]")


class Execution(str, Enum):
    fused = "fused"
    eager = "eager"


class Attention(str, Enum):
    flash = "flash"
    standard = "standard"


def err(msg: str) -> None:
    """One line on stderr."""
    print(f"baige-plan: {msg}", file=sys.stderr)


def note(msg: str) -> None:
    print(f"note: {msg}", file=sys.stderr)


def fail_input(e: InputError | SpecError, source: str = "") -> None:
    """Print a bad-input error (file, field, reason) and exit 2."""
    if isinstance(e, SpecError):
        err(f"{source + ': ' if source else ''}{e.field}: {e.reason}")
    else:
        err(str(e))
    raise typer.Exit(2)


def write_atomic(path: Path, text: str) -> None:
    """Write via a temp file in the same folder + os.replace: never a half-written file."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(str(path), "", f"folder {str(parent)!r} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
