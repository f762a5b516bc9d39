"""`baige-plan plan`: search the strategy space for the fastest plans that fit."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from baige_plan.cli.common import (
    Attention,
    CatalogOpt,
    Fmt,
    Precision,
    Recompute,
    Runtime,
    RuntimeOpt,
    err,
    fail_input,
    note,
    write_atomic,
)
from baige_plan.cli.profile_opts import ProfileOpt, apply_profiles
from baige_plan.cli.runtime_opts import check_pins_runtime, resolve_runtime
from baige_plan.errors import InputError, SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.specs.job import JobSpec

RUNNERS_UP = 4   # runners-up stored in a plan file for `explain`


class Objective(str, Enum):
    throughput = "throughput"


def plan(
    model: str = typer.Argument(..., help="Built-in model name, model YAML, or Hugging Face config.json."),
    cluster: str = typer.Argument(..., help="Built-in topology, topology YAML, or CHIP:NODESxDEVICES."),
    global_batch: int = typer.Option(None, "--global-batch", help="Sequences per optimizer step [default: devices]."),
    seq_len: int = typer.Option(None, "--seq-len", help="Sequence length [default: the model's]."),
    precision: Precision = typer.Option(Precision.bf16, "--precision"),
    top: int = typer.Option(1, "--top", min=1, help="How many plans to print."),
    out: Path = typer.Option(None, "--out", help="Write the best plan here (.yaml/.yml, or .json)."),
    fmt: Fmt = typer.Option(Fmt.table, "--format"),
    time_limit: float = typer.Option(None, "--time-limit", help="Stop the search after this many seconds "
                                     "(reports FEASIBLE and the optimality gap)."),
    max_tp: int = typer.Option(None, "--max-tp", help="[default: devices per node]"),
    max_pp: int = typer.Option(None, "--max-pp", help="[default: layers]"),
    max_cp: int = typer.Option(None, "--max-cp"),
    max_micro_batch: int = typer.Option(16, "--max-micro-batch"),
    max_memory_frac: float = typer.Option(0.9, "--max-memory-frac", help="Fraction of device memory a plan may use."),
    objective: Objective = typer.Option(Objective.throughput, "--objective"),
    runtime: Runtime = RuntimeOpt,
    tp: int = typer.Option(None, "--tp", help="Pin tensor parallel size."),
    pp: int = typer.Option(None, "--pp"),
    dp: int = typer.Option(None, "--dp"),
    cp: int = typer.Option(None, "--cp"),
    ep: int = typer.Option(None, "--ep"),
    etp: int = typer.Option(None, "--etp"),
    zero: int = typer.Option(None, "--zero", min=0, max=3),
    micro_batch: int = typer.Option(None, "--micro-batch"),
    vpp: int = typer.Option(None, "--vpp"),
    recompute: Recompute = typer.Option(None, "--recompute"),
    sequence_parallel: bool = typer.Option(None, "--sequence-parallel/--no-sequence-parallel"),
    attention: Attention = typer.Option(Attention.flash, "--attention"),
    catalog: list[str] = CatalogOpt,
    profile: list[Path] = ProfileOpt,
) -> None:
    """Find the fastest parallel plans that fit. Exits 1 naming the binding constraint when none fits."""
    from baige_plan.io.plans import chip_docs_from_catalog, dumps, format_for, plan_doc, plans_doc
    from baige_plan.io.render_plans import Progress, print_tables, ranking_table
    from baige_plan.search.solver import search
    from baige_plan.search.space import Bounds, Pins

    try:
        cat = Catalog.create(catalog or [])
        m = cat.model(model)
        cl, bridged = cat.cluster(cluster)
        if bridged:
            note("shorthand mixes chip families: added a default cpu-forwarding bridge")
        if global_batch is None:
            global_batch = cl.devices
            note(f"--global-batch not given: using one sequence per device = {global_batch}")
        job = JobSpec(global_batch=global_batch, seq_len=seq_len or m.seq_len, precision=precision.value)
        cl = apply_profiles(cl, profile, m, job)
        rt_name = resolve_runtime(runtime, cl.is_heterogeneous)
        check_pins_runtime(rt_name, job, zero=zero, vpp=vpp, cp=cp, ep=ep, etp=etp, pp=pp,
                           recompute=recompute.value if recompute else None, sequence_parallel=sequence_parallel, tp=tp)
        if cl.is_heterogeneous:
            # every option applies to every pipeline shape, or is refused: replicas differ per shape (--dp),
            # and the heterogeneous runtime runs no cp/ep/vpp across chip groups (runtimes/flagscale.py)
            refused = {k: v for k, v in (("--dp", dp), ("--cp", cp if cp != 1 else None),
                                          ("--ep", ep if ep != 1 else None), ("--etp", etp if etp != 1 else None),
                                          ("--vpp", vpp if vpp != 1 else None)) if v is not None}
            if refused:
                raise InputError("plan", ", ".join(refused), "on a cluster of several groups each pipeline shape "
                                 "has its own replicas, and the heterogeneous runtime runs no cp, ep or vpp; pin "
                                 "--tp, --pp, --micro-batch, --zero, --recompute, --sequence-parallel, or cap with "
                                 "--max-tp, --max-pp, --max-micro-batch")
            from baige_plan.cli.plan_hetero import plan_hetero
            from baige_plan.search.hetero_templates import Limits
            lim = Limits(max_tp=max_tp, max_pp=max_pp, max_micro_batch=max_micro_batch, tp=tp, pp=pp,
                         micro_batch=micro_batch, zero=zero, recompute=recompute.value if recompute else None,
                         sequence_parallel=sequence_parallel)
            plan_hetero(cat, m, cl, job, micro_batch=micro_batch, zero=zero, recompute=recompute,
                        sequence_parallel=sequence_parallel, attention=attention.value,
                        max_memory_frac=max_memory_frac, time_limit=time_limit, out=out, fmt=fmt, runtime=rt_name,
                        lim=lim)
            return
        bounds = Bounds(max_tp=max_tp, max_pp=max_pp, max_cp=max_cp, max_micro_batch=max_micro_batch,
                        max_memory_frac=max_memory_frac, runtime=rt_name)
        pins = Pins(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, zero=zero, micro_batch=micro_batch, vpp=vpp,
                    recompute=recompute.value if recompute else None, sequence_parallel=sequence_parallel,
                    attention=attention.value)
        progress = Progress()
        try:
            res = search(m, cl, job, bounds, pins, top=max(top, 1 + RUNNERS_UP) if out else top,
                         time_limit_s=time_limit, progress=progress)
        finally:
            progress.close()
        chip_docs = chip_docs_from_catalog(cat, cl) if out and res.plans else {}
    except InputError as ex:
        fail_input(ex)
    except SpecError as ex:
        fail_input(ex, "plan")
    note(f"runtime {rt_name}: searched {res.candidates:,} candidates ({res.feasible:,} fit in memory, {res.evaluated:,} fully "
         f"estimated) in {res.seconds:.2f} s: {res.status}"
         + (f", gap {res.gap:.2%}" if res.gap else ""))
    if not res.plans:
        err(f"no feasible plan: {res.binding}")
        raise typer.Exit(1)
    if out is not None:
        from baige_plan.search.placement import placement
        s0, g0 = res.plans[0].strategy, cl.groups[0]
        slots = placement(s0.tp, s0.cp, s0.dp, s0.pp, g0.name, g0.devices_per_node)
        doc = plan_doc(m, cl, job, res.plans[0], res, chip_docs, max_memory_frac, list(res.plans[1:]), slots)
        try:
            write_atomic(out, dumps(doc, format_for(out)))
        except InputError as ex:
            fail_input(ex)
        note(f"wrote {out}")
    shown = res.plans[:top]
    from dataclasses import replace
    doc = plans_doc(replace(res, plans=shown), cl.groups[0].name, max_memory_frac)
    if fmt is Fmt.table:
        title = (f"{m.name} on {cl.name} (global batch {job.global_batch}, seq {job.seq_len}, {job.precision}): "
                 f"{len(shown)} best of {res.candidates:,}")
        print_tables([ranking_table(doc["plans"], title)])
    else:
        typer.echo(dumps(doc, fmt.value), nl=False)
