"""The homogeneous strategy space: every valid (tp, pp, dp, cp, ep, etp, zero, micro-batch, vpp,
recompute, sequence parallel, layer split) for a model, a one-group cluster and a job.

Rules (the same ones `specs.strategy.check_strategy` enforces, plus the space's own):
  world: tp·pp·cp·dp = devices; tp divides heads, kv_heads, ffn_hidden; tp <= max_tp (default
  devices per node) and, when tp <= devices per node, tp divides it (TP groups never straddle nodes);
  layers: split evenly over pp·vpp, or, only when layers % pp != 0 (vpp 1), Megatron's uneven
  first/last split (`uneven_splits`); batch: global_batch % (dp·micro_batch) == 0; cp: seq_len %
  (2·cp) == 0; SP (tp > 1 only): (seq_len/cp) % tp == 0; MoE: experts % ep, ep | tp·cp·dp/etp,
  expert_ffn_hidden % etp, etp <= max_tp; vpp > 1 needs micro-batches % pp == 0.
  Attention stays "flash" unless pinned. Pins fix a dimension; bounds cap tp, pp, cp, micro-batch.

A candidate is a plain tuple (`Cand`), sortable: the deterministic tie-break of the search.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from baige_plan import runtimes
from baige_plan.errors import SpecError
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import ATTENTION, RECOMPUTE, StrategySpec

# (tp, pp, dp, cp, ep, etp, zero, micro_batch, vpp, recompute index, sp 0/1, first, last, attention index)
# all ints; first/last = 0 means "not set" (even split). Sorting these tuples is the tie-break.
Cand = tuple
FIELDS = ("tp", "pp", "dp", "cp", "ep", "etp", "zero", "micro_batch", "vpp", "recompute", "sp", "first", "last",
          "attention")
COL = {k: i for i, k in enumerate(FIELDS)}


@dataclass(frozen=True)
class Bounds:
    max_tp: int | None = None         # default: devices per node
    max_pp: int | None = None         # default: layers
    max_cp: int | None = None         # default: no cap beyond divisibility
    max_micro_batch: int = 16
    max_memory_frac: float = 0.9
    runtime: str = "megatron"         # baige_plan/runtimes/: the space keeps to what it runs

    def __post_init__(self) -> None:
        for k in ("max_tp", "max_pp", "max_cp", "max_micro_batch"):
            v = getattr(self, k)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise SpecError(f"--{k.replace('_', '-')}", f"must be a positive integer, got {v!r}")
        runtimes.get(self.runtime)   # raises on an unknown name
        if not 0 < self.max_memory_frac <= 1:
            raise SpecError("--max-memory-frac", f"must be in (0, 1], got {self.max_memory_frac}")


@dataclass(frozen=True)
class Pins:
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    cp: int | None = None
    ep: int | None = None
    etp: int | None = None
    zero: int | None = None
    micro_batch: int | None = None
    vpp: int | None = None
    recompute: str | None = None
    sequence_parallel: bool | None = None
    attention: str = "flash"


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def uneven_splits(layers: int, pp: int) -> list[tuple[int, int]]:
    """(first, last) stage layer counts (0 = not set) when layers % pp != 0: the last stage, or the
    first and last stages together, take x layers, x within 2 of layers/pp, the middle stages an
    equal share >= x (Megatron --decoder-first/last-pipeline-num-layers)."""
    if pp < 2 or layers % pp == 0:
        return []
    out = []
    lo, hi = max(1, layers // pp - 2), -(-layers // pp)
    for x in range(lo, hi + 1):
        rest = layers - x
        if rest % (pp - 1) == 0 and rest // (pp - 1) >= x:
            out.append((0, x))
        if pp > 2:
            rest = layers - 2 * x
            if rest > 0 and rest % (pp - 2) == 0 and rest // (pp - 2) >= x:
                out.append((x, x))
    return out


def _pick(pin, values):
    return [pin] if pin is not None else values


def enumerate_space(model: ModelSpec, devices: int, devices_per_node: int, job: JobSpec,
                    bounds: Bounds = Bounds(), pins: Pins = Pins()) -> Iterator[Cand]:
    """Every valid candidate the runtime (`bounds.runtime`) runs, built by construction (no trial and
    error): its ZeRO stages (with and without pipeline parallelism), interleaving, CP, EP/ETP, uneven
    splits, sequence-parallel rule and recompute modes prune the loops; its extra rules (e.g.
    DeepSpeed-MoE without the PipelineEngine) are checked per candidate."""
    rt = runtimes.get(bounds.runtime)
    if job.precision not in rt.precisions:
        return
    L, gb, seq = model.layers, job.global_batch, job.seq_len
    max_tp = bounds.max_tp or devices_per_node
    max_pp = bounds.max_pp or L
    recs = [RECOMPUTE.index(r) for r in ([pins.recompute] if pins.recompute else RECOMPUTE) if r in rt.recompute]
    zeros = [z for z in _pick(pins.zero, [0, 1, 2, 3]) if z in rt.zero_stages]
    att = ATTENTION.index(pins.attention)
    extra = rt.extra_refusal
    for tp in _pick(pins.tp, divisors(devices)):
        if tp > max_tp or devices % tp or model.heads % tp or model.kv_heads % tp or model.ffn_hidden % tp:
            continue
        if tp <= devices_per_node and devices_per_node % tp:
            continue
        for pp in _pick(pins.pp, divisors(devices // tp) if devices % tp == 0 else []):
            if pp > max_pp or (devices // tp) % pp:
                continue
            splits = [(0, 0)] if L % pp == 0 else (uneven_splits(L, pp) if rt.uneven_split else [])
            if not splits:
                continue
            pp_zeros = [z for z in zeros if pp == 1 or z in rt.zero_stages_with_pp]
            rest = devices // (tp * pp)
            for cp in _pick(pins.cp, divisors(rest) if rt.context_parallel else [1]):
                if rest % cp or (bounds.max_cp and cp > bounds.max_cp) or (cp > 1 and seq % (2 * cp)):
                    continue
                dp = rest // cp
                if pins.dp is not None and dp != pins.dp:
                    continue
                sps = [False] if tp == 1 else {"optional": [True, False], "always": [True], "never": [False]}[
                    rt.sequence_parallel]
                if pins.sequence_parallel is not None:
                    sps = [sp for sp in sps if sp == (pins.sequence_parallel and tp > 1)]
                sps = [sp for sp in sps if not sp or (seq // cp) % tp == 0]
                if not sps or gb % dp:
                    continue
                for ep, etp in _expert_dims(model, tp * cp * dp, max_tp, pins):
                    if (ep > 1 and not rt.expert_parallel) or (etp > 1 and not rt.expert_tensor_parallel):
                        continue
                    for mb in _pick(pins.micro_batch, divisors(gb // dp)):
                        if mb > bounds.max_micro_batch and pins.micro_batch is None:
                            continue
                        if (gb // dp) % mb:
                            continue
                        m = gb // (dp * mb)
                        for first, last in splits:
                            vpps = [1]
                            if pp > 1 and first == last == 0 and rt.interleaved:
                                vpps = [v for v in divisors(L // pp) if v == 1 or m % pp == 0]
                            for vpp in _pick(pins.vpp, vpps):
                                if vpp not in vpps:
                                    continue
                                for rec in recs:
                                    for sp in sps:
                                        for zero in pp_zeros:
                                            c = (tp, pp, dp, cp, ep, etp, zero, mb, vpp, rec, int(sp), first, last, att)
                                            if extra is None or extra(to_strategy(c, bounds.runtime), model, job) is None:
                                                yield c


def space_array(model: ModelSpec, devices: int, devices_per_node: int, job: JobSpec,
                bounds: Bounds = Bounds(), pins: Pins = Pins()) -> np.ndarray:
    """The space as an int64 array, one row per candidate (columns: FIELDS)."""
    rows = list(enumerate_space(model, devices, devices_per_node, job, bounds, pins))
    return np.array(rows, dtype=np.int64).reshape(len(rows), len(FIELDS))


def _expert_dims(model: ModelSpec, folded: int, max_tp: int, pins: Pins) -> list[tuple[int, int]]:
    if model.moe is None:
        ok = (pins.ep in (None, 1)) and (pins.etp in (None, 1))
        return [(1, 1)] if ok else []
    out = []
    for etp in _pick(pins.etp, divisors(folded)):
        if etp > max_tp or folded % etp or model.moe.expert_ffn_hidden % etp:
            continue
        for ep in _pick(pins.ep, divisors(folded // etp)):
            if (folded // etp) % ep == 0 and model.moe.experts % ep == 0:
                out.append((ep, etp))
    return out


def to_strategy(c: Cand, runtime: str = runtimes.DEFAULT) -> StrategySpec:
    """The candidate as a strategy run (and costed) by `runtime`."""
    tp, pp, dp, cp, ep, etp, zero, mb, vpp, rec, sp, first, last, att = c
    return StrategySpec(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, zero=zero, micro_batch=mb, vpp=vpp,
                        recompute=RECOMPUTE[rec], sequence_parallel=bool(sp), attention=ATTENTION[att],
                        first_stage_layers=first or None, last_stage_layers=last or None, **runtimes.knobs(runtime))


def from_strategy(s: StrategySpec) -> Cand:
    return (s.tp, s.pp, s.dp, s.cp, s.ep, s.etp, s.zero, s.micro_batch, s.vpp, RECOMPUTE.index(s.recompute),
            int(bool(s.sequence_parallel)), s.first_stage_layers or 0, s.last_stage_layers or 0,
            ATTENTION.index(s.attention))
