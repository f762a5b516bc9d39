"""`baige-plan plan`: search the strategy space for the fastest plans that fit."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from baige_plan.cli.common import (
    ATTENTION_HELP,
    FORMAT_HELP,
    MAX_MEMORY_FRAC,
    PRECISION_HELP,
    Attention,
    CatalogOpt,
    Fmt,
    Precision,
    Recompute,
    RuntimeOpt,
    domain_notes,
    err,
    fail_input,
    note,
    progress_line,
    write_atomic,
)
from baige_plan.cli.matmul_opts import MatmulOpt, apply_fp32_matmul
from baige_plan.cli.profile_opts import ProfileOpt, apply_profiles
from baige_plan.cli.runtime_opts import check_pins_runtime, resolve_runtime
from baige_plan.errors import InputError, SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec

RUNNERS_UP = 4   # runners-up stored in a plan file for `explain`


class Objective(str, Enum):
    throughput = "throughput"   # fastest step (today's ranking)
    time = "time"               # time to train --tokens: the same ranking on a given cluster, reported
    cost = "cost"               # money to train --tokens: devices used x price x hours (cost/money.py)


def plan(
    model: str = typer.Argument(..., metavar="MODEL", help="Built-in model name, model YAML, or Hugging Face "
                                "config.json."),
    cluster: str = typer.Argument(..., metavar="CLUSTER", help="Built-in topology, topology YAML, or "
                                  "CHIP:NODESxDEVICES[+CHIP:NODESxDEVICES...]."),
    global_batch: int = typer.Option(None, "--global-batch", help="Sequences per optimizer step [default: one per "
                                     "device]."),
    seq_len: int = typer.Option(None, "--seq-len", help="Sequence length [default: the model's]."),
    precision: Precision = typer.Option(Precision.bf16, "--precision", help=PRECISION_HELP),
    top: int = typer.Option(1, "--top", min=1, help="How many plans to print."),
    out: Path = typer.Option(None, "--out", metavar="FILE", help="Write the best plan here (.yaml/.yml, or .json) "
                             "[default: no file]."),
    pick: int = typer.Option(1, "--pick", min=1, metavar="N", help="With --out: write the N-th plan shown (N <= "
                             "--top), e.g. a simpler one of a tie, instead of the first [default: 1]."),
    fmt: Fmt = typer.Option(Fmt.table, "--format", help=FORMAT_HELP),
    time_limit: float = typer.Option(None, "--time-limit", metavar="SECONDS", help="Stop the search after this "
                                     "many seconds (reports FEASIBLE and the optimality gap) [default: no limit]."),
    max_tp: int = typer.Option(None, "--max-tp", help="Largest tensor parallel size to try (TP stays within a "
                               "node) [default: devices per node]."),
    max_pp: int = typer.Option(None, "--max-pp", help="Largest pipeline parallel size (stages) to try [default: "
                               "the model's layers]."),
    max_cp: int = typer.Option(None, "--max-cp", help="Largest context parallel size to try [default: no cap]."),
    max_micro_batch: int = typer.Option(16, "--max-micro-batch", help="Largest micro-batch (sequences) to try."),
    max_memory_frac: float = typer.Option(MAX_MEMORY_FRAC, "--max-memory-frac", help="Fraction of device memory a plan may use."),
    objective: Objective = typer.Option(Objective.throughput, "--objective",
                                        help="throughput (fastest step), time (to train --tokens) or cost (USD to "
                                        "train --tokens: devices used x price per device-hour x hours; idle "
                                        "devices are not paid)."),
    tokens: float = typer.Option(None, "--tokens", help="Tokens to train: report time and cost to train them "
                                 "(needed by --objective time|cost), e.g. 3e11 [default: not reported]."),
    price: list[str] = typer.Option(None, "--price", metavar="CHIP=USD", help="USD per device-hour of a chip id "
                                    "or a group name, repeatable; overrides the topology's and the chip file's "
                                    "price [default: the topology's, else the chip file's]."),
    runtime: str | None = RuntimeOpt,
    tp: int = typer.Option(None, "--tp", help="Pin tensor parallel size [default: searched]."),
    pp: int = typer.Option(None, "--pp", help="Pin pipeline parallel size [default: searched]."),
    dp: int = typer.Option(None, "--dp", help="Pin data parallel size [default: searched]."),
    cp: int = typer.Option(None, "--cp", help="Pin context parallel size [default: searched]."),
    ep: int = typer.Option(None, "--ep", help="Pin expert parallel size (MoE models) [default: searched]."),
    etp: int = typer.Option(None, "--etp", help="Pin expert tensor parallel size (MoE models) [default: searched]."),
    zero: int = typer.Option(None, "--zero", min=0, max=3, help="Pin the ZeRO stage (0-3; 1 = distributed "
                             "optimizer) [default: searched]."),
    micro_batch: int = typer.Option(None, "--micro-batch", help="Pin the micro-batch (sequences) [default: "
                                    "searched]."),
    vpp: int = typer.Option(None, "--vpp", help="Pin model chunks per device (interleaved 1F1B; 1 = none) "
                            "[default: searched]."),
    first_stage_layers: int = typer.Option(None, "--first-stage-layers",
                                           help="Pin the first stage's transformer layers (uneven split) [default: "
                                           "searched]."),
    last_stage_layers: int = typer.Option(None, "--last-stage-layers",
                                          help="Pin the last stage's transformer layers (uneven split) [default: "
                                          "searched]."),
    account_for_embedding: bool = typer.Option(None, "--account-for-embedding/--no-account-for-embedding",
                                               help="Pin: count the embedding as a pipeline layer (Megatron) "
                                               "[default: searched].", show_default=False),
    account_for_loss: bool = typer.Option(None, "--account-for-loss/--no-account-for-loss",
                                          help="Pin: count the output layer and loss as a pipeline layer (Megatron) "
                                          "[default: searched].", show_default=False),
    recompute: Recompute = typer.Option(None, "--recompute", help="Pin activation recomputation: none, selective "
                                        "or full [default: search selective and full]."),
    sequence_parallel: bool = typer.Option(None, "--sequence-parallel/--no-sequence-parallel",
                                           help="Pin sequence parallelism [default: on when tp > 1]."),
    attention: Attention = typer.Option(Attention.flash, "--attention", help=ATTENTION_HELP),
    moe_a2a_overlap: bool = typer.Option(None, "--moe-a2a-overlap/--no-moe-a2a-overlap",
                                         help="Pin Megatron-core's EP all-to-all overlap (MoE, megatron and flagscale: "
                                         "--overlap-moe-expert-parallel-comm) [default: searched where it runs].",
                                         show_default=False),
    tp_pp_dp_mapping: bool = typer.Option(None, "--tp-pp-dp-mapping/--no-tp-pp-dp-mapping",
                                          help="Pin Megatron's rank order tp-cp-ep-pp-dp (--use-tp-pp-dp-mapping: "
                                          "a replica's pipeline stages are neighbours) or the default tp-cp-ep-dp-pp "
                                          "[default: both searched where they differ: pp > 1 and dp > 1].",
                                          show_default=False),
    exclude: list[str] = typer.Option(None, "--exclude", metavar="NODES", help="Nodes not to use (broken or "
                                      "reserved): GROUP:INDEX or GROUP:FIRST-LAST, as in a plan's placement and "
                                      "`replan --drop`; comma- or space-separated, repeatable [default: none]."),
    catalog: list[str] = CatalogOpt,
    profile: list[Path] = ProfileOpt,
    fp32_matmul: list[str] = MatmulOpt,
    batch_tolerance: float = typer.Option(None, "--batch-tolerance", metavar="PCT",
                                          help="Clusters of several groups: also try global batches within PCT "
                                          "percent of --global-batch that split over replicas using whole groups, "
                                          "and keep the one with the most tokens/s; the plan states the batch it "
                                          "runs [default: the batch as given].", show_default=False),
) -> None:
    """Find the fastest parallel plans that fit. Exits 1 naming the binding constraint when none fits.
    On one chip group, plans may use fewer nodes than the cluster has when that is faster (cheaper with
    --objective cost) or the only way (search/partial.py); the idle devices are reported, with why."""
    from baige_plan.io.plans import chip_docs_from_catalog, dumps, format_for, plan_doc, plans_doc
    from baige_plan.present.render_plans import print_tables, ranking_tables
    from baige_plan.search.partial import parse_exclude, search_partial, why_none
    from baige_plan.search.ranking import TIE_POOL
    from baige_plan.search.space import Bounds, Pins

    try:
        cat = Catalog.create(catalog or [])
        m = cat.model(model)
        cl, bridged = cat.cluster(cluster)
        if bridged:
            note("shorthand mixes chip families: added a default cpu-forwarding bridge")
        domain_notes(cl)
        if global_batch is None:
            global_batch = cl.devices
            note(f"--global-batch not given: using one sequence per device = {global_batch}")
        job = JobSpec(global_batch=global_batch, seq_len=seq_len or m.seq_len, precision=precision.value)
        cl = apply_profiles(cl, profile, m, job)
        cl = apply_fp32_matmul(cl, fp32_matmul)   # per-group fp32 matmul engine (issue 18)
        # --objective / --tokens / --price (issue 12, cost/money.py)
        from baige_plan.cost import money
        if objective is not Objective.throughput and tokens is None:
            raise InputError("--objective", objective.value, "needs --tokens N (the tokens to train)")
        if pick > top:
            raise InputError("--pick", str(pick), f"must be at most --top ({top}): it picks one of the plans shown")
        if pick > 1 and out is None:
            raise InputError("--pick", str(pick), "needs --out FILE (it chooses the plan the file holds)")
        price_over = money.parse_price_options(price)
        money.check_price_keys(cl, price_over)
        prices = money.prices(cl, price_over)
        if objective is Objective.cost:
            money.require_prices(cl, prices)
        rt_name = resolve_runtime(runtime, cl.is_heterogeneous)
        why = runtimes.get(rt_name).model_refusal(m)    # a model feature the runtime does not build (MLA, ...)
        if why:
            raise SpecError("--runtime", why)
        excluded = parse_exclude(exclude, cl)   # {group: node indices}; InputError (exit 2) on an unknown node
        if (first_stage_layers or last_stage_layers) and (account_for_embedding or account_for_loss):
            raise SpecError("--account-for-embedding", "cannot be combined with --first-stage-layers or "
                            "--last-stage-layers (megatron-core refuses both: transformer_config.py)")
        check_pins_runtime(rt_name, job, zero=zero, vpp=vpp, cp=cp, ep=ep, etp=etp, pp=pp,
                           recompute=recompute.value if recompute else None, sequence_parallel=sequence_parallel, tp=tp,
                           uneven=bool(first_stage_layers or last_stage_layers) or None,
                           account=bool(account_for_embedding or account_for_loss) or None)
        if moe_a2a_overlap:
            _check_a2a_pin(m, rt_name, ep, pp, vpp, recompute.value if recompute else None)
        if cl.is_heterogeneous:
            # every option applies to every pipeline shape, or is refused: replicas differ per shape (--dp),
            # and the heterogeneous runtime runs no cp/ep/vpp across chip groups (specs/runtimes/flagscale.py)
            refused = {k: v for k, v in (("--dp", dp), ("--cp", cp if cp != 1 else None),
                                          ("--ep", ep if ep != 1 else None), ("--etp", etp if etp != 1 else None),
                                          ("--vpp", vpp if vpp != 1 else None),
                                          ("--first-stage-layers", first_stage_layers),
                                          ("--last-stage-layers", last_stage_layers),
                                          ("--account-for-embedding", account_for_embedding or None),
                                          ("--account-for-loss", account_for_loss or None),
                                          ("--moe-a2a-overlap", moe_a2a_overlap or None),
                                          ("--tp-pp-dp-mapping", tp_pp_dp_mapping or None)) if v is not None}
            if refused:
                raise InputError("plan", ", ".join(refused), "on a cluster of several groups each pipeline shape "
                                 "has its own replicas, and the heterogeneous runtime runs no cp, ep or vpp; pin "
                                 "--tp, --pp, --micro-batch, --zero, --recompute, --sequence-parallel, or cap with "
                                 "--max-tp, --max-pp, --max-micro-batch")
            from baige_plan.cli.plan_hetero import plan_hetero
            from baige_plan.search.hetero_templates import Limits
            lim = Limits(max_tp=max_tp, max_pp=max_pp, max_micro_batch=max_micro_batch, tp=tp, pp=pp,
                         micro_batch=micro_batch, zero=zero, recompute=recompute.value if recompute else None,
                         sequence_parallel=sequence_parallel, cp=cp, max_cp=max_cp, ep=ep, etp=etp, vpp=vpp,
                         attention=attention.value)
            from baige_plan.search.partial import without
            avail = without(cl, excluded) if excluded else cl   # a whole group excluded: exit 2, naming it
            plan_hetero(cat, m, avail, job, micro_batch=micro_batch, zero=zero, recompute=recompute,
                        sequence_parallel=sequence_parallel, attention=attention.value,
                        max_memory_frac=max_memory_frac, time_limit=time_limit, out=out, fmt=fmt, runtime=rt_name,
                        lim=lim, objective=objective.value, tokens=tokens, prices=prices, whole=cl,
                        excluded=excluded, batch_tolerance=batch_tolerance, top=top, pick=pick)
            return
        bounds = Bounds(max_tp=max_tp, max_pp=max_pp, max_cp=max_cp, max_micro_batch=max_micro_batch,
                        max_memory_frac=max_memory_frac, runtime=rt_name)
        pins = Pins(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, zero=zero, micro_batch=micro_batch, vpp=vpp,
                    recompute=recompute.value if recompute else None, sequence_parallel=sequence_parallel,
                    attention=attention.value, first_stage_layers=first_stage_layers,
                    last_stage_layers=last_stage_layers, account_for_embedding=account_for_embedding,
                    account_for_loss=account_for_loss, moe_a2a_overlap=moe_a2a_overlap,
                    tp_pp_dp_mapping=tp_pp_dp_mapping)
        if len(excluded.get(cl.groups[0].name, ())) >= cl.groups[0].nodes:   # SPEC §3: no feasible plan, exit 1
            err(f"no feasible plan: --exclude leaves no node of the cluster (all {cl.groups[0].nodes} nodes of group "
                f"{cl.groups[0].name!r} excluded)")
            raise typer.Exit(1)
        progress = progress_line()      # on stderr after a second; never with --quiet
        try:
            # enough plans for --top distinct rows, the tie pool and the runners-up (search/ranking.py)
            pr, rows = _search_distinct(max(top, TIE_POOL, 1 + RUNNERS_UP), lambda n: search_partial(
                m, cl, job, bounds, pins, top=n, time_limit_s=time_limit, progress=progress,
                objective=objective.value, excluded=excluded.get(cl.groups[0].name, ())))
        finally:
            progress.close()
        res = pr.result
        chip_docs = chip_docs_from_catalog(cat, cl) if out and res.plans else {}
    except InputError as ex:
        fail_input(ex)
    except SpecError as ex:
        fail_input(ex, "plan")
    searched = [c.result for c in pr.counts if c.result is not None]
    note(f"runtime {rt_name}: searched {sum(r.candidates for r in searched):,} candidates "
         f"({sum(r.feasible for r in searched):,} fit in memory, {sum(r.evaluated for r in searched):,} fully estimated) "
         + (f"on {pr.counts[0].nodes} nodes" if len(pr.counts) == 1 else
            f"at node counts {', '.join(str(c.nodes) for c in pr.counts if not c.skipped)}"
            + "".join(f"; {c.nodes} skipped: {c.error}" for c in pr.counts if c.skipped))
         + f" in {pr.seconds:.2f} s: {res.status}" + (f", gap {res.gap:.2%}" if res.gap else ""))
    if not res.plans:
        why = why_none(pr)
        if why.startswith("memory:") and len(pr.cluster.groups) == 1:    # issue 19: say the smallest that fits
            from baige_plan.search.partial import smallest_fitting
            g = pr.cluster.groups[0]
            found = smallest_fitting(m, pr.cluster, job, bounds, pins)
            why += (f"; the smallest {g.chip.id} cluster that fits: {g.chip.id}:{found[0]}x{g.devices_per_node} "
                    f"({found[1]})" if found else
                    f"; no {g.chip.id} cluster of {g.devices_per_node}-device nodes up to the device limit fits")
        err(f"no feasible plan: {why}")
        raise typer.Exit(1)
    from baige_plan.io.serialize import Flow
    idle = [Flow(group=g, devices=n, why=why) for g, n, why in pr.idle]   # search/partial.py
    for x in idle if fmt is not Fmt.table else ():   # the table shows them under the ranking
        note(f"idle devices: {x['group']} {x['devices']}: {x['why']}")
    # the shown order: equal estimates as one row, ties simpler first; the nearest published recipe (issue 16)
    ranked, published = _present(rows, res.plans, m, job, pr.cluster, rt_name, max_memory_frac, attention.value)
    if pick > len(ranked):
        err(f"--pick {pick}: the search found {len(ranked)} distinct plan{'s' if len(ranked) > 1 else ''}")
        raise typer.Exit(1)
    first = ranked[pick - 1][1]     # the plan file holds the first plan shown (--pick: the N-th)
    if pr.cluster.groups[0].profile is not None:
        from baige_plan.cli.profile_opts import report_outside_profiles
        report_outside_profiles(pr.cluster, m, job, [(pr.cluster.groups[0].name, first.strategy)])
    if out is not None:
        from baige_plan.search.placement import placement
        with progress_line(f"writing {out}: placement of {cl.devices:,} devices"):
            s0, g0 = first.strategy, cl.groups[0]
            slots = placement(s0.tp, s0.cp, s0.dp, s0.pp, g0.name, g0.devices_per_node, nodes=pr.nodes_used,
                              tp_pp_dp=s0.tp_pp_dp_mapping)
            doc = plan_doc(m, cl, job, first, res, chip_docs, max_memory_frac,
                           [e for i, (_, e, _) in enumerate(ranked[:max(top, 1 + RUNNERS_UP)]) if i != pick - 1],
                           slots)
            if idle:
                doc["estimate"]["idle_devices"] = idle
            if tokens is not None:
                doc["estimate"]["training"] = _training(first, cl, job, tokens, prices, objective)
            try:
                write_atomic(out, dumps(doc, format_for(out)))
            except InputError as ex:
                fail_input(ex)
        note(f"wrote {out}" + (f" (plan {pick} of those shown)" if pick > 1 else ""))
    shown = tuple(e for _, e, _ in ranked[:top])
    from dataclasses import replace
    doc = plans_doc(replace(res, plans=shown), cl.groups[0].name, max_memory_frac, m, job)
    _mark(doc, ranked[:top], published, m, job)
    if idle:
        for d in doc["plans"]:
            d["idle_devices"] = idle
    if tokens is not None:   # the plans of one node count run on the same devices: cost ranks them as time does
        for e, d in zip(shown, doc["plans"], strict=True):
            d["training"] = _training(e, cl, job, tokens, prices, objective)
        from baige_plan.cost.money import summary_line, training_cost
        if objective is Objective.time:
            note("--objective time: on one chip group the fastest plan trains soonest, so it ranks as throughput "
                 "does; the time and cost to train are reported")
        elif objective is Objective.cost:
            note("--objective cost: node counts ranked by devices used x step time (idle devices are not paid), "
                 "the plans of a count by step time; the time and cost to train are reported")
        note(summary_line(training_cost(tokens, job.global_batch, job.seq_len, shown[0].step_time_s,
                                        {cl.groups[0].name: shown[0].devices}, {cl.groups[0].name: cl.devices},
                                        prices)))
    dtensor = _dtensor_moe_note(doc, m)
    if dtensor and fmt is not Fmt.table:   # the table prints it under the ranking
        note(dtensor)
    hidden = _hidden_fastest_note(ranked, top)
    if hidden and fmt is not Fmt.table:
        note(hidden)
    if fmt is Fmt.table:
        part = "" if pr.nodes == cl.groups[0].nodes else f", {pr.nodes} of its {cl.groups[0].nodes} nodes"
        title = (f"{m.name} on {cl.name}{part} (global batch {job.global_batch}, seq {job.seq_len}, {job.precision}): "
                 f"{len(shown)} best of {res.candidates:,}")
        notes = _notes(doc, _none_why(m, pr.cluster, job)) + ([dtensor] if dtensor else []) + \
            ([hidden] if hidden else [])
        tables: list = [ranking_tables(doc["plans"], title, idle, notes=notes)]
        if tokens is not None:
            from baige_plan.cli.whatif import training_table
            tables.append(training_table([d["training"] for d in doc["plans"]], tokens))
        print_tables(tables)
    else:
        if doc["published_recipe"] is None:
            from baige_plan.present.render_plans import recipe_line
            note(recipe_line(None, doc["plans"][0], _none_why(m, pr.cluster, job)))
        typer.echo(dumps(doc, fmt.value), nl=False)


def _search_distinct(need: int, run):
    """`run(n)` (search_partial for the n fastest plans) asked for enough plans to fill `need` distinct rows
    (search/ranking.py dedupe): twice as many, then 4x more while rows are missing and more plans exist.
    (PartialResult, rows); a row whose equivalents may lie past the n-th plan is left out."""
    from baige_plan.search.ranking import dedupe

    n = 2 * need
    while True:
        pr = run(n)
        plans = pr.result.plans
        rows = dedupe([e.step_time_s for e in plans], [e.peak_memory_gib for e in plans], [e.strategy for e in plans])
        every = len(plans) < n      # every plan that fits is here
        if not every and len(rows) > 1:
            rows = rows[:-1]
        if every or len(rows) >= need or pr.result.status != "OPTIMAL":
            return pr, rows
        n *= 4


def _bands_or_none(plans, m, job: JobSpec):
    """Each plan's step_time_band_s, or None when the band table cannot be read (then there are no ties)."""
    from baige_plan.io.bands import estimate_band, load_bands
    try:
        load_bands()
    except (InputError, OSError):
        return None
    return [estimate_band(e, m, job) for e in plans]


