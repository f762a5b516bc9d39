"""Score the cost model against measured runs: per-row predicted vs measured, and a summary."""

from __future__ import annotations

import statistics
from pathlib import Path

from baige_plan.cost.estimate import estimate
from baige_plan.errors import InputError, SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import RunCase, load_runs
from baige_plan.io.serialize import rnd


def _pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1])."""
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(round(q * len(v) + 0.5)) - 1))]


def backtest_case(c: RunCase) -> dict:
    try:
        e = estimate(c.model, c.cluster, c.job, c.strategy)
    except SpecError as ex:
        raise InputError(c.id, ex.field, ex.reason) from None
    allocated = e.peak_memory_gib - e.memory_gib["other"]
    row = {"id": c.id,
           "measured_step_time_s": c.measured_step_time_s,
           "predicted_step_time_s": e.step_time_s,
           "step_time_error": (e.step_time_s / c.measured_step_time_s - 1) if c.measured_step_time_s else None,
           "measured_peak_memory_gib": c.measured_peak_memory_gib,
           "predicted_peak_memory_gib": allocated,
           "memory_error": (allocated / c.measured_peak_memory_gib - 1) if c.measured_peak_memory_gib else None,
           "predicted_mfu": e.mfu,
           "strategy": (f"tp{c.strategy.tp} pp{c.strategy.pp} dp{c.strategy.dp} cp{c.strategy.cp} ep{c.strategy.ep} "
                        f"zero{c.strategy.zero} mb{c.strategy.micro_batch} vpp{c.strategy.vpp} "
                        f"{c.strategy.recompute}{' sp' if c.strategy.sequence_parallel else ''} {c.strategy.attention}"),
           "assumptions": list(c.assumptions)}
    if c.measured_states_gib is not None:
        mg = e.memory_gib
        row["measured_states_gib"] = c.measured_states_gib
        row["predicted_states_gib"] = mg["weights"] + mg["grads"] + mg["optimizer"]
    if c.measured_activations_gib is not None:
        row["measured_activations_gib"] = c.measured_activations_gib
        row["predicted_activations_gib"] = e.memory_gib["activations"]
    return row


def summarize(rows: list[dict]) -> dict:
    errs = [abs(r["step_time_error"]) for r in rows if r["step_time_error"] is not None]
    merrs = [abs(r["memory_error"]) for r in rows if r["memory_error"] is not None]
    out = {"rows": len(rows), "step_time_rows": len(errs)}
    if errs:
        out.update({"median_abs_step_time_error": statistics.median(errs), "p90_abs_step_time_error": _pct(errs, 0.9),
                    "max_abs_step_time_error": max(errs),
                    "mean_signed_step_time_error": statistics.fmean(
                        r["step_time_error"] for r in rows if r["step_time_error"] is not None)})
    if merrs:
        out.update({"memory_rows": len(merrs), "median_abs_memory_error": statistics.median(merrs),
                    "max_abs_memory_error": max(merrs)})
    return out


def backtest_file(path: str | Path, catalog: Catalog) -> dict:
    rows = [backtest_case(c) for c in load_runs(path, catalog)]
    return rnd({"rows": rows, "summary": summarize(rows)}, 5)
