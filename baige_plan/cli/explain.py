"""`baige-plan explain PLAN`: why this plan, where its time and memory go, how the runners-up compare."""

from __future__ import annotations

from pathlib import Path

import typer

from baige_plan.cli.common import CatalogOpt, fail_input
from baige_plan.errors import InputError


def explain(plan: Path = typer.Argument(..., help="A plan file written by `baige-plan plan --out`."),
            catalog: list[str] = CatalogOpt) -> None:
    """Per-stage breakdown, memory by kind against capacity, the bottleneck, and the runners-up."""
    from baige_plan.io.plans import estimate_plan, read_plan
    from baige_plan.io.render_plans import explain_tables, print_tables, runners_table
    from baige_plan.io.serialize import estimate_dict

    try:
        doc = read_plan(plan)
        e, model, cluster, job = estimate_plan(doc, str(plan))
    except InputError as ex:
        fail_input(ex)
    stages = [{"index": st.index, "layers": st.layers, "time_s": st.time_s, "compute_s": st.compute_s,
               "tp_s": st.tp_s, "cp_s": st.cp_s, "ep_s": st.ep_s, "pp_s": st.pp_s, "memory_gib": st.memory_gib}
              for st in e.stages]
    view = dict(doc, estimate=estimate_dict(e))
    title = f"{model.name} on {cluster.name} (global batch {job.global_batch}, seq {job.seq_len}, {job.precision})"
    tables = explain_tables(view, stages, title)
    runners = (doc.get("search") or {}).get("runners_up") or []
    if runners:
        tables.append(runners_table(view, runners))
    if cluster.is_heterogeneous:
        from baige_plan.io.render_plans import hetero_tables
        # the stored estimate carries the heterogeneous efficiency, shapes and bridge traffic
        tables = hetero_tables(dict(doc, estimate={**doc["estimate"], **view["estimate"]}), title) + tables[1:]
    print_tables(tables)
    typer.echo(_sentence(view["estimate"], runners))


def _sentence(est: dict, runners: list[dict]) -> str:
    out = f"Bottleneck: {est['bottleneck']}."
    t = est["step_time_s"]
    ties = [r for r in runners if r["step_time_s"] <= t * (1 + 1e-6)]
    slower = [r for r in runners if r["step_time_s"] > t * (1 + 1e-6)]
    if ties:
        out += f" {len(ties)} runner-up(s) predict the same step time (equivalent settings; ties go to the lower tuple)."
    if slower:
        r = slower[0]
        out += (f" The best slower runner-up is {r['step_time_s'] / t - 1:.2%} slower ({r['step_time_s']:.4g} s vs "
                f"{t:.4g} s); its bottleneck: {r['bottleneck']}.")
    return out
