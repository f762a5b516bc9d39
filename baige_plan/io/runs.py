"""Measured runs (the schema of shared/reference/published_calibration.yaml, also written by
benchmarks/real/harness.py) -> evaluable inputs, with every assumption stated.

A row has model{layers, hidden, heads, kv_heads, ffn_hidden, vocab, seq_len, [activation,
head_dim, dropout, tie_embeddings, moe]}, hardware{gpu_model | chip, num_gpus, gpus_per_node,
[inter_node_bw_per_gpu_gbps]}, parallel{tp, pp, dp, [cp, ep, vpp, micro_batch, zero |
zero_or_sharding, sequence_parallel, recompute, precision, attention, global_batch_seqs]} and
results{step_time_s | derived.step_time_s, [memory_gib | peak_memory_gib]}.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from baige_plan import runtimes
from baige_plan.errors import InputError, SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.io.yamlio import read_document
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec, MoESpec
from baige_plan.specs.strategy import StrategySpec
from baige_plan.specs.topology import ClusterSpec, GroupSpec

# gpu_model text -> catalog chip id (first match wins)
_GPU_MAP = (
    (r"A100.*80", "a100-sxm4-80g"), (r"A100.*40", "a100-sxm4-40g"), (r"A100", "a100-sxm4-80g"),
    (r"H100.*PCIe", "h100-pcie-80g"), (r"H100", "h100-sxm5-80g"), (r"H800", "h800-sxm5-80g"),
    (r"H200", "h200-sxm-141g"), (r"B200", "b200"), (r"V100.*16", "v100-sxm2-16g"), (r"V100", "v100-sxm2-32g"),
    (r"MI300X", "mi300x"), (r"910B", "ascend-910b"), (r"Gaudi ?2", "gaudi2"),
)


@dataclass(frozen=True)
class RunCase:
    id: str
    model: ModelSpec
    cluster: ClusterSpec
    job: JobSpec
    strategy: StrategySpec
    measured_step_time_s: float | None
    measured_peak_memory_gib: float | None
    measured_states_gib: float | None        # params + grads + optimizer (Korthikanti Fig. 1)
    measured_activations_gib: float | None
    assumptions: tuple[str, ...]


def _year(row: dict) -> int | None:
    key = str((row.get("source") or {}).get("key", ""))
    m = re.search(r"(19|20)\d\d", key)
    return int(m.group(0)) if m else None


def _recompute(text: Any) -> str:
    t = str(text or "none").lower()
    if t.startswith("full"):
        return "full"
    if t.startswith("selective"):
        return "selective"
    if t.startswith("none") or t in ("false", "off", "no"):
        return "none"
    raise ValueError(f"cannot read recompute {text!r} (full | selective | none)")


def _zero(par: dict) -> int:
    if isinstance(par.get("zero"), int):
        return par["zero"]
    t = str(par.get("zero_or_sharding") or "none").lower()
    for stage in (3, 2, 1):
        if f"zero-{stage}" in t or f"zero{stage}" in t or f"stage {stage}" in t:
            return stage
    if "fsdp" in t or "full_shard" in t:
        return 3
    return 0


def _precision(text: Any) -> str:
    t = str(text or "bf16").lower()
    for p in ("bf16", "fp8", "fp32"):
        if p in t:
            return p
    return "fp16" if ("16" in t or "half" in t) else "bf16"


def _execution(framework) -> str:
    """Eager PyTorch with autocast (plain torch / FSDP / HF) vs fused-kernel frameworks (Megatron,
    NeMo, DeepSpeed, Paddle, torchtitan)."""
    t = str(framework or "").lower()
    if "torchtitan" in t:
        # torchtitan is eager PyTorch unless torch.compile fuses its kernels
        compiled = "compile" in t and not any(k in t for k in ("no torch.compile", "no compile", "eager"))
        return "fused" if compiled else "eager"
    if any(k in t for k in ("megatron-lm", "megatron-core", "megatron-deepspeed", "nemo", "deepspeed", "paddle",
                            "colossal")) or t.strip() == "megatron":
        return "fused"
    if any(k in t for k in ("pytorch", "torch", "fsdp", "huggingface", "transformers", "accelerate")):
        return "eager"
    return "fused"


def runtime_of(framework, sharding) -> str:
    """The runtime (baige_plan/runtimes/) a measured run executed on, from its framework text."""
    t = f"{framework or ''} {sharding or ''}".lower()
    if "deepspeed" in t:
        return "deepspeed"
    if "torchtitan" in t:
        return "torchtitan"
    if "paddle" in t:
        return "paddle"
    if t.strip().startswith("pytorch") or "harness" in t:
        return "pytorch"
    # Megatron-LM, NeMo, Megatron-Bridge; other in-house stacks are costed as Megatron (stated per row)
    return "megatron"


def balanced_split(layers: int, pp: int) -> tuple[int | None, int | None]:
    """Uneven split when layers % pp != 0: as Megatron-DeepSpeed's `type:transformer|embedding`
    partitioning (the embedding and the output layer each count as one layer), else None."""
    if layers % pp == 0:
        return None, None
    per, rem = divmod(layers + 2, pp)
    if rem == 0 and per >= 2:
        return per - 1, per - 1
    raise ValueError(f"layers={layers} cannot be split over pp={pp}")


def case_from_row(row: dict, catalog: Catalog, src: str) -> RunCase:
    rid = str(row.get("id", "?"))
    notes: list[str] = []
    try:
        md, hw, par = row["model"], row["hardware"], row["parallel"]
    except (KeyError, TypeError) as e:
        raise InputError(src, f"rows[{rid}]", f"missing section {e}") from None
    year = _year(row)
    attention = par.get("attention") or ("standard" if year is not None and year <= 2022 else "flash")
    if not par.get("attention"):
        notes.append(f"attention {attention} (source year {year})")
    dropout = md.get("dropout")
    if dropout is None:
        dropout = 0.1 if attention == "standard" and "bloom" not in str(md.get("name", "")).lower() else 0.0
    try:
        moe = MoESpec(**md["moe"]) if md.get("moe") else None
        model = ModelSpec(name=str(md.get("name", rid)), layers=md["layers"], hidden=md["hidden"], heads=md["heads"],
                          kv_heads=md.get("kv_heads"), head_dim=md.get("head_dim"), ffn_hidden=md["ffn_hidden"],
                          vocab=md["vocab"], seq_len=md.get("seq_len", 2048),
                          activation=md.get("activation") or ("gelu" if year and year <= 2022 else "swiglu"),
                          tie_embeddings=bool(md.get("tie_embeddings", True if year and year <= 2022 else False)),
                          dropout=float(dropout), moe=moe)
        chip_id = hw.get("chip")
        if not chip_id:
            chip_id = next((cid for pat, cid in _GPU_MAP if re.search(pat, str(hw.get("gpu_model", "")), re.I)), None)
            if chip_id is None:
                raise ValueError(f"unknown gpu_model {hw.get('gpu_model')!r}; add hardware.chip")
        chip_path = Path(src).parent / chip_id
        chip = catalog.chip(str(chip_path) if chip_path.is_file() else chip_id, src, f"rows[{rid}].hardware.chip")
        n, dpn = int(hw["num_gpus"]), int(hw.get("gpus_per_node") or 8)
        nodes = max(1, n // dpn)
        nic = hw.get("inter_node_bw_per_gpu_gbps")
        group = GroupSpec(name="g", chip=chip, nodes=nodes, devices_per_node=min(dpn, n),
                          scaleout_Gbps=float(nic) if nic else None, chip_ref=chip.id)
        cluster = ClusterSpec(name=f"{chip.id}:{nodes}x{min(dpn, n)}", groups=(group,))
        mb = par.get("micro_batch")
        if mb is None:
            mb = 1
            notes.append("micro-batch unstated: 1 used")
        vpp = par.get("vpp") or 1
        if par.get("vpp") is None and par.get("pp", 1) > 1:
            notes.append("interleaving unstated: vpp 1 used")
        pp = int(par.get("pp") or 1)
        first, last = balanced_split(model.layers, pp)
        if first is not None:
            notes.append(f"uneven split: first/last stage {first}/{last} layers (embedding counted as a layer)")
        execution = par.get("execution") or _execution(par.get("framework"))
        # NeMo / Megatron-Bridge performance recipes run TE userbuffer TP-communication overlap
        fw = str(par.get("framework", "")).lower()
        tp_overlap = bool(par.get("tp_comm_overlap", "nemo" in fw or "megatron-bridge" in fw))
        runtime = runtime_of(par.get("framework"), par.get("zero_or_sharding"))
        zero3_impl = runtimes.get(runtime).zero3_impl
        if not par.get("execution"):
            notes.append(f"execution {execution} (framework {par.get('framework')!r})")
        sp = par.get("sequence_parallel")
        strategy = StrategySpec(tp=int(par.get("tp") or 1), pp=pp, dp=int(par.get("dp") or 1),
                                cp=int(par.get("cp") or 1), ep=int(par.get("ep") or 1), etp=int(par.get("etp") or 1),
                                zero=_zero(par), micro_batch=int(mb), vpp=int(vpp),
                                recompute=_recompute(par.get("recompute")),
                                sequence_parallel=bool(sp) if sp is not None else False,
                                attention=attention, first_stage_layers=first, last_stage_layers=last,
                                execution=execution, zero3_impl=zero3_impl, tp_comm_overlap=tp_overlap,
                                runtime=runtime)
        job = JobSpec(global_batch=int(par["global_batch_seqs"]), seq_len=int(md.get("seq_len", 2048)),
                      precision=_precision(par.get("precision")))
    except SpecError as e:
        raise InputError(src, f"rows[{rid}].{e.field}", e.reason) from None
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(src, f"rows[{rid}]", str(e)) from None
    res = row.get("results") or {}
    der = row.get("derived") or {}
    step = res.get("step_time_s") if res.get("step_time_s") is not None else der.get("step_time_s")
    if res.get("step_time_s") is None and step is not None:
        notes.append("step time derived from published TFLOP/s with the paper's FLOP formula")
    mem = res.get("memory_gib")
    states = acts = peak = None
    if isinstance(mem, dict):
        states = mem.get("params_grads_optimizer_gib")
        acts = mem.get("activations_gib")
    elif isinstance(mem, (int, float)):
        peak = float(mem)
    if res.get("peak_memory_gib") is not None:
        peak = float(res["peak_memory_gib"])
    return RunCase(rid, model, cluster, job, strategy, float(step) if step is not None else None, peak,
                   states, acts, tuple(notes))


def load_runs(path: str | Path, catalog: Catalog) -> list[RunCase]:
    doc = read_document(path)
    src = str(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise InputError(src, "rows", "expected a mapping with a 'rows:' list")
    return [case_from_row(r, catalog, src) for r in doc["rows"]]
