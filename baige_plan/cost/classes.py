"""Mechanism classes: which parts of the cost model an estimate leans on.

The validation corpus (benchmarks/corpus/) is scored per class, and an estimate's uncertainty band
(`step_time_band_s`) comes from the out-of-sample residuals of its class. A strategy belongs to every
class whose mechanism it uses; `primary_class` picks the one whose errors dominate, in the order below
(the mechanisms the model is least sure of first):

  moe    mixture-of-experts layers (grouped GEMMs, routing, token dispatch, load imbalance)
  fp4    NVFP4 GEMMs (their efficiency is an estimate from the fp8 curve; quantisation traffic, fp4 weight caches)
  cp     context parallelism (ring-attention exchange)
  fsdp   ZeRO-3 / FSDP parameter gathers (per micro-batch or per step)
  fp8    fp8 GEMMs (quantisation traffic, fp8 weight caches)
  eager  eager PyTorch kernels (host dispatch, unfused non-GEMM work)
  dense  everything else: dense tensor / pipeline / data parallelism with fused kernels
"""

from __future__ import annotations

from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import StrategySpec

CLASSES = ("moe", "fp4", "cp", "fsdp", "fp8", "eager", "dense")


def mechanism_classes(model: ModelSpec, job: JobSpec, s: StrategySpec) -> tuple[str, ...]:
    """Every class the estimate uses, in CLASSES order; "dense" only when no other applies."""
    used = {"moe": model.moe is not None, "fp4": job.precision == "fp4", "cp": s.cp > 1, "fsdp": s.zero >= 3,
            "fp8": job.precision == "fp8", "eager": s.execution == "eager"}
    out = tuple(c for c in CLASSES[:-1] if used[c])
    return out or ("dense",)


def primary_class(model: ModelSpec, job: JobSpec, s: StrategySpec) -> str:
    """The class whose residuals set the estimate's band: the first of `mechanism_classes`."""
    return mechanism_classes(model, job, s)[0]
