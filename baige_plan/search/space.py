"""The homogeneous strategy space: every valid (tp, pp, dp, cp, ep, etp, zero, micro-batch, vpp,
recompute, sequence parallel, layer split, EP all-to-all overlap) for a model, a one-group cluster and a job.

Rules (the same ones `specs.strategy.check_strategy` enforces, plus the space's own):
  world: tp·pp·cp·dp = devices; tp divides heads, kv_heads, ffn_hidden; tp <= max_tp (default
  devices per node) and, when tp <= devices per node, tp divides it (TP groups never straddle nodes);
  layers: split evenly over pp·vpp, or, only when layers % (pp·vpp) != 0, Megatron's uneven first/last
  split or its embedding/loss accounting, interleaved where the runtime runs that (`uneven_splits`,
  `split_family`); batch: global_batch % (dp·micro_batch) == 0; cp: seq_len %
  (2·cp) == 0; SP (tp > 1 only): (seq_len/cp) % tp == 0; MoE: experts % ep, ep | tp·cp·dp/etp,
  expert_ffn_hidden % etp, etp <= max_tp; vpp > 1 needs micro-batches % pp == 0; EP all-to-all overlap
  (megatron, flagscale) with ep > 1, no full recomputation, vpp > 1 when pp > 1 (`a2a_choices`).
  Attention stays "flash" unless pinned. Pins fix a dimension; bounds cap tp, pp, cp, micro-batch.

A candidate is a plain tuple (`Cand`), sortable: the deterministic tie-break of the search.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from baige_plan.errors import SpecError
from baige_plan.limits import MAX_CANDIDATES, MAX_DEVICES
from baige_plan.specs import runtimes
from baige_plan.specs.frozen import make
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import ATTENTION, RECOMPUTE, StrategySpec, a2a_overlap_refusal, chunk_layers

# (tp, pp, dp, cp, ep, etp, zero, micro_batch, vpp, recompute index, sp 0/1, first, last, attention index,
# account, a2a 0/1) all ints; first/last = 0 means "not set" (even split); account: bit 1 the embedding, bit 2 the
# loss counted as a pipeline layer (Megatron account_for_*); a2a: Megatron-core's EP all-to-all overlap
# (StrategySpec.moe_a2a_overlap); order: Megatron's rank order, 0 tp-cp-ep-dp-pp, 1 tp-cp-ep-pp-dp
# (StrategySpec.tp_pp_dp_mapping); shard: hybrid sharding's group (StrategySpec.fsdp_shard, 0 = shard over all dp·cp
# ranks; `shard_choices`). Sorting these tuples is the tie-break.
Cand = tuple
FIELDS = ("tp", "pp", "dp", "cp", "ep", "etp", "zero", "micro_batch", "vpp", "recompute", "sp", "first", "last",
          "attention", "account", "a2a", "order", "shard")
COL = {k: i for i, k in enumerate(FIELDS)}
# StrategySpec field -> the candidate column that sets it (_strategy_fields)
_CAND_INDEX = {**{k: COL[k] for k in FIELDS[:10]}, "sequence_parallel": COL["sp"], "first_stage_layers": COL["first"],
               "last_stage_layers": COL["last"], "attention": COL["attention"], "account_for_embedding": COL["account"],
               "account_for_loss": COL["account"], "moe_a2a_overlap": COL["a2a"], "tp_pp_dp_mapping": COL["order"],
               "fsdp_shard": COL["shard"]}


@dataclass(frozen=True)
class Bounds:
    max_tp: int | None = None         # default: devices per node
    max_pp: int | None = None         # default: layers
    max_cp: int | None = None         # default: no cap beyond divisibility
    max_micro_batch: int = 16
    max_memory_frac: float = 0.9
    runtime: str = "megatron"         # baige_plan/specs/runtimes/: the space keeps to what it runs

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
    # the layer split: first/last stage layer counts, or embedding/loss accounting (None: searched)
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    account_for_embedding: bool | None = None
    account_for_loss: bool | None = None
    moe_a2a_overlap: bool | None = None   # None: searched where the runtime runs it (`a2a_choices`)
    tp_pp_dp_mapping: bool | None = None  # None: both rank orders where they differ (`order_choices`)
    fsdp_shard: int | None = None       # None: full and hybrid sharding where the runtime runs both (`shard_choices`)

    @property
    def split_pinned(self) -> bool:
        return self.first_stage_layers is not None or self.last_stage_layers is not None or \
            bool(self.account_for_embedding) or bool(self.account_for_loss)


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending: trial division up to sqrt(n), O(sqrt n) (n is a device count, a
    batch or a layer count, bounded by baige_plan/limits.py)."""
    if n < 1:
        return []
    small, large = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
    return small + large[::-1]


