"""`baige-plan profile`: measure the local accelerator(s) and write a measured chip file.

Needs the optional torch extra (`pip install 'baige-plan[profile]'`); --help works without it.
Register with `app.command("profile")(profile)`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import typer

_NO_TORCH = "baige-plan profile needs PyTorch: pip install 'baige-plan[profile]'"


def profile(
    out: Path = typer.Option(Path("chip-profiled.yaml"), "--out", help="Chip YAML to write; raw samples go to "
                             "<out stem>.raw.json beside it."),
    devices: int = typer.Option(1, "--devices", min=1, help="Local GPUs; >1 also measures NCCL collectives "
                                "(all-reduce, all-gather, reduce-scatter, all-to-all, send/recv)."),
    quick: bool = typer.Option(False, "--quick", help="Smaller GEMM grid and fewer message sizes."),
    base: str = typer.Option("h100-sxm5-80g", "--base", help="Datasheet chip (catalog id or file) whose peaks, "
                             "capacities and link rates are kept."),
    catalog: list[str] = typer.Option([], "--catalog", help="Extra catalog folder (repeatable)."),
    chip_id: str = typer.Option(None, "--id", help="id of the written chip (default: <base id>-profiled)."),
    refit: Path = typer.Option(None, "--refit", help="Fit and write from an existing .raw.json (no torch, "
                               "no GPU)."),
) -> None:
    r"""Measure GEMM efficiency, HBM bandwidth and collective bus bandwidth; write a chip file.

    Needs the optional extra: pip install 'baige-plan\[profile]' (adds torch).
    """
    from baige_plan.errors import InputError

    argv = ["--out", str(out), "--devices", str(devices), "--base", base]
    argv += ["--quick"] if quick else []
    for c in catalog:
        argv += ["--catalog", c]
    if chip_id:
        argv += ["--id", chip_id]
    if refit is not None:
        argv += ["--refit", str(refit)]
    elif importlib.util.find_spec("torch") is None:
        typer.echo(f"error: {_NO_TORCH}", err=True)
        raise typer.Exit(2)
    from baige_plan.profile import measure

    try:
        rc = measure.main(argv)
    except InputError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    except RuntimeError as e:       # no CUDA device, too few devices
        typer.echo(f"error: {str(e).splitlines()[0]}", err=True)
        raise typer.Exit(2) from None
    if rc:
        raise typer.Exit(rc)
    sys.stderr.flush()
