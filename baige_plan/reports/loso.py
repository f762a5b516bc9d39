"""Leave-one-source-out (LOSO) validation of the cost model over the runs corpus.

Rows are grouped by `source.key` (a publication at one version; the file's stem when a row names none).
For each source S, every corpus-fitted constant of the cost model (specs/calibration.py FITTED) is refit on
the rows of all other sources, and S's rows are scored with the refit values: no constant that scores a
source was fitted on it. The same is done leaving out whole families (`source.family`, default the key).

Fitting. The objective of a constant is the median |log(predicted / measured step time)| over the
evaluated training rows it applies to (`Fitted.applies`). Each evaluated row is estimated once on the
product grid of the constants that apply to it (`Fitted.grid()`); a fit interpolates the predicted step
time between grid values, linearly in the constant's coordinate (`Fitted.coordinate`: 1/gemm_scale, as a
GEMM's time is; the ZeRO-3 overlap itself, on which the exposed time is linear: interpolation is within
0.1 % of the exact estimate on the published rows), evaluates the objective on [lo, hi] in steps of
`Fitted.resolution` and picks its minimum (ties: the value closest to the start); several constants are fitted
coordinate-wise (in FITTED order, repeated until none moves), starting from the middle of each range
(`fit_start`), never from the committed values: the objective is flat along ridges (gemm_scale and the FSDP
overlap share the A100 FSDP runs), and a fit started from the committed values walks along them, so the
held-out figures would depend on what is committed and "committed = fitted on all sources" would have no
fixed point. A constant with fewer than MIN_FIT_ROWS training rows takes the start of its range, not its
committed value: the committed value is fitted on every source, so falling back to it would score the only
source a constant applies to with a value fitted on that source. Held-out rows are then estimated exactly with the refit values.

Evaluated: a row is evaluated when its runtime runs its strategy (RuntimeSpec.refusal), the cost model
estimates it, it has a measured step time and it is predicted to fit in 100 % of device memory (the run
happened); the others are listed with the reason. Memory ('memory' class): |predicted / measured peak - 1|
over the rows with a measured peak that the model estimates (the constants do not change memory).

The output: per source (LOSO), per family (leave-one-family-out), per mechanism class (cost/classes.py:
a row counts in every class it uses) and overall (pooled LOSO residuals), and the step-time band table
(measured / predicted quantiles per primary class, io/bands.py).
"""

from __future__ import annotations

import hashlib
import math
import statistics
import subprocess
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from baige_plan.cost.bands import ALL, MIN_ROWS
from baige_plan.cost.classes import CLASSES, mechanism_classes, primary_class
from baige_plan.cost.estimate import estimate
from baige_plan.errors import InputError, SpecError
from baige_plan.io.bands import bands_doc
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import RunCase, load_runs
from baige_plan.io.serialize import rnd
from baige_plan.io.yamlio import kind_of, read_document
from baige_plan.reports.backtest import _pct, backtest_case
from baige_plan.specs import runtimes
from baige_plan.specs.calibration import COMMITTED, FITTED, Calibration, Fitted

LOSO_SCHEMA = "baige-plan/loso/v1"
MIN_FIT_ROWS = 3          # fewer training rows: the constant takes fit_start (a prior not fitted on the data)
MAX_SWEEPS = 5            # coordinate-wise fitting rounds
# acceptance targets of the corpus (issue): pooled LOSO median / p90, worst source median, evaluated share
TARGETS = (("median_abs_step_time_error", "<=", 0.08), ("p90_abs_step_time_error", "<=", 0.25),
           ("worst_source_median_abs_step_time_error", "<=", 0.15), ("evaluated_share", ">=", 0.95))


@dataclass(frozen=True)
class CorpusRow:
    """One run of the corpus with where it comes from and the mechanism classes it uses."""

    case: RunCase
    file: str
    source: str
    family: str
    classes: tuple[str, ...]
    primary: str


