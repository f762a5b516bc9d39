"""Measured per-layer profile of one model on one chip (schema baige-plan/profile/v1).

What the heterogeneous planners in the literature consume (Metis, Sailor, AMP, FlashFlex): per
transformer layer, for each (tensor-parallel size, micro-batch, recomputation) measured, the
forward and backward seconds on one device, the activation bytes it stores for the backward, the
bytes it sends to the next stage, its parameter bytes; the embedding and the logits + loss
"layers" separately; and the optimizer step (seconds per locally owned parameter).

The cost model (cost/estimate.py `stage_cost`) uses an entry for a stage whose strategy matches
it (same tp, micro-batch and recomputation, cp = 1, the profile's attention kernels) on a job of
the profile's sequence length and precision, and the analytical model for everything else:
MoE layers, other strategies, and all communication (TP/CP/EP/PP/DP), which the profile does
not measure (tp is emulated on one device by dividing heads, kv_heads and ffn_hidden by tp).

Frozen, hashable (tuples and frozen dataclasses), validates itself (SpecError).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from baige_plan.errors import SpecError, require
from baige_plan.specs.job import PRECISIONS

SCHEMA = "baige-plan/profile/v1"
RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("flash", "standard")
EXECUTION = ("fused", "eager")
METHODS = ("measured", "analytical", "published")
# model fields a profile is matched on (besides the name, which only warns)
SHAPE_FIELDS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "activation")


MAX_SECONDS = 1e6      # one layer's forward or backward on one device (11.6 days): beyond it, a unit error
MAX_BYTES = 1e18       # 1 EB on one device


def _num(v, name: str, positive: bool = False) -> None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v > 0 if positive else v >= 0)
    require(ok, name, f"must be a {'positive' if positive else 'non-negative'} number, got {v!r}")
    hi = MAX_BYTES if name.endswith("_bytes") else MAX_SECONDS if name.endswith("_s") else None
    if hi is not None and v > hi:
        require(False, name, f"must be at most {hi:g} ({'bytes' if hi == MAX_BYTES else 'seconds'}), got {v!r}")


def _opt_num(v, name: str) -> None:
    if v is not None:
        _num(v, name)


def _pos_int(v, name: str) -> None:
    require(isinstance(v, int) and not isinstance(v, bool) and v > 0, name, f"must be a positive integer, got {v!r}")


@dataclass(frozen=True)
class ProfiledModel:
    """The model a profile was measured for: its name and the shape fields that matter."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    activation: str
    head_dim: int | None = None

    def __post_init__(self) -> None:
        require(isinstance(self.name, str) and bool(self.name), "model.name", "must be a non-empty string")
        for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab"):
            _pos_int(getattr(self, k), f"model.{k}")
        if self.head_dim is not None:
            _pos_int(self.head_dim, "model.head_dim")
        require(isinstance(self.activation, str) and bool(self.activation), "model.activation",
                "must be a non-empty string")

    def mismatch(self, model) -> tuple[str, str] | None:
        """(field, reason) when `model` (a ModelSpec) does not have this shape, else None."""
        for k in SHAPE_FIELDS:
            mine, theirs = getattr(self, k), getattr(model, k)
            if mine != theirs:
                return f"model.{k}", f"profile measured {k}={mine!r}, the model {model.name!r} has {theirs!r}"
        if self.head_dim is not None and self.head_dim != model.head_dim:
            return "model.head_dim", (f"profile measured head_dim={self.head_dim}, the model {model.name!r} has "
                                      f"{model.head_dim}")
        return None

    def matches(self, model) -> bool:
        return self.mismatch(model) is None


