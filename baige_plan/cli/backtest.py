"""`baige-plan backtest RUNS_FILE...`: measured vs predicted step time and memory, with a summary per
set (file): error median / p90 / max, the share of runs evaluated, and a ranking check. With
--fail-above-median / --fail-above-p90 it is a CI gate (exit 3 when a set exceeds a limit).

`--loso`: leave-one-source-out validation over all the files (reports/loso.py): per source, family, mechanism
class and overall, with the corpus-fitted constants refit without the source being scored; `--tables DIR`
writes DIR/loso.json and DIR/LOSO.md, `--bands FILE` the step-time band table (`make corpus-tables`)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from baige_plan.cli.common import CatalogOpt, err, fail_input, note, progress_line, write_atomic
from baige_plan.errors import InputError
from baige_plan.io.catalog import Catalog
from baige_plan.io.serialize import to_json
from baige_plan.present.render import Stdout
from baige_plan.reports.backtest import backtest_files, gate


def _pct_opt(name: str, text: str | None) -> float | None:
    """A percent limit (a string option, parsed and checked here: a finite number >= 0), or None."""
    if text is None:
        return None
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and 0 <= v <= 1e6):
        fail_input(InputError(name, "", f"must be a finite number of percent from 0 to 1e6, got {text!r}"))
    return v


def backtest(
    runs: list[Path] = typer.Argument(..., metavar="RUNS", help="Runs YAML file(s) (schema of published_calibration.yaml / "
                                      "benchmarks/real); each file is one set in the summary."),
    fmt: str = typer.Option("table", "--format", help="Output: table (for people) or json (one document on "
                            "stdout)."),
    catalog: list[str] = CatalogOpt,
    plot: Path = typer.Option(None, "--plot", metavar="FILE", help="Also draw predicted vs measured step time (y = x, ±10 % band, "
                              "labelled points) into this .svg or .png file (needs the optional plot extra: "
                              "pip install 'baige-plan[plot]') [default: no picture]."),
    fail_median: str = typer.Option(None, "--fail-above-median", metavar="PCT",
                                      help="Exit 3 when a set's median |step-time error| exceeds PCT percent "
                                      "[default: no limit]."),
    fail_p90: str = typer.Option(None, "--fail-above-p90", metavar="PCT",
                                   help="Exit 3 when a set's p90 |step-time error| exceeds PCT percent "
                                   "[default: no limit]."),
    loso_: bool = typer.Option(False, "--loso", help="Leave-one-source-out validation over all the files: rows "
                               "grouped by source.key; the corpus-fitted constants (specs/calibration.py) refit "
                               "without the source being scored; per source, family, mechanism class and overall "
                               "(docs/VALIDATION.md). With --fail-above-*, the limits apply to the pooled figures."),
    tables: Path = typer.Option(None, "--tables", metavar="DIR", help="With --loso: write DIR/loso.json and "
                                "DIR/LOSO.md (the committed tables) [default: not written]."),
    bands: Path = typer.Option(None, "--bands", metavar="FILE", help="With --loso: write the step-time band "
                               "table (quantiles of measured / predicted per mechanism class) to FILE [default: not written]."),
) -> None:
    """Evaluate each measured run with the cost model and report the error (the golden table)."""
    if fmt not in ("table", "json"):
        fail_input(InputError("--format", "", f"must be table or json, got {fmt!r}"))
    median_lim = _pct_opt("--fail-above-median", fail_median)
    p90_lim = _pct_opt("--fail-above-p90", fail_p90)
    if not loso_:
        for opt, v in (("--tables", tables), ("--bands", bands)):
            if v is not None:
                fail_input(InputError(opt, "", "needs --loso"))
    else:
        if plot is not None:
            fail_input(InputError("--plot", "", "not with --loso (plot a plain backtest)"))
        _loso(list(runs), fmt, catalog, median_lim, p90_lim, tables, bands)
        return
    try:
        with progress_line("backtest") as prog:      # on stderr after a second; never with --quiet
            doc = backtest_files(list(runs), Catalog.create(catalog or []), progress=prog.update)
    except InputError as e:
        fail_input(e)
    label = ", ".join(str(p) for p in runs)
    if plot is not None:
        from baige_plan.present.pictures import write_backtest_plot
        try:
            write_backtest_plot(doc, plot, f"backtest: {label}")
        except InputError as e:
            fail_input(e)
    if fmt == "json":
        typer.echo(to_json(doc), nl=False)
    else:
        _print_tables(doc, label)
    problems = gate(doc, median_lim, p90_lim)
    for p in problems:
        err(f"backtest gate: {p}")
    if problems:
        raise typer.Exit(3)


def _print_tables(doc: dict, label: str) -> None:
    t = Table(title=f"backtest: {label}", title_justify="left")
    for col in ("run", "strategy", "measured s", "predicted s", "error", "meas. GiB", "pred. GiB"):
        t.add_column(col, justify="left" if col in ("run", "strategy") else "right")
    for r in doc["rows"]:
        err_ = r["step_time_error"]
        mem_m = r.get("measured_peak_memory_gib") or r.get("measured_activations_gib")
        mem_p = r["predicted_peak_memory_gib"] if r.get("measured_peak_memory_gib") else r.get("predicted_activations_gib")
        t.add_row(r["id"], r["strategy"], f"{r['measured_step_time_s']:.4g}" if r["measured_step_time_s"] else "-",
                  f"{r['predicted_step_time_s']:.4g}", f"{err_:+.1%}" if err_ is not None else "-",
                  f"{mem_m:.2f}" if mem_m else "-", f"{mem_p:.2f}" if mem_m else "-")
    console = Stdout(140)       # no cell cut at any width; ids and paths print as written (present/render.py)
    console.print(t)
    sets = doc.get("sets") or [{"file": label, "summary": doc["summary"]}]
    for st in sets + ([{"file": "all sets", "summary": doc["summary"]}] if len(sets) > 1 else []):
        _print_summary(console, st["file"], st["summary"])
    console.print("(memory columns: activations for the Korthikanti rows, the measured run's peak otherwise -- "
                  "allocated, or reserved where the source logs that (results.peak_memory_kind, e.g. torchtitan); "
                  "step times derived from TFLOP/s where the source gives no time; ranking by step time per "
                  "sequence of the global batch)")


def _print_summary(console: Stdout, name: str, s: dict) -> None:
    console.print(Text.assemble((name, "bold"), f": {s['evaluated_rows']} of {s['runs_total']} runs evaluated "
                                f"({s['evaluated_share']:.0%}); refused {s['refused_rows']}, predicted not to fit "
                                f"{s['does_not_fit_rows']}"))
    for r in s["refused"]:
        console.print(f"  refused: {r['id']}: {r['field']}: {r['reason']}")
    if s["does_not_fit"]:
        console.print(f"  predicted not to fit: {', '.join(map(str, s['does_not_fit']))}")
    if "median_abs_step_time_error" in s:
        console.print(f"step time over {s['step_time_rows']} runs: median |error| {s['median_abs_step_time_error']:.1%}, "
                      f"p90 {s['p90_abs_step_time_error']:.1%}, max {s['max_abs_step_time_error']:.1%}, "
                      f"mean signed {s['mean_signed_step_time_error']:+.1%}")
    if "median_abs_memory_error" in s:
        console.print(f"peak memory over {s['memory_rows']} runs: median |error| {s['median_abs_memory_error']:.1%}, "
                      f"p90 {s['p90_abs_memory_error']:.1%}, max {s['max_abs_memory_error']:.1%}")
    if "median_abs_reserved_memory_error" in s:
        console.print(f"reserved memory over {s['reserved_memory_rows']} runs: median |error| "
                      f"{s['median_abs_reserved_memory_error']:.1%}, max {s['max_abs_reserved_memory_error']:.1%}")
    rk = s["ranking"]
    if not rk["groups"]:
        return
    console.print(f"ranking over {rk['group_count']} groups ({rk['pairs']} pairs): Kendall tau {rk['kendall_tau']:+.2f}, "
                  f"{rk['discordant']} discordant pairs, predicted best = measured best in "
                  f"{rk['groups_with_best_picked']}/{rk['group_count']}, regret median {rk['median_regret']:.1%}, "
                  f"max {rk['max_regret']:.1%}")
    t = Table(title_justify="left")
    for col in ("group", "runs", "tau", "discordant", "predicted best", "measured best", "regret"):
        t.add_column(col, justify="left" if col in ("group", "predicted best", "measured best") else "right")
    for g in rk["groups"]:
        t.add_row(g["group"], str(g["runs"]), f"{g['kendall_tau']:+.2f}", f"{g['discordant']}/{g['pairs']}",
                  str(g["predicted_best"]), str(g["measured_best"]), f"{g['regret']:.1%}")
    console.print(t)


def _loso(runs: list[Path], fmt: str, catalog: list[str], median_lim: float | None, p90_lim: float | None,
          tables: Path | None, bands: Path | None) -> None:
    from baige_plan.io.serialize import to_yaml
    from baige_plan.reports.loso import bands_file_doc, loso, loso_gate, markdown

    t0 = time.perf_counter()
    try:
        with progress_line("loso") as prog:      # on stderr after a second; never with --quiet
            doc = loso(runs, Catalog.create(catalog or []), progress=prog.update)
        bands_doc = bands_file_doc(doc) if bands is not None else None
        if tables is not None:
            cmd = f"baige-plan backtest --loso FILE... --tables {tables}" + (f" --bands {bands}" if bands else "")
            write_atomic(tables / "loso.json", to_json(doc))
            write_atomic(tables / "LOSO.md", markdown(doc, cmd))
        if bands is not None:
            write_atomic(bands, to_yaml(bands_doc))
    except InputError as e:
        fail_input(e)
    note(f"loso: {doc['overall']['runs']} runs of {len(doc['sources'])} sources in {time.perf_counter() - t0:.1f} s")
    if fmt == "json":
        typer.echo(to_json(doc), nl=False)
    else:
        _print_loso(doc)
    problems = loso_gate(doc, median_lim, p90_lim)
    for p in problems:
        err(f"backtest gate: {p}")
    if problems:
        raise typer.Exit(3)


def _pc(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def _print_loso(doc: dict) -> None:
    console = Stdout(140)
    o, ins = doc["overall"], doc["in_sample_committed"]
    console.print(Text.assemble(("leave-one-source-out", "bold"), f" over {', '.join(doc['files'])}"))
    console.print(f"overall: {o['evaluated_rows']} of {o['runs']} runs evaluated ({o['evaluated_share']:.0%}); "
                  f"held-out |step-time error| median {_pc(o.get('median_abs_step_time_error'))}, p90 "
                  f"{_pc(o.get('p90_abs_step_time_error'))}, max {_pc(o.get('max_abs_step_time_error'))} "
                  f"(committed constants, in sample: median {_pc(ins.get('median_abs_step_time_error'))}, p90 "
                  f"{_pc(ins.get('p90_abs_step_time_error'))})")
    console.print("targets: " + "; ".join(f"{t['figure']} {t['limit']}: "
                                          f"{'-' if t['value'] is None else format(t['value'], '.3g')} "
                                          f"{'met' if t['met'] else 'NOT met'}" for t in doc["targets"]))
    for title, key, entries in (("source (left out)", "source", doc["sources"]),
                                ("family (left out)", "family", doc["families"]),
                                ("mechanism class", "class", doc["classes"])):
        t = Table(title_justify="left")
        for col in (title, "runs", "evaluated", "median", "p90", "max", "median signed"):
            t.add_column(col, justify="left" if col == title else "right")
        for s in entries:
            kind = "memory" if s.get(key) == "memory" else "step_time"
            t.add_row(str(s[key]), str(s["runs"]),
                      "-" if kind == "memory" else f"{s['evaluated_rows']} ({s['evaluated_share']:.0%})",
                      _pc(s.get(f"median_abs_{kind}_error")), _pc(s.get(f"p90_abs_{kind}_error")),
                      _pc(s.get(f"max_abs_{kind}_error")),
                      "-" if s.get(f"median_signed_{kind}_error") is None else f"{s[f'median_signed_{kind}_error']:+.1%}")
        console.print(t)
    console.print("fitted constants: " + "; ".join(
        f"{f['name']} committed {f['committed']:g}, fitted on all sources {f['fit_on_all_sources']:g} "
        f"({f['training_rows_all_sources']} runs), range {f['lo']:g}-{f['hi']:g}" for f in doc["fitted"]))
    console.print("step-time bands (measured / predicted q10 / q50 / q90, runs): " + "; ".join(
        f"{c} {b['q10']:.3f} / {b['q50']:.3f} / {b['q90']:.3f} ({b['n']})" for c, b in doc["bands"].items()))
    for x in doc["not_evaluated"]:
        console.print(f"  not evaluated: {x['id']} ({x['source']}): {x['reason']}")
