"""`baige-plan whatif`: which mix of chips from a priced pool trains N tokens by a deadline at the lowest
cost, or within a budget at the earliest finish (issue 12; the grid and the ranking: search/whatif.py,
time and money: cost/money.py)."""

from __future__ import annotations

import typer
from rich.table import Table

from baige_plan.cli.common import (
    ATTENTION_HELP,
    FORMAT_HELP,
    MAX_MEMORY_FRAC,
    PRECISION_HELP,
    Attention,
    CatalogOpt,
    Fmt,
    Precision,
    err,
    fail_input,
    note,
    progress_line,
)
from baige_plan.errors import InputError, SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.specs.job import JobSpec

SCHEMA = "baige-plan/whatif/v1"
PAYS_FOR = "every device of a mix is rented and paid for the hours it trains, even those its plan leaves idle"


def whatif(
    model: str = typer.Argument(..., metavar="MODEL", help="Built-in model name, model YAML, or Hugging Face "
                                "config.json."),
    pool: list[str] = typer.Option(None, "--pool", metavar="CHIP:MAX_DEVICES[:USD]", help="Repeatable: a chip you "
                                   "can rent, at most MAX_DEVICES of it, at USD per device-hour [default: USD from "
                                   "the chip file]."),
    global_batch: int = typer.Option(..., "--global-batch", help="Sequences per optimizer step."),
    tokens: float = typer.Option(..., "--tokens", help="Tokens to train, e.g. 3e11."),
    deadline: float = typer.Option(None, "--deadline", metavar="HOURS", help="Finish within this many hours, at "
                                   "the lowest cost [default: none; give this or --budget]."),
    budget: float = typer.Option(None, "--budget", metavar="USD", help="Spend at most this many USD, finishing "
                                 "earliest [default: none; give this or --deadline]."),
    seq_len: int = typer.Option(None, "--seq-len", help="Sequence length [default: the model's]."),
    precision: Precision = typer.Option(Precision.bf16, "--precision", help=PRECISION_HELP),
    max_memory_frac: float = typer.Option(MAX_MEMORY_FRAC, "--max-memory-frac", help="Fraction of device memory a plan may use."),
    time_limit: float = typer.Option(10.0, "--time-limit", help="Seconds each option's search may take."),
    attention: Attention = typer.Option(Attention.flash, "--attention", help=ATTENTION_HELP),
    top: int = typer.Option(20, "--top", help="Rows of the table (json: all)."),
    fmt: Fmt = typer.Option(Fmt.table, "--format", help=FORMAT_HELP),
    catalog: list[str] = CatalogOpt,
) -> None:
    """Rank mixes of a chip pool (each chip alone at power-of-two node counts and its maximum; two-chip mixes
    at the three largest of each) by cost to meet --deadline, or by finish time within --budget. Exit 1 when
    no mix meets it (the closest is named)."""
    from baige_plan.search.whatif import parse_pool
    from baige_plan.search.whatif import whatif as run

    if (deadline is None) == (budget is None):
        err("whatif: give exactly one of --deadline HOURS or --budget USD")
        raise typer.Exit(2)
    try:
        cat = Catalog.create(catalog or [])
        m = cat.model(model)
        job = JobSpec(global_batch=global_batch, seq_len=seq_len or m.seq_len, precision=precision.value)
        entries = parse_pool(pool, cat.chip)
    except (InputError, SpecError) as ex:
        fail_input(ex, "whatif")
    for e in entries:
        note(f"pool {e.chip.id}: up to {e.max_devices} devices in nodes of {e.devices_per_node}, "
             f"${e.usd_per_device_hour:g} per device-hour ({e.price_origin})")

    prog = progress_line("whatif: planning the options of the pool")   # on stderr after a second; not with --quiet

    def progress(i, n, o):
        prog.update(f"whatif: planned {i} of {n} options (last: {o.mix})")
        if o.estimate is None:
            note(f"[{i}/{n}] {o.mix}: no plan ({o.why})")

    try:
        with prog:
            w = run(cat, m, job, entries, tokens=tokens, deadline_h=deadline, budget_usd=budget,
                    memory_frac=max_memory_frac, time_limit_s=time_limit, attention=attention.value,
                    progress=progress)
    except (InputError, SpecError) as ex:
        fail_input(ex, "whatif")
    n_opts = len(w.ranked) + len(w.infeasible)
    note(f"whatif: planned {n_opts} options ({len(w.ranked)} fit) in {w.seconds:.1f} s; {PAYS_FOR}")
    what = (f"finish within {deadline:g} h at the lowest cost" if deadline is not None
            else f"spend at most ${budget:,.0f}, finishing earliest")
    if fmt is Fmt.table:
        title = (f"{m.name}: {tokens:,.0f} tokens, global batch {job.global_batch}, seq {job.seq_len}, "
                 f"{job.precision}; {what}")
        from baige_plan.present.render import print_tables
        print_tables([_table(w, title, top)])
    else:
        from baige_plan.io.plans import dumps
        typer.echo(dumps(_doc(w, m.name, job, tokens, deadline, budget), fmt.value), nl=False)
    if not w.ranked:
        err(f"no mix fits in memory ({len(w.infeasible)} tried); first: {w.infeasible[0].mix}: {w.infeasible[0].why}"
            if w.infeasible else "no option to try")
        raise typer.Exit(1)
    if w.best is None:
        c = w.closest
        lim = f"the deadline of {deadline:g} h" if deadline is not None else f"the budget of ${budget:,.2f}"
        err(f"no mix meets {lim}; closest: {c.mix} ({c.devices} devices) in {c.hours:,.2f} h for ${c.usd:,.2f}")
        raise typer.Exit(1)
    b = w.best
    note(f"best: {b.mix} ({b.devices} devices): {b.hours:,.2f} h, ${b.usd:,.2f}")


