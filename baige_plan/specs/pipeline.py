"""Heterogeneous plans: pipeline *shapes* whose stages sit on different groups with their own tp
(SPEC §4 `pipelines`). Homogeneous plans are the one-shape special case."""

from __future__ import annotations

from dataclasses import dataclass

from baige_plan.errors import SpecError, require
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.topology import ClusterSpec


@dataclass(frozen=True)
class StageSpec:
    group: str
    layers: tuple[int, int]     # transformer layers [start, end)
    tp: int

    @property
    def n_layers(self) -> int:
        return self.layers[1] - self.layers[0]


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
        return {k: v for k, v in self.__dict__.items() if v is not None}


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
    runtime: str = "flagscale"    # baige_plan/runtimes/: heterogeneous pipelines run on FlagScale

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


def check_pipelines(p: PipelinesSpec, model: ModelSpec, cluster: ClusterSpec, job: JobSpec) -> None:
    """Every shape covers layers [0, L) once, contiguously; tp divides heads and kv heads and stays
    inside a node; the batch adds up; no group is over-subscribed."""
    require(len(p.shapes) >= 1, "pipelines", "needs at least one pipeline shape")
    for si, sh in enumerate(p.shapes):
        where = f"pipelines[{si}]"
        require(sh.replicas >= 1 and sh.micro_batches >= 1, where,
                f"replicas={sh.replicas} and micro_batches={sh.micro_batches} must be >= 1")
        require(len(sh.stages) >= 1, f"{where}.stages", "needs at least one stage")
        nxt = 0
        vpp = p.knob(sh, "vpp")
        for i, st in enumerate(sh.stages):
            w = f"{where}.stages[{i}]"
            try:
                g = cluster.group(st.group)
            except SpecError:
                raise SpecError(f"{w}.group", f"unknown group {st.group!r} "
                                f"(groups: {', '.join(x.name for x in cluster.groups)})") from None
            require(st.layers[0] == nxt and st.layers[1] > st.layers[0], f"{w}.layers",
                    f"layers {list(st.layers)} must start at {nxt} and be non-empty (stages cover [0, {model.layers}) "
                    "contiguously)")
            nxt = st.layers[1]
            require(st.n_layers % vpp == 0, f"{w}.layers",
                    f"{st.n_layers} layers do not split into vpp={vpp} model chunks")
            require(st.tp >= 1 and model.heads % st.tp == 0 and model.kv_heads % st.tp == 0, f"{w}.tp",
                    f"tp={st.tp} must divide heads={model.heads} and kv_heads={model.kv_heads}")
            require(g.devices_per_node % st.tp == 0, f"{w}.tp",
                    f"tp={st.tp} must divide the {g.devices_per_node} devices of a {st.group} node (TP stays in a node)")
        require(nxt == model.layers, f"{where}.stages", f"layers end at {nxt}, the model has {model.layers}")
    require(p.sequences == job.global_batch, "pipelines",
            f"sum(replicas x micro_batches x micro_batch) = {p.sequences} must equal global_batch={job.global_batch}")
    for name, used in sorted(p.devices_by_group().items()):
        have = cluster.group(name).devices
        require(used <= have, "pipelines", f"group {name!r} is asked for {used} devices, it has {have}")