def _present(rows, plans, m, job: JobSpec, cluster, runtime: str, frac: float, attention: str):
    """([(Row, its estimate, Placed), ...] in the shown order, the nearest published recipe or None)."""
    from baige_plan.io.recipes import layouts, load_recipes, nearest
    from baige_plan.search.ranking import present_order

    reps = [plans[r.index] for r in rows]
    try:
        recipes = load_recipes()
    except (InputError, OSError) as ex:
        note(f"published recipes not read ({ex}): no recipe shown")
        recipes = ()
    order = present_order([e.step_time_s for e in reps], [e.strategy for e in reps], _bands_or_none(reps, m, job),
                          layouts(recipes, m, cluster))
    published = nearest(recipes, m, cluster, job, runtime, frac, attention)
    return [(rows[p.index], reps[p.index], p) for p in order], published


def _mark(doc: dict, ranked, published, m, job: JobSpec) -> None:
    """Add the shown order's marks to `plan`'s plans document: per plan `tie` (and `tie_group`), `equivalent`
    knobs; `ordering` (the rule) and `published_recipe` (null when none is near)."""
    from baige_plan.io.bands import estimate_band
    from baige_plan.io.recipes import published_doc
    from baige_plan.io.serialize import estimate_dict, strategy_dict
    from baige_plan.search.ranking import ORDER_RULE

    for d, (row, _, p) in zip(doc["plans"], ranked, strict=True):
        d["tie"] = p.tie
        if p.tie:
            d["tie_group"] = p.tie_group
        if row.equivalent:
            d["equivalent"] = row.equivalent_dict()
    doc["ordering"] = ORDER_RULE
    pub = None
    if published is not None:
        e = published.estimate
        try:
            band = estimate_band(e, m, job)
        except (InputError, OSError):
            band = None
        pub = published_doc(published, strategy_dict(published.strategy, job.global_batch), estimate_dict(e, band))
    doc["published_recipe"] = pub


