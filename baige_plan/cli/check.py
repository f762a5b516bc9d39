"""`baige-plan check PLAN --baseline BASE`: CI regression gate (exit 3 on a regression)."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from baige_plan.cli.common import CatalogOpt, err, fail_input, progress_line


def check(plan: Path = typer.Argument(..., help="The new plan file."),
          baseline: Path = typer.Option(..., "--baseline", help="The plan file to compare against."),
          tolerance: float = typer.Option(0.02, "--tolerance", help="Allowed relative slowdown."),
          catalog: list[str] = CatalogOpt) -> None:
    """Exit 3 when PLAN is predicted slower than BASELINE beyond the tolerance, no longer fits, or the
    inputs changed in a way that matters; 0 otherwise. Prints what changed."""
    from baige_plan.errors import InputError
    from baige_plan.io.plan_check import validate_plan_file
    from baige_plan.io.plan_compare import compare, regressions
    from baige_plan.io.render_plans import diff_table, print_tables
    from baige_plan.io.serialize import estimate_dict

    if not math.isfinite(tolerance) or tolerance < 0:
        err(f"--tolerance: must be a finite number >= 0 (a relative slowdown, 0.02 = 2%), got {tolerance}")
        raise typer.Exit(2)
    tolerance += 0.0        # -0.0 -> 0.0
    try:    # both files pass every check `baige-plan validate` makes, or exit 2
        with progress_line("checking") as prog:      # on stderr after a second; never with --quiet
            a, _ = validate_plan_file(baseline, step=lambda text: prog.update(f"checking {text}"))
            b, e_now = validate_plan_file(plan, step=lambda text: prog.update(f"checking {text}"))
    except InputError as ex:
        fail_input(ex)
    now = estimate_dict(e_now)
    if not (math.isfinite(now["step_time_s"]) and now["step_time_s"] > 0):     # never "ok" on a NaN
        err(f"{plan}: estimate.step_time_s: the re-estimate is {now['step_time_s']}, not a positive number")
        raise typer.Exit(2)
    c = compare(a, dict(b, estimate=now))
    if c["rows"]:
        print_tables([diff_table(c["rows"], f"{baseline} (A) -> {plan} (B)")])
    problems = regressions(a, now, c, tolerance)
    for p in problems:
        err(f"regression: {p}")
    if problems:
        raise typer.Exit(3)
    typer.echo(f"ok: {now['step_time_s']:.4g} s vs baseline {a['estimate']['step_time_s']:.4g} s "
               f"(tolerance {tolerance:.1%}), fits")
