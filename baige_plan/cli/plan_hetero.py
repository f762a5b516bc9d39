"""`baige-plan plan` on a cluster of several groups: the CP-SAT heterogeneous solver."""

from __future__ import annotations

from pathlib import Path

import typer

from baige_plan import runtimes
from baige_plan.cli.common import Fmt, Recompute, err, fail_input, note, progress_line, write_atomic
from baige_plan.errors import InputError, SpecError
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import StrategySpec
from baige_plan.specs.topology import ClusterSpec


def plan_hetero(cat, m: ModelSpec, cl: ClusterSpec, job: JobSpec, *, micro_batch: int | None, zero: int | None,
                recompute: Recompute | None, sequence_parallel: bool | None, attention: str, max_memory_frac: float,
                time_limit: float | None, out: Path | None, fmt: Fmt, runtime: str = "flagscale",
                lim=None, objective: str = "throughput", tokens: float | None = None, prices=None,
                whole: ClusterSpec | None = None, excluded: dict[str, list[int]] | None = None) -> None:
    """`cl` is the cluster to plan on; with `--exclude`, `whole` is the cluster as given and `excluded` its nodes
    left out (search/partial.py without): the plan file keeps `whole`, its placement names the real nodes."""
    whole = whole or cl
    from baige_plan.io.hetero_plans import hetero_plan_doc, hetero_plans_doc
    from baige_plan.io.plans import chip_docs_from_catalog, dumps, format_for
    from baige_plan.io.render_plans import hetero_tables, print_tables
    from baige_plan.search.hetero import runs_on, solve

    base = StrategySpec(micro_batch=micro_batch or 1, zero=1 if zero is None else zero,
                        recompute=recompute.value if recompute else "selective",
                        sequence_parallel=True if sequence_parallel is None else sequence_parallel, attention=attention,
                        **runtimes.knobs(runtime))
    from baige_plan.search.hetero_templates import missing_figure
    lacking = {g.name: missing_figure(g, job) for g in cl.groups if not runs_on(g, job)}
    for g in cl.groups:
        if g.name in lacking:
            note(f"group {g.name!r} ({g.chip.id}) is left out: {lacking[g.name]} is unknown, and the cost model "
                 f"needs it for {job.precision}; supply a measured chip file")
    if len(lacking) == len(cl.groups):   # bad input (exit 2), not an infeasible search
        err(f"cluster: no group can run {job.precision}: "
            + "; ".join(f"group {n!r}: {f} unknown" for n, f in lacking.items()))
        raise typer.Exit(2)
    try:
        if objective == "cost":   # the cheapest group subset (search/whatif.py); idle devices are not paid
            from baige_plan.search.whatif import cheapest_subset
            with progress_line("--objective cost: planning each subset of the chip groups"):
                r, tried = cheapest_subset(m, cl, job, base, memory_frac=max_memory_frac,
                                           time_limit_s=time_limit, recompute_pinned=recompute is not None,
                                           lim=lim, price=prices, tokens=tokens)
            for o in tried:
                note(f"--objective cost: groups {'+'.join(o.groups)}: " + (
                    f"{o.cost.hours:.4g} h, ${o.cost.usd:,.2f} on {o.cost.devices_paid} devices" if o.cost
                    else f"no plan ({o.why})"))
        else:
            with progress_line("solving") as prog:    # on stderr after a second; never with --quiet
                r = solve(m, cl, job, base, memory_frac=max_memory_frac, time_limit_s=time_limit,
                          recompute_pinned=recompute is not None, lim=lim,
                          progress=lambda stage, done, total: prog.update(f"{stage}: {done:,} of {total:,}"))
        chip_docs = chip_docs_from_catalog(cat, whole) if out else {}
    except InputError as ex:
        fail_input(ex)
    except SpecError as ex:
        err(f"no feasible plan: {ex.field}: {ex.reason}")
        raise typer.Exit(1) from None
    if excluded:   # the excluded nodes are idle too, and say why
        from dataclasses import replace

        from baige_plan.search.partial import node_list
        gone = tuple((g.name, len(excluded[g.name]) * g.devices_per_node,
                      f"{len(excluded[g.name])} node{'s' if len(excluded[g.name]) > 1 else ''} "
                      f"({node_list(excluded[g.name])}) excluded by --exclude")
                     for g in whole.groups if excluded.get(g.name))
        r = replace(r, idle=gone + tuple(r.idle))
    note(f"solved {r.templates} pipeline templates with CP-SAT in {r.seconds:.2f} s: {r.status}"
         + (f", gap {r.gap:.2%}" if r.gap else ""))
    training = None
    if tokens is not None:   # time and money to train --tokens (cost/money.py)
        from baige_plan.cost.money import summary_line, training_cost, training_dict
        from baige_plan.io.serialize import rnd
        tc = training_cost(tokens, job.global_batch, job.seq_len, r.estimate.step_time_s, r.pipelines.devices_by_group(),
                           {g.name: g.devices for g in whole.groups}, prices)
        training = training_dict(tc, objective, rnd)
        note(summary_line(tc))
    if out is not None:
        try:
            from baige_plan.search.hetero_placement import hetero_placement
            with progress_line(f"writing {out}"):
                slots = hetero_placement(r.pipelines, cl)
                if excluded:   # node k of a group's remaining nodes is its k-th node not excluded
                    from dataclasses import replace
                    usable = {g.name: [i for i in range(g.nodes) if i not in set(excluded.get(g.name, ()))]
                              for g in whole.groups}
                    slots = [replace(x, node=usable[x.group][x.node]) for x in slots]
                fdoc = hetero_plan_doc(m, whole, job, r, chip_docs, max_memory_frac, slots)
                if training is not None:
                    fdoc["estimate"]["training"] = training
                write_atomic(out, dumps(fdoc, format_for(out)))
        except InputError as ex:
            fail_input(ex)
        note(f"wrote {out}")
    doc = hetero_plans_doc(r, max_memory_frac, m, job)
    if training is not None:
        doc["plans"][0]["training"] = training
    if fmt is Fmt.table:
        title = f"{m.name} on {cl.name} (global batch {job.global_batch}, seq {job.seq_len}, {job.precision})"
        best = dict(doc["plans"][0])
        tables = hetero_tables(best, title)
        if training is not None:
            from baige_plan.cli.whatif import training_table
            tables = [*tables, training_table([training], tokens)]
        print_tables(tables)
    else:
        typer.echo(dumps(doc, fmt.value), nl=False)
