"""`--profile FILE` (repeatable) on `plan` and `evaluate`: measured per-layer profiles attached to the
cluster's groups whose chip they were measured on (specs/profile.py, io/profiles.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer

from baige_plan.cli.common import note
from baige_plan.errors import InputError
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.topology import ClusterSpec

ProfileOpt = typer.Option(None, "--profile", metavar="FILE", help="Measured per-layer profile "
                          "(baige-plan/profile/v1, written by `baige-plan profile --model`); repeatable. Groups of "
                          "its chip use its forward/backward, activation and optimizer numbers where it has the "
                          "strategy's (tp, micro-batch, recompute), the analytical model elsewhere [default: none: "
                          "analytical].")


def apply_profiles(cluster: ClusterSpec, files: list[Path] | None, model: ModelSpec, job: JobSpec) -> ClusterSpec:
    """The cluster with each profile attached to the groups of its chip. Raises InputError (file, field,
    reason) when a profile's model shape, sequence length or precision is not the job's, when it matches
    no group, or when two profiles claim one group. Says on stderr which groups use measured values."""
    if not files:
        return cluster
    from baige_plan.io.profiles import load_profile

    groups = list(cluster.groups)
    claimed: dict[str, str] = {}
    for f in files:
        p = load_profile(f)
        src = str(f)
        bad = p.model.mismatch(model)
        if bad is not None:
            raise InputError(src, *bad)
        if p.seq_len != job.seq_len:
            raise InputError(src, "seq_len", f"profile measured seq_len={p.seq_len}, the job has --seq-len "
                             f"{job.seq_len}")
        if p.precision != job.precision:
            raise InputError(src, "precision", f"profile measured precision {p.precision}, the job has --precision "
                             f"{job.precision}")
        hits = [i for i, g in enumerate(groups) if p.fits_chip(g.chip.id, g.chip_ref)]
        if not hits:
            chips = ", ".join(sorted({g.chip.id for g in groups}))
            raise InputError(src, "chip", f"profile measured on {p.chip!r} matches no group of {cluster.name!r} "
                             f"(chips: {chips})")
        if p.model.name != model.name:
            note(f"{src}: profile of model {p.model.name!r} used for {model.name!r} (same shape)")
        for i in hits:
            g = groups[i]
            if g.name in claimed:
                raise InputError(src, "chip", f"group {g.name!r} already uses profile {claimed[g.name]}")
            claimed[g.name] = src
            groups[i] = replace(g, profile=p)
            note(f"group {g.name} ({g.chip.id}) uses measured profile {p.name!r} ({p.provenance.method}) for "
                 f"{p.coverage()}, {p.attention} attention: per-layer compute, activation memory and optimizer "
                 "step; communication and all other strategies stay analytical")
    return replace(cluster, groups=tuple(groups))


def report_sources(sources: dict[str, str]) -> None:
    """One stderr line naming the measured parts of an estimate (nothing when all are analytical)."""
    measured = {k: v for k, v in sources.items() if v != "analytical"}
    if measured:
        note("measured values used: " + ", ".join(f"{k} = {v}" for k, v in measured.items()))


def report_outside_profiles(cluster: ClusterSpec, model: ModelSpec, job: JobSpec, stages) -> None:
    """A note for each profiled group whose stages in the chosen plan run where the group's profile does not apply
    (another cp, attention or execution than measured, or a (tp, micro-batch, recompute) it does not cover): their
    per-layer compute is the analytical model's, while the search compared them with measured neighbours, so the
    optimiser may have walked to where the two disagree. Names the nearest measured point (same tp and recompute,
    nearest micro-batch; else any) and its measured / analytical layer time (cost/measured.py compare_entry).
    `stages`: (group name, StrategySpec) of each stage of the plan."""
    from math import log2

    from baige_plan.cost.estimate import engine_precision
    from baige_plan.cost.measured import analytical_entry

    seen = set()
    groups = {g.name: g for g in cluster.groups}
    for name, s in stages:
        g = groups.get(name)
        p = g.profile if g is not None else None
        key = (name, s.tp, s.cp, s.micro_batch, s.recompute, s.attention, s.execution)
        if p is None or key in seen or p.entry_for(model, job.seq_len, job.precision, s) is not None:
            continue
        seen.add(key)
        why = [f"cp {s.cp} (measured at cp 1)"] if s.cp != 1 else []
        if s.attention != p.attention:
            why.append(f"{s.attention} attention (measured: {p.attention})")
        if p.execution is not None and s.execution != p.execution:
            why.append(f"{s.execution} execution (measured: {p.execution})")
        if p.entry(s.tp, s.micro_batch, s.recompute, bool(s.sequence_parallel)) is None:
            why.append(f"tp {s.tp} x micro-batch {s.micro_batch} x recompute {s.recompute} (measured: {p.coverage()})")
        same = [e for e in p.entries if e.tp == s.tp and e.recompute == s.recompute] or list(p.entries)
        near = min(same, key=lambda e: (abs(log2(e.micro_batch) - log2(s.micro_batch)), abs(e.tp - s.tp),
                                        e.micro_batch, e.tp, e.recompute))
        # the analytical layer as the estimate costs it there: this plan's runtime, attention and engine precision
        # (an fp32 job's TF32 where the runtime's stack runs it), at the measured point's tp, micro-batch, recompute
        at = replace(s, tp=near.tp, micro_batch=near.micro_batch, recompute=near.recompute, cp=1,
                     attention=p.attention, sequence_parallel=near.sequence_parallel and near.tp > 1,
                     **({"execution": p.execution} if p.execution else {}))
        a = analytical_entry(model, g.chip, job.seq_len, engine_precision(g, job.precision, s.runtime), at).layer
        m = near.layer
        ratio = (m.forward_s + m.backward_s + m.recompute_s) / (a.forward_s + a.backward_s + a.recompute_s) \
            if m.has_times and a.forward_s + a.backward_s + a.recompute_s > 0 else None
        note(f"the plan's {name} stages run outside profile {p.name!r}: {'; '.join(why)}; their per-layer compute is "
             "analytical" + (f", and at the nearest measured point (tp {near.tp}, micro-batch {near.micro_batch}, "
                            f"recompute {near.recompute}) the profile's layer takes {ratio:.2f}x the analytical one: the "
                            "search may have preferred this plan for that difference" if ratio else ""))