def _check_a2a_pin(m, runtime: str, ep, pp, vpp, recompute) -> None:
    """Exit 2 for a --moe-a2a-overlap pin no plan can take (specs/strategy.py a2a_overlap_refusal), naming why and
    the pin that refuses it."""
    from baige_plan.specs.strategy import a2a_overlap_refusal

    why = a2a_overlap_refusal(model=m, runtime=runtime, ep=ep, pp=pp, vpp=vpp, recompute=recompute)
    if why:
        field, reason = why
        pinned = {"ep": f"--ep {ep}", "recompute": f"--recompute {recompute}", "vpp": f"--pp {pp} --vpp {vpp}"}
        raise SpecError("--moe-a2a-overlap", reason + (f" ({pinned[field]} pinned)" if field in pinned else ""))


def _hidden_fastest_note(ranked, top: int) -> str | None:
    """When the first plan shown is in a tie group (search/ranking.py: simpler first) whose fastest plan is not among
    the `top` shown, that plan, its predicted step and where it is in the order (--top / --pick reach it): a tie may
    hold plans well apart in predicted time when the bands are wide, and the user should see the fastest."""
    if not ranked or not ranked[0][2].tie:
        return None
    group = ranked[0][2].tie_group
    members = [(k, e) for k, (_row, e, p) in enumerate(ranked) if p.tie_group == group]
    k, fast = min(members, key=lambda x: (x[1].step_time_s, x[0]))
    if k < top:
        return None
    s, first = fast.strategy, ranked[0][1]
    lay = " ".join(f"{n} {getattr(s, n)}" for n in ("tp", "pp", "dp", "cp", "ep", "vpp") if getattr(s, n) != 1 or
                   n in ("tp", "pp", "dp"))
    return (f"~ the fastest plan of the first plan's tie ({lay}, zero {s.zero}, micro-batch {s.micro_batch}, "
            f"recompute {s.recompute}) is predicted {fast.step_time_s:.4g} s, "
            f"{1 - fast.step_time_s / first.step_time_s:.1%} less than the first shown: --top {k + 1} shows it, "
            f"--top {k + 1} --pick {k + 1} --out FILE writes it")


