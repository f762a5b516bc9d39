"""The cost model's corpus-fitted constants, as one value: `Calibration`.

Almost every number in the cost model is sourced or measured (docs/COST_MODEL.md). A few are fitted
on published runs; they live here so that leave-one-source-out validation (io/loso.py, `baige-plan
backtest --loso`) can refit them without the source being scored, and so that the fit is stated in
one place. `Calibration()` holds the committed values: `estimate(..., calibration=None)` uses them,
bit-identically to the constants they replaced.

`FITTED` describes how each is fitted: its allowed range [lo, hi], the evaluation grid (`points`
values evenly spaced over the range; fitting interpolates between them) and which runs it applies to
(`applies(run)`: `run` has `.model`, `.job` and `.strategy`, as io/runs.py RunCase). The objective is
the median |log(predicted / measured step time)| over the evaluated runs it applies to. Adding a
fitted constant is one field here and one `Fitted` entry (and reading the field where the cost model
uses it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from baige_plan.errors import require


@dataclass(frozen=True)
class Calibration:
    """Corpus-fitted constants of the cost model (committed values as defaults).

    gemm_scale: multiplier on every chip's GEMM-efficiency curve (every dtype, every size) relative to
        the committed curves; 1.0 = the chip files as written. The committed curves carry
        CALIB_RATIO (chips/*.yaml: the A100 curve's top point 0.72 was fitted to the Megatron-LM rows of
        tests/data/published_calibration.yaml, 0.828 of the best-shape microbenchmark, and every other
        chip's curve was scaled by the same ratio), so the effective ratio is 0.828 x gemm_scale.
        Efficiency stays <= 1. Allowed range 0.80-1.25 (FITTED).
    zero3_overlap: fraction of the shorter of (ZeRO-3 per-micro-batch communication, compute) hidden
        under the longer (cost/estimate.py DpTraffic.exposed_s); fitted on Narayanan 2021 Table 2
        (the compute-bound 384/640-GPU DeepSpeed ZeRO-3 rows). Allowed range 0-1.
    """

    gemm_scale: float = 1.0
    zero3_overlap: float = 0.55

    def __post_init__(self) -> None:
        for f in FITTED:
            v = getattr(self, f.name)
            require(isinstance(v, (int, float)) and not isinstance(v, bool) and f.lo <= v <= f.hi, f.name,
                    f"must be a number from {f.lo:g} to {f.hi:g}, got {v!r}")

    def with_values(self, values: dict[str, float]) -> Calibration:
        """A copy with some constants replaced (names of FITTED)."""
        return replace(self, **values)

    def values(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _all_runs(run: Any) -> bool:
    return True


def _zero3_runs(run: Any) -> bool:
    return run.strategy.zero >= 3


@dataclass(frozen=True)
class Fitted:
    """How one Calibration field is fitted: range, evaluation grid, the runs it applies to."""

    name: str
    lo: float
    hi: float
    applies: Callable[[Any], bool]
    points: int = 5          # evaluation grid: `points` values evenly spaced over [lo, hi]
    fitted_on: str = ""      # what the committed value was fitted on
    # the coordinate in which a step time is close to linear, for interpolating between grid values:
    # "linear" (the value itself) or "reciprocal" (1 / value: a rate multiplier, time ~ a + b / value)
    coordinate: str = "linear"
    resolution: float = 0.001   # step of the fine grid the fit picks its value on


    def __post_init__(self) -> None:
        require(self.lo < self.hi and self.points >= 2, self.name, "needs lo < hi and at least 2 grid points")
        require(0 < self.resolution <= (self.hi - self.lo) / 2, f"{self.name}.resolution",
                f"must be in (0, (hi - lo) / 2], got {self.resolution!r}")
        require(self.coordinate in ("linear", "reciprocal"), f"{self.name}.coordinate",
                f"must be linear or reciprocal, got {self.coordinate!r}")
        require(self.coordinate == "linear" or self.lo > 0, f"{self.name}.lo", "a reciprocal coordinate needs lo > 0")

    def grid(self) -> tuple[float, ...]:
        step = (self.hi - self.lo) / (self.points - 1)
        return tuple(round(self.lo + i * step, 12) for i in range(self.points))


FITTED: tuple[Fitted, ...] = (
    Fitted("gemm_scale", 0.80, 1.25, _all_runs, points=10,
           fitted_on="A100 curve top 0.72 on the Megatron-LM rows of tests/data/published_calibration.yaml "
                     "(CALIB_RATIO in chips/*.yaml)", coordinate="reciprocal"),
    Fitted("zero3_overlap", 0.0, 1.0, _zero3_runs, points=5,
           fitted_on="Narayanan 2021 Table 2, compute-bound 384/640-GPU ZeRO-3 rows"),
)

COMMITTED = Calibration()
