"""Step-time uncertainty bands: the range an estimate's step time is expected in (SPEC §3
`step_time_band_s`).

The band of an estimate is its step time times the 10th and 90th percentiles of measured / predicted
step time over the validation corpus' leave-one-source-out residuals (reports/loso.py) of the estimate's
mechanism class (cost/classes.py primary_class): the out-of-sample error of estimates that lean on the
same mechanisms. A class with fewer than `min_rows` residuals uses the corpus-wide quantiles ("all"). An eager step its
host sets also spans the measured machines' host speeds (`host_range_s`; io/bands.py estimate_band).
The table is data (baige_plan/data/bands.yaml, written by `make corpus-tables`; io/bands.py loads it).
"""

from __future__ import annotations

from dataclasses import dataclass

from baige_plan.cost.classes import primary_class
from baige_plan.errors import require
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import StrategySpec

ALL = "all"
MIN_ROWS = 8


@dataclass(frozen=True)
class ClassBand:
    """Quantiles of measured / predicted step time over `n` out-of-sample residuals of one class."""

    q10: float
    q50: float
    q90: float
    n: int

    def __post_init__(self) -> None:
        require(0 < self.q10 <= self.q50 <= self.q90, "q10", f"needs 0 < q10 <= q50 <= q90, got "
                f"{self.q10!r}, {self.q50!r}, {self.q90!r}")
        require(isinstance(self.n, int) and self.n >= 0, "n", f"must be an integer >= 0, got {self.n!r}")


@dataclass(frozen=True)
class StepTimeBands:
    """Per-class bands (class name -> ClassBand; "all" is required) and the fallback threshold."""

    classes: tuple[tuple[str, ClassBand], ...]
    min_rows: int = MIN_ROWS

    def __post_init__(self) -> None:
        require(any(name == ALL for name, _ in self.classes), "classes", f"needs the {ALL!r} class")

    def band_of(self, cls: str) -> tuple[str, ClassBand]:
        """(class used, its band): `cls` when it has >= min_rows residuals, else "all"."""
        table = dict(self.classes)
        b = table.get(cls)
        if b is not None and b.n >= self.min_rows:
            return cls, b
        return ALL, table[ALL]


def step_time_band_s(step_time_s: float, model: ModelSpec, job: JobSpec, strategy: StrategySpec,
                     bands: StepTimeBands, host_range_s: tuple[float, float] | None = None) -> tuple[float, float]:
    """(low, high) seconds: step_time_s x (q10, q90) of the strategy's primary mechanism class
    (or of "all" when that class has too few residuals). `host_range_s`: the step on the fastest and the slowest
    host measured (Estimate.host_scaled_step_s; eager steps set by their host), which widens the band to
    min(step, fast) x q10 .. max(step, slow) x q90: the corpus residuals are of production steps, which no host
    sets, and the machine's host speed is not an input."""
    _, b = bands.band_of(primary_class(model, job, strategy))
    lo = hi = step_time_s
    if host_range_s is not None:
        lo, hi = min(lo, host_range_s[0]), max(hi, host_range_s[1])
    return lo * b.q10, hi * b.q90