def uneven_splits(layers: int, pp: int, vpp: int = 1, first_last: bool = True, accounting: bool = False
                  ) -> list[tuple[int, int, int]]:
    """(first, last, account) splits when layers % (pp·vpp) != 0 (first/last 0 = not set; account bit 1 the
    embedding, bit 2 the loss counted as a layer). first_last: the last stage, or the first and last stages
    together, take x layers, x within 2 of layers/pp, the middle stages an equal share >= x (Megatron
    --decoder-first/last-pipeline-num-layers); with vpp > 1 x and the share are multiples of vpp.
    accounting: the embedding, the loss or both count as one layer of the first/last stage, pp divides
    layers + those and vpp the per-stage share (--account-for-embedding/loss-in-pipeline-split); one whose
    stage counts a first/last split above already gives is left out (the same cost)."""
    if pp < 2 or layers % (pp * vpp) == 0:
        return []
    out: list[tuple[int, int, int]] = []
    seen: set[tuple[int, ...]] = set()   # stage counts of the first/last splits
    if first_last:
        lo, hi = max(1, layers // pp - 2), -(-layers // pp)
        for x in range(lo, hi + 1):
            if x % vpp:
                continue
            rest = layers - x
            share = rest // (pp - 1)
            if rest % (pp - 1) == 0 and share >= x and share % vpp == 0:
                out.append((0, x, 0))
                seen.add((share,) * (pp - 1) + (x,))
            if pp > 2:
                rest = layers - 2 * x
                share = rest // (pp - 2)
                if rest > 0 and rest % (pp - 2) == 0 and share >= x and share % vpp == 0:
                    out.append((x, x, 0))
                    seen.add((x,) + (share,) * (pp - 2) + (x,))
    if accounting:
        for acc in (1, 2, 3):
            e, lo_ = acc & 1, acc >> 1
            total = layers + e + lo_
            per = total // pp
            if total % pp or per % vpp or per < 2:   # at least one transformer layer per stage
                continue
            counts = (per - e,) + (per,) * (pp - 2) + (per - lo_,)
            if counts not in seen:
                out.append((0, 0, acc))
    return out


def split_family(layers: int, pp: int, runtime: str, pins: Pins = Pins()) -> tuple[tuple[int, int, int, int], ...]:
    """Every (vpp, first, last, account) layer split the space holds for `pp`: the even split over pp·vpp
    (vpp | layers/pp), else `uneven_splits` (vpp 1, and vpp > 1 where the runtime interleaves them), as the
    runtime runs them. A pinned split (first/last counts or accounting flags) replaces the family: it is
    kept for every vpp Megatron's rule (specs/strategy.py chunk_layers) accepts it with."""
    return _split_family(layers, pp, runtime, pins.first_stage_layers, pins.last_stage_layers,
                         pins.account_for_embedding, pins.account_for_loss)


@functools.lru_cache(maxsize=4096)
def _split_family(layers: int, pp: int, runtime: str, first: int | None, last: int | None,
                  acc_e: bool | None, acc_l: bool | None) -> tuple[tuple[int, int, int, int], ...]:
    rt = runtimes.get(runtime)
    vmax = -(-layers // pp) + 1 if pp > 1 and rt.interleaved else 1
    out: list[tuple[int, int, int, int]] = []
    if first is not None or last is not None or acc_e or acc_l:
        if pp < 2:
            return ()
        f, la = first or 0, last or 0
        if f or la:
            if acc_e or acc_l or not rt.uneven_split:
                return ()
            accs = [0]
        else:   # a flag left unpinned may take either value
            if not rt.split_accounting:
                return ()
            accs = [a for a in (1, 2, 3) if (acc_e is None or bool(a & 1) == acc_e)
                    and (acc_l is None or bool(a & 2) == acc_l)]
        for v in range(1, vmax + 1):
            if v > 1 and (f or la) and not rt.uneven_interleaved:
                continue
            for acc in accs:
                try:
                    chunk_layers(StrategySpec(pp=pp, vpp=v, first_stage_layers=first, last_stage_layers=last,
                                              account_for_embedding=bool(acc & 1), account_for_loss=bool(acc & 2)),
                                 layers)
                except SpecError:
                    continue
                out.append((v, f, la, acc))
        return tuple(out)
    for v in range(1, vmax + 1):
        if pp > 1 and layers % (pp * v) == 0:
            out.append((v, 0, 0, 0))
        elif pp == 1 and v == 1:
            out.append((1, 0, 0, 0))
        elif v == 1 and rt.balanced_partition and layers >= pp:
            out.append((1, 0, 0, 0))    # the runtime splits uneven counts itself (StrategySpec.balanced_partition)
        elif rt.uneven_split:
            fl = v == 1 or rt.uneven_interleaved
            for f, la, acc in uneven_splits(layers, pp, v, first_last=fl, accounting=rt.split_accounting):
                if (acc & 1 and acc_e is False) or (acc & 2 and acc_l is False):
                    continue
                out.append((v, f, la, acc))
    return tuple(out)


def _pick(pin, values):
    return [pin] if pin is not None else values


def a2a_choices(model: ModelSpec, runtime: str, ep: int, pp: int, vpp: int, recompute: str,
                pin: bool | None = None) -> tuple[int, ...]:
    """The EP all-to-all overlap settings (0 off, 1 on) a candidate may take: on only where megatron-core runs
    it (specs/strategy.py a2a_overlap_refusal: an MoE model, a runtime with its combined 1F1B, ep > 1, no full
    recomputation, a virtual pipeline when pp > 1); a pin keeps one value."""
    ok = a2a_overlap_refusal(model=model, runtime=runtime, ep=ep, pp=pp, vpp=vpp, recompute=recompute) is None
    vals = (0, 1) if ok else (0,)
    return vals if pin is None else tuple(v for v in vals if v == int(pin))


def order_choices(runtime: str, pp: int, dp: int, pin: bool | None = None) -> tuple[int, ...]:
    """The rank orders (0 Megatron's default tp-cp-ep-dp-pp, 1 tp-cp-ep-pp-dp) a candidate may take: both where the
    runtime has the second (RuntimeSpec.tp_pp_dp_mapping) and they place ranks differently (pp > 1 and dp > 1);
    a pin keeps one value."""
    vals = (0, 1) if runtimes.get(runtime).tp_pp_dp_mapping and pp > 1 and dp > 1 else (0,)
    return vals if pin is None else tuple(v for v in vals if v == int(pin))


def shard_choices(runtime: str, zero: int, tp: int, dp: int, cp: int, ep: int, devices_per_node: int,
                  pin: int | None = None) -> tuple[int, ...]:
    """The sharding groups (StrategySpec.fsdp_shard) a candidate may take: 0 (over all dp·cp ranks) and, where the
    runtime runs hybrid sharding at this ZeRO stage (RuntimeSpec.hsdp_zero), the node's share of the dp·cp ranks,
    S = devices_per_node / tp in Megatron's default order (FSDP1 HYBRID_SHARD's node; torchtitan dp_shard x cp), when
    the ranks span more than one such group (1 < S < dp·cp, S divides dp·cp, cp divides S) and there is no expert
    parallelism (not modelled with it); a pin keeps one value."""
    vals: tuple[int, ...] = (0,)
    n = dp * cp
    if zero in runtimes.get(runtime).hsdp_zero and ep == 1 and tp <= devices_per_node:
        share = devices_per_node // tp
        if 1 < share < n and n % share == 0 and share % cp == 0:
            vals = (0, share)
    return vals if pin is None else tuple(v for v in vals if v == pin)


def enumerate_space(model: ModelSpec, devices: int, devices_per_node: int, job: JobSpec,
                    bounds: Bounds = Bounds(), pins: Pins = Pins()) -> Iterator[Cand]:
    """Every valid candidate the runtime (`bounds.runtime`) runs, built by construction (no trial and
    error): its ZeRO stages (with and without pipeline parallelism), interleaving, CP, EP/ETP, uneven
    splits, sequence-parallel rule and recompute modes prune the loops; its extra rules (e.g.
    DeepSpeed-MoE without the PipelineEngine) are checked per candidate."""
    rt = runtimes.get(bounds.runtime)
    if devices > MAX_DEVICES:      # a guard for callers that did not check the cluster (limits.py)
        raise SpecError("devices", f"{devices:,} devices exceed the limit of {MAX_DEVICES:,}")
    if job.precision not in rt.precisions:
        return
    L, gb, seq = model.layers, job.global_batch, job.seq_len
    max_tp = bounds.max_tp or devices_per_node
    max_pp = bounds.max_pp or L
    recs = [RECOMPUTE.index(r) for r in ([pins.recompute] if pins.recompute else RECOMPUTE) if r in rt.recompute]
    zeros = [z for z in _pick(pins.zero, [0, 1, 2, 3]) if z in rt.zero_stages]
    att = ATTENTION.index(pins.attention)
    extra = rt.extra_refusal
    base = StrategySpec(**runtimes.knobs(bounds.runtime))   # the runtime's knobs, for `_probe`
    # a rule that declares the fields it reads is asked once per distinct value of them (RuntimeSpec.extra_refusal_reads)
    reads = tuple(_CAND_INDEX[f] for f in rt.extra_refusal_reads) if extra is not None else ()
    refused: dict[tuple[int, ...], bool] = {}
    for tp in _pick(pins.tp, divisors(devices)):
        if tp > max_tp or devices % tp or model.heads % tp or model.kv_heads % tp or model.ffn_hidden % tp:
            continue
        if tp <= devices_per_node and devices_per_node % tp:
            continue
        for pp in _pick(pins.pp, divisors(devices // tp) if devices % tp == 0 else []):
            if pp > max_pp or (devices // tp) % pp:
                continue
            layouts = split_family(L, pp, bounds.runtime, pins)   # (vpp, first, last, account)
            if not layouts:
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
                orders = order_choices(bounds.runtime, pp, dp, pins.tp_pp_dp_mapping)
                if not orders:
                    continue
                for ep, etp in _expert_dims(model, tp * cp * dp, max_tp, pins):
                    if (ep > 1 and not rt.expert_parallel) or (etp > 1 and not rt.expert_tensor_parallel):
                        continue
                    shard_sets = {z: shard_choices(bounds.runtime, z, tp, dp, cp, ep, devices_per_node, pins.fsdp_shard)
                                  for z in pp_zeros}
                    for mb in _pick(pins.micro_batch, divisors(gb // dp)):
                        if mb > bounds.max_micro_batch and pins.micro_batch is None:
                            continue
                        if (gb // dp) % mb:
                            continue
                        m = gb // (dp * mb)
                        for vpp, first, last, acc in layouts:
                            if (vpp > 1 and m % pp) or (pins.vpp is not None and vpp != pins.vpp):
                                continue
                            for rec in recs:
                                a2as = a2a_choices(model, bounds.runtime, ep, pp, vpp, RECOMPUTE[rec],
                                                   pins.moe_a2a_overlap)
                                if not a2as:
                                    continue
                                for sp in sps:
                                    for zero in pp_zeros:
                                        # runtimes' own rules (RuntimeSpec.extra_refusal) do not read the EP overlap:
                                        # asked once for both settings
                                        shards = shard_sets[zero]
                                        if not shards:
                                            continue
                                        c = (tp, pp, dp, cp, ep, etp, zero, mb, vpp, rec, int(sp), first, last, att,
                                             acc, a2as[0], orders[0], shards[0])
                                        if extra is None:
                                            ok = True
                                        elif reads:
                                            key = tuple(c[i] for i in reads)
                                            ok = refused.get(key)
                                            if ok is None:
                                                ok = refused[key] = extra(_probe(c, base), model, job) is None
                                        else:
                                            ok = extra(_probe(c, base), model, job) is None
                                        if ok:
                                            for a2a in a2as:
                                                for order in orders:
                                                    for shard in shards:
                                                        yield c[:-3] + (a2a, order, shard)


def space_array(model: ModelSpec, devices: int, devices_per_node: int, job: JobSpec,
                bounds: Bounds = Bounds(), pins: Pins = Pins()) -> np.ndarray:
    """The space as an int64 array, one row per candidate (columns: FIELDS)."""
    rows = []
    for c in enumerate_space(model, devices, devices_per_node, job, bounds, pins):
        rows.append(c)
        if len(rows) > MAX_CANDIDATES:      # a size guard: bounded time and memory whatever the input
            raise SpecError("search space", f"more than {MAX_CANDIDATES:,} candidate strategies (the largest real "
                            "spaces have ~400,000); pin or cap dimensions: --tp, --pp, --cp, --ep, --micro-batch, "
                            "--max-tp, --max-pp, --max-cp, --max-micro-batch")
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


def _probe(c: Cand, base: StrategySpec) -> StrategySpec:
    """`to_strategy(c)` for the runtime's own refusal (RuntimeSpec.extra_refusal), without re-running
    StrategySpec's field checks on every candidate of a space of millions: `enumerate_space` builds its candidates
    valid by construction (tests/test_search.py: the same set as the oracle's, which checks each strategy), and
    only the candidates it keeps are built with the checks (`to_strategy`). `base`: the runtime's knobs."""
    s = object.__new__(StrategySpec)
    s.__dict__.update(base.__dict__)
    s.__dict__.update(_strategy_fields(c))
    return s


def _strategy_fields(c: Cand) -> dict:
    """The StrategySpec fields candidate c sets (the runtime's knobs aside)."""
    tp, pp, dp, cp, ep, etp, zero, mb, vpp, rec, sp, first, last, att, acc, a2a, order, shard = c
    return dict(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, zero=zero, micro_batch=mb, vpp=vpp,
                recompute=RECOMPUTE[rec], sequence_parallel=bool(sp), attention=ATTENTION[att],
                first_stage_layers=first or None, last_stage_layers=last or None,
                account_for_embedding=bool(acc & 1), account_for_loss=bool(acc & 2), moe_a2a_overlap=bool(a2a),
                tp_pp_dp_mapping=bool(order), fsdp_shard=int(shard))


def to_strategy(c: Cand, runtime: str = runtimes.DEFAULT) -> StrategySpec:
    """The candidate as a strategy run (and costed) by `runtime`."""
    # make: StrategySpec(...) with its checks, without its frozen __init__'s 45 object.__setattr__ calls
    return make(StrategySpec, **_strategy_fields(c), **runtimes.knobs(runtime))


def from_strategy(s: StrategySpec) -> Cand:
    return (s.tp, s.pp, s.dp, s.cp, s.ep, s.etp, s.zero, s.micro_batch, s.vpp, RECOMPUTE.index(s.recompute),
            int(bool(s.sequence_parallel)), s.first_stage_layers or 0, s.last_stage_layers or 0,
            ATTENTION.index(s.attention), int(s.account_for_embedding) | 2 * int(s.account_for_loss),
            int(bool(s.moe_a2a_overlap)), int(bool(s.tp_pp_dp_mapping)), int(s.fsdp_shard))
