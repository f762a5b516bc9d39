"""`baige-plan replan`: a new plan after nodes, a chip family or a bridge are lost (or nodes added) that keeps
as many ranks on their stage and layers as the throughput allows (search/replan.py has the method)."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from baige_plan.cli.common import (
    FORMAT_HELP,
    CatalogOpt,
    Fmt,
    err,
    fail_input,
    note,
    progress_line,
    write_atomic,
)
from baige_plan.errors import InputError, SpecError

NODE_HELP = ("Lost node(s), repeatable: GROUP:INDEX as numbered in the plan's placement (group and node of each "
             "rank, e.g. gpu:17), GROUP:FIRST-LAST, or GROUP for all its nodes (a whole chip family) "
             "[default: none].")


def _max_loss(text: str) -> float:
    t = text.strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or not 0 <= v < 1:
        raise InputError("--max-loss", "", f"must be a fraction in [0, 1) or a percentage such as 3%, got {text!r}")
    return v


def _adds(cat, specs: list[str]):
    from baige_plan.io.catalog import _short
    from baige_plan.io.topologies import _SHORT
    from baige_plan.limits import MAX_DEVICES
    from baige_plan.specs.topology import GroupSpec
    out = []
    for spec in specs:
        m = _SHORT.match(spec.strip())
        if m and (len(m["nodes"]) > 9 or len(m["dpn"]) > 9 or int(m["nodes"]) * int(m["dpn"]) > MAX_DEVICES):
            raise InputError("--add", _short(spec), f"more than the limit of {MAX_DEVICES:,} devices")
        if not m or int(m["nodes"]) < 1 or int(m["dpn"]) < 1:
            raise InputError("--add", _short(spec), "expected CHIP:NODESxDEVICES with NODES, DEVICES >= 1 "
                             "(e.g. a100-sxm4-80g:2x8)")
        chip = cat.chip(m["chip"], "--add", spec)
        try:
            out.append(GroupSpec(name=chip.id, chip=chip, nodes=int(m["nodes"]), devices_per_node=int(m["dpn"]),
                                 chip_ref=m["chip"]))
        except SpecError as e:
            raise InputError("--add", f"{spec}: {e.field}", e.reason) from None
    return out


def replan(
    plan: Path = typer.Argument(..., metavar="PLAN", help="Plan file written by `plan --out` (self-contained)."),
    drop: list[str] = typer.Option(None, "--drop", metavar="NODES", help=NODE_HELP),
    drop_count: list[str] = typer.Option(None, "--drop-count", metavar="GROUP:N", help="GROUP:N: lose N nodes of GROUP, the least "
                                         "disruptive ones (nodes hosting no rank first, then the nodes of the last "
                                         "data-parallel replicas, highest index first); repeatable [default: none]."),
    add: list[str] = typer.Option(None, "--add", metavar="CHIP:NODESxDEVICES", help="Add nodes (to the group of "
                                  "that chip and node size, numbered after its last node; else a new group); "
                                  "repeatable [default: none]."),
    drop_bridge: list[str] = typer.Option(None, "--drop-bridge", metavar="A:B", help="Two group names, A and B "
                                          "written as 'A:B': they can no longer talk, no plan crosses between them; "
                                          "repeatable [default: none]."),
    max_loss: str = typer.Option("3%", "--max-loss", help="Keep the plan that moves the fewest bytes among those "
                                 "within this throughput loss of the fastest fresh plan (fraction or percent)."),
    out: Path = typer.Option(None, "--out", metavar="FILE", help="Write the new plan here (.yaml/.yml, or .json) "
                             "[default: no file]."),
    fmt: Fmt = typer.Option(Fmt.table, "--format", help=FORMAT_HELP),
    time_limit: float = typer.Option(None, "--time-limit", metavar="SECONDS", help="Seconds for the searches "
                                     "[default: 10]."),
    catalog: list[str] = CatalogOpt,
) -> None:
    """Re-plan after failures: keep ranks on their stage and layers where the throughput allows; report the
    throughput change and the bytes to move. Exits 1 naming the binding constraint when no plan fits."""
    from baige_plan.io.catalog import Catalog
    from baige_plan.io.plans import dumps, estimate_plan_full, format_for
    from baige_plan.reports.replan_doc import load_old, new_plan_doc, report_doc
    from baige_plan.search.replan import Infeasible
    from baige_plan.search.replan import replan as run
    from baige_plan.search.replan_world import apply_changes

    prog = progress_line(f"replan: reading {plan}")     # on stderr after a second; never with --quiet
    try:
        if not (drop or drop_count or add or drop_bridge):
            raise InputError("replan", "", "nothing changes: give --drop, --drop-count, --add or --drop-bridge")
        loss = _max_loss(max_loss)
        cat = Catalog.create(catalog or [])
        old = load_old(plan, cat)
        adds = _adds(cat, add or [])
        w = apply_changes(old.cluster, old.slots, list(drop or []), list(drop_count or []), adds,
                          list(drop_bridge or []))
        for g in w.groups.values():
            if g.name not in old.chip_docs:
                from baige_plan.io.plans import chip_docs_from_catalog
                from baige_plan.specs.topology import ClusterSpec
                old.chip_docs.update(chip_docs_from_catalog(cat, ClusterSpec(name=g.name, groups=(g,))))
        for msg in w.notes:
            note(msg)
        prog.update("replan: searching the surviving cluster (fresh and rank-keeping plans)")
        try:
            res = run(old.model, old.job, old.cluster, old.estimate, old.strategy, old.pipelines, old.slots, w,
                      frac=old.frac, max_loss=loss, time_limit_s=time_limit)
        except Infeasible as ex:
            err(f"no feasible plan: {ex}")
            raise typer.Exit(1) from None
        c = res.chosen
        prog.update("replan: re-estimating the new plan as written")
        doc = new_plan_doc(old.model, old.job, c, res, old.chip_docs, old.frac)
        e2, *_ = estimate_plan_full(doc, "replan")   # what `evaluate --plan` will say of the file
        if not math.isclose(e2.step_time_s, c.estimate.step_time_s, rel_tol=1e-9):
            note(f"re-estimated as written: {e2.step_time_s:.6g} s per step (search: {c.estimate.step_time_s:.6g} s)")
            c.estimate = e2
            doc = new_plan_doc(old.model, old.job, c, res, old.chip_docs, old.frac)
        if out is not None:
            prog.update(f"replan: writing {out}")
            write_atomic(out, dumps(doc, format_for(out)))
    except InputError as ex:
        fail_input(ex)
    except SpecError as ex:
        fail_input(ex, "replan")
    finally:
        prog.close()
    note(f"considered {res.considered} plans in {res.seconds:.2f} s; chose {c.label}")
    if out is not None:
        note(f"wrote {out}")
    rep = report_doc(res, old.estimate.tokens_per_s, out)
    # each plan as the one estimate object (README "JSON shapes"): the new plan's as its file holds it
    rep["old"]["estimate"] = _estimate(old.estimate, old.model, old.job)
    rep["new"]["estimate"] = doc["estimate"]
    if rep["fresh"] is not None and res.fresh is not None:
        rep["fresh"]["estimate"] = _estimate(res.fresh.estimate, old.model, old.job)
    if fmt is Fmt.table:
        _tables(rep)
    else:
        typer.echo(dumps(rep, fmt.value), nl=False)


def _estimate(e, model, job) -> dict:
    """The estimate JSON (SPEC §3) of `e`, with its step-time band when the band table reads."""
    from baige_plan.io.bands import estimate_band
    from baige_plan.io.serialize import estimate_dict
    try:
        band = estimate_band(e, model, job)
    except (InputError, OSError):
        band = None
    return estimate_dict(e, band)


def _tables(rep: dict) -> None:
    from rich.table import Table

    from baige_plan.present.render_plans import print_tables

    ch = rep["changes"]
    what = [f"lost {' '.join(ch['dropped_nodes'])}" if ch["dropped_nodes"] else "",
            f"added {' '.join(ch['added_nodes'])}" if ch["added_nodes"] else "",
            f"lost bridge {' '.join(ch['dropped_bridges'])}" if ch["dropped_bridges"] else ""]
    t = Table(title="replan: " + ", ".join(x for x in what if x), title_justify="left")
    for h in ("", "tokens/s", "change", "step time", "devices", "ranks kept", "params GB", "optimizer GB", "total GB"):
        t.add_column(h, justify="left" if not h else "right")
    o = rep["old"]
    t.add_row("old", f"{o['tokens_per_s']:,.0f}", "", f"{o['step_time_s']:.4g} s", str(o["devices"]), "", "", "", "")
    for name, d in (("new", rep["new"]), ("fresh", rep["fresh"])):
        if d is None:
            continue
        r, b = d["ranks"], d["bytes_moved_gb"]
        t.add_row(name, f"{d['tokens_per_s']:,.0f}", f"{d['change']:+.1%}", f"{d['step_time_s']:.4g} s",
                  str(d["devices"]), f"{r['kept']}/{r['total']}", f"{b['parameters']:,.1f}", f"{b['optimizer']:,.1f}",
                  f"{b['total']:,.1f}")
    tables = [t]
    info = Table(show_header=False)
    info.add_column("k", style="bold")
    info.add_column("v")
    info.add_row("new plan", rep["new"]["plan"])
    if rep["fresh"] is not None:
        info.add_row("fresh plan", "the reference: the fastest plan `plan` finds on the surviving nodes, placed on "
                     "them in order: " + rep["fresh"]["plan"])
    info.add_row("choice", rep["choice"])
    runs = [f"{g}: " + " ".join(x.rpartition(":")[2] if x.startswith(g + ":") else x for x in v)
            for g, v in rep["new"]["node_map"].items()]
    text = "; ".join(runs)
    if len(text) > 400:
        text = text[:400].rsplit(" ", 1)[0] + " ... (--format json lists all)"
    info.add_row("node map", text + "  (the new plan's nodes 0, 1, ... of each group)")
    if rep["new"]["spare_nodes"]:
        info.add_row("spare nodes", " ".join(rep["new"]["spare_nodes"]))
    tables.append(info)
    mv = rep["new"]["moves"]
    if mv:
        m = Table(title="state to move, by new role" + (f" (first 16 of {len(mv)})" if len(mv) > 16 else ""),
                  title_justify="left")
        for h in ("new role", "nodes receiving state", "params GB", "optimizer GB"):
            m.add_column(h, justify="left" if "GB" not in h else "right")
        for x in mv[:16]:
            m.add_row(x["role"], x["nodes"], f"{x['parameters_gb']:,.2f}", f"{x['optimizer_gb']:,.2f}")
        tables.append(m)
    print_tables(tables)
