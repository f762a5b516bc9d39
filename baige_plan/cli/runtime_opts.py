"""Choosing the runtime from `--runtime` and refusing pins it cannot run (shared by plan and evaluate)."""

from __future__ import annotations

from baige_plan.cli.common import note
from baige_plan.errors import SpecError
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec


def _named(opt) -> str:
    """The canonical runtime name of a `--runtime` value (the Typer enum or its text)."""
    return runtimes.canonical(opt.value if hasattr(opt, "value") else str(opt))


def resolve_runtime(opt, heterogeneous: bool) -> str:
    """The runtime a plan targets: the one named, else the default (megatron; flagscale on clusters of
    several groups, since Megatron-LM cannot put pipeline stages on different chip types)."""
    if opt is not None:
        name = _named(opt)
        if name in runtimes.BACKTEST_ONLY:
            raise SpecError("--runtime", f"{name} is costed by evaluate and backtest only (no export to launch a "
                            "plan with); plan for torchtitan (PyTorch FSDP2) or megatron instead")
        rt = runtimes.get(name)
        if heterogeneous and not rt.heterogeneous:
            heteros = [n for n in runtimes.NAMES if runtimes.get(n).heterogeneous]
            raise SpecError("--runtime", f"{name} runs one chip group per job; this cluster has several: "
                            f"use a heterogeneous runtime ({', '.join(heteros)}) or plan one group's topology")
        return name
    name = runtimes.DEFAULT_HETEROGENEOUS if heterogeneous else runtimes.DEFAULT
    note(f"--runtime not given: planning for {name} ({runtimes.get(name).title})")
    return name


def default_sequence_parallel(opt) -> bool | None:
    """`--sequence-parallel` left unset, for a named runtime: on where it always runs SP with TP, off where it has
    none (megatron-local, torchtitan, ...), else None (StrategySpec's default: on when tp > 1)."""
    if opt is None:
        return None
    mode = runtimes.get(_named(opt)).sequence_parallel
    return {"always": True, "never": False}.get(mode)


def contract_defaults(opt, zero: int | None, recompute: str | None) -> tuple[int, str]:
    """`--zero` / `--recompute` as given, or the documented defaults (zero 1, recompute selective). A default the
    named runtime does not run is an error that says so and lists what it runs, rather than the runtime's refusal of
    a value the user never typed (torchtitan and FSDP runtimes: no ZeRO-1; paddle: no selective)."""
    z = 1 if zero is None else zero
    rc = "selective" if recompute is None else recompute
    if opt is not None:
        name = _named(opt)
        rt = runtimes.get(name)
        if zero is None and z not in rt.zero_stages:
            raise SpecError("--zero", f"not given, so the default 1 (distributed optimizer), which {name} does not run:"
                            f" pass one of its ZeRO stages {list(rt.zero_stages)}")
        if recompute is None and rc not in rt.recompute:
            raise SpecError("--recompute", f"not given, so the default 'selective', which {name} does not run: pass "
                            f"one of {list(rt.recompute)}")
    return z, rc


def check_pins_runtime(name: str, job: JobSpec, **pins) -> None:
    """Exit-2 error for pins the runtime can never run (its declared rules, RuntimeSpec.violation),
    naming the option, the value and the runtime."""
    rt = runtimes.get(name)
    v = rt.violation(precision=job.precision, **pins)
    if v is None and rt.export_precisions is not None and job.precision not in rt.export_precisions:
        v = "precision", (f"{name} plans are exported in {list(rt.export_precisions)}, not {job.precision} "
                          f"({name} {job.precision} is costed only to backtest published runs)")
    if v is not None:
        field, reason = v
        flag = {"sequence_parallel": "--no-sequence-parallel", "pp": "--pp",
                "account_for": "--account-for-embedding/--account-for-loss"}.get(field, "--" + field)
        raise SpecError(flag, reason)


def pick_runtime(s, model, job: JobSpec, opt):
    """The strategy as costed by a runtime (evaluate). Named runtime: it must run `s` (else exit 2 with
    its reason). None: the default if it runs `s`, else the first runtime that does (said on stderr);
    when none does, `s` is still estimated as the what-if of the runtime offering its ZeRO stage, and
    stderr says that no runtime runs it and why."""
    from baige_plan.specs.strategy import check_strategy

    check_strategy(s, model, job)
    if opt is not None:
        name = _named(opt)
        why = runtimes.get(name).refusal(s, model, job)
        if why:
            raise SpecError("--runtime", why)
        return s.with_(**runtimes.knobs(name))
    reasons = {}
    for name in (runtimes.DEFAULT,) + tuple(n for n in runtimes.NAMES if n != runtimes.DEFAULT):
        why = runtimes.get(name).refusal(s, model, job)
        if why is None:
            if name != runtimes.DEFAULT:
                note(f"--runtime not given: {runtimes.DEFAULT} cannot run this strategy "
                     f"({reasons[runtimes.DEFAULT]}); costed as {name} runs it")
            return s.with_(**runtimes.knobs(name))
        reasons[name] = why
    fallback = next((n for n in runtimes.NAMES if s.zero in runtimes.get(n).zero_stages), runtimes.DEFAULT)
    note("no runtime runs this strategy (" + "; ".join(reasons.values()) + f"); estimated as a what-if with "
         f"{fallback}'s execution semantics")
    return s.with_(**runtimes.knobs(fallback))