@dataclass(frozen=True)
class RowEval:
    """A row's committed-constants backtest and, when evaluated, its predicted step time (s) on the grid
    of the constants that apply to it (axes in FITTED order)."""

    row: CorpusRow
    bt: dict | None               # reports/backtest.py backtest_case row (None: refused)
    reason: str | None            # why the step time is not evaluated (None: evaluated)
    axes: tuple[str, ...] = ()
    grid: np.ndarray | None = None

    @property
    def evaluated(self) -> bool:
        return self.reason is None

    @property
    def log_measured(self) -> float:
        return math.log(self.row.case.measured_step_time_s)


def _source_of(raw: dict, path: str, rid: str) -> tuple[str, str]:
    src = raw.get("source") if isinstance(raw, dict) else None
    src = src if isinstance(src, dict) else {}
    key, fam = src.get("key"), src.get("family")
    for name, v in (("key", key), ("family", fam)):
        if v is not None and (not isinstance(v, str) or not v.strip()):
            raise InputError(path, f"rows[{rid}].source.{name}", f"expected a non-empty string, got {v!r}")
    key = key or Path(path).stem
    return key, fam or key


def load_corpus(paths: list[str | Path], catalog: Catalog) -> list[CorpusRow]:
    """Every row of the runs files with its source and family; ids unique across the corpus."""
    out: list[CorpusRow] = []
    seen: dict[str, str] = {}
    for p in paths:
        cases = load_runs(p, catalog)            # checks the document and every row (exit 2 on bad input)
        raws = read_document(p)["rows"]
        for raw, c in zip(raws, cases, strict=True):
            if c.id in seen:
                raise InputError(str(p), f"rows[{c.id}].id", f"duplicate id (also in {seen[c.id]})")
            seen[c.id] = str(p)
            key, fam = _source_of(raw, str(p), c.id)
            out.append(CorpusRow(c, str(p), key, fam, mechanism_classes(c.model, c.job, c.strategy),
                                 primary_class(c.model, c.job, c.strategy)))
    return out


def _predict_s(c: RunCase, cal: Calibration | None) -> float:
    return estimate(c.model, c.cluster, c.job, c.strategy, calibration=cal).step_time_s


def evaluate_row(r: CorpusRow, fitted: tuple[Fitted, ...] = FITTED) -> RowEval:
    """The committed backtest of a row, why it is not evaluated, or its grid of log(predicted)."""
    c = r.case
    refusal = runtimes.get(c.strategy.runtime).refusal(c.strategy, c.model, c.job)
    if refusal:
        return RowEval(r, None, f"refused by its runtime ({c.strategy.runtime}): {refusal}")
    try:
        bt = backtest_case(c)          # memory_frac 1.0: the run happened, so judge fit at all of device memory
    except InputError as e:
        return RowEval(r, None, f"refused by the cost model: {e.field}: {e.reason}")
    if not c.measured_step_time_s:
        return RowEval(r, bt, "no measured step time")
    if not bt["predicted_fits"]:
        e = estimate(c.model, c.cluster, c.job, c.strategy)
        return RowEval(r, bt, f"predicted not to fit in 100% of device memory (peak {e.peak_memory_gib:.1f} GiB "
                              f"> {e.capacity_gib:g} GiB)")
    fs = [f for f in fitted if f.applies(c)]
    shape = tuple(f.points for f in fs)
    grid = np.empty(shape)
    for ix in np.ndindex(*shape):
        values = {f.name: f.grid()[i] for f, i in zip(fs, ix, strict=True)}
        try:
            grid[ix] = _predict_s(c, COMMITTED.with_values(values))
        except SpecError as e:       # a valid strategy stays valid: the constants change no rule
            raise InputError(r.file, f"rows[{c.id}].{e.field}", e.reason) from None
    return RowEval(r, bt, None, tuple(f.name for f in fs), grid)


