"""Estimate -> contract dict (SPEC §3 estimate JSON), rounding, and JSON/YAML text.

Floats are rounded to 6 significant digits so identical inputs give byte-identical output and
no platform noise leaks into plan files.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

from baige_plan.cost.estimate import Estimate
from baige_plan.specs.strategy import StrategySpec

ESTIMATE_SCHEMA = "baige-plan/estimate/v1"
CONVENTIONS = ("mfu: model FLOPs of Megatron-LM num_floating_point_operations (causal attention, no "
               "recomputation) / (step time x devices x dense peak); hfu: executed FLOPs incl. recomputation")


def rnd(x: Any, digits: int = 6) -> Any:
    """Round floats (recursively) to `digits` significant digits; ints, strings, bools untouched."""
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return x
    if isinstance(x, float):
        if x == 0 or not math.isfinite(x):
            return 0.0 if x == 0 else x
        return float(f"{x:.{digits}g}")
    if isinstance(x, dict):
        return {k: rnd(v, digits) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [rnd(v, digits) for v in x]
    return x


def strategy_dict(s: StrategySpec, global_batch: int) -> dict:
    d = {"tp": s.tp, "pp": s.pp, "dp": s.dp, "cp": s.cp, "ep": s.ep, "zero": s.zero, "micro_batch": s.micro_batch,
         "global_batch": global_batch, "vpp": s.vpp, "recompute": s.recompute,
         "sequence_parallel": bool(s.sequence_parallel), "etp": s.etp, "attention": s.attention, "runtime": s.runtime}
    if s.execution != "fused":
        d["execution"] = s.execution
    if s.attention_kernel:        # a kernel other than the runtime's (specs/runtime.py attention_kernel)
        d["attention_kernel"] = s.attention_kernel
    if s.fp8_recipe:              # an fp8 scaling recipe other than the chip's default (cost/fp8.py)
        d["fp8_recipe"] = s.fp8_recipe
    if s.moe_dispatcher:          # a MoE dispatcher named by the user or a run (cost/moe.py)
        d["moe_dispatcher"] = s.moe_dispatcher
    if s.moe_a2a_overlap:         # Megatron-core's EP all-to-all overlap (cost/moe.py a2a_overlap_pair_s)
        d["moe_a2a_overlap"] = True
    if s.moe_fused_mlp:           # Transformer Engine's fused grouped MLP (cost/moe.py fused_grouped_mlp)
        d["moe_fused_mlp"] = True
    if s.fsdp_shard:              # hybrid sharding (HSDP): the shard group's size (cost/estimate.py dp_traffic)
        d["fsdp_shard"] = s.fsdp_shard
    if s.loss_kernel:             # a cross-entropy kernel other than the runtime's (cost/estimate.py)
        d["loss_kernel"] = s.loss_kernel
    if s.recompute_early_stop:    # a checkpoint early stop other than the runtime's (specs/runtime.py)
        d["recompute_early_stop"] = s.recompute_early_stop
    if s.first_stage_layers is not None:
        d["first_stage_layers"] = s.first_stage_layers
    if s.last_stage_layers is not None:
        d["last_stage_layers"] = s.last_stage_layers
    if s.account_for_embedding:   # Megatron --account-for-embedding-in-pipeline-split (specs/strategy.py)
        d["account_for_embedding"] = True
    if s.account_for_loss:        # Megatron --account-for-loss-in-pipeline-split
        d["account_for_loss"] = True
    if s.recompute_modules:       # Megatron --recompute-modules core_attn + these
        d["recompute_modules"] = s.recompute_modules
    if s.pipeline_layout is not None:   # Megatron --pipeline-model-parallel-layout: layers per virtual stage
        d["pipeline_layout"] = list(s.pipeline_layout)
    if s.grad_reduce_bf16:        # Megatron --grad-reduce-in-bf16
        d["grad_reduce_bf16"] = True
    if s.tp_pp_dp_mapping:        # Megatron --use-tp-pp-dp-mapping (rank order tp-cp-ep-pp-dp)
        d["tp_pp_dp_mapping"] = True
    if s.distribute_saved_activations:   # Megatron --distribute-saved-activations / DeepSpeed partition_activations
        d["distribute_saved_activations"] = True
    return d


def estimate_dict(e: Estimate, band: tuple[float, float] | None = None) -> dict:
    """The SPEC §3 estimate; `band`: its step_time_band_s (io/bands.py band_for), written after memory_gib."""
    d = {
        "schema": ESTIMATE_SCHEMA,
        "strategy": strategy_dict(e.strategy, e.global_batch),
        "fits": e.fits,
        "step_time_s": e.step_time_s,
        "tokens_per_s": e.tokens_per_s,
        "tokens_per_s_per_device": e.tokens_per_s_per_device,
        "model_tflops_per_device": e.model_tflops_per_device,
        "mfu": e.mfu,
        "hfu": e.hfu,
        "peak_memory_gib": e.peak_memory_gib,
        "breakdown_s": dict(e.breakdown_s),
        "memory_gib": dict(e.memory_gib),
        **({"step_time_band_s": list(band)} if band is not None else {}),   # after the SPEC §3 keys, in order
        "memory_capacity_gib": e.capacity_gib,
        "max_memory_frac": e.memory_frac,          # the fraction of device memory `fits` allows
        "memory_margin_gib": e.memory_margin_gib,  # capacity x max_memory_frac - peak (negative: over)
        "reserved_peak_gib": e.reserved_peak_gib,  # nvidia-smi at the peak: + the allocator cache it would release
        "micro_batches": e.micro_batches,
        "devices": e.devices,
        "bottleneck": e.bottleneck,
        "sources": e.sources,   # which parts are measured (--profile) and which analytical
        "stages": [{"index": st.index, "layers": list(st.layers), "time_per_micro_batch_s": st.time_s,
                    "memory_gib": st.memory_gib} for st in e.stages],
        "conventions": CONVENTIONS,
    }
    return rnd(d)


def to_json(doc: Any) -> str:
    return json.dumps(doc, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


class Flow(dict):
    """A mapping written on one line in YAML (placement entries, stages)."""


class _Dumper(yaml.SafeDumper):
    pass


def _repr_list(dumper, data):
    flow = all(isinstance(x, (int, float, str, bool)) or x is None for x in data) and len(data) <= 8
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _repr_list)
_Dumper.add_representer(Flow, lambda d, data: d.represent_mapping("tag:yaml.org,2002:map", data.items(),
                                                                  flow_style=True))


def to_yaml(doc: Any, width: int = 120) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=width, default_flow_style=False)
