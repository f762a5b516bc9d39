"""A parallel strategy (SPEC §3 strategy options) and its divisibility rules.

As in Megatron-core, world = tp·pp·cp·dp; MoE layers re-fold a stage's tp·cp·dp ranks into
ep × etp × edp, so ep must divide tp·cp·dp / etp. Messages name the values, as torchtitan's
`ParallelDims` does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from baige_plan.errors import SpecError, require
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec

RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("flash", "standard")


def _pos(v, name: str) -> None:
    require(isinstance(v, int) and not isinstance(v, bool) and v > 0, name,
            f"must be a positive integer, got {v!r}")


@dataclass(frozen=True)
class StrategySpec:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    zero: int = 1
    micro_batch: int = 1
    vpp: int = 1
    recompute: str = "selective"
    sequence_parallel: bool | None = None   # None: on when tp > 1 (Megatron default with TP)
    attention: str = "flash"                # flash (fused, no s² activations) | standard (2021-era)
    first_stage_layers: int | None = None   # Megatron --decoder-first-pipeline-num-layers (uneven split)
    last_stage_layers: int | None = None    # Megatron --decoder-last-pipeline-num-layers
    overlap_grad_reduce: bool = True        # DP gradient reduction overlapped with the last backward
    execution: str = "fused"                # fused (Megatron/TE kernels) | eager (PyTorch eager + autocast)
    tp_comm_overlap: bool = False           # Transformer Engine userbuffers: TP collectives overlap the GEMMs
    zero3_impl: str = "fsdp"                # ZeRO-3 collectives: fsdp (one per layer, NCCL hierarchical rings)
                                            # | deepspeed (one per weight, flat over the DP world; Narayanan 2021)
    runtime: str = "megatron"               # baige_plan/runtimes/: whose execution semantics the cost follows

    def __post_init__(self) -> None:
        for k in ("tp", "pp", "dp", "cp", "ep", "etp", "micro_batch", "vpp"):
            _pos(getattr(self, k), k)
        require(self.zero in (0, 1, 2, 3), "zero", f"must be 0, 1, 2 or 3, got {self.zero!r}")
        require(self.recompute in RECOMPUTE, "recompute",
                f"must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        require(self.attention in ATTENTION, "attention",
                f"must be one of {', '.join(ATTENTION)}, got {self.attention!r}")
        require(self.execution in ("fused", "eager"), "execution",
                f"must be fused or eager, got {self.execution!r}")
        require(self.zero3_impl in ("fsdp", "deepspeed"), "zero3_impl",
                f"must be fsdp or deepspeed, got {self.zero3_impl!r}")
        if self.sequence_parallel is None:
            object.__setattr__(self, "sequence_parallel", self.tp > 1)
        if self.tp == 1 and self.sequence_parallel:
            # SP shards along the TP group; with tp=1 it is a no-op, so store the canonical form.
            object.__setattr__(self, "sequence_parallel", False)
        require(self.vpp == 1 or self.pp > 1, "vpp", f"vpp={self.vpp} needs pp > 1 (pp={self.pp})")
        for k in ("first_stage_layers", "last_stage_layers"):
            v = getattr(self, k)
            if v is not None:
                _pos(v, k)
                require(self.pp > 1, k, f"{k}={v} needs pp > 1 (pp={self.pp})")
                require(self.vpp == 1, k, f"{k} cannot be combined with vpp={self.vpp}")

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def edp(self) -> int:
        """Expert-data-parallel size: replicas of each expert's weights."""
        return self.tp * self.cp * self.dp // (self.ep * self.etp)

    def with_(self, **kw) -> StrategySpec:
        return replace(self, **kw)


