"""Options and helpers shared by the command modules (thin layer over io/ and cost/)."""

from __future__ import annotations

import sys
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
    fp32 = "fp32"      # IEEE fp32 on CUDA cores (PyTorch default, allow_tf32=False)
    tf32 = "tf32"      # fp32 storage, TF32 tensor-core matmuls (torch.backends.cuda.matmul.allow_tf32=True)


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
    """Write an output file: regular files only (a device, pipe, socket or folder -- or a link to one -- is
    refused with an InputError), temp file in the same folder + fsync + os.replace, never half-written;
    a new file gets 0o666 & ~umask, an existing one keeps its mode (baige_plan/io/outfile.py)."""
    from baige_plan.io.outfile import write_atomic as write

    write(path, text)
