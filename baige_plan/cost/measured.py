"""Measured per-layer profiles and the analytical model (specs/profile.py, cost/estimate.py).

- `analytical_profile`: the cost model's own per-layer numbers written as a profile (forward,
  backward and recomputation compute seconds, stored activation bytes, embedding and logits, the
  optimizer step per parameter). Planning with it reproduces the analytical plan exactly (bit for
  bit: `stage_cost` substitutes the same floats in the same arithmetic); it is also the reference
  a measured profile is compared with (`compare_entry`).
- `profile_bound_factors`: how far below the analytical model a group's profile goes (activation
  memory, optimizer step), so the search's vectorised lower bounds (search/bounds.py) stay bounds.
"""

from __future__ import annotations

from baige_plan.cost import collectives as C
from baige_plan.cost.estimate import (
    ADAM_BYTES_PER_PARAM,
    _embedding_act_bytes,
    _layer_terms,
    _logits_terms,
    _placement_per_node,
    strategy_rates,
)
from baige_plan.cost.params import layer_params_split
from baige_plan.specs.chip import ChipSpec
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.profile import (
    LayerProfile,
    PartProfile,
    ProfiledModel,
    ProfileEntry,
    ProfileSpec,
    Provenance,
)
from baige_plan.specs.strategy import StrategySpec
from baige_plan.specs.topology import GroupSpec

ANALYTICAL_NOTE = ("the baige-plan cost model's own per-layer numbers (GEMM roofline on the chip's efficiency "
                   "curve + memory-bound kernels, Korthikanti activations, Adam 36 B/param at achievable HBM "
                   "bandwidth); communication excluded, as in a measured profile")


def profiled_model(model: ModelSpec) -> ProfiledModel:
    return ProfiledModel(name=model.name, layers=model.layers, hidden=model.hidden, heads=model.heads,
                         kv_heads=model.kv_heads, ffn_hidden=model.ffn_hidden, vocab=model.vocab,
                         activation=model.activation, head_dim=model.head_dim)


def weight_bytes(precision: str) -> int:
    """Bytes of a parameter as the layer holds it (16-bit for mixed precision, 4 for fp32/tf32)."""
    return 4 if precision in ("fp32", "tf32") else 2


def _strategy(tp: int, mb: int, recompute: str, sp: bool, attention: str, knobs: dict | None = None) -> StrategySpec:
    return StrategySpec(tp=tp, micro_batch=mb, recompute=recompute, sequence_parallel=sp, attention=attention,
                        **(knobs or {}))


def _terms(model: ModelSpec, chip: ChipSpec, seq_len: int, precision: str, s: StrategySpec) -> dict:
    """The analytical per-layer, embedding and logits numbers for strategy `s` (one device)."""
    r = strategy_rates(chip, precision, s)
    dpn = max(8, s.tp)
    group = GroupSpec(name="profile", chip=chip, nodes=1, devices_per_node=dpn)
    links = (C.group_link(group, s.tp, min(s.tp, dpn)), C.group_link(group, s.cp, _placement_per_node(dpn, s.tp, s.cp)),
             C.group_link(group, s.ep, _placement_per_node(dpn, s.etp, s.ep)), C.group_link(group, s.etp, s.etp))
    sp = bool(s.sequence_parallel)
    tokens = s.micro_batch * seq_len / s.cp
    lt = _layer_terms(model, s, r, seq_len, tokens, sp, s.attention == "standard", links, False)
    lg_f, lg_b, lg_act = _logits_terms(model, s, r, tokens)
    return {"lt": lt, "tokens": tokens, "r": r, "emb_act": _embedding_act_bytes(model, s, tokens, r.act_bytes, sp),
            "lg": (lg_f, lg_b, lg_act), "opt_rate": ADAM_BYTES_PER_PARAM / r.hbm_Bps}


def analytical_entry(model: ModelSpec, chip: ChipSpec, seq_len: int, precision: str, s: StrategySpec) -> ProfileEntry:
    t = _terms(model, chip, seq_len, precision, s)
    lt, r = t["lt"], t["r"]
    wb = weight_bytes(precision)
    layer_p = layer_params_split(model, False)[0] / s.tp
    emb_p = model.vocab * model.hidden / s.tp
    layer = LayerProfile(forward_s=lt["lf"], backward_s=lt["lb"], recompute_s=lt["rc"], activation_bytes=lt["act"],
                         working_bytes=lt["act_full"] if s.recompute == "full" else None,
                         output_bytes=t["tokens"] * model.hidden * r.act_bytes, parameter_bytes=layer_p * wb,
                         optimizer_s=layer_p * t["opt_rate"])
    lg_f, lg_b, lg_act = t["lg"]
    return ProfileEntry(tp=s.tp, micro_batch=s.micro_batch, recompute=s.recompute,
                        sequence_parallel=bool(s.sequence_parallel), layer=layer,
                        embedding=PartProfile(forward_s=0.0, backward_s=0.0, activation_bytes=t["emb_act"],
                                              parameter_bytes=emb_p * wb),
                        logits=PartProfile(forward_s=lg_f, backward_s=lg_b, activation_bytes=lg_act,
                                           parameter_bytes=emb_p * wb),
                        optimizer_s_per_param=t["opt_rate"])


