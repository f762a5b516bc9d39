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