def _table(w, title: str, top: int) -> Table:
    t = Table(title=title, title_justify="left")
    for h in ("#", "mix (CHIP:NODESxDEVICES)", "devices", "tokens/s", "hours", "USD", "meets"):
        t.add_column(h, justify="left" if h.startswith(("mix", "meets")) else "right", no_wrap=h.startswith("mix"))
    for i, o in enumerate(w.ranked[:top]):
        # devices used / rented when the plan leaves some idle (they are paid all the same)
        used = f"{o.devices_used}/{o.devices}" if o.devices_used != o.devices else str(o.devices)
        t.add_row(str(i + 1), o.mix, used, f"{o.estimate.tokens_per_s:,.0f}", f"{o.hours:,.2f}", f"{o.usd:,.2f}",
                  "yes" if o.meets else "no")
    return t


def _doc(w, model_name: str, job: JobSpec, tokens: float, deadline, budget) -> dict:
    from baige_plan.io.serialize import rnd

    def opt(o):
        parts = [{"chip": e.chip.id, "nodes": n, "devices_per_node": e.devices_per_node,
                  "usd_per_device_hour": rnd(e.usd_per_device_hour), "price_origin": e.price_origin}
                 for e, n in o.parts]
        d = {"mix": o.mix, "kind": o.kind, "groups": parts, "devices": o.devices}
        if o.estimate is None:
            d["why"] = o.why
            return d
        d.update({"devices_used": o.devices_used, "step_time_s": rnd(o.estimate.step_time_s),
                  "tokens_per_s": rnd(o.estimate.tokens_per_s), "mfu": rnd(o.estimate.mfu), "hours": rnd(o.hours),
                  "usd_per_hour": rnd(o.usd_per_hour), "usd": rnd(o.usd), "meets": o.meets, "solver": o.solver,
                  "plan": o.detail})
        return d

    return {"schema": SCHEMA, "model": model_name,
            "job": {"global_batch": job.global_batch, "seq_len": job.seq_len, "precision": job.precision},
            "tokens": rnd(tokens),
            "constraint": {"deadline_hours": rnd(deadline)} if deadline is not None else {"budget_usd": rnd(budget)},
            "pays_for": PAYS_FOR,
            "grid": "each chip alone at 1, 2, 4, ... nodes and its most nodes; each pair of chips at the three "
                    "largest node counts of each (search/whatif.py)",
            "best": opt(w.best) if w.best is not None else None,
            "options": [opt(o) for o in w.ranked],
            "infeasible": [opt(o) for o in w.infeasible],
            "seconds": round(w.seconds, 3)}


def training_table(rows: list[dict], tokens: float) -> Table:
    """`plan --tokens N`: time and money to train N tokens for each plan shown (the `training` dicts)."""
    from baige_plan.cost.money import fmt_usd

    t = Table(title=f"to train {tokens:,.0f} tokens (USD: devices used x price x hours; idle devices not paid)",
              title_justify="left")
    for h in ("#", "steps", "hours", "days", "devices paid", "USD/h", "USD", "whole cluster USD"):
        t.add_column(h, justify="right")
    for i, r in enumerate(rows):
        t.add_row(str(i + 1), f"{r['steps']:,.0f}", f"{r['hours']:,.2f}", f"{r['days']:,.2f}", str(r["devices_paid"]),
                  fmt_usd(r["usd_per_hour"]), fmt_usd(r["usd"]), fmt_usd(r["cluster_usd"]))
    return t