def analytical_profile(model: ModelSpec, chip: ChipSpec, seq_len: int, precision: str,
                       tps: tuple[int, ...] = (1,), micro_batches: tuple[int, ...] = (1,),
                       recomputes: tuple[str, ...] = ("none", "selective", "full"), attention: str = "flash",
                       execution: str = "fused", name: str | None = None, command: str | None = None) -> ProfileSpec:
    """The cost model's own numbers as a profile: one entry per (tp, micro-batch, recompute) and, for
    tp > 1, with and without sequence parallelism."""
    entries = []
    for tp in tps:
        for mb in micro_batches:
            for rec in recomputes:
                for sp in ((False, True) if tp > 1 else (False,)):
                    s = _strategy(tp, mb, rec, sp, attention, {"execution": execution})
                    entries.append(analytical_entry(model, chip, seq_len, precision, s))
    return ProfileSpec(name=name or f"{model.name}@{chip.id}-{precision}-analytical", model=profiled_model(model),
                       chip=chip.id, seq_len=seq_len, precision=precision, entries=tuple(entries),
                       provenance=Provenance(method="analytical", command=command, notes=ANALYTICAL_NOTE),
                       attention=attention, execution=execution)


def compare_entry(model: ModelSpec, chip: ChipSpec, p: ProfileSpec, e: ProfileEntry,
                  execution: str = "fused") -> dict[str, float]:
    """measured / analytical ratios of one entry (forward, backward, forward+backward, recompute total,
    activation bytes, logits, optimizer per parameter); absent parts are left out."""
    s = _strategy(e.tp, e.micro_batch, e.recompute, e.sequence_parallel, p.attention, {"execution": execution})
    a = analytical_entry(model, chip, p.seq_len, p.precision, s)
    out: dict[str, float] = {}

    def ratio(key: str, mv: float | None, av: float | None) -> None:
        if mv is not None and av:
            out[key] = mv / av
    L, A = e.layer, a.layer
    ratio("forward", L.forward_s, A.forward_s)
    ratio("backward", L.backward_s, A.backward_s)
    if L.has_times:
        ratio("layer_fwd_bwd", L.forward_s + L.backward_s + L.recompute_s,
              A.forward_s + A.backward_s + A.recompute_s)
    ratio("activation_bytes", L.activation_bytes, A.activation_bytes)
    if e.logits is not None and e.logits.has_times and a.logits is not None:
        ratio("logits_fwd_bwd", e.logits.forward_s + e.logits.backward_s, a.logits.forward_s + a.logits.backward_s)
    ratio("optimizer_s_per_param", e.optimizer_s_per_param, a.optimizer_s_per_param)
    return out


def profile_bound_factors(model: ModelSpec, group: GroupSpec, job: JobSpec, knobs: dict | None = None
                          ) -> tuple[float, float]:
    """(activation factor, optimizer factor), each <= 1: every activation-memory term and the optimizer
    step of any strategy on `group` is at least that fraction of its analytical value (the profile's
    smallest measured/analytical ratio, 1 where it measures nothing smaller). The search multiplies its
    analytical lower bounds by them (search/bounds.py), so a profile faster or leaner than the model
    cannot make it skip a plan."""
    p = group.profile
    if p is None or p.seq_len != job.seq_len or p.precision != job.precision or not p.model.matches(model):
        return 1.0, 1.0
    act_f = opt_f = 1.0
    kn = dict(knobs or {})
    if p.execution is not None:
        kn["execution"] = p.execution
    for e in p.entries:
        for sp in ((False, True) if e.tp > 1 and not e.sequence_parallel else (e.sequence_parallel,)):
            s = _strategy(e.tp, e.micro_batch, e.recompute, sp, p.attention, kn)
            t = _terms(model, group.chip, job.seq_len, job.precision, s)
            pairs = [(e.layer.activation_bytes, t["lt"]["act"]), (e.layer.working_bytes, t["lt"]["act_full"]),
                     (e.embedding.activation_bytes if e.embedding else None, t["emb_act"]),
                     (e.logits.activation_bytes if e.logits else None, t["lg"][2])]
            for mv, av in pairs:
                if mv is not None and av > 0:
                    act_f = min(act_f, mv / av)
            if e.optimizer_s_per_param is not None:
                opt_f = min(opt_f, e.optimizer_s_per_param / t["opt_rate"])
    return max(0.0, act_f), max(0.0, opt_f)


__all__ = ["analytical_entry", "analytical_profile", "compare_entry", "profile_bound_factors",
           "profiled_model", "weight_bytes"]
