"""Heterogeneous plans: pipeline *shapes* whose stages sit on different groups with their own tp
(SPEC §4 `pipelines`). Homogeneous plans are the one-shape special case."""

from __future__ import annotations

from dataclasses import dataclass, fields

from baige_plan.errors import SpecError, require
from baige_plan.limits import MAX_DEVICES, MAX_GLOBAL_BATCH, MAX_LAYERS
from baige_plan.specs.frozen import hash_once
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import ATTENTION, RECOMPUTE
from baige_plan.specs.topology import ClusterSpec


@hash_once
@dataclass(frozen=True)
class StageSpec:
    group: str
    layers: tuple[int, int]     # transformer layers [start, end)
    tp: int

    @property
    def n_layers(self) -> int:
        return self.layers[1] - self.layers[0]


@hash_once
@dataclass(frozen=True)
class ShapeKnobs:
    """Per-shape strategy settings; None = the plan-wide value (PipelinesSpec)."""

    micro_batch: int | None = None
    cp: int | None = None
    ep: int | None = None
    etp: int | None = None
    zero: int | None = None
    vpp: int | None = None
    recompute: str | None = None
    sequence_parallel: bool | None = None

    def items(self) -> dict:
        # by field, in field order (the instance dict also holds hash_once's kept hash)
        return {k: v for k in _KNOB_FIELDS if (v := getattr(self, k)) is not None}


_KNOB_FIELDS = tuple(f.name for f in fields(ShapeKnobs))


@dataclass(frozen=True)
class PipelineShape:
    replicas: int               # identical DP copies of this shape
    micro_batches: int          # per replica per step
    stages: tuple[StageSpec, ...]
    knobs: ShapeKnobs = ShapeKnobs()


@dataclass(frozen=True)
class PipelinesSpec:
    shapes: tuple[PipelineShape, ...]
    micro_batch: int = 1
    zero: int = 1
    recompute: str = "selective"
    sequence_parallel: bool = True
    attention: str = "flash"
    runtime: str = "flagscale"    # baige_plan/specs/runtimes/: heterogeneous pipelines run on FlagScale

    def knob(self, sh: PipelineShape, name: str):
        v = getattr(sh.knobs, name)
        if v is not None:
            return v
        return getattr(self, name, None) if name in ("micro_batch", "zero", "recompute", "sequence_parallel") \
            else 1

    @property
    def sequences(self) -> int:
        return sum(sh.replicas * sh.micro_batches * self.knob(sh, "micro_batch") for sh in self.shapes)

    def devices_by_group(self) -> dict[str, int]:
        used: dict[str, int] = {}
        for sh in self.shapes:
            cp = self.knob(sh, "cp")
            for st in sh.stages:
                used[st.group] = used.get(st.group, 0) + st.tp * cp * sh.replicas
        return used


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


_KNOB_INTS = (("micro_batch", MAX_GLOBAL_BATCH), ("cp", MAX_DEVICES), ("ep", MAX_DEVICES), ("etp", MAX_DEVICES),
              ("vpp", MAX_LAYERS))


def _check_knobs(kn: ShapeKnobs, where: str) -> None:
    """A shape's own knobs: integers in range, zero 0-3, a known recompute mode, sequence parallel a boolean
    (messages built only on a failure: this runs in every estimate of the heterogeneous search)."""
    for k, top in _KNOB_INTS:
        v = getattr(kn, k)
        if v is not None and not (_is_int(v) and 1 <= v <= top):
            raise SpecError(f"{where}.{k}", f"must be an integer from 1 to {top:,}, got {_short(v)}")
    if kn.zero is not None and not (_is_int(kn.zero) and kn.zero in (0, 1, 2, 3)):
        raise SpecError(f"{where}.zero", f"must be 0, 1, 2 or 3, got {_short(kn.zero)}")
    if kn.recompute is not None and not (isinstance(kn.recompute, str) and kn.recompute in RECOMPUTE):
        raise SpecError(f"{where}.recompute", f"must be one of {', '.join(RECOMPUTE)}, got {_short(kn.recompute)}")
    if kn.sequence_parallel is not None and not isinstance(kn.sequence_parallel, bool):
        raise SpecError(f"{where}.sequence_parallel", f"must be true or false, got {_short(kn.sequence_parallel)}")


def _check_plan_wide(p: PipelinesSpec) -> None:
    if not (_is_int(p.micro_batch) and 1 <= p.micro_batch <= MAX_GLOBAL_BATCH):
        raise SpecError("micro_batch", f"must be an integer from 1 to {MAX_GLOBAL_BATCH:,}, got {_short(p.micro_batch)}")
    if not (_is_int(p.zero) and p.zero in (0, 1, 2, 3)):
        raise SpecError("zero", f"must be 0, 1, 2 or 3, got {_short(p.zero)}")
    if not (isinstance(p.recompute, str) and p.recompute in RECOMPUTE):
        raise SpecError("recompute", f"must be one of {', '.join(RECOMPUTE)}, got {_short(p.recompute)}")
    if not (isinstance(p.attention, str) and p.attention in ATTENTION):
        raise SpecError("attention", f"must be one of {', '.join(ATTENTION)}, got {_short(p.attention)}")