# -- fitting ---------------------------------------------------------------------------------------------
def _fine(f: Fitted) -> np.ndarray:
    """The values a fit picks from: [lo, hi] in steps of f.resolution."""
    n = int(round((f.hi - f.lo) / f.resolution))
    return np.unique(np.round(np.linspace(f.lo, f.hi, n + 1), 9))


def fit_start(f: Fitted) -> float:
    """Where the coordinate-wise fit starts a constant: the middle of its range, on its fine grid."""
    return float(round(round((f.lo + f.hi) / 2 / f.resolution) * f.resolution, 9))


def _coords(f: Fitted, values) -> np.ndarray:
    """Values in the constant's interpolation coordinate (Fitted.coordinate)."""
    v = np.asarray(values, dtype=float)
    return 1.0 / v if f.coordinate == "reciprocal" else v


def _reduce(g: np.ndarray, axis: int, f: Fitted, v: float) -> np.ndarray:
    """Interpolation of `g` along `axis` (sampled at f.grid()) at value v, linear in f's coordinate;
    the axis is removed."""
    x = _coords(f, f.grid())
    order = np.argsort(x)
    x, g = x[order], np.take(g, order, axis=axis)
    xv = float(_coords(f, v))
    i = int(np.clip(np.searchsorted(x, xv, side="right") - 1, 0, len(x) - 2))
    w = (xv - x[i]) / (x[i + 1] - x[i])
    return np.take(g, i, axis=axis) * (1 - w) + np.take(g, i + 1, axis=axis) * w


@dataclass(frozen=True)
class _Stack:
    """Evaluated rows that share the same constant axes, stacked: grids (rows, *axes), log measured."""

    axes: tuple[str, ...]
    idx: np.ndarray
    grids: np.ndarray
    log_meas: np.ndarray


def _stacks(evals: list[RowEval]) -> list[_Stack]:
    by: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, ev in enumerate(evals):
        if ev.evaluated:
            by[ev.axes].append(i)
    return [_Stack(axes, np.array(ix), np.stack([evals[i].grid for i in ix]),
                   np.array([evals[i].log_measured for i in ix])) for axes, ix in sorted(by.items())]


def fit(stacks: list[_Stack], train: np.ndarray,
        fitted: tuple[Fitted, ...] = FITTED) -> tuple[dict[str, float], dict[str, int]]:
    """Coordinate-wise fit of every constant on the rows `train` (a boolean mask over all rows):
    (values, training rows per constant)."""
    spec = {f.name: f for f in fitted}
    start = {f.name: fit_start(f) for f in fitted}
    cur = dict(start)
    counts = {f.name: 0 for f in fitted}
    for _ in range(MAX_SWEEPS):
        moved = False
        for f in fitted:
            fine = _fine(f)
            curves, meas = [], []
            for st in stacks:
                if f.name not in st.axes:
                    continue
                keep = train[st.idx]
                if not keep.any():
                    continue
                g = st.grids[keep]
                # interpolate every other axis at its current value (highest axis first: indices stay valid)
                for ax in sorted((k for k, n in enumerate(st.axes) if n != f.name), reverse=True):
                    g = _reduce(g, ax + 1, spec[st.axes[ax]], cur[st.axes[ax]])
                x = _coords(f, f.grid())
                order = np.argsort(x)
                xf = _coords(f, fine)
                curves.append(np.log(np.stack([np.interp(xf, x[order], row[order]) for row in g])))
                meas.append(st.log_meas[keep])
            n = sum(len(m) for m in meas)
            counts[f.name] = n
            if n < MIN_FIT_ROWS:
                v = start[f.name]
            else:
                obj = np.median(np.abs(np.concatenate(curves) - np.concatenate(meas)[:, None]), axis=0)
                cands = np.flatnonzero(obj <= obj.min() + 1e-12)
                v = float(fine[cands[np.argmin(np.abs(fine[cands] - start[f.name]))]])
            if v != cur[f.name]:
                cur[f.name], moved = v, True
        if not moved:
            break
    return cur, counts


