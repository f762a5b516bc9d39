"""`baige-plan export PLAN --to RUNTIME [--out-dir DIR]`: the runtime's launch files for a plan."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from baige_plan.cli.common import CatalogOpt, fail_input, note, progress_line, write_atomic
from baige_plan.cli.values import out_dir_option, plan_file
from baige_plan.specs.runtimes import NAMES

Target = Enum("Target", {n: n for n in NAMES + ("hostfile",)}, type=str)


def export(plan: Path = typer.Argument(..., metavar="PLAN", help="A plan file.", callback=plan_file),
           to: Target = typer.Option(None, "--to", help="Target runtime [default: the plan's runtime]."),
           out_dir: str = typer.Option(None, "--out-dir", metavar="DIR", callback=out_dir_option,   # str: '' is refused
                                        help="Write every launch file (config, arguments, "
                                        "launch script, hostfile) into this folder [default: print the "
                                        "first file only]."),
           hostfile: Path = typer.Option(None, "--hostfile", metavar="FILE",
                                         help="The real hosts, one per line (name or IP, optional slots=N), in "
                                         "the plan's node order: written instead of placeholder names "
                                         "[default: placeholder names]."),
           mock_data: bool = typer.Option(False, "--mock-data",
                                          help="Launch scripts default to mock data (BAIGE_MOCK_DATA=1) instead of "
                                          "requiring BAIGE_DATA_PATH and BAIGE_TOKENIZER."),
           runtime_version: str = typer.Option(None, "--runtime-version", metavar="VERSION",
                                               help="Runtime version to write for (torchtitan: 0.3.0 for torch >= "
                                               "2.14, 0.2.2 for torch 2.11/2.12 stacks) [default: the newest]."),
           catalog: list[str] = CatalogOpt) -> None:
    """Print the plan as the target runtime's arguments or config (the first launch file); what it cannot
    express is said on stderr (and as a comment where the format has comments). A plan the runtime refuses
    exits 2. Launch scripts read the data, tokenizer and run length from BAIGE_DATA_PATH, BAIGE_TOKENIZER and
    BAIGE_TRAIN_ITERS (BAIGE_MOCK_DATA=1: mock data), check the runtime's and torch's versions, and a
    slurm.sbatch runs them under SLURM."""
    from baige_plan.errors import InputError
    from baige_plan.exports.files import export_plan, read_hostfile, write_export
    from baige_plan.io.plans import read_plan

    try:
        with progress_line(f"export: reading {plan}") as prog:     # on stderr after a second; never with --quiet
            doc = read_plan(plan)
            target = to.value if to is not None else (doc.get("strategy") or {}).get("runtime", "megatron")
            planned = (doc.get("strategy") or {}).get("runtime")
            hosts = read_hostfile(hostfile) if hostfile is not None else ()
            prog.update(f"export: writing the {target} launch files")
            ex = export_plan(doc, target, hosts=hosts, mock_data=mock_data, runtime_version=runtime_version,
                             src=str(plan), hostfile_src=str(hostfile))
            # said once the target runs the plan (a refusal is one line, exit 2)
            if planned and target not in (planned, "hostfile"):
                note(f"the plan was searched and costed for runtime {planned!r}; exporting it to {target!r}")
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