def check_strategy(s: StrategySpec, model: ModelSpec, job: JobSpec, devices: int | None = None) -> None:
    """Raise SpecError (field, reason naming the values) when `s` cannot run `model` for `job`."""
    if devices is not None:
        require(s.world == devices, "dp",
                f"tp·pp·cp·dp = {s.tp}·{s.pp}·{s.cp}·{s.dp} = {s.world} must equal the cluster's {devices} devices")
    require(model.heads % s.tp == 0, "tp", f"heads={model.heads} is not divisible by tp={s.tp}")
    require(model.kv_heads % s.tp == 0, "tp",
            f"kv_heads={model.kv_heads} is not divisible by tp={s.tp} (Megatron needs query groups % tp == 0)")
    require(model.ffn_hidden % s.tp == 0, "tp", f"ffn_hidden={model.ffn_hidden} is not divisible by tp={s.tp}")
    stage_layers(s, model.layers)   # raises when the split is impossible
    require(job.global_batch % (s.dp * s.micro_batch) == 0, "global_batch",
            f"global_batch={job.global_batch} is not divisible by dp·micro_batch = {s.dp}·{s.micro_batch}")
    if s.cp > 1:
        require(job.seq_len % (2 * s.cp) == 0, "cp",
                f"seq_len={job.seq_len} is not divisible by 2·cp = {2 * s.cp} (load-balanced causal CP)")
    if s.sequence_parallel:
        require(job.seq_len // s.cp % s.tp == 0, "sequence_parallel",
                f"seq_len/cp = {job.seq_len // s.cp} is not divisible by tp={s.tp}")
    if model.moe is None:
        require(s.ep == 1, "ep", f"ep={s.ep} needs an MoE model; {model.name} is dense")
        require(s.etp == 1, "etp", f"etp={s.etp} needs an MoE model; {model.name} is dense")
    else:
        require(model.moe.experts % s.ep == 0, "ep",
                f"experts={model.moe.experts} is not divisible by ep={s.ep}")
        folded = s.tp * s.cp * s.dp
        require(folded % s.etp == 0, "etp", f"etp={s.etp} does not divide tp·cp·dp = {folded}")
        require((folded // s.etp) % s.ep == 0, "ep",
                f"ep={s.ep} does not divide tp·cp·dp/etp = {folded}/{s.etp} = {folded // s.etp}")
        require(model.moe.expert_ffn_hidden % s.etp == 0, "etp",
                f"expert_ffn_hidden={model.moe.expert_ffn_hidden} is not divisible by etp={s.etp}")
    if s.vpp > 1:
        m = job.global_batch // (s.dp * s.micro_batch)
        require(m % s.pp == 0, "vpp",
                f"interleaved schedule needs micro-batches per replica ({m}) divisible by pp={s.pp}")


def stage_layers(s: StrategySpec, layers: int) -> tuple[int, ...]:
    """Transformer layers per pipeline stage: even, or Megatron's uneven first/last split with the
    remaining layers spread evenly over the middle stages."""
    if s.first_stage_layers is None and s.last_stage_layers is None:
        require(layers % (s.pp * s.vpp) == 0, "pp",
                f"layers={layers} is not divisible by pp·vpp = {s.pp}·{s.vpp} = {s.pp * s.vpp}; "
                "set first/last stage layers for an uneven split")
        return (layers // s.pp,) * s.pp
    first = s.first_stage_layers
    last = s.last_stage_layers
    middle = s.pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    require(rest >= middle and (middle == 0 and rest == 0 or middle > 0 and rest % middle == 0), "pp",
            f"layers={layers} minus first={first} and last={last} leaves {rest} layers for "
            f"{middle} middle stages (must divide evenly, at least 1 each)")
    each = rest // middle if middle else 0
    out = [each] * s.pp
    if first is not None:
        out[0] = first
    if last is not None:
        out[-1] = last
    return tuple(out)


def infer_dp(devices: int, tp: int, pp: int, cp: int) -> int:
    """dp = devices / (tp·pp·cp), or a SpecError naming the numbers."""
    denom = tp * pp * cp
    if devices % denom != 0:
        raise SpecError("dp", f"{devices} devices are not divisible by tp·pp·cp = {tp}·{pp}·{cp} = {denom}")
    return devices // denom
