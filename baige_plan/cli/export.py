"""`baige-plan export PLAN --to RUNTIME [--out-dir DIR]`: the runtime's launch files for a plan."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from baige_plan.cli.common import CatalogOpt, fail_input, note, progress_line, write_atomic
from baige_plan.cli.values import out_dir_option, plan_file
from baige_plan.runtimes import NAMES

Target = Enum("Target", {n: n for n in NAMES + ("hostfile",)}, type=str)


def export(plan: Path = typer.Argument(..., metavar="PLAN", help="A plan file.", callback=plan_file),
           to: Target = typer.Option(None, "--to", help="Target runtime [default: the plan's runtime]."),
           out_dir: Path = typer.Option(None, "--out-dir", metavar="DIR", callback=out_dir_option,
                                        help="Write every launch file (config, arguments, "
                                        "launch script, hostfile) into this folder [default: print the "
                                        "first file only]."),
           catalog: list[str] = CatalogOpt) -> None:
    """Print the plan as the target runtime's arguments or config (the first launch file); what it cannot
    express is said on stderr (and as a comment where the format has comments)."""
    from baige_plan.errors import InputError
    from baige_plan.io.exports import export_plan, write_export
    from baige_plan.io.plans import read_plan

    try:
        with progress_line(f"export: reading {plan}") as prog:     # on stderr after a second; never with --quiet
            doc = read_plan(plan)
            target = to.value if to is not None else (doc.get("strategy") or {}).get("runtime", "megatron")
            planned = (doc.get("strategy") or {}).get("runtime")
            if planned and target not in (planned, "hostfile"):
                note(f"the plan was searched and costed for runtime {planned!r}; exporting it to {target!r}")
            prog.update(f"export: writing the {target} launch files")
            ex = export_plan(doc, target)
        if out_dir is not None:
            if out_dir.is_dir():        # refuse a device, pipe or folder among the files before writing any
                from baige_plan.io.outfile import check_target
                for f in ex.files:
                    check_target(out_dir / f.name)
            for p in write_export(ex, out_dir, write_atomic):
                note(f"wrote {p}")
    except InputError as e:
        fail_input(e)
    for c in ex.caveats:
        note(f"{target}: {c}")
    typer.echo(ex.files[0].text, nl=False)
