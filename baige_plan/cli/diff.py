"""`baige-plan diff A B`: what differs between two plans (strategy, stages, estimate, inputs, placement).
Exit 0 when they are the same, 1 when they differ (as diff(1) and SPEC §3), 2 on bad input."""

from __future__ import annotations

from pathlib import Path

import typer

from baige_plan.cli.common import FORMAT_HELP, CatalogOpt, Fmt, fail_input, progress_line


def diff(plan_a: Path = typer.Argument(..., metavar="PLAN_A", help="Plan file A."),
         plan_b: Path = typer.Argument(..., metavar="PLAN_B", help="Plan file B."),
         fmt: Fmt = typer.Option(Fmt.table, "--format", help=FORMAT_HELP),
         catalog: list[str] = CatalogOpt) -> None:
    """Show the differences between two plan files (as written), for humans or as JSON. Exit 0 when the
    plans are the same, 1 when they differ (as diff(1)), 2 on bad input."""
    from baige_plan.errors import InputError
    from baige_plan.io.plans import dumps
    from baige_plan.present.plan_compare import compare
    from baige_plan.present.render_plans import diff_table, print_tables
    from baige_plan.reports.plan_check import validate_plan_file

    try:    # both files pass every check `baige-plan validate` makes, or exit 2
        with progress_line("comparing") as prog:     # on stderr after a second; never with --quiet
            a, _ = validate_plan_file(plan_a, step=lambda text: prog.update(f"comparing {text}"))
            b, _ = validate_plan_file(plan_b, step=lambda text: prog.update(f"comparing {text}"))
    except InputError as ex:
        fail_input(ex)
    c = compare(a, b)
    same = not c["rows"]
    if fmt is Fmt.table:
        if same:
            typer.echo("no differences")
        else:
            print_tables([diff_table(c["rows"], f"{plan_a} (A) vs {plan_b} (B)")])
    else:
        c.pop("rows")
        # A and B's estimates as the plan files hold them: the one estimate object (README "JSON shapes")
        doc = dict({"schema": "baige-plan/diff/v1"}, **c, same=same,
                   a={"file": str(plan_a), "estimate": a["estimate"]},
                   b={"file": str(plan_b), "estimate": b["estimate"]})
        typer.echo(dumps(doc, fmt.value), nl=False)
    if not same:
        raise typer.Exit(1)
