"""`baige-plan backtest RUNS_FILE`: measured vs predicted step time and memory, with a summary."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from baige_plan.cli.common import CatalogOpt, fail_input
from baige_plan.errors import InputError
from baige_plan.io.backtest import backtest_file
from baige_plan.io.catalog import Catalog
from baige_plan.io.serialize import to_json


def backtest(
    runs: Path = typer.Argument(..., help="Runs YAML (schema of published_calibration.yaml / benchmarks/real)."),
    fmt: str = typer.Option("table", "--format", help="table | json"),
    catalog: list[str] = CatalogOpt,
) -> None:
    """Evaluate each measured run with the cost model and report the error (the golden table)."""
    if fmt not in ("table", "json"):
        fail_input(InputError("--format", "", f"must be table or json, got {fmt!r}"))
    try:
        doc = backtest_file(runs, Catalog.create(catalog or []))
    except InputError as e:
        fail_input(e)
    if fmt == "json":
        typer.echo(to_json(doc), nl=False)
        return
    t = Table(title=f"backtest: {runs}", title_justify="left")
    for col in ("run", "strategy", "measured s", "predicted s", "error", "meas. GiB", "pred. GiB"):
        t.add_column(col, justify="left" if col in ("run", "strategy") else "right")
    for r in doc["rows"]:
        err = r["step_time_error"]
        mem_m = r.get("measured_peak_memory_gib") or r.get("measured_activations_gib")
        mem_p = r["predicted_peak_memory_gib"] if r.get("measured_peak_memory_gib") else r.get("predicted_activations_gib")
        t.add_row(r["id"], r["strategy"], f"{r['measured_step_time_s']:.4g}" if r["measured_step_time_s"] else "-",
                  f"{r['predicted_step_time_s']:.4g}", f"{err:+.1%}" if err is not None else "-",
                  f"{mem_m:.2f}" if mem_m else "-", f"{mem_p:.2f}" if mem_m else "-")
    s = doc["summary"]
    console = Console(width=max(Console().width, 140))
    console.print(t)
    if "median_abs_step_time_error" in s:
        console.print(f"step time over {s['step_time_rows']} runs: median |error| {s['median_abs_step_time_error']:.1%}, "
                      f"p90 {s['p90_abs_step_time_error']:.1%}, max {s['max_abs_step_time_error']:.1%}, "
                      f"mean signed {s['mean_signed_step_time_error']:+.1%}")
    if "median_abs_memory_error" in s:
        console.print(f"peak memory over {s['memory_rows']} runs: median |error| {s['median_abs_memory_error']:.1%}, "
                      f"max {s['max_abs_memory_error']:.1%}")
    console.print("(memory columns: activations for the Korthikanti rows, allocated peak for measured runs; "
                  "step times derived from TFLOP/s where the source gives no time)")
