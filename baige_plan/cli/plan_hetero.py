"""`baige-plan plan` on a cluster of several groups: the CP-SAT heterogeneous solver."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer

from baige_plan.cli.common import Fmt, Recompute, err, fail_input, note, progress_line, write_atomic
from baige_plan.errors import InputError, SpecError
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import StrategySpec
from baige_plan.specs.topology import ClusterSpec

# a bubble this large a share of the step gets a note on interleaving (issue 18): which runtime would run it
BUBBLE_NOTE = 0.10


def plan_hetero(cat, m: ModelSpec, cl: ClusterSpec, job: JobSpec, *, micro_batch: int | None, zero: int | None,
                recompute: Recompute | None, sequence_parallel: bool | None, attention: str, max_memory_frac: float,
                time_limit: float | None, out: Path | None, fmt: Fmt, runtime: str = "flagscale",
                lim=None, objective: str = "throughput", tokens: float | None = None, prices=None,
                whole: ClusterSpec | None = None, excluded: dict[str, list[int]] | None = None,
                batch_tolerance: float | None = None, top: int = 1, pick: int = 1) -> None:
    """`cl` is the cluster to plan on; with `--exclude`, `whole` is the cluster as given and `excluded` its nodes
    left out (search/partial.py without): the plan file keeps `whole`, its placement names the real nodes."""
    whole = whole or cl
    from baige_plan.io.hetero_plans import hetero_plan_doc, hetero_plans_doc
    from baige_plan.io.plans import chip_docs_from_catalog, dumps, format_for
    from baige_plan.present.render_plans import hetero_ranking_table, hetero_tables, print_tables
    from baige_plan.search.hetero import RUNNERS_UP, runs_on, solve

    base = StrategySpec(micro_batch=micro_batch or 1, zero=1 if zero is None else zero,
                        recompute=recompute.value if recompute else "selective",
                        sequence_parallel=True if sequence_parallel is None else sequence_parallel, attention=attention,
                        **runtimes.knobs(runtime))
    from baige_plan.search.hetero_templates import missing_figure
    lacking = {g.name: missing_figure(g, job, runtime) for g in cl.groups if not runs_on(g, job, runtime)}
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
            if pick > 1:
                raise InputError("--pick", str(pick), "--objective cost on a cluster of several groups finds one plan "
                                 "(the cheapest group subset's); pick among --objective throughput plans instead")
            if top > 1:
                note(f"--top {top}: --objective cost prints the cheapest plan only on a cluster of several groups")
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
                          recompute_pinned=recompute is not None, lim=lim, alternatives=top - 1,
                          progress=lambda stage, done, total: prog.update(f"{stage}: {done:,} of {total:,}"))
            if batch_tolerance:   # --batch-tolerance: nearby batches that split over whole groups (issue 18)
                from baige_plan.search.batch_tolerance import candidate_batches
                asked = job.global_batch
                for b2 in candidate_batches(asked, cl, batch_tolerance):
                    j2 = replace(job, global_batch=b2)
                    try:
                        r2 = solve(m, cl, j2, base, memory_frac=max_memory_frac, time_limit_s=time_limit,
                                   recompute_pinned=recompute is not None, lim=lim, alternatives=top - 1)
                    except SpecError:
                        continue
                    better = r2.estimate.fits and r2.estimate.tokens_per_s > r.estimate.tokens_per_s * (1 + 1e-9)
                    note(f"--batch-tolerance {batch_tolerance:g}%: global batch {b2} ({(b2 - asked) / asked:+.2%}): "
                         f"{r2.estimate.tokens_per_s:,.0f} tokens/s on {sum(r2.pipelines.devices_by_group().values())}"
                         f" devices" + (" (better)" if better else ""))
                    if better:
                        r, job = r2, j2
                if job.global_batch != asked:
                    note(f"runs global batch {job.global_batch} instead of {asked} ({(job.global_batch - asked) / asked:+.2%}"
                         f", within --batch-tolerance {batch_tolerance:g}%): it splits over replicas that use whole "
                         "groups; Megatron/FlagScale run one micro-batch count for every replica of a pipeline, so "
                         "uneven counts per replica are not an option")
        chip_docs = chip_docs_from_catalog(cat, whole) if out else {}
    except InputError as ex:
        fail_input(ex)
    except SpecError as ex:
        err(f"no feasible plan: {ex.field}: {ex.reason}")
        raise typer.Exit(1) from None
    gone: tuple = ()
    if excluded:   # the excluded nodes are idle too, and say why
        from baige_plan.search.partial import node_list
        gone = tuple((g.name, len(excluded[g.name]) * g.devices_per_node,
                      f"{len(excluded[g.name])} node{'s' if len(excluded[g.name]) > 1 else ''} "
                      f"({node_list(excluded[g.name])}) excluded by --exclude")
                     for g in whole.groups if excluded.get(g.name))
        r = replace(r, idle=gone + tuple(r.idle))
    if top > 1 + len(r.alternatives) and objective != "cost":
        n = 1 + len(r.alternatives)
        from baige_plan.search.hetero import POLISH_WITHIN
        note(f"--top {top}: the search estimated {n} distinct plan{'s' if n > 1 else ''} exactly (those whose "
             f"lower bound is within {POLISH_WITHIN - 1:.0%} of the best step, and each chip group's best plan "
             "alone); all are shown")
    fr = r           # the plan the file holds: the first shown, or --pick's
    if pick > 1:
        if pick > 1 + len(r.alternatives):
            n = 1 + len(r.alternatives)
            err(f"--pick {pick}: the search found {n} distinct plan{'s' if n > 1 else ''}")
            raise typer.Exit(1)
        a = r.alternatives[pick - 2]
        others = [(r.label, r.estimate)] + [(x.label, x.estimate) for x in r.alternatives if x is not a]
        fr = replace(r, pipelines=a.pipelines, estimate=a.estimate, idle=gone + a.idle, label=a.label,
                     runners_up=tuple(others[:RUNNERS_UP]), alternatives=())
    if any(g.profile is not None for g in cl.groups):
        from baige_plan.cli.profile_opts import report_outside_profiles
        from baige_plan.cost.hetero import stage_strategy_cached
        report_outside_profiles(cl, m, job, [(st.group, stage_strategy_cached(fr.pipelines, sh, st, None))
                                             for sh in fr.pipelines.shapes for st in sh.stages])
    how = "each by an exact layer sweep" if not r.cp_sat else f"{r.cp_sat} with CP-SAT, the others by an exact layer sweep"
    note(f"solved {r.templates} pipeline templates ({how}) in {r.seconds:.2f} s: {r.status}"
         + (f", gap {r.gap:.2%}" if r.gap else ""))
    from baige_plan.search.hetero_templates import EXHAUSTIVE_ORDER_GROUPS, FEW_ORDER_GROUPS
    n_run = sum(1 for g in cl.groups if runs_on(g, job, runtime))
    if n_run > EXHAUSTIVE_ORDER_GROUPS:
        ends = "every first and last group" if n_run <= FEW_ORDER_GROUPS else "each group first and each group last"
        note(f"{n_run} chip groups: a pipeline spanning them was tried with {ends}, the others between them by "
             "device memory (largest first), and a bounded set of tp choices (every order and tp combination is "
             f"tried up to {EXHAUSTIVE_ORDER_GROUPS} groups; search/hetero_templates.py)")
    bubble = r.estimate.breakdown_s.get("pp_bubble", 0.0) / r.estimate.step_time_s
    if bubble >= BUBBLE_NOTE and len(r.pipelines.devices_by_group()) > 1 and runtime != "flagscale":
        note(f"the pipeline bubble is {bubble:.0%} of the step; interleaving (vpp) would divide it, but {runtime} "
             "does not interleave pipelines that span chip groups")
    elif bubble >= BUBBLE_NOTE and len(r.pipelines.devices_by_group()) > 1:
        note(f"the pipeline bubble is {bubble:.0%} of the step; interleaving (vpp) would divide it, but {runtime}'s "
             "heterogeneous mode refuses virtual pipelines (FlagOpen/FlagScale@da4935ec flagscale/train/arguments.py: "
             "with enable_hetero, num_layers_per_virtual_pipeline_stage must be None, 'virtual pipeline not support "
             "now!'); Megatron-LM interleaves (--num-layers-per-virtual-pipeline-stage) on one chip group only: no "
             "runtime planned here interleaves across chip groups")
    training = training_file = None
    if tokens is not None:   # time and money to train --tokens (cost/money.py)
        from baige_plan.cost.money import summary_line, training_cost, training_dict
        from baige_plan.io.serialize import rnd

        def cost_of(x):
            return training_cost(tokens, job.global_batch, job.seq_len, x.estimate.step_time_s,
                                 x.pipelines.devices_by_group(), {g.name: g.devices for g in whole.groups}, prices)
        tc = cost_of(r)
        training = training_file = training_dict(tc, objective, rnd)
        note(summary_line(tc))
        if fr is not r:   # --pick: the file's plan trains at its own step time
            training_file = training_dict(cost_of(fr), objective, rnd)
    if out is not None:
        try:
            from baige_plan.search.hetero_placement import hetero_placement
            with progress_line(f"writing {out}"):
                slots = hetero_placement(fr.pipelines, cl)
                if excluded:   # node k of a group's remaining nodes is its k-th node not excluded
                    usable = {g.name: [i for i in range(g.nodes) if i not in set(excluded.get(g.name, ()))]
                              for g in whole.groups}
                    slots = [replace(x, node=usable[x.group][x.node]) for x in slots]
                fdoc = hetero_plan_doc(m, whole, job, fr, chip_docs, max_memory_frac, slots)
                if training is not None:
                    fdoc["estimate"]["training"] = training_file
                write_atomic(out, dumps(fdoc, format_for(out)))
        except InputError as ex:
            fail_input(ex)
        note(f"wrote {out}" + (f" (plan {pick} of those shown: {fr.label})" if pick > 1 else ""))
    doc = hetero_plans_doc(r, max_memory_frac, m, job, cl)
    if batch_tolerance:
        doc["search"]["batch_tolerance"] = {"percent": batch_tolerance, "asked": asked, "global_batch": job.global_batch}
    if training is not None:
        doc["plans"][0]["training"] = training
    if fmt is Fmt.table:
        title = f"{m.name} on {cl.name} (global batch {job.global_batch}, seq {job.seq_len}, {job.precision})"
        best = dict(doc["plans"][0])
        tables = hetero_tables(best, title)
        if len(doc["plans"]) > 1:     # --top K: the plans in order, the first detailed above
            tables.append(hetero_ranking_table(doc["plans"]))
        if training is not None:
            from baige_plan.cli.whatif import training_table
            tables = [*tables, training_table([training], tokens)]
        print_tables(tables)
    else:
        typer.echo(dumps(doc, fmt.value), nl=False)