def _dtensor_moe_note(doc: dict, m) -> str | None:
    """What the estimates of torchtitan MoE plans with tensor parallelism leave out (docs/VALIDATION.md "Fine-grained
    MoE through torchtitan on 4x H200"), when any plan shown is one."""
    if m.moe is None or not any(d["strategy"].get("runtime") == "torchtitan" and d["strategy"]["tp"] > 1
                                and d["strategy"].get("execution", "eager") == "eager" for d in doc["plans"]):
        return None
    return ("!: torchtitan runs an MoE layer under tp > 1 through DTensor, whose host time (dispatch, redistribution) "
            "is not costed: at micro-batch 1 it set the pace, Qwen3-30B-A3B tp2 x dp2 ran 4.1-4.6x its estimate on "
            "4x H200, while OLMoE-1B-7B tp2 at micro-batch 8 was within 7 %")


def _notes(doc: dict, none_why: str) -> list[str]:
    """Lines under the ranking table: the tie rule (when there are ties) and the nearest published recipe."""
    from baige_plan.present.render_plans import recipe_line
    out = []
    if any(d.get("tie") for d in doc["plans"]):
        out.append("~ " + doc["ordering"])
    if any(d["strategy"].get("moe_a2a_overlap") or "moe_a2a_overlap" in (d.get("equivalent") or {})
           for d in doc["plans"]):
        out.append("+ov: the EP all-to-all overlapped with another micro-batch's compute (megatron-core "
                   "overlap_moe_expert_parallel_comm), costed with its measured contention; (+ov): on or off, equal")
    if any(d["strategy"].get("tp_pp_dp_mapping") or "tp_pp_dp_mapping" in (d.get("equivalent") or {})
           for d in doc["plans"]):
        out.append("^: Megatron's tp-pp-dp rank order (--use-tp-pp-dp-mapping): a replica's pipeline stages are "
                   "neighbours, data parallelism strides over replicas; (^): either order, equal")
    if any(d["strategy"].get("fsdp_shard") for d in doc["plans"]):
        out.append("3hN: hybrid sharding (HSDP): ZeRO-3 states sharded over groups of N data-parallel ranks (a node's), "
                   "the groups replicated and their gradient shards all-reduced across them")
    out.append(recipe_line(doc.get("published_recipe"), doc["plans"][0], none_why))
    return out


def _none_why(m, cluster, job: JobSpec) -> str:
    g = cluster.groups[0]
    return (f"no published run of {m.name}'s shape, or of a model within 2x its parameters, on {g.chip.family} chips "
            f"adapts to {cluster.devices} devices and global batch {job.global_batch}")


def _training(e, cl, job: JobSpec, tokens: float, prices, objective: Objective) -> dict:
    """The `training` key of a homogeneous plan: time and money to train `tokens` (cost/money.py)."""
    from baige_plan.cost.money import training_cost, training_dict
    from baige_plan.io.serialize import rnd

    g = cl.groups[0].name
    tc = training_cost(tokens, job.global_batch, job.seq_len, e.step_time_s, {g: e.devices}, {g: cl.devices}, prices)
    return training_dict(tc, objective.value, rnd)
