"""The step-time band table (baige_plan/data/bands.yaml): load it, write it, and the band of an estimate.

The file is written by `make corpus-tables` (`baige-plan backtest --loso ... --bands FILE`, reports/loso.py)
from the leave-one-source-out residuals of the corpus and ships inside the wheel:

    schema: baige-plan/bands/v1
    quantity: measured / predicted step time (leave-one-source-out residuals)
    min_rows: 8                       # a class with fewer residuals uses "all"
    computed_from: {commit: <git HEAD or unknown>, files: [{path, sha256}, ...]}
    classes:                          # cost/classes.py CLASSES that have residuals, then "all"
      dense: {q10: 0.93, q50: 1.01, q90: 1.12, n: 31}
      ...
      all: {q10: ..., q50: ..., q90: ..., n: ...}
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

from baige_plan.cost.bands import ALL, MIN_ROWS, ClassBand, StepTimeBands, step_time_band_s
from baige_plan.cost.classes import CLASSES
from baige_plan.cost.estimate import Estimate
from baige_plan.cost.execution import EAGER_HOST
from baige_plan.errors import InputError, SpecError
from baige_plan.io.serialize import Flow
from baige_plan.io.yamlio import check_keys, kind_of, read_document
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import StrategySpec

BANDS_SCHEMA = "baige-plan/bands/v1"
QUANTITY = "measured / predicted step time (leave-one-source-out residuals, io/loso.py)"


def shipped_bands_path() -> Path:
    """The table shipped in the package (baige_plan/data/bands.yaml)."""
    return Path(__file__).resolve().parents[1] / "data" / "bands.yaml"


def _number(v: Any, src: str, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise InputError(src, where, f"expected a finite number, got {v!r}")
    return float(v)


def parse_bands(doc: Any, src: str) -> StepTimeBands:
    """A bands document -> StepTimeBands; InputError naming the file, field and reason."""
    d = check_keys(doc, src, "", {"schema", "classes"}, {"quantity", "min_rows", "computed_from"})
    if d["schema"] != BANDS_SCHEMA:
        raise InputError(src, "schema", f"expected {BANDS_SCHEMA!r}, got {d['schema']!r}")
    min_rows = d.get("min_rows", MIN_ROWS)
    if isinstance(min_rows, bool) or not isinstance(min_rows, int) or min_rows < 1:
        raise InputError(src, "min_rows", f"expected an integer >= 1, got {min_rows!r}")
    classes = d["classes"]
    if not isinstance(classes, dict):
        raise InputError(src, "classes", f"expected a mapping, got {kind_of(classes)}")
    out = []
    for name, v in classes.items():
        if name not in CLASSES + (ALL,):
            raise InputError(src, f"classes.{name}", f"unknown class (one of {', '.join(CLASSES + (ALL,))})")
        q = check_keys(v, src, f"classes.{name}", {"q10", "q50", "q90", "n"})
        n = q["n"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InputError(src, f"classes.{name}.n", f"expected an integer >= 1, got {n!r}")
        try:
            out.append((name, ClassBand(*(_number(q[k], src, f"classes.{name}.{k}") for k in ("q10", "q50", "q90")),
                                        n=n)))
        except SpecError as e:
            raise InputError(src, f"classes.{name}.{e.field}", e.reason) from None
    if ALL not in classes:
        raise InputError(src, "classes", f"needs the {ALL!r} class")
    return StepTimeBands(classes=tuple(out), min_rows=min_rows)


@functools.lru_cache(maxsize=8)
def load_bands(path: str | None = None) -> StepTimeBands:
    """The band table at `path` (default: the shipped one), read once per path (a pure loader, cached)."""
    p = Path(path) if path is not None else shipped_bands_path()
    return parse_bands(read_document(p), str(p))


def band_for(step_time_s: float, model: ModelSpec, job: JobSpec, strategy: StrategySpec,
             bands: StepTimeBands | None = None, host_range_s: tuple[float, float] | None = None
             ) -> tuple[float, float]:
    """step_time_band_s of an estimate with the shipped table (or `bands`)."""
    return step_time_band_s(step_time_s, model, job, strategy, bands if bands is not None else load_bands(),
                            host_range_s)


def estimate_band(e: Estimate, model: ModelSpec, job: JobSpec, bands: StepTimeBands | None = None
                  ) -> tuple[float, float]:
    """band_for of an estimate, widened for an eager step its host sets: the step on the fastest and the slowest
    host measured (cost/execution.py EagerHost.host_fast_factor / host_slow_factor)."""
    rng = (e.host_scaled_step_s(EAGER_HOST.host_fast_factor), e.host_scaled_step_s(EAGER_HOST.host_slow_factor))
    return band_for(e.step_time_s, model, job, e.strategy, bands, rng)


def bands_doc(classes: dict[str, dict], files: list[dict], commit: str, min_rows: int = MIN_ROWS) -> dict:
    """The bands document (what `write` puts in the file); `classes`: name -> {q10, q50, q90, n}."""
    return {"schema": BANDS_SCHEMA, "quantity": QUANTITY, "min_rows": min_rows,
            "computed_from": {"commit": commit, "files": [Flow(f) for f in files]},
            "classes": {k: Flow(v) for k, v in classes.items()}}