# -- summaries -------------------------------------------------------------------------------------------
def _err_stats(errs: list[float], prefix: str = "step_time") -> dict:
    if not errs:
        return {}
    a = [abs(x) for x in errs]
    return {f"median_abs_{prefix}_error": statistics.median(a), f"p90_abs_{prefix}_error": _pct(a, 0.9),
            f"max_abs_{prefix}_error": max(a), f"median_signed_{prefix}_error": statistics.median(errs)}


def _share(evaluated: int, total: int) -> dict:
    return {"runs": total, "evaluated_rows": evaluated, "evaluated_share": evaluated / total if total else 0.0}


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def _sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def loso(paths: list[str | Path], catalog: Catalog, progress: Callable[[str], None] | None = None,
         fitted: tuple[Fitted, ...] = FITTED) -> dict:
    """The leave-one-source-out document (see the module docstring), floats rounded to 5 digits. Rows that
    say why they are not scored (`excluded`: hardware outside the catalog, a configuration the source leaves
    incomplete) are listed, not scored, and outside the evaluated share."""
    rows = load_corpus(paths, catalog)
    excluded = [{"id": r.case.id, "source": r.source, "reason": r.case.excluded} for r in rows if r.case.excluded]
    rows = [r for r in rows if not r.case.excluded]
    evals = []
    for i, r in enumerate(rows):
        if progress is not None:
            progress(f"loso: estimating run {i + 1:,} of {len(rows):,} on its constants' grid")
        evals.append(evaluate_row(r, fitted))
    stacks = _stacks(evals)
    ok = np.array([ev.evaluated for ev in evals], dtype=bool)
    exact: dict[tuple[int, tuple], float] = {}

    def predicted(i: int, values: dict[str, float]) -> float:
        key = (i, tuple(sorted(values.items())))
        if key not in exact:
            cal = COMMITTED.with_values(values)
            exact[key] = evals[i].bt["predicted_step_time_s"] if cal == COMMITTED else _predict_s(evals[i].row.case, cal)
        return exact[key]

    def leave_out(group_of: Callable[[CorpusRow], str]) -> tuple[dict[str, dict], dict[int, float]]:
        """Per group: the refit values without it; per evaluated row: its held-out prediction."""
        groups = sorted({group_of(r) for r in rows})
        refit, pred = {}, {}
        for gname in groups:
            if progress is not None:
                progress(f"loso: fitting without {gname}")
            member = np.array([group_of(r) == gname for r in rows], dtype=bool)
            values, counts = fit(stacks, ok & ~member, fitted)
            refit[gname] = {"values": values, "training_rows": counts}
            for i in np.flatnonzero(member & ok):
                pred[int(i)] = predicted(int(i), values)
        return refit, pred

    by_source, pred_s = leave_out(lambda r: r.source)
    by_family, pred_f = leave_out(lambda r: r.family)
    all_values, all_counts = fit(stacks, ok, fitted)

    def err(i: int, pred: dict[int, float]) -> float:
        return pred[i] / rows[i].case.measured_step_time_s - 1

    def stats(ix: list[int], pred: dict[int, float]) -> dict:
        ev = [i for i in ix if evals[i].evaluated]
        return {**_share(len(ev), len(ix)), **_err_stats([err(i, pred) for i in ev])}

    sources = []
    for s in sorted({r.source for r in rows}):
        ix = [i for i, r in enumerate(rows) if r.source == s]
        sources.append({"source": s, "family": rows[ix[0]].family,
                        "files": sorted({rows[i].file for i in ix}), **stats(ix, pred_s),
                        "refit": by_source[s]["values"]})
    families = []
    for fam in sorted({r.family for r in rows}):
        ix = [i for i, r in enumerate(rows) if r.family == fam]
        families.append({"family": fam, "sources": sorted({rows[i].source for i in ix}), **stats(ix, pred_f),
                         "refit": by_family[fam]["values"]})
    classes = []
    for cls in CLASSES:
        ix = [i for i, r in enumerate(rows) if cls in r.classes]
        if ix:
            classes.append({"class": cls, **stats(ix, pred_s)})
    mem_ix = [i for i, ev in enumerate(evals) if ev.bt is not None and ev.bt.get("memory_error") is not None]
    memory = {"class": "memory", "runs": len(mem_ix),
              "what": "|predicted / measured peak memory - 1| (allocated or reserved as the source logs)",
              **_err_stats([evals[i].bt["memory_error"] for i in mem_ix], "memory")}
    every = list(range(len(rows)))
    overall = stats(every, pred_s)
    committed_pred = {i: evals[i].bt["predicted_step_time_s"] for i in every if evals[i].evaluated}
    in_sample = stats(every, committed_pred)
    worst = max((s for s in sources if "median_abs_step_time_error" in s),
                key=lambda s: (s["median_abs_step_time_error"], s["source"]), default=None)
    figures = dict(overall, worst_source_median_abs_step_time_error=worst["median_abs_step_time_error"]
                   if worst else None)
    targets = [{"figure": k, "limit": f"{op} {lim:g}", "value": figures.get(k),
                "met": figures.get(k) is not None and (figures[k] <= lim + 1e-12 if op == "<=" else
                                                       figures[k] >= lim - 1e-12)}
               for k, op, lim in TARGETS]
    base = COMMITTED.values()
    doc = {
        "schema": LOSO_SCHEMA,
        "files": [str(p) for p in paths],
        "fitted": [{"name": f.name, "committed": base[f.name], "lo": f.lo, "hi": f.hi, "grid": list(f.grid()),
                    "fitted_on": f.fitted_on, "fit_on_all_sources": all_values[f.name],
                    "training_rows_all_sources": all_counts[f.name]} for f in fitted],
        "overall": overall,
        "worst_source": worst["source"] if worst else None,
        "in_sample_committed": in_sample,
        "targets": targets,
        "sources": sources,
        "families": families,
        "classes": classes + [memory],
        "not_evaluated": [{"id": ev.row.case.id, "source": ev.row.source, "reason": ev.reason}
                          for ev in evals if not ev.evaluated],
        "excluded": excluded,
        "rows": [_row_doc(ev, pred_s.get(i)) for i, ev in enumerate(evals)],
        "bands": band_table(rows, evals, pred_s),
    }
    return rnd(doc, 5)