@dataclass(frozen=True)
class LayerProfile:
    """One transformer layer on one device, per micro-batch.

    forward_s / backward_s: compute seconds (no TP/CP/EP communication); backward_s excludes
    recomputation, recompute_s is what recomputation adds to the backward under the entry's
    recompute mode (0 for none). activation_bytes: stored for the backward (under that mode);
    working_bytes: one layer's activations without recomputation (the working set a full-recompute
    backward rebuilds); output_bytes: the layer's output (what a pipeline boundary sends, before
    Megatron's scatter-gather /tp); parameter_bytes: this device's share of the layer's parameters;
    optimizer_s: the optimizer step of this layer's parameters (informational; the cost model uses
    the entry's optimizer_s_per_param). Each may be absent (null): the analytical value is used."""

    forward_s: float | None = None
    backward_s: float | None = None
    recompute_s: float = 0.0
    activation_bytes: float | None = None
    working_bytes: float | None = None
    output_bytes: float | None = None
    parameter_bytes: float | None = None
    optimizer_s: float | None = None

    def __post_init__(self) -> None:
        for k in ("forward_s", "backward_s", "activation_bytes", "working_bytes", "output_bytes",
                  "parameter_bytes", "optimizer_s"):
            _opt_num(getattr(self, k), k)
        _num(self.recompute_s, "recompute_s")
        require((self.forward_s is None) == (self.backward_s is None), "backward_s",
                "forward_s and backward_s come together (both measured or both absent)")
        for k in ("forward_s", "backward_s"):       # a transformer layer takes time: 0 is a broken measurement
            v = getattr(self, k)
            require(v is None or v > 0, k, f"must be > 0 seconds for a transformer layer, got {v!r}")

    @property
    def has_times(self) -> bool:
        return self.forward_s is not None


@dataclass(frozen=True)
class PartProfile:
    """The embedding, or the output layer with its loss (final norm + logits GEMM + cross-entropy)."""

    forward_s: float | None = None
    backward_s: float | None = None
    activation_bytes: float | None = None
    parameter_bytes: float | None = None

    def __post_init__(self) -> None:
        for k in ("forward_s", "backward_s", "activation_bytes", "parameter_bytes"):
            _opt_num(getattr(self, k), k)
        require((self.forward_s is None) == (self.backward_s is None), "backward_s",
                "forward_s and backward_s come together (both measured or both absent)")

    @property
    def has_times(self) -> bool:
        return self.forward_s is not None