def _check_stage_types(st: StageSpec, w: str) -> None:
    if not isinstance(st.group, str):
        raise SpecError(f"{w}.group", f"expected a group name, got {_short(st.group)}")
    if not (isinstance(st.layers, tuple) and len(st.layers) == 2 and all(_is_int(x) for x in st.layers)):
        raise SpecError(f"{w}.layers", f"expected [start, end): two integers, got {_short(st.layers)}")
    if not _is_int(st.tp):
        raise SpecError(f"{w}.tp", f"expected an integer, got {_short(st.tp)}")


def check_pipelines(p: PipelinesSpec, model: ModelSpec, cluster: ClusterSpec, job: JobSpec,
                    memo: dict | None = None) -> None:
    """Every shape covers layers [0, L) once, contiguously; tp divides heads and kv heads and stays
    inside a node; the batch adds up; no group is over-subscribed. `memo`: a dict the caller owns (one search, one
    model and cluster) in which the shapes that passed their own checks are kept, by the shape object (kept alive
    in the entry): a plan that keeps a shape of one checked before (the polish moves one shape at a time) checks
    only the others and the plan-wide sums. The same errors with or without it."""
    require(len(p.shapes) >= 1, "pipelines", "needs at least one pipeline shape")
    _check_plan_wide(p)
    groups = {g.name: g for g in cluster.groups}
    for si, sh in enumerate(p.shapes):
        passed = ("shape-checked", id(sh))
        if memo is not None and (hit := memo.get(passed)) is not None and hit is sh:
            continue        # its checks read the shape, the model and the cluster's groups only
        where = f"pipelines[{si}]"
        if not (_is_int(sh.replicas) and _is_int(sh.micro_batches) and sh.replicas >= 1 and sh.micro_batches >= 1):
            raise SpecError(where, f"replicas={_short(sh.replicas)} and micro_batches={_short(sh.micro_batches)} must "
                            "be integers >= 1")
        _check_knobs(sh.knobs, f"{where}.strategy")
        require(len(sh.stages) >= 1, f"{where}.stages", "needs at least one stage")
        nxt = 0
        vpp = p.knob(sh, "vpp")
        for i, st in enumerate(sh.stages):
            # each check builds its message only on a failure: this runs for every stage of every estimate
            if not (isinstance(st.group, str) and isinstance(st.layers, tuple) and len(st.layers) == 2
                    and _is_int(st.layers[0]) and _is_int(st.layers[1]) and _is_int(st.tp)):
                _check_stage_types(st, f"{where}.stages[{i}]")
            g = groups.get(st.group)
            if g is None:
                raise SpecError(f"{where}.stages[{i}].group", f"unknown group {st.group!r} "
                                f"(groups: {', '.join(x.name for x in cluster.groups)})")
            a, b = st.layers
            if not (a == nxt and b > a):
                raise SpecError(f"{where}.stages[{i}].layers", f"layers {list(st.layers)} must start at {nxt} and be "
                                f"non-empty (stages cover [0, {model.layers}) contiguously)")
            nxt = b
            if (b - a) % vpp:
                raise SpecError(f"{where}.stages[{i}].layers", f"{b - a} layers do not split into vpp={vpp} model "
                                "chunks")
            if not (st.tp >= 1 and model.heads % st.tp == 0 and model.kv_heads % st.tp == 0):
                raise SpecError(f"{where}.stages[{i}].tp",
                                f"tp={st.tp} must divide heads={model.heads} and kv_heads={model.kv_heads}")
            if g.devices_per_node % st.tp:
                raise SpecError(f"{where}.stages[{i}].tp", f"tp={st.tp} must divide the {g.devices_per_node} devices "
                                f"of a {st.group} node (TP stays in a node)")
        if nxt != model.layers:
            raise SpecError(f"{where}.stages", f"layers end at {nxt}, the model has {model.layers}")
        if memo is not None:
            memo[passed] = sh
    if p.sequences != job.global_batch:
        raise SpecError("pipelines", f"sum(replicas x micro_batches x micro_batch) = {p.sequences} must equal "
                        f"global_batch={job.global_batch}")
    for name, used in sorted(p.devices_by_group().items()):
        have = cluster.group(name).devices
        if not used <= have:
            raise SpecError("pipelines", f"group {name!r} is asked for {used} devices, it has {have}")
