"""Score the cost model against measured runs: per-row predicted vs measured, and a summary.

The summary of a set (one runs file) gives the step-time and memory errors (median, p90, max of
|predicted / measured - 1|), which runs were evaluated (a run the cost model refuses, and a run it
predicts not to fit, is counted and listed), and a ranking check: inside each group of runs of one
model on one cluster at one precision and sequence length, does the predicted order of the runs match
the measured one (Kendall tau, discordant pairs), and how much slower than the measured best is the
run the model would have picked (regret). Runs are ranked by step time per sequence of the global
batch (step time / global batch), so that runs with different global batches compare by throughput.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path

from baige_plan.cost.estimate import estimate
from baige_plan.errors import InputError, SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import RunCase, load_runs
from baige_plan.io.serialize import rnd


def _pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]): the ceil(q*n)-th smallest value."""
    v = sorted(values)
    k = math.ceil(q * len(v) - 1e-9)
    return v[min(len(v) - 1, max(0, k - 1))]


def rank_group_key(c: RunCase) -> str:
    """Runs compared with each other by the ranking check: one model, one cluster, one precision."""
    return f"{c.model.name} | {c.cluster.name} | {c.job.precision} | seq {c.job.seq_len}"


def backtest_case(c: RunCase) -> dict:
    try:
        e = estimate(c.model, c.cluster, c.job, c.strategy)
    except SpecError as ex:
        raise InputError(c.id, ex.field, ex.reason) from None
    peak_stage = max(e.stages, key=lambda st: st.memory_gib)
    allocated = peak_stage.allocated_gib
    # the caching allocator's reserve at the peak, all of it (cost/memory.py slack_bytes: allocated x
    # allocator_slack), as torch.cuda.max_memory_reserved reports it
    reserved = allocated + peak_stage.slack_gib
    predicted = reserved if c.measured_memory_kind == "reserved" else allocated
    row = {"id": c.id,
           "measured_step_time_s": c.measured_step_time_s,
           "predicted_step_time_s": e.step_time_s,
           "step_time_error": (e.step_time_s / c.measured_step_time_s - 1) if c.measured_step_time_s else None,
           "measured_peak_memory_gib": c.measured_peak_memory_gib,
           "predicted_peak_memory_gib": predicted,
           "memory_kind": c.measured_memory_kind,   # allocated | reserved: what the measured peak is
           "memory_error": (predicted / c.measured_peak_memory_gib - 1) if c.measured_peak_memory_gib else None,
           "predicted_mfu": e.mfu,
           "strategy": (f"tp{c.strategy.tp} pp{c.strategy.pp} dp{c.strategy.dp} cp{c.strategy.cp} ep{c.strategy.ep} "
                        f"zero{c.strategy.zero} mb{c.strategy.micro_batch} vpp{c.strategy.vpp} "
                        f"{c.strategy.recompute}{' sp' if c.strategy.sequence_parallel else ''} {c.strategy.attention}"),
           "assumptions": list(c.assumptions),
           "predicted_fits": bool(e.fits),
           "global_batch_seqs": c.job.global_batch,
           "rank_group": rank_group_key(c)}
    if c.measured_reserved_gib is not None:
        row["measured_reserved_memory_gib"] = c.measured_reserved_gib
        row["predicted_reserved_memory_gib"] = reserved
        row["reserved_memory_error"] = reserved / c.measured_reserved_gib - 1
    if c.measured_states_gib is not None:
        mg = e.memory_gib
        row["measured_states_gib"] = c.measured_states_gib
        row["predicted_states_gib"] = mg["weights"] + mg["grads"] + mg["optimizer"]
    if c.measured_activations_gib is not None:
        row["measured_activations_gib"] = c.measured_activations_gib
        row["predicted_activations_gib"] = e.memory_gib["activations"]
    return row


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def rank_check(rows: list[dict]) -> dict:
    """Kendall tau and regret of the predicted order inside each rank group of >= 2 runs.

    Runs are ordered by step time per sequence (step time / global_batch_seqs; rows without a
    global batch by step time). A pair is concordant when prediction and measurement order it the
    same way, discordant when they disagree, tied when either is equal; tau = (C - D) / pairs (tau-a).
    The predicted best is the run with the least predicted time (ties: the first by id); its regret
    is its measured time / the least measured time - 1 (0 when the model picks the measured best)."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r.get("measured_step_time_s") and r.get("predicted_step_time_s") and r.get("rank_group"):
            groups[r["rank_group"]].append(r)
    out = []
    for key in sorted(groups):
        rs = sorted(groups[key], key=lambda r: str(r["id"]))
        if len(rs) < 2:
            continue
        per = [max(1, r.get("global_batch_seqs") or 1) for r in rs]
        meas = [r["measured_step_time_s"] / b for r, b in zip(rs, per, strict=True)]
        pred = [r["predicted_step_time_s"] / b for r, b in zip(rs, per, strict=True)]
        conc = disc = tied = 0
        discordant = []
        for i in range(len(rs)):
            for j in range(i + 1, len(rs)):
                dm, dp = _sign(meas[i] - meas[j]), _sign(pred[i] - pred[j])
                if dm == 0 or dp == 0:
                    tied += 1
                elif dm == dp:
                    conc += 1
                else:
                    disc += 1
                    discordant.append([rs[i]["id"], rs[j]["id"]])
        pairs = len(rs) * (len(rs) - 1) // 2
        ib = min(range(len(rs)), key=lambda k: pred[k])      # first minimum: ids sorted
        im = min(range(len(rs)), key=lambda k: meas[k])
        out.append({"group": key, "runs": len(rs), "ids": [r["id"] for r in rs], "pairs": pairs,
                    "concordant": conc, "discordant": disc, "tied": tied, "kendall_tau": (conc - disc) / pairs,
                    "discordant_pairs": discordant,
                    "predicted_best": rs[ib]["id"], "measured_best": rs[im]["id"],
                    "regret": meas[ib] / meas[im] - 1})
    res: dict = {"groups": out, "group_count": len(out)}
    if out:
        pairs = sum(g["pairs"] for g in out)
        res.update({"pairs": pairs, "discordant": sum(g["discordant"] for g in out),
                    "concordant": sum(g["concordant"] for g in out),
                    "kendall_tau": (sum(g["concordant"] for g in out) - sum(g["discordant"] for g in out)) / pairs,
                    "groups_with_best_picked": sum(g["predicted_best"] == g["measured_best"] for g in out),
                    "median_regret": statistics.median(g["regret"] for g in out),
                    "max_regret": max(g["regret"] for g in out)})
    return res


def summarize(rows: list[dict], refused: list[dict] | None = None) -> dict:
    refused = refused or []
    errs = [abs(r["step_time_error"]) for r in rows if r["step_time_error"] is not None]
    merrs = [abs(r["memory_error"]) for r in rows if r["memory_error"] is not None]
    rerrs = [abs(r["reserved_memory_error"]) for r in rows if r.get("reserved_memory_error") is not None]
    out = {"rows": len(rows), "step_time_rows": len(errs)}
    if errs:
        out.update({"median_abs_step_time_error": statistics.median(errs), "p90_abs_step_time_error": _pct(errs, 0.9),
                    "max_abs_step_time_error": max(errs),
                    "mean_signed_step_time_error": statistics.fmean(
                        r["step_time_error"] for r in rows if r["step_time_error"] is not None)})
    if merrs:
        out.update({"memory_rows": len(merrs), "median_abs_memory_error": statistics.median(merrs),
                    "max_abs_memory_error": max(merrs), "p90_abs_memory_error": _pct(merrs, 0.9)})
    if rerrs:
        out.update({"reserved_memory_rows": len(rerrs), "median_abs_reserved_memory_error": statistics.median(rerrs),
                    "max_abs_reserved_memory_error": max(rerrs)})
    no_fit = [r["id"] for r in rows if r.get("predicted_fits") is False]
    total = len(rows) + len(refused)
    evaluated = len(rows) - len(no_fit)
    out.update({"runs_total": total, "evaluated_rows": evaluated,
                "evaluated_share": evaluated / total if total else 0.0,
                "refused_rows": len(refused), "refused": refused,
                "does_not_fit_rows": len(no_fit), "does_not_fit": no_fit,
                "ranking": rank_check(rows)})
    return out


def backtest_cases(cases: list[RunCase], progress=None) -> tuple[list[dict], list[dict]]:
    """(evaluated rows, refused runs): a run whose estimate the cost model refuses (SpecError) is
    listed as {id, field, reason} instead of failing the whole set. `progress(done, total)`: told before
    each run (a progress line)."""
    rows, refused = [], []
    for i, c in enumerate(cases):
        if progress is not None:
            progress(i, len(cases))
        if c.excluded:     # the row says why it is not scored (io/runs.py RunCase.excluded)
            refused.append({"id": c.id, "field": "excluded", "reason": c.excluded})
            continue
        try:
            rows.append(backtest_case(c))
        except InputError as ex:
            refused.append({"id": c.id, "field": ex.field, "reason": ex.reason})
    return rows, refused


def backtest_file(path: str | Path, catalog: Catalog, progress=None) -> dict:
    rows, refused = backtest_cases(load_runs(path, catalog), progress)
    doc = {"rows": rows, "summary": summarize(rows, refused)}
    if refused:
        doc["refused"] = refused
    return rnd(doc, 5)


def backtest_files(paths: list[str | Path], catalog: Catalog, progress=None) -> dict:
    """Several sets: `rows` and `summary` over all of them (one file: exactly backtest_file's), and
    `sets`: [{file, summary}] per file; each row names its `set`. `progress(text)`: told which run of which
    file is being estimated (a progress line); it changes nothing."""
    def told(p):
        if progress is None:
            return None
        return lambda done, total: progress(f"backtest {p}: run {done + 1:,} of {total:,}")

    if len(paths) == 1:
        doc = backtest_file(paths[0], catalog, told(paths[0]))
        doc["sets"] = [{"file": str(paths[0]), "summary": doc["summary"]}]
        return doc
    all_rows, all_refused, sets = [], [], []
    for p in paths:
        rows, refused = backtest_cases(load_runs(p, catalog), told(p))
        for r in rows:
            r["set"] = str(p)
        all_rows += rows
        all_refused += [dict(x, set=str(p)) for x in refused]
        sets.append({"file": str(p), "summary": summarize(rows, refused)})
    doc = {"rows": all_rows, "summary": summarize(all_rows, all_refused), "sets": sets}
    if all_refused:
        doc["refused"] = all_refused
    return rnd(doc, 5)


def gate(doc: dict, median_pct: float | None, p90_pct: float | None) -> list[str]:
    """The CI gate: one line per set whose median / p90 |step-time error| exceeds the limit (percent)."""
    problems = []
    for s in doc.get("sets") or [{"file": "runs", "summary": doc["summary"]}]:
        sm = s["summary"]
        for lim, key, what in ((median_pct, "median_abs_step_time_error", "median"),
                               (p90_pct, "p90_abs_step_time_error", "p90")):
            if lim is None:
                continue
            if key not in sm:
                problems.append(f"{s['file']}: no run with a measured step time (limit on the {what})")
            elif sm[key] * 100 > lim + 1e-9:      # 0.2 * 100 = 20.000000000000004
                problems.append(f"{s['file']}: {what} |step-time error| {sm[key]:.1%} > {lim:g}% "
                                f"(over {sm['step_time_rows']} runs)")
    return problems
