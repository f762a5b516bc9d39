"""`baige-plan explain PLAN`: why this plan, where its time and memory go, how the runners-up compare."""

from __future__ import annotations

from pathlib import Path

import typer

from baige_plan.cli.common import FORMAT_HELP, CatalogOpt, Fmt, fail_input, progress_line
from baige_plan.cli.values import plan_file
from baige_plan.errors import InputError

EXPLAIN_SCHEMA = "baige-plan/explain/v1"


def explain(plan: Path = typer.Argument(..., metavar="PLAN", help="A plan file written by `baige-plan plan --out`.",
                                        callback=plan_file),
            catalog: list[str] = CatalogOpt,
            svg: Path = typer.Option(None, "--svg", metavar="FILE", help="Also draw the plan into this .svg file: "
                                     "pipeline schedule, placement, memory per stage (needs the optional plot "
                                     "extra: pip install 'baige-plan[plot]') [default: no picture]."),
            png: Path = typer.Option(None, "--png", metavar="FILE", help="The same picture as a .png file (needs the "
                                     "plot extra too: pip install 'baige-plan[plot]') [default: no picture]."),
            fmt: Fmt = typer.Option(Fmt.table, "--format", help=FORMAT_HELP)) -> None:
    """Per-stage breakdown, memory by kind against capacity, the bottleneck, and the runners-up."""
    from baige_plan.io.plans import estimate_plan_full, read_plan
    from baige_plan.io.serialize import estimate_dict
    from baige_plan.present.render_plans import explain_tables, print_tables, runners_table

    prog = progress_line(f"explain: re-estimating {plan}")     # on stderr after a second; never with --quiet
    try:
        doc = read_plan(plan)
        e, model, cluster, job, pspec = estimate_plan_full(doc, str(plan))
    except InputError as ex:
        prog.close()
        fail_input(ex)
    stages = [{"index": st.index, "layers": st.layers, "time_s": st.time_s, "compute_s": st.compute_s,
               "tp_s": st.tp_s, "cp_s": st.cp_s, "ep_s": st.ep_s, "pp_s": st.pp_s, "memory_gib": st.memory_gib}
              for st in e.stages]
    if not cluster.is_heterogeneous and e.strategy.vpp > 1:   # layers per model chunk (specs/strategy.py)
        from baige_plan.errors import SpecError
        from baige_plan.specs.strategy import chunk_layers
        try:
            for x, c in zip(stages, chunk_layers(e.strategy, model.layers), strict=True):
                x["chunks"] = c
        except SpecError:
            pass
    view = dict(doc, estimate=estimate_dict(e, _band(e, model, job)))
    title = f"{model.name} on {cluster.name} (global batch {job.global_batch}, seq {job.seq_len}, {job.precision})"
    try:
        if svg is not None or png is not None:
            from baige_plan.present.pictures import write_plan_pictures
            prog.update(f"explain: drawing {', '.join(str(p) for p in (svg, png) if p is not None)}")
            try:
                write_plan_pictures(doc, e, cluster, title, svg=svg, png=png)
            except InputError as ex:
                fail_input(ex)
        runners = (doc.get("search") or {}).get("runners_up") or []
        pipelines, hetero = doc.get("pipelines"), None
        if cluster.is_heterogeneous and pspec is not None:
            from baige_plan.io.hetero_plans import hetero_pipelines_doc
            from baige_plan.io.plan_doc import hetero_estimate_dict
            from baige_plan.search.hetero import standalone_throughputs
            # the plan as written, as `evaluate --plan` re-estimates it (io/plans.evaluate_plan_file): heterogeneous
            # efficiency, shapes and bridge traffic recomputed, never the numbers stored in a (hand-edited) file
            prog.update("explain: searching each chip group alone (heterogeneous efficiency)")
            frac = float((doc.get("search") or {}).get("max_memory_frac", 1.0))
            from baige_plan.io.plan_doc import matmul_precisions
            hetero = hetero_estimate_dict(e, pspec, standalone_throughputs(model, cluster, job, frac),
                                          band=_band(e, model, job), matmul=matmul_precisions(pspec, cluster, job))
            pipelines = hetero_pipelines_doc(pspec, e)
    finally:
        prog.close()
    est = hetero if hetero is not None else view["estimate"]
    summary = _sentence(view["estimate"], runners)
    if fmt is not Fmt.table:
        from baige_plan.io.plans import dumps
        from baige_plan.io.serialize import rnd
        rows = [dict(x, layers=list(x["layers"]), **({"chunks": list(x["chunks"])} if "chunks" in x else {}))
                for x in stages]
        out = {"schema": EXPLAIN_SCHEMA, "file": str(plan), "title": title, "estimate": est, "stages": rnd(rows),
               "pipelines": pipelines, "runners_up": runners, "summary": summary}
        typer.echo(dumps(out, fmt.value), nl=False)
        return
    tables = explain_tables(view, stages, title)
    if runners:
        tables.append(runners_table(view, runners))
    if hetero is not None:
        from baige_plan.present.render_plans import hetero_tables
        tables = hetero_tables(dict(doc, estimate=hetero, pipelines=pipelines), title) + tables[1:]
    print_tables(tables)
    from baige_plan.present.render import print_text
    print_text(summary)         # wrapped at the tables' width


def _band(e, model, job):
    """The estimate's step_time_band_s, or None when the band table cannot be read."""
    from baige_plan.io.bands import estimate_band
    try:
        return estimate_band(e, model, job)
    except (InputError, OSError):
        return None


def _sentence(est: dict, runners: list[dict]) -> str:
    out = f"Bottleneck: {est['bottleneck']}."
    t = est["step_time_s"]
    faster = [r for r in runners if r["step_time_s"] < t * (1 - 1e-6)]
    ties = [r for r in runners if t * (1 - 1e-6) <= r["step_time_s"] <= t * (1 + 1e-6)]
    slower = [r for r in runners if r["step_time_s"] > t * (1 + 1e-6)]
    if faster:   # `plan` shows ties (overlapping step-time bands) simpler first: search/ranking.py
        r = min(faster, key=lambda x: x["step_time_s"])
        out += (f" {len(faster)} runner-up(s) predict a shorter step (the fastest {1 - r['step_time_s'] / t:.2%}, "
                f"{r['step_time_s']:.4g} s) within the uncertainty band: this plan is the simpler of a tie.")
    if ties:
        out += f" {len(ties)} runner-up(s) predict the same step time (equivalent settings; ties go to the lower tuple)."
    if slower:
        r = min(slower, key=lambda x: x["step_time_s"])
        out += (f" The best slower runner-up is {r['step_time_s'] / t - 1:.2%} slower ({r['step_time_s']:.4g} s vs "
                f"{t:.4g} s); its bottleneck: {r['bottleneck']}.")
    return out