@dataclass(frozen=True)
class ProfileEntry:
    """Measurements for one (tp, micro_batch, recompute, sequence_parallel)."""

    tp: int
    micro_batch: int
    recompute: str
    layer: LayerProfile
    sequence_parallel: bool = False
    embedding: PartProfile | None = None
    logits: PartProfile | None = None
    optimizer_s_per_param: float | None = None

    def __post_init__(self) -> None:
        _pos_int(self.tp, "tp")
        _pos_int(self.micro_batch, "micro_batch")
        require(self.recompute in RECOMPUTE, "recompute",
                f"must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        require(isinstance(self.sequence_parallel, bool), "sequence_parallel", "must be true or false")
        require(not (self.sequence_parallel and self.tp == 1), "sequence_parallel",
                "sequence parallelism needs tp > 1 (tp=1 entries have sequence_parallel: false)")
        require(self.recompute != "none" or self.layer.recompute_s == 0, "layer.recompute_s",
                "must be 0 with recompute: none")
        if self.optimizer_s_per_param is not None:
            _num(self.optimizer_s_per_param, "optimizer_s_per_param", positive=True)

    @property
    def key(self) -> tuple[int, int, str, bool]:
        return (self.tp, self.micro_batch, self.recompute, self.sequence_parallel)


@dataclass(frozen=True)
class Provenance:
    """How the numbers were obtained: measured (device, versions, date, command), published
    (source citation), or analytical (the cost model's own numbers, for tests and comparisons)."""

    method: str
    device: str | None = None
    torch: str | None = None
    cuda: str | None = None
    date: str | None = None
    command: str | None = None
    source: str | None = None
    notes: str | None = None

    def __post_init__(self) -> None:
        require(self.method in METHODS, "provenance.method",
                f"must be one of {', '.join(METHODS)}, got {self.method!r}")
        for k in ("device", "torch", "cuda", "date", "command", "source", "notes"):
            v = getattr(self, k)
            require(v is None or isinstance(v, str), f"provenance.{k}", f"must be a string, got {v!r}")
        if self.method == "published":
            require(bool(self.source), "provenance.source", "published profiles must cite their source")
        if self.method == "measured":
            require(bool(self.device), "provenance.device", "measured profiles must name the device")


@dataclass(frozen=True)
class ProfileSpec:
    name: str
    model: ProfiledModel
    chip: str
    seq_len: int
    precision: str
    entries: tuple[ProfileEntry, ...]
    provenance: Provenance
    attention: str = "flash"           # which attention kernels the times are for
    execution: str | None = None       # fused | eager: the execution profile the numbers are for; None: any
    _index: dict = field(default=None, compare=False, hash=False, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        require(isinstance(self.name, str) and bool(self.name), "name", "must be a non-empty string")
        require(isinstance(self.chip, str) and bool(self.chip), "chip", "must be a chip id")
        _pos_int(self.seq_len, "seq_len")
        require(self.precision in PRECISIONS, "precision",
                f"must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        require(self.attention in ATTENTION, "attention",
                f"must be one of {', '.join(ATTENTION)}, got {self.attention!r}")
        require(self.execution is None or self.execution in EXECUTION, "execution",
                f"must be one of {', '.join(EXECUTION)} (or absent: any), got {self.execution!r}")
        require(len(self.entries) >= 1, "entries", "needs at least one entry")
        index: dict = {}
        for i, e in enumerate(self.entries):
            if e.key in index:
                raise SpecError(f"entries[{i}]", f"duplicate entry for tp={e.tp} micro_batch={e.micro_batch} "
                                f"recompute={e.recompute} sequence_parallel={str(e.sequence_parallel).lower()}")
            require(self.model.heads % e.tp == 0 and self.model.kv_heads % e.tp == 0
                    and self.model.ffn_hidden % e.tp == 0, f"entries[{i}].tp",
                    f"tp={e.tp} does not divide heads={self.model.heads}, kv_heads={self.model.kv_heads} "
                    f"and ffn_hidden={self.model.ffn_hidden}")
            index[e.key] = e
        object.__setattr__(self, "_index", index)

    def entry(self, tp: int, micro_batch: int, recompute: str, sequence_parallel: bool) -> ProfileEntry | None:
        """The entry for a strategy. A strategy with sequence parallelism falls back to the entry
        measured without it (an upper bound: SP only splits norms and dropout and their memory)."""
        e = self._index.get((tp, micro_batch, recompute, bool(sequence_parallel)))
        if e is None and sequence_parallel:
            e = self._index.get((tp, micro_batch, recompute, False))
        return e

    def entry_for(self, model, seq_len: int, precision: str, s) -> ProfileEntry | None:
        """The entry that applies to strategy `s` (a StrategySpec) of `model` at (seq_len,
        precision), or None (then the analytical model applies)."""
        if (seq_len != self.seq_len or precision != self.precision or s.cp != 1 or s.attention != self.attention
                or (self.execution is not None and s.execution != self.execution) or not self.model.matches(model)):
            return None
        return self.entry(s.tp, s.micro_batch, s.recompute, bool(s.sequence_parallel))

    def fits_chip(self, chip_id: str, chip_ref: str | None = None) -> bool:
        """Measured on this chip: its catalog id (or the reference it was given by), or its profiled
        variant (`baige-plan profile` writes `<id>-profiled` chip files of the same hardware)."""
        return self.chip in (chip_id, chip_ref) or chip_id == f"{self.chip}-profiled"

    @property
    def source_label(self) -> str:
        return f"measured:{self.name}"

    def coverage(self) -> str:
        """One line: which (tp, micro-batch, recompute) the profile covers."""
        tps = sorted({e.tp for e in self.entries})
        mbs = sorted({e.micro_batch for e in self.entries})
        recs = [r for r in RECOMPUTE if any(e.recompute == r for e in self.entries)]
        return (f"tp {','.join(map(str, tps))} x micro-batch {','.join(map(str, mbs))} x recompute "
                f"{','.join(recs)}")