def _row_doc(ev: RowEval, loso_pred: float | None) -> dict:
    c = ev.row.case
    d = {"id": c.id, "source": ev.row.source, "family": ev.row.family, "classes": list(ev.row.classes),
         "primary_class": ev.row.primary, "measured_step_time_s": c.measured_step_time_s,
         "predicted_step_time_s": ev.bt["predicted_step_time_s"] if ev.bt is not None else None,
         "loso_predicted_step_time_s": loso_pred,
         "loso_step_time_error": loso_pred / c.measured_step_time_s - 1 if loso_pred is not None else None,
         "evaluated": ev.evaluated}
    if ev.bt is not None and ev.bt.get("memory_error") is not None:
        d["memory_error"] = ev.bt["memory_error"]
    if ev.reason:
        d["reason"] = ev.reason
    return d


def band_table(rows: list[CorpusRow], evals: list[RowEval], pred: dict[int, float]) -> dict[str, dict]:
    """measured / predicted (held out) quantiles per primary class with residuals, and over all rows."""
    ratios: dict[str, list[float]] = defaultdict(list)
    for i, p in sorted(pred.items()):
        r = rows[i].case.measured_step_time_s / p
        ratios[rows[i].primary].append(r)
        ratios[ALL].append(r)
    out = {}
    for cls in CLASSES + (ALL,):
        v = ratios.get(cls)
        if v:
            out[cls] = {"q10": _pct(v, 0.1), "q50": statistics.median(v), "q90": _pct(v, 0.9), "n": len(v)}
    return rnd(out, 4)


