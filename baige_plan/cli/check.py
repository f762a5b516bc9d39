"""`baige-plan check PLAN --baseline BASE`: CI regression gate (exit 3 on a regression); `--update-baseline`
(`--accept`) makes PLAN the new baseline for an intended change."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from baige_plan.cli.common import FORMAT_HELP, CatalogOpt, Fmt, err, fail_input, note, progress_line

CHECK_SCHEMA = "baige-plan/check/v1"


def check(plan: Path = typer.Argument(..., metavar="PLAN", help="The new plan file (e.g. written by `plan --out` "
                                      "in this CI run)."),
          baseline: Path = typer.Option(..., "--baseline", metavar="BASE", help="The plan file to compare against "
                                        "(the committed baseline)."),
          tolerance: float = typer.Option(0.02, "--tolerance", help="Allowed relative slowdown of the predicted step "
                                          "time (0.02 = 2%)."),
          update_baseline: bool = typer.Option(False, "--update-baseline", "--accept",
                                               help="The change is intended: report it, then write PLAN over BASE "
                                               "(atomically; BASE may not exist yet) and exit 0. Commit BASE."),
          fmt: Fmt = typer.Option(Fmt.table, "--format", help=FORMAT_HELP),
          catalog: list[str] = CatalogOpt) -> None:
    """Exit 3 when PLAN is predicted slower than BASELINE beyond the tolerance, no longer fits, or the
    inputs changed in a way that matters; 0 otherwise. Prints what changed. With --update-baseline
    (--accept), PLAN becomes the new baseline instead."""
    from baige_plan.errors import InputError
    from baige_plan.io.plans import dumps
    from baige_plan.present.plan_compare import compare, regressions
    from baige_plan.present.render_plans import diff_table, print_tables
    from baige_plan.reports.plan_check import validate_plan_file

    if not math.isfinite(tolerance) or tolerance < 0:
        err(f"--tolerance: must be a finite number >= 0 (a relative slowdown, 0.02 = 2%), got {tolerance}")
        raise typer.Exit(2)
    tolerance += 0.0        # -0.0 -> 0.0
    a = None
    try:    # both files pass every check `baige-plan validate` makes, or exit 2
        with progress_line("checking") as prog:      # on stderr after a second; never with --quiet
            b, e_now = validate_plan_file(plan, step=lambda text: prog.update(f"checking {text}"))
            try:
                a, _ = validate_plan_file(baseline, step=lambda text: prog.update(f"checking {text}"))
            except InputError as ex:
                if not update_baseline:
                    raise
                # accepting: a missing or unreadable baseline is replaced (said on stderr), never compared
                note(f"baseline not compared ({'it does not exist yet' if not baseline.exists() else ex}); "
                     "writing PLAN as the new baseline")
            now = _estimate_now(b, e_now, str(plan))
    except InputError as ex:
        fail_input(ex)
    if not (math.isfinite(now["step_time_s"]) and now["step_time_s"] > 0):     # never "ok" on a NaN
        err(f"{plan}: estimate.step_time_s: the re-estimate is {now['step_time_s']}, not a positive number")
        raise typer.Exit(2)
    c = compare(a, dict(b, estimate=now)) if a is not None else None
    problems = regressions(a, now, c, tolerance) if a is not None else []
    base_t = a["estimate"]["step_time_s"] if a is not None else None
    if update_baseline:
        _write_baseline(plan, b, baseline)
    doc = {"schema": CHECK_SCHEMA, "ok": not problems,
           "plan": {"file": str(plan), "estimate": now},
           "baseline": {"file": str(baseline), "estimate": a["estimate"]} if a is not None else None,
           "tolerance": tolerance,
           "step_time_change": round(now["step_time_s"] / base_t - 1, 6) if base_t else None,
           "regressions": problems,
           "changes": {k: v for k, v in c.items() if k != "rows"} if c is not None else None,
           "baseline_updated": bool(update_baseline)}
    if fmt is not Fmt.table:
        for p in problems:
            err(f"{'accepted ' if update_baseline else ''}regression: {p}")
        typer.echo(dumps(doc, fmt.value), nl=False)
    else:
        if c is not None and c["rows"]:
            print_tables([diff_table(c["rows"], f"{baseline} (A) -> {plan} (B)")])
        for p in problems:
            err(f"{'accepted ' if update_baseline else ''}regression: {p}")
        vs = f" vs baseline {base_t:.4g} s" if base_t else ""
        if update_baseline:
            typer.echo(f"baseline updated: {baseline} <- {plan} ({now['step_time_s']:.4g} s{vs})")
        elif not problems:
            typer.echo(f"ok: {now['step_time_s']:.4g} s{vs} (tolerance {tolerance:.1%}), fits")
    if problems and not update_baseline:
        raise typer.Exit(3)


def _estimate_now(doc: dict, e, src: str) -> dict:
    """PLAN re-estimated as written, as the estimate JSON (SPEC §3) with its step-time band when the band
    table reads (the object a plan file's `estimate` holds)."""
    from baige_plan.errors import InputError
    from baige_plan.io.bands import estimate_band
    from baige_plan.io.plans import plan_inputs
    from baige_plan.io.serialize import estimate_dict

    try:
        model, _, job = plan_inputs(doc, src)
        band = estimate_band(e, model, job)
    except (InputError, OSError):
        band = None
    return estimate_dict(e, band)


def _write_baseline(plan: Path, doc: dict, baseline: Path) -> None:
    """PLAN over BASE, atomically (io/outfile.py): its very bytes when both are YAML or both JSON, else the
    document in BASE's format. InputError (exit 2) when BASE cannot be written."""
    from baige_plan.errors import InputError
    from baige_plan.io.outfile import write_atomic
    from baige_plan.io.plans import dumps, format_for

    try:
        if format_for(plan) == format_for(baseline):
            data: str | bytes = plan.read_bytes()
        else:
            data = dumps(doc, format_for(baseline))
            note(f"{baseline}: written as {format_for(baseline)} (PLAN is {format_for(plan)})")
        write_atomic(baseline, data)
    except OSError as ex:
        fail_input(InputError(str(plan), "", f"cannot read: {ex.strerror or ex}"))
    except InputError as ex:
        fail_input(ex)
