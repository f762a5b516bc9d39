"""What a training runtime (framework) can run and how it executes it: the data every layer reads.

A `RuntimeSpec` is declared once, in the runtime's own module (`baige_plan/runtimes/NAME.py`), next to
its export and its pinned version. The search keeps to `RuntimeSpec.refusal(...) is None`; the cost
model reads `grad_sync(zero, pp)` (when and how data-parallel traffic runs) and the execution
defaults. No I/O here.

Gradient-synchronisation vocabulary (`GradSync`), per ZeRO stage and pipeline use:
  grads        "step":        gradients accumulate locally over the m micro-batches and are reduced
                              once per step (Megatron DDP grad buffer / distributed optimizer, DDP with
                              no_sync, DeepSpeed ZeRO-0/1 at the accumulation boundary)
               "micro_batch": reduced after every micro-batch's backward (DeepSpeed ZeRO-2,
                              FSDP2 reduce-scatter without no_sync, Paddle sharding stage 2)
  overlap      "backward":    bucketed, launched as backward produces gradients: hidden under the
                              (last, for "step") micro-batch's backward except the last bucket
               "none":        issued after the backward pass (or after the pipeline flush) completes:
                              fully exposed
  params       "none":        no parameter all-gather (ZeRO-0)
               "next_forward":the updated 16-bit parameters are all-gathered overlapped with the next
                              step's forward (Megatron --overlap-param-gather)
               "after_step":  all-gathered right after the optimizer step, exposed (DeepSpeed ZeRO-1/2,
                              Paddle sharding)
  ZeRO-3 uses `zero3_gather`: "micro_batch" (gather per micro-batch forward and backward, reduce-scatter
  per micro-batch) or "step" (torch.distributed.pipelining with FSDP2: resharding and gradient sync
  are disabled for all but the last micro-batch, so one gather and one reduce-scatter per step, with the
  stage's full parameters and gradients resident through the step).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from baige_plan.errors import require

GRADS = ("step", "micro_batch")
OVERLAP = ("backward", "none")
PARAMS = ("none", "next_forward", "after_step")


@dataclass(frozen=True)
class GradSync:
    grads: str = "step"
    overlap: str = "backward"
    params: str = "next_forward"

    def __post_init__(self) -> None:
        require(self.grads in GRADS, "grads", f"must be one of {GRADS}, got {self.grads!r}")
        require(self.overlap in OVERLAP, "overlap", f"must be one of {OVERLAP}, got {self.overlap!r}")
        require(self.params in PARAMS, "params", f"must be one of {PARAMS}, got {self.params!r}")


@dataclass(frozen=True)
class RuntimeSpec:
    """One runtime: its space (what combinations it accepts), its schedules and its execution
    semantics. `refuse` returns the reason a strategy cannot run on it, or None; the search and
    `evaluate --runtime` both use it, so a plan never names a combination its runtime refuses."""

    name: str
    title: str                         # what it is, e.g. "Megatron-LM / Megatron-core (NeMo, Megatron-Bridge)"
    package: str                       # the registry package whose parser the exports target
    version: str                       # pinned version the exports target (printed in every export)
    zero_stages: tuple[int, ...]       # ZeRO stages it runs (0 = plain DDP)
    zero_stages_with_pp: tuple[int, ...]
    interleaved: bool                  # vpp > 1 (interleaved 1F1B)
    context_parallel: bool             # ring-attention CP (cp > 1)
    expert_parallel: bool              # ep > 1
    expert_tensor_parallel: bool       # etp > 1
    uneven_split: bool                 # first/last stage layer counts
    sequence_parallel: str             # "optional" | "always" (SP on whenever tp > 1) | "never"
    recompute: tuple[str, ...]
    precisions: tuple[str, ...]
    heterogeneous: bool                # pipelines whose stages run on different chip groups
    schedules: tuple[str, ...]         # pipeline schedules it runs (names as the runtime spells them)
    execution: str                     # "fused" | "eager": how it runs non-GEMM work (cost/execution.py)
    zero3_impl: str                    # "fsdp" (one collective per layer) | "deepspeed" (per weight, flat)
    zero3_gather: Callable[[int], str]  # pp -> "micro_batch" | "step"
    grad_sync: Callable[[int, int], GradSync]   # (zero, pp) -> GradSync
    tp_comm_overlap: bool = False      # TP collectives overlapped with GEMMs (plans assume off unless set)
    grad_bytes: int = 4                # gradient buffer bytes per parameter (fp32 main grads)
    notes: tuple[str, ...] = field(default_factory=tuple)   # sources for the semantics above
    extra_refusal: Callable[..., str | None] | None = None   # runtime-specific rules (model, job, strategy)

    def violation(self, *, zero=None, pp=None, vpp=None, cp=None, ep=None, etp=None, uneven=None, tp=None,
                  sequence_parallel=None, recompute=None, precision=None) -> tuple[str, str] | None:
        """(field, reason naming the values) of the first declared rule the given values break; None when
        none does. A value left None is not known yet (a pin not given) and breaks nothing: `refusal`
        passes a whole strategy, `plan` its pins."""
        if zero is not None and zero not in self.zero_stages:
            return "zero", f"{self.name} runs ZeRO stages {list(self.zero_stages)}, not zero={zero}"
        if zero is not None and pp is not None and pp > 1 and zero not in self.zero_stages_with_pp:
            return "zero", (f"{self.name} runs ZeRO stages {list(self.zero_stages_with_pp)} with pipeline "
                            f"parallelism, not zero={zero} with pp={pp}")
        if vpp is not None and vpp > 1 and not self.interleaved:
            return "vpp", f"{self.name} has no interleaved pipeline schedule (vpp={vpp})"
        if cp is not None and cp > 1 and not self.context_parallel:
            return "cp", f"{self.name} has no context parallelism (cp={cp})"
        if ep is not None and ep > 1 and not self.expert_parallel:
            return "ep", f"{self.name} has no expert parallelism (ep={ep})"
        if etp is not None and etp > 1 and not self.expert_tensor_parallel:
            return "etp", f"{self.name} has no expert tensor parallelism (etp={etp})"
        if uneven and not self.uneven_split:
            return "pp", f"{self.name} cannot set first/last pipeline stage layer counts"
        if sequence_parallel is False and self.sequence_parallel == "always" and (tp is None or tp > 1):
            return "sequence_parallel", (f"{self.name} always runs sequence parallelism with tensor parallelism "
                                         f"(tp={tp})")
        if sequence_parallel and self.sequence_parallel == "never":
            return "sequence_parallel", f"{self.name} has no Megatron-style sequence parallelism"
        if recompute is not None and recompute not in self.recompute:
            return "recompute", f"{self.name} runs recompute {list(self.recompute)}, not {recompute!r}"
        if precision is not None and precision not in self.precisions:
            return "precision", f"{self.name} runs precisions {list(self.precisions)}, not {precision}"
        return None

    def refusal(self, s, model=None, job=None) -> str | None:
        """Why `s` (a StrategySpec) cannot run on this runtime, naming the values; None when it can."""
        v = self.violation(zero=s.zero, pp=s.pp, vpp=s.vpp, cp=s.cp, ep=s.ep, etp=s.etp,
                           uneven=bool(s.first_stage_layers or s.last_stage_layers), tp=s.tp,
                           sequence_parallel=bool(s.sequence_parallel) if s.tp > 1 else None,
                           recompute=s.recompute, precision=job.precision if job is not None else None)
        if v is not None:
            return v[1]
        if self.extra_refusal is not None:
            return self.extra_refusal(s, model, job)
        return None