def bands_file_doc(doc: dict) -> dict:
    """The bands document (io/bands.py) of a LOSO document: its table and where it comes from."""
    if ALL not in doc["bands"]:
        raise InputError(", ".join(doc["files"]), "bands", "no evaluated run: no band can be computed")
    files = [{"path": p, "sha256": _sha256(p)} for p in doc["files"]]
    return bands_doc(doc["bands"], files, _git_commit(), MIN_ROWS)


# -- the human table ---------------------------------------------------------------------------------------
def _p(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def _sp(x) -> str:
    return "-" if x is None else f"{x:+.1%}"


def markdown(doc: dict, command: str) -> str:
    """LOSO.md: the committed human table (written with loso.json by one command)."""
    o = doc["overall"]
    lines = ["# Leave-one-source-out validation", "",
             f"Written by `make corpus-tables` (`{command}`, FILE... = the files below) with "
             "`benchmarks/corpus/loso.json` and `baige_plan/data/bands.yaml`; method: docs/VALIDATION.md, "
             "\"Leave-one-source-out validation\". Every figure is |predicted / measured step time - 1| of runs scored "
             "with constants fitted without their source.", "",
             "Files: " + ", ".join(f"`{f}`" for f in doc["files"]), "",
             "## Overall (pooled held-out residuals)", "",
             "| runs | evaluated | median | p90 | max | median signed | in-sample median (committed constants) |",
             "|---|---|---|---|---|---|---|",
             f"| {o['runs']} | {o['evaluated_rows']} ({o['evaluated_share']:.0%}) | "
             f"{_p(o.get('median_abs_step_time_error'))} | {_p(o.get('p90_abs_step_time_error'))} | "
             f"{_p(o.get('max_abs_step_time_error'))} | {_sp(o.get('median_signed_step_time_error'))} | "
             f"{_p(doc['in_sample_committed'].get('median_abs_step_time_error'))} |", "",
             "Targets: " + "; ".join(
                 f"{t['figure']} {t['limit']}: {'-' if t['value'] is None else format(t['value'], '.3g')} "
                 f"({'met' if t['met'] else 'NOT met'})" for t in doc["targets"]), "",
             "## Per source (left out one at a time)", "",
             "| source | family | runs | evaluated | median | p90 | max | median signed | refit constants |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in doc["sources"]:
        refit = ", ".join(f"{k} {v:g}" for k, v in s["refit"].items())
        lines.append(f"| {s['source']} | {s['family']} | {s['runs']} | {s['evaluated_rows']} "
                     f"({s['evaluated_share']:.0%}) | {_p(s.get('median_abs_step_time_error'))} | "
                     f"{_p(s.get('p90_abs_step_time_error'))} | {_p(s.get('max_abs_step_time_error'))} | "
                     f"{_sp(s.get('median_signed_step_time_error'))} | {refit} |")
    lines += ["", "## Per family (left out one family at a time)", "",
              "| family | sources | runs | evaluated | median | p90 | max | median signed |",
              "|---|---|---|---|---|---|---|---|"]
    for f in doc["families"]:
        lines.append(f"| {f['family']} | {len(f['sources'])} | {f['runs']} | {f['evaluated_rows']} "
                     f"({f['evaluated_share']:.0%}) | {_p(f.get('median_abs_step_time_error'))} | "
                     f"{_p(f.get('p90_abs_step_time_error'))} | {_p(f.get('max_abs_step_time_error'))} | "
                     f"{_sp(f.get('median_signed_step_time_error'))} |")
    lines += ["", "## Per mechanism class (a run counts in every class it uses; memory: peak-memory error)", "",
              "| class | runs | evaluated | median | p90 | max | median signed |", "|---|---|---|---|---|---|---|"]
    for c in doc["classes"]:
        if c["class"] == "memory":
            lines.append(f"| memory | {c['runs']} | - | {_p(c.get('median_abs_memory_error'))} | "
                         f"{_p(c.get('p90_abs_memory_error'))} | {_p(c.get('max_abs_memory_error'))} | "
                         f"{_sp(c.get('median_signed_memory_error'))} |")
        else:
            lines.append(f"| {c['class']} | {c['runs']} | {c['evaluated_rows']} ({c['evaluated_share']:.0%}) | "
                         f"{_p(c.get('median_abs_step_time_error'))} | {_p(c.get('p90_abs_step_time_error'))} | "
                         f"{_p(c.get('max_abs_step_time_error'))} | {_sp(c.get('median_signed_step_time_error'))} |")
    lines += ["", "## Fitted constants", "",
              "| constant | committed | range | fitted on all sources (rows) | committed value fitted on |",
              "|---|---|---|---|---|"]
    for f in doc["fitted"]:
        lines.append(f"| {f['name']} | {f['committed']:g} | {f['lo']:g}-{f['hi']:g} | "
                     f"{f['fit_on_all_sources']:g} ({f['training_rows_all_sources']}) | {f['fitted_on']} |")
    lines += ["", "## Step-time bands (measured / predicted, held out; baige_plan/data/bands.yaml)", "",
              "| class | q10 | q50 | q90 | runs |", "|---|---|---|---|---|"]
    for cls, b in doc["bands"].items():
        lines.append(f"| {cls} | {b['q10']:.3f} | {b['q50']:.3f} | {b['q90']:.3f} | {b['n']} |")
    lines += ["", f"A class with fewer than {MIN_ROWS} runs uses the `all` band.", "",
              "## Not evaluated", ""]
    lines += [f"- `{x['id']}` ({x['source']}): {x['reason']}" for x in doc["not_evaluated"]] or ["(none)"]
    lines += ["", "Not scored (the row says why: hardware outside the catalog, a configuration the source leaves "
              "incomplete):", ""]
    lines += [f"- `{x['id']}` ({x['source']}): {x['reason']}" for x in doc.get("excluded", [])] or ["(none)"]
    return "\n".join(lines) + "\n"


def check_loso_doc(doc, src: str) -> dict:
    """A committed loso.json as the gate reads it: {source: entry}; InputError naming the field."""
    if not isinstance(doc, dict) or doc.get("schema") != LOSO_SCHEMA or not isinstance(doc.get("sources"), list):
        raise InputError(src, "schema", f"expected a {LOSO_SCHEMA} document, got {kind_of(doc)}")
    return {s["source"]: s for s in doc["sources"]}


def loso_gate(doc: dict, median_pct: float | None, p90_pct: float | None) -> list[str]:
    """--fail-above-median / --fail-above-p90 on the pooled held-out figures: one line per limit exceeded."""
    problems = []
    o = doc["overall"]
    for lim, key, what in ((median_pct, "median_abs_step_time_error", "median"),
                           (p90_pct, "p90_abs_step_time_error", "p90")):
        if lim is None:
            continue
        if key not in o:
            problems.append(f"leave-one-source-out: no evaluated run (limit on the {what})")
        elif o[key] * 100 > lim + 1e-9:
            problems.append(f"leave-one-source-out: {what} |step-time error| {o[key]:.1%} > {lim:g}% "
                            f"(over {o['evaluated_rows']} runs)")
    return problems


def default_corpus(root: str | Path = ".") -> list[Path]:
    """The validation corpus under a checkout `root`, in the Makefile's order (`make corpus-tables`):
    the published calibration runs, the held-out runs, then benchmarks/corpus/*.yaml sorted by name."""
    r = Path(root)
    return [r / "tests" / "data" / "published_calibration.yaml", r / "benchmarks" / "published_heldout.yaml",
            *sorted((p for p in (r / "benchmarks" / "corpus").glob("*.yaml") if not p.name.endswith(".amend.yaml")),
                    key=lambda p: p.name)]
