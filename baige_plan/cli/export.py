"""`baige-plan export PLAN --to ...`: launch arguments/configs for training frameworks."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from baige_plan.cli.common import CatalogOpt, fail_input, note


class Target(str, Enum):
    megatron = "megatron"
    deepspeed = "deepspeed"
    torchtitan = "torchtitan"
    paddle = "paddle"
    hostfile = "hostfile"


def export(plan: Path = typer.Argument(..., help="A plan file."),
           to: Target = typer.Option(..., "--to", help="Target framework."),
           catalog: list[str] = CatalogOpt) -> None:
    """Print the plan as the target framework's arguments or config; what it cannot express is said
    on stderr (and as a comment where the format has comments)."""
    from baige_plan.errors import InputError
    from baige_plan.io.exports import export_plan
    from baige_plan.io.plans import read_plan

    try:
        text, caveats = export_plan(read_plan(plan), to.value)
    except InputError as ex:
        fail_input(ex)
    for c in caveats:
        note(f"{to.value}: {c}")
    typer.echo(text, nl=False)
