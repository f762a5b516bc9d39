"""Measured runs (the schema of shared/reference/published_calibration.yaml, also written by
benchmarks/real/harness.py) -> evaluable inputs, with every assumption stated.

A row has model{layers, hidden, heads, kv_heads, ffn_hidden, vocab, seq_len, [activation,
head_dim, dropout, tie_embeddings, moe]}, hardware{gpu_model | chip, num_gpus, gpus_per_node,
[inter_node_bw_per_gpu_gbps]}, parallel{tp, pp, dp, [cp, ep, vpp, micro_batch, zero |
zero_or_sharding, sequence_parallel, recompute, precision, attention, global_batch_seqs, runtime (a
specs/runtimes/ name; inferred from `framework` when absent), execution, tp_comm_overlap]} and
results{step_time_s | derived.step_time_s, [memory_gib | peak_memory_gib, peak_memory_kind allocated | reserved,
reserved_memory_gib]}.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from baige_plan.cost.fp8 import MXFP8_CHIPS
from baige_plan.errors import InputError, SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.io.run_amends import apply_amendments
from baige_plan.io.yamlio import check_keys, is_regular_file, kind_of, read_document
from baige_plan.limits import MAX_DEVICES, MAX_RUN_ROWS, MIN_STEP_TIME_S
from baige_plan.specs import runtimes
from baige_plan.specs.job import BF16_WEIGHT_PRECISIONS, QUANTIZED_PRECISIONS, JobSpec
from baige_plan.specs.model import MLASpec, ModelSpec, MoESpec
from baige_plan.specs.strategy import RECOMPUTE_MODULES, StrategySpec, check_strategy
from baige_plan.specs.topology import ClusterSpec, GroupSpec

# gpu_model text -> catalog chip id (first match wins)
# hardware.gpu_model text -> catalog chip, first match wins (specific before general: GB200 before B200, H200
# before H20); None: a device the catalog has no file for (the row needs hardware.chip)
_GPU_MAP = (
    (r"GB300", "gb300"), (r"GB200", "gb200"), (r"B300", "b300"), (r"B200", "b200"),
    (r"A100.*PCIe", "a100-pcie-80g"), (r"A100.*80", "a100-sxm4-80g"), (r"A100.*40", "a100-sxm4-40g"),
    (r"A100", "a100-sxm4-80g"), (r"A800", "a800-sxm4-80g"),
    (r"H100.*PCIe", "h100-pcie-80g"), (r"H100", "h100-sxm5-80g"), (r"H800", "h800-sxm5-80g"),
    (r"H200", "h200-sxm-141g"), (r"H20(?!\d)", "h20"), (r"V100.*16", "v100-sxm2-16g"), (r"V100", "v100-sxm2-32g"),
    (r"MI355X", "mi355x"), (r"MI350X", "mi350x"), (r"MI325X", "mi325x"), (r"MI300X", "mi300x"), (r"MI250X", "mi250x-gcd"),
    (r"910C", "ascend-910c"), (r"910B", "ascend-910b"), (r"910A|Ascend[ -]?910(?![BC\d])", "ascend-910a"),
    (r"Gaudi ?3", "gaudi3"), (r"Gaudi ?2", "gaudi2"),
    (r"TPU ?v6e|Trillium", "tpu-v6e"), (r"TPU ?v5p", "tpu-v5p"), (r"TPU ?v5e|TPU ?v5 ?lite", "tpu-v5e"),
    (r"TPU ?v4", "tpu-v4"), (r"Trainium ?2|Trn2", "trainium2"), (r"P800", "kunlun-p800"),
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
    # what results.peak_memory_gib measured: "allocated" (torch.cuda.max_memory_allocated, our harness) or
    # "reserved" (max_memory_reserved: torchtitan's logged memory, metrics.py DeviceMemoryMonitor)
    measured_memory_kind: str = "allocated"
    measured_reserved_gib: float | None = None   # results.reserved_memory_gib beside an allocated peak
    # why the run is not scored although it loads (row key `excluded`: its hardware is outside the catalog, or the
    # source leaves a part of its configuration that sets the step time unstated); None: scored
    excluded: str | None = None


def _year(row: dict) -> int | None:
    key = str((row.get("source") or {}).get("key", ""))
    m = re.search(r"(19|20)\d\d", key)
    return int(m.group(0)) if m else None


# Megatron-core's selective recompute modules (transformer_config.py recompute_modules): a row that lists them ran
# module-level selective recomputation, costed as "selective"
_MEGATRON_RECOMPUTE_MODULES = ("core_attn", "mla_up_proj", "moe_act", "layernorm", "mlp", "moe", "shared_experts")


def _recompute_modules(par: dict) -> tuple[str, ...]:
    """Megatron recompute_modules a row states: `parallel.recompute_modules`, or a list given as `recompute`."""
    v = par.get("recompute_modules")
    if v is None and isinstance(par.get("recompute"), (list, tuple)):
        v = par["recompute"]
    if v is None:
        return ()
    if not isinstance(v, (list, tuple)) or any(str(x).strip().lower() not in _MEGATRON_RECOMPUTE_MODULES for x in v):
        raise ValueError(f"cannot read recompute_modules {v!r} (a list of {', '.join(_MEGATRON_RECOMPUTE_MODULES)})")
    return tuple(str(x).strip().lower() for x in v)


def _modelled_modules(par: dict, notes: list[str]) -> str:
    """StrategySpec.recompute_modules of a row: the modules it states that the cost model knows (core_attn is
    "selective" itself); the others are named in the row's notes as not modelled."""
    mods = _recompute_modules(par)
    other = [x for x in mods if x not in RECOMPUTE_MODULES and x != "core_attn"]
    if other:
        notes.append(f"recompute_modules {', '.join(other)}: not modelled (costed as plain selective recompute)")
    return ",".join(x for x in RECOMPUTE_MODULES if x in mods)


def _distributed_saved(par: dict, tp: int, sp: Any, notes: list[str]) -> bool:
    """Whether full recomputation keeps 1/tp of each checkpointed input (StrategySpec.distribute_saved_activations):
    the row's `distribute_saved_activations: true`, or its recompute text naming DeepSpeed's `partition_activations
    True`, Megatron's --distribute-saved-activations or its earlier name --distribute-checkpointed-activations
    (Megatron-LM d6c4248b, 2020-09, until the rename; metaseq passes it). Only where it acts (tp > 1, full
    recompute, no SP)."""
    text = str(par.get("recompute") or "").lower()
    on = par.get("distribute_saved_activations") is True or bool(
        re.search(r"partition_activations\W{0,3}true|distribute[-_ ](saved|checkpointed)[-_ ]activations", text))
    if not on:
        return False
    rc = _recompute(par.get("recompute"))
    if tp > 1 and rc == "full" and not sp:
        return True
    notes.append(f"distributed saved activations stated but inert here (tp={tp}, recompute {rc}, "
                 f"sequence parallel {bool(sp)})")
    return False


def _recompute(text: Any) -> str:
    if isinstance(text, bool):
        return "full" if text else "none"
    if isinstance(text, (list, tuple)):
        if not text:
            return "none"
        if all(str(x).strip().lower() in _MEGATRON_RECOMPUTE_MODULES for x in text):
            return "selective"
        raise ValueError(f"cannot read recompute {text!r}: a list names Megatron's recompute_modules "
                         f"({', '.join(_MEGATRON_RECOMPUTE_MODULES)})")
    t = str(text or "none").lower().strip()
    if t in ("true", "yes", "on", "uniform", "block", "activation checkpointing", "checkpoint", "checkpointing"):
        return "full"
    if t in ("op", "sac", "op_sac"):
        return "selective"
    if t.startswith("full"):
        return "full"
    if t.startswith("selective"):
        # torchtitan's 2024 per-layer selective AC (selective_ac_option = N: every N-th block fully checkpointed)
        # is not the op-level SAC "selective" costs on torchtitan; N = 1 is every block, i.e. full
        per_layer = re.search(r"selective_ac_option\W{0,3}(\d+)", t)
        if per_layer:
            if int(per_layer.group(1)) == 1:
                return "full"
            raise ValueError(f"cannot read recompute {text!r}: per-layer selective AC (every "
                             f"{per_layer.group(1)}-th layer checkpointed) is not modelled (op-level SAC is)")
        return "selective"
    if t.startswith("none") or t in ("false", "off", "no"):
        return "none"
    raise ValueError(f"cannot read recompute {text!r} (full | selective | none)")


def _megatron_recipe(par: dict) -> bool:
    """NeMo / Megatron-Bridge runs: their recipes' defaults fill what a published table leaves unstated."""
    fw = str(par.get("framework") or "").lower()
    return "nemo" in fw or "megatron-bridge" in fw


def _zero(par: dict) -> int:
    if isinstance(par.get("zero"), int):
        return par["zero"]
    t = str(par.get("zero_or_sharding") or "none").lower()
    for stage in (3, 2, 1):
        if f"zero-{stage}" in t or f"zero{stage}" in t or f"stage {stage}" in t:
            return stage
    # Megatron-FSDP names its stage by --data-parallel-sharding-strategy (megatron-core training/arguments.py):
    # optim_grads_params (the default) = ZeRO-3, optim_grads = ZeRO-2
    if "optim_grads_params" in t:
        return 3
    if "optim_grads" in t:
        return 2
    if "fsdp" in t or "full_shard" in t:
        return 3
    fw = str(par.get("framework") or "").lower()
    if (not par.get("zero_or_sharding") or "not stated" in t) and any(
            k in fw for k in ("megatron-fsdp", "megatron fsdp", "use-megatron-fsdp", "use-torch-fsdp2")):
        return 3     # Megatron-FSDP / torch FSDP2 in Megatron named by the framework: full sharding by default
    if _megatron_recipe(par) and "not stated" in t:
        # unstated distributed optimizer in a NeMo / Megatron-Bridge run: every Megatron-Bridge recipe builds its
        # optimizer with use_distributed_optimizer=True (NVIDIA-NeMo/Megatron-Bridge@067f987d
        # src/megatron/bridge/recipes/utils/optimizer_utils.py), i.e. ZeRO-1
        return 1
    return 0


def _precision(text: Any) -> str:
    t = str(text or "bf16").lower()
    # the leading word names it ("fp8 (FP8 GEMMs, BF16 elsewhere)" is fp8); free text after it is a note
    lead = re.match(r"\s*(bf16|fp16|fp8|fp32|tf32|fp4|nvfp4)\b", t)
    if lead:
        return "fp4" if lead.group(1) == "nvfp4" else lead.group(1)   # NVFP4 is the fp4 precision (cost/fp8.py)
    for p in ("bf16", "fp8", "fp32"):
        if p in t:
            return p
    return "fp16" if ("16" in t or "half" in t) else "bf16"


def _nemo_release(par: dict) -> tuple[int, int] | None:
    """(year, month) of the NeMo container a NeMo / Megatron-Bridge row names ("NeMo 25.11"), else None."""
    m = re.search(r"nemo\D{0,20}?(\d\d)\.(\d\d)", str(par.get("framework") or ""), re.I)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _moe_host_recipe(row: dict, par: dict, notes: list[str]) -> tuple[bool, str]:
    """(moe_token_drop, cuda_graph_scope) of a row (cost/moe.py host-bound MoE layers): `parallel.moe_token_drop` /
    `parallel.cuda_graph_scope` when given, else what the row's `unstated` entries record of its recipe --
    `moe.token_dropping` (a capacity factor: token drop), `model.moe.routing` ("token-drop ..."; "CUDA graphs (TE)
    for attn, moe_router, moe_preprocess"; "cuda_graph_impl full_iteration"), `cuda_graphs: true` (NeMo 2.x
    `enable_cuda_graph`: every transformer layer captured, scope full) -- else dropless, no CUDA graphs."""
    drop, scope = par.get("moe_token_drop"), par.get("cuda_graph_scope")
    if drop is not None and scope is not None:
        return bool(drop), str(scope or "")
    inf_drop, scopes = False, []
    for u in row.get("unstated") or []:
        if not isinstance(u, dict):
            continue
        f, a = str(u.get("field", "")), str(u.get("assumed", ""))
        low = a.lower()
        if f == "moe.token_dropping" and "capacity" in low:
            inf_drop = True
        elif f == "model.moe.routing":
            inf_drop = inf_drop or low.startswith("token-drop")
            if "full_iteration" in low:
                scopes.append("full")
            m = re.search(r"cuda graphs \(te\) for ([a-z_, ]+)", low)
            if m:
                scopes += [x.strip() for x in m.group(1).split(",") if x.strip() in ("attn", "moe_router", "moe_preprocess")]
        elif f == "cuda_graphs" and u.get("assumed") is True:
            scopes.append("full")
    if drop is None:
        drop = inf_drop
        if inf_drop:
            notes.append("MoE token drop (padded to capacity) from the row's recipe")
    if scope is None:
        scope = ",".join(dict.fromkeys(scopes))
        if scope:
            notes.append(f"CUDA graph scope {scope} from the row's recipe")
    return bool(drop), str(scope or "")


def _routing_notes(row: dict) -> list[str]:
    """What the row's `unstated` entries for `model.moe.routing` assume, lower-cased, whitespace collapsed."""
    return [re.sub(r"\s+", " ", str(u.get("assumed", "")).lower()) for u in row.get("unstated") or []
            if isinstance(u, dict) and u.get("field") == "model.moe.routing"]


def _moe_dispatcher(row: dict, par: dict, notes: list[str]) -> str:
    """The MoE token dispatcher a row ran (cost/moe.py moe_dispatch_comm_s): `parallel.moe_dispatcher` when given,
    else its `model.moe.routing` recipe note ("flex dispatcher, DeepEP ...", "DeepEP dispatch": flex; "allgather
    dispatcher": allgather), else "" (alltoall, the Megatron-Bridge / NeMo recipes' default)."""
    if par.get("moe_dispatcher"):
        return str(par["moe_dispatcher"])
    for low in _routing_notes(row):
        for name, says in (("flex", "flex dispatcher"), ("flex", "deepep dispatch"), ("allgather", "allgather dispatcher")):
            if says in low:
                notes.append(f"MoE {name} dispatcher from the row's recipe")
                return name
    return ""


def _moe_a2a_overlap(row: dict, par: dict, notes: list[str]) -> bool:
    """Whether a row ran Megatron-core's EP all-to-all overlap (overlap_moe_expert_parallel_comm; cost/moe.py
    a2a_overlap_pair_s): `parallel.moe_a2a_overlap` when given, else its `model.moe.routing` recipe note naming
    Megatron-Bridge's `moe_a2a_overlap` or "all-to-all overlapped with compute" (not "no a2a overlap")."""
    if par.get("moe_a2a_overlap") is not None:
        return bool(par["moe_a2a_overlap"])
    for low in _routing_notes(row):
        if re.search(r"(?<!no )(moe_a2a_overlap|a2a overlap|all-to-all overlapped with compute)", low):
            notes.append("MoE EP all-to-all overlap (moe_a2a_overlap) from the row's recipe")
            return True
    return False


def _moe_fused_mlp(row: dict, par: dict, notes: list[str]) -> bool:
    """Whether a row ran Transformer Engine's fused grouped MLP (StrategySpec.moe_fused_mlp; cost/moe.py
    fused_grouped_mlp): `parallel.moe_fused_mlp` when given, else its `model.moe.routing` recipe note naming
    Megatron-Bridge's `cutedsl_fused_grouped_mlp` (scripts/performance/utils/overrides.py: use_transformer_engine_op_fuser
    with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1) or TE's fused grouped MLP (not "no ...")."""
    if par.get("moe_fused_mlp") is not None:
        return bool(par["moe_fused_mlp"])
    for low in _routing_notes(row):
        if re.search(r"(?<!no )(cutedsl_fused_grouped_mlp|cute-dsl fused grouped|fused grouped (expert )?mlp)", low):
            notes.append("MoE experts as Transformer Engine's fused grouped MLP (cutedsl_fused_grouped_mlp) from the "
                         "row's recipe")
            return True
    return False


# Transformer Engine's fp8 recipes by release: DelayedScaling only before 2.0; MXFP8BlockScaling (Blackwell) from the
# TE 2.0 code (NVIDIA/TransformerEngine 544dd14b4, 2025-02-07, first tagged v2.1); Float8CurrentScaling from v2.2
# (77fa1e596, 2025-03-07). A NeMo container before 25.01 (Blackwell) / 25.04 (others) ships a TE without them.
_NEMO_BEFORE_MXFP8 = (25, 1)
_NEMO_BEFORE_CURRENT_SCALING = (25, 4)


def _fp8_recipe(par: dict, precision: str, runtime: str, chip_id: str, notes: list[str]) -> str:
    """The fp8 recipe of a run (cost/fp8.py): `parallel.fp8_recipe` when stated; for an unstated recipe of a NeMo /
    Megatron-Bridge fp8 run on Transformer Engine whose container predates the chip's default recipe (current
    scaling, MXFP8 on Blackwell: cost/fp8.py fp8_recipe), delayed scaling, the one recipe its TE had; else "" (the
    chip's default)."""
    stated = str(par.get("fp8_recipe") or "")
    if stated or precision != "fp8" or runtime != "megatron" or not _megatron_recipe(par):
        return stated
    rel = _nemo_release(par)
    first = _NEMO_BEFORE_MXFP8 if chip_id in MXFP8_CHIPS else _NEMO_BEFORE_CURRENT_SCALING
    if rel is None or rel >= first:
        return stated
    notes.append(f"fp8_recipe unstated: delayed (NeMo {rel[0]}.{rel[1]:02d}'s Transformer Engine predates "
                 f"{'MXFP8BlockScaling' if chip_id in MXFP8_CHIPS else 'Float8CurrentScaling'})")
    return "delayed"


def _recipe_memory(par: dict, precision: str, runtime: str, zero: int, notes: list[str]) -> tuple[bool, bool, float]:
    """(grad_reduce_bf16, fp8_param_gather, optimizer_bytes_per_param) of a run: the row's
    `parallel.grad_reduce_in_fp32` / `parallel.fp8_param_gather` / `parallel.optimizer_bytes_per_param` when
    stated, else what the NeMo / Megatron-Bridge performance recipes of its release set (cost/memory.py;
    docs/COST_MODEL.md "Memory model"):
      grad_reduce_in_fp32 False (bf16 main grads) from NeMo 25.02: NVIDIA/NeMo v2.2.0 recipes
        pretrain_performance_optimizations (e.g. llama3_70b.py, gpt3_175b.py) set plugins.grad_reduce_in_fp32
        False, v2.4.0 scripts/performance/helpers.py set_precision_configs for every dtype; Megatron-Bridge
        scripts/performance/configs/*_llm_pretrain.py set mixed_precision/ddp.grad_reduce_in_fp32 False (v0.2.0).
        NeMo 24.12, the first NeMo 2.0 table, too: its layouts are the rows of v2.2.0's
        scripts/llm/performance/recommended_model_configs/model_configs_h100.csv, whose pretrain_*.py all set
        plugins.grad_reduce_in_fp32 = False for fp8 (the v2.1.0 recipes alone keep bf16_mixed's True; with it,
        Nemotron-4 340B on 128 H100 would need 89 GiB of the 79 GiB it ran in). NeMo 24.07 (NeMo 1 launcher) is
        per example script.
      fp8 primary weights (fp8_param_gather) in NeMo 2: v2.0.0/v2.1.0 bf16_with_fp8_mixed sets fp8_params True,
        v2.3.0+ fp8_param_gather True (delayed, current scaling, MXFP8); Megatron-Bridge's
        bf16_with_fp8_delayed_scaling / current_scaling / mxfp8 presets set it (training/mixed_precision.py v0.2.0);
        not the blockwise (subchannel) presets; NeMo 1 (24.07) launcher configs set no fp8_params.
      optimizer state 10 B (fp32 master as a 16-bit remainder + Adam m, v): NeMo 1 (24.07 launcher, DGX Cloud
        recipes: distributed_fused_adam with megatron_amp_O2 bf16 and fp32 optimizer dtype: NVIDIA/NeMo v2.0.0
        megatron_base_model.py setup_optimization store_param_remainders; 12 with model.fp8_params, which sets
        store_params; a bf16 optimizer dtype is per row); bf16 runs from NeMo 25.07 (v2.4.0
        scripts/performance/helpers.py set_precision_configs: use_precision_aware_optimizer True) and of
        Megatron-Bridge (scripts/performance/utils/helpers.py v0.2.0), Megatron-core store_param_remainders
        True by default (optimizer_config.py core_v0.13.1); not with Megatron-FSDP (ZeRO-3), which turns the
        precision-aware optimizer off."""
    gr, f8 = par.get("grad_reduce_in_fp32"), par.get("fp8_param_gather")
    ob = par.get("optimizer_bytes_per_param")
    rel = _nemo_release(par) if _megatron_recipe(par) and runtime == "megatron" else None
    fw = str(par.get("framework") or "").lower()
    # NeMo 1 (megatron_gpt_pretraining.py via the launcher: the 24.07 tables, DGX Cloud recipes on 24.09):
    # apex DistributedFusedAdam; fp8 primary weights only where the run sets model.fp8_params
    nemo1 = rel is not None and (rel <= (24, 7) or any(k in fw for k in ("nemo 1", "launcher", "megatron_gpt_pretraining")))
    prec_text = re.sub(r"\s", "", str(par.get("precision") or "").lower())
    if f8 is None and rel is not None and precision == "fp8":
        if nemo1:
            f8 = "fp8_params=true" in prec_text or "fp8_params:true" in prec_text
        elif not re.search(r"block-?wise|sub-?channel", prec_text):
            # the blockwise (subchannel) presets keep bf16 weights; MXFP8 ("1x32-block-scaled") does not
            f8 = True
            notes.append(f"fp8_param_gather unstated: True (NeMo {rel[0]}.{rel[1]:02d} fp8 recipes: fp8 primary weights)")
    if gr is None and rel is not None and not nemo1 and precision in BF16_WEIGHT_PRECISIONS \
            and rel >= ((24, 12) if precision in QUANTIZED_PRECISIONS else (25, 2)):
        gr = False
        notes.append(f"grad_reduce_in_fp32 unstated: False (NeMo {rel[0]}.{rel[1]:02d} performance recipes)")
    if ob is None and rel is not None and zero in (1, 2) and precision in ("bf16", "fp8") and (
            nemo1 or rel >= (25, 7) and precision == "bf16"):
        # NeMo 1 with fp8_params stores a full fp32 master (megatron_base_model.py: store_params True): 12
        ob = 12.0 if nemo1 and f8 else 10.0
        notes.append(f"optimizer state unstated: {ob:g} B/parameter (NeMo {rel[0]}.{rel[1]:02d} optimizer"
                     f"{'' if ob == 12 else ', fp32 master kept as a 16-bit remainder'})")
    return (gr is False and precision in BF16_WEIGHT_PRECISIONS), bool(f8) and precision == "fp8", float(ob or 0.0)


# torch 2.1 (released 2023-10-04) made early stop the default of non-reentrant checkpointing (cost/recompute.py);
# torchtitan turned it off in its AC config on 2025-08-29 (pytorch/torchtitan@25413d224)
_TORCH_EARLY_STOP = (2, 1)
_TORCH_EARLY_STOP_DATE = "2023-10"
_TORCHTITAN_NO_EARLY_STOP_DATE = "2025-08-29"
_TORCHTITAN_NO_EARLY_STOP_RELEASE = (0, 2)


# torchtitan moved context parallelism to FlexAttention's K/V all-gather in 0.3.0 (specs/runtimes/torchtitan.py "CP");
# releases before it (0.2.x, and the 2024-2025 commits the published runs name) ran PyTorch's SDPA ring attention
_TORCHTITAN_FLEX_CP_RELEASE = (0, 3)


def _torchtitan_release(fw: str) -> tuple[int, int] | None:
    """(major, minor) of the torchtitan release a framework text names ("torchtitan 0.2.2", "torchtitan v0.3.0")."""
    m = re.search(r"torchtitan[ =v]*(\d+)\.(\d+)\.", fw)
    return (int(m.group(1)), int(m.group(2))) if m else None


_TORCH_FUSED_RMSNORM = (2, 8)      # aten._fused_rms_norm (pytorch#153666, 2025-05), released in torch 2.8 (2025-08)
_TORCH_FUSED_RMSNORM_DATE = "2025-08"


def _eager_traffic(par: dict, runtime: str, notes: list[str]) -> str:
    """A torchtitan-costed row's eager traffic (StrategySpec.eager_traffic): `parallel.eager_traffic` when given;
    "bf16" (the runtime's: bf16 parameters, fused RMSNorm) when the framework text names torchtitan >= 0.2, torch >=
    2.8 or a date from 2025-08 on; otherwise "autocast_fp32": PyTorch loops of older releases (composite fp32
    RMSNorm, LLM Foundry / fms-fsdp mixed precision), for which the harness figure stands in."""
    if par.get("eager_traffic"):
        return str(par["eager_traffic"])
    if runtime != "torchtitan":
        return ""
    fw = str(par.get("framework") or "").lower()
    tt = _torchtitan_release(fw)
    torch_v = re.search(r"(?:pytorch[:\s]|torch )(\d+)\.(\d+)", fw)
    date = re.search(r"(20\d\d-\d\d)", fw)
    if (tt and tt >= (0, 2)) or \
            (torch_v and (int(torch_v.group(1)), int(torch_v.group(2))) >= _TORCH_FUSED_RMSNORM) or \
            (not torch_v and not tt and date and date.group(1) >= _TORCH_FUSED_RMSNORM_DATE):
        return ""
    notes.append("eager traffic: autocast/composite-norm figure (torch before 2.8 or not stated)")
    return "autocast_fp32"


def _offload_layers(par: dict, src: str, rid: str) -> int:
    """`parallel.activation_offload_layers` (Megatron cpu_offloading_num_layers): a whole number >= 0, default 0."""
    v = par.get("activation_offload_layers", 0) or 0
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise InputError(src, f"rows[{rid}].parallel.activation_offload_layers", f"must be a whole number >= 0, got {v!r}")
    return v


def _cp_comm(par: dict, runtime: str, cp: int, notes: list[str]) -> str:
    """A row's context-parallel attention (StrategySpec.cp_comm; "" = the runtime's): `parallel.cp_comm` when given;
    a torchtitan run of a release before 0.3.0 (its framework text names a version < 0.3, or a date before 2026) ran
    PyTorch's ring attention for SDPA (cost/cp.py "torch_ring")."""
    if par.get("cp_comm"):
        return str(par["cp_comm"])
    if runtime != "torchtitan" or cp <= 1:
        return ""
    fw = str(par.get("framework") or "").lower()
    ver = _torchtitan_release(fw)
    date = re.search(r"(20\d\d)-\d\d", fw)
    if (ver and ver < _TORCHTITAN_FLEX_CP_RELEASE) or \
            (not ver and date and int(date.group(1)) < 2026):
        notes.append("context parallelism: PyTorch SDPA ring attention (torchtitan before 0.3.0)")
        return "torch_ring"
    return ""


def _recompute_early_stop(par: dict, runtime: str, notes: list[str]) -> str:
    """Whether a PyTorch-loop row's full recomputation stopped early (StrategySpec.recompute_early_stop; "" = the
    runtime's): `parallel.recompute_early_stop` when given, else from the versions its framework text names -- a
    reentrant checkpoint or torch < 2.1 re-ran whole layers; torchtitan from 2025-08-29 passes early_stop=False;
    a non-reentrant checkpoint on torch >= 2.1 (or a framework dated from 2023-10 on) stopped early."""
    if par.get("recompute_early_stop") is not None:
        return "on" if par["recompute_early_stop"] else "off"
    if runtime not in ("torchtitan", "pytorch") or _recompute(par.get("recompute")) != "full":
        return ""
    fw, rc = str(par.get("framework") or "").lower(), str(par.get("recompute") or "").lower()
    if "reentrant" in rc and "non-reentrant" not in rc:
        return "off"
    m = re.search(r"(?:pytorch[:\s]|torch |post-)(\d+)\.(\d+)", fw)
    date = re.search(r"(20\d\d-\d\d(?:-\d\d)?)", fw)
    if "torchtitan" in fw:
        # releases from 0.2.0 (2025-10) on carry the 2025-08-29 config (ACConfig.early_stop = False)
        ver = _torchtitan_release(fw)
        if (ver and ver >= _TORCHTITAN_NO_EARLY_STOP_RELEASE) or \
                (date and date.group(1) >= _TORCHTITAN_NO_EARLY_STOP_DATE):
            return "off"
    if m:
        on = (int(m.group(1)), int(m.group(2))) >= _TORCH_EARLY_STOP
        notes.append(f"full recompute early stop {'on' if on else 'off'} (torch {m.group(1)}.{m.group(2)}: "
                     "non-reentrant checkpoint, cost/recompute.py)")
        return "on" if on else "off"
    if date:
        on = date.group(1) >= _TORCH_EARLY_STOP_DATE
        notes.append(f"full recompute early stop {'on' if on else 'off'} (framework dated {date.group(1)}: torch "
                     f"{'>=' if on else '<'} 2.1, cost/recompute.py)")
        return "on" if on else "off"
    return ""


def te_cross_entropy(framework: str) -> bool:
    """Whether a NVIDIA performance-table run computed its loss with Transformer Engine's parallel_cross_entropy
    (StrategySpec.loss_kernel "te_xent"), from its framework string: Megatron-Bridge's performance scripts set
    model.cross_entropy_fusion_impl = "te" (NVIDIA-NeMo/Megatron-Bridge v0.1.0rc3 scripts/performance/configs/
    {llama3,llama31,qwen3,deepseek}/*.yaml; v0.2.0 utils/helpers.py and v0.3.0-v0.5.0 utils/overrides.py for every
    model), and NeMo 2's from v2.4.0 = container 25.07 (scripts/performance/helpers.py set_primary_perf_configs; not in
    v2.3.0 = 25.04). Their containers ship Transformer Engine 2.5-2.16, whose kernel writes the gradient in place."""
    fw = framework.lower()
    if "megatron-bridge" in fw:
        return True
    rel = _nemo_release({"framework": framework})     # NeMo AutoModel runs its own (PyTorch) loss
    return rel is not None and rel >= (25, 7) and "automodel" not in fw


def _loss_kernel(par: dict, notes: list[str]) -> str:
    """The cross-entropy kernel a row ran (StrategySpec.loss_kernel): `parallel.loss_kernel` when given; LLM Foundry's
    MPT models default to flash-attn's fused cross-entropy (llmfoundry/models/mpt/modeling_mpt.py ComposerMPTCausalLM:
    om_model_config.get('loss_fn', 'fused_crossentropy') -> flash_attn.losses.cross_entropy.CrossEntropyLoss, at
    5f43bf1 2023-05-03, b2a43a1 2023-10-19 and v0.4.0); Megatron-LM before megatron-core: its unfused loss; else the
    runtime's."""
    if par.get("loss_kernel"):
        return str(par["loss_kernel"])
    fw = str(par.get("framework") or "").lower()
    if any(k in fw for k in ("llm foundry", "llm-foundry", "llmfoundry")):
        notes.append("loss: flash-attn fused cross-entropy (LLM Foundry MPT default loss_fn fused_crossentropy)")
        return "flash_xent"
    if te_cross_entropy(fw):
        notes.append("loss: Transformer Engine parallel_cross_entropy (cross_entropy_fusion_impl 'te', set by "
                     "Megatron-Bridge's and NeMo >= 25.07's performance scripts)")
        return "te_xent"
    if "megatron-lm" in fw and not any(k in fw for k in ("core", "nemo", "bridge")):
        # Megatron-LM before Megatron-core had only the unfused vocab-parallel loss
        # (megatron/mpu/cross_entropy.py; the fused one came with megatron-core in 2024)
        notes.append("loss: Megatron-LM's unfused vocab-parallel cross-entropy (no fused loss before megatron-core)")
        return "megatron_unfused"
    return ""


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
    """The runtime (baige_plan/specs/runtimes/) a measured run executed on, from its framework text."""
    t = f"{framework or ''} {sharding or ''}".lower()
    if "deepspeed" in t:
        return "deepspeed"
    if "torchtitan" in t:
        return "torchtitan"
    if "automodel" in t:
        # NeMo Automodel: PyTorch FSDP2 on bf16 parameters (specs/runtimes/automodel.py), not NeMo's Megatron path
        return "automodel"
    if "paddle" in t:
        return "paddle"
    if any(k in t for k in ("llm foundry", "llm-foundry", "llmfoundry", "fms-fsdp", "fms_fsdp")):
        # PyTorch FSDP training loops (LLM Foundry / Composer, IBM fms-fsdp) are costed as torchtitan runs
        # FSDP (benchmarks/corpus/README.md: "PyTorch FSDP1/2 loops: torchtitan")
        return "torchtitan"
    if any(k in t for k in ("megatron-fsdp", "megatron fsdp", "use-megatron-fsdp", "use-torch-fsdp2",
                            "fsdp2 in megatron")):
        return "megatron"    # Megatron-core's own FSDP paths, before the plain-PyTorch rule below
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


def _section(row: dict, key: str, src: str, rid: str, required: bool = True) -> dict:
    v = row.get(key)
    if v is None and not required:
        return {}
    if not isinstance(v, dict):
        raise InputError(src, f"rows[{rid}].{key}", "missing section" if v is None else
                         f"expected a mapping, got {kind_of(v)}")
    return v


def _opt_number(d: dict, key: str, src: str, path: str) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(src, f"{path}.{key}", f"expected a number, got {v!r}")
    if not math.isfinite(v) or v < 0 or v > 1e12:
        raise InputError(src, f"{path}.{key}", f"must be a finite number from 0 to 1e12, got {v!r}")
    return float(v)


def case_from_row(row: dict, catalog: Catalog, src: str, index: int | None = None) -> RunCase:
    if not isinstance(row, dict):
        raise InputError(src, f"rows[{index if index is not None else '?'}]",
                         f"expected a mapping, got {kind_of(row)}")
    rid = row.get("id", index if index is not None else "?")
    if not isinstance(rid, (str, int)) or isinstance(rid, bool):
        raise InputError(src, f"rows[{index}].id", f"expected a string, got {rid!r}")
    rid = str(rid)
    notes: list[str] = []
    md, hw, par = (_section(row, k, src, rid) for k in ("model", "hardware", "parallel"))
    for k in ("source", "results", "derived"):
        _section(row, k, src, rid, required=False)
    try:
        return _case(row, rid, md, hw, par, notes, catalog, src)
    except SpecError as e:
        raise InputError(src, f"rows[{rid}].{e.field}", e.reason) from None
    except KeyError as e:
        raise InputError(src, f"rows[{rid}]", f"missing key {e}") from None
    except (TypeError, ValueError, AttributeError, OverflowError) as e:
        raise InputError(src, f"rows[{rid}]", str(e).splitlines()[0][:300] if str(e) else type(e).__name__) from None


def recipe_layout(layers: int, pp: int, vpp: int) -> tuple[int, ...]:
    """The layout Megatron-Bridge's DeepSeek recipes give pp x vpp virtual stages (NVIDIA-NeMo/Megatron-Bridge@7af9601c
    src/megatron/bridge/recipes/deepseek/deepseek_v3.py layout_map: (4, 4), (8, 2), (16, 1) -> 4 layers on each
    virtual stage and 1 on the last; (4, 2), (8, 1) -> 8 and 5): ceil(layers / (pp x vpp)) on every virtual stage,
    the rest on the last."""
    n = pp * vpp
    per = -(-layers // n)
    return (per,) * (n - 1) + (layers - per * (n - 1),)


def parse_layout(v: Any) -> tuple[int, ...] | None:
    """A run's pipeline layout: transformer layers per virtual stage, as a list or as Megatron's
    --pipeline-model-parallel-layout string (`|` between virtual stages, `t` a transformer layer, `E` embedding,
    `m` an MTP layer, `L` loss, `X*N` and `(...)*N` repetition: "Et*4|(t*4|)*14tmL")."""
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
            raise ValueError(f"pipeline_layout {v!r}: expected layer counts >= 0")
        return tuple(v)
    text = str(v).replace(" ", "")
    while True:     # innermost (...)*N first
        new = re.sub(r"\(([^()]*)\)\*(\d+)", lambda mo: mo.group(1) * int(mo.group(2)), text)
        if new == text:
            break
        text = new
    text = re.sub(r"([tEmL])\*(\d+)", lambda mo: mo.group(1) * int(mo.group(2)), text)
    if re.search(r"[^tEmL|]", text):
        raise ValueError(f"cannot read pipeline_layout {v!r} (Megatron layout: t, E, m, L, |, *N, (...)*N)")
    return tuple(stage.count("t") for stage in text.rstrip("|").split("|"))


_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_rope_head_dim", "v_head_dim")


def _mla(md: dict, src: str, rid: str) -> MLASpec | None:
    """A run's multi-head latent attention: `model.mla` (the model file's keys), or the Hugging Face config's keys
    on the model itself (kv_lora_rank, q_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim)."""
    if md.get("mla") is not None:
        a = check_keys(md["mla"], src, f"rows[{rid}].model.mla", set(_MLA_KEYS) - {"q_lora_rank"}, {"q_lora_rank"})
        return MLASpec(**a)
    if md.get("kv_lora_rank") is None:
        return None
    return MLASpec(kv_lora_rank=md["kv_lora_rank"], qk_head_dim=md.get("qk_nope_head_dim", md.get("qk_head_dim")),
                   qk_rope_head_dim=md.get("qk_rope_head_dim"), v_head_dim=md.get("v_head_dim"),
                   q_lora_rank=md.get("q_lora_rank"))


def _case(row: dict, rid: str, md: dict, hw: dict, par: dict, notes: list[str], catalog: Catalog,
          src: str) -> RunCase:
    year = _year(row)
    attention = par.get("attention") or ("standard" if year is not None and year <= 2022 else "flash")
    if not par.get("attention"):
        notes.append(f"attention {attention} (source year {year})")
    dropout = _opt_number(md, "dropout", src, f"rows[{rid}].model")
    if dropout is None:
        dropout = 0.1 if attention == "standard" and "bloom" not in str(md.get("name", "")).lower() else 0.0
    try:
        moe = None
        if md.get("moe"):
            mo = check_keys(md["moe"], src, f"rows[{rid}].model.moe", {"experts", "top_k", "expert_ffn_hidden"},
                            {"shared_experts", "layer_freq", "first_dense_layers"})
            moe = MoESpec(**mo)
        model = ModelSpec(name=str(md.get("name", rid)), layers=md["layers"], hidden=md["hidden"], heads=md["heads"],
                          kv_heads=md.get("kv_heads"), head_dim=md.get("head_dim"), ffn_hidden=md["ffn_hidden"],
                          vocab=md["vocab"], seq_len=md.get("seq_len", 2048),
                          activation=md.get("activation") or ("gelu" if year and year <= 2022 else "swiglu"),
                          tie_embeddings=bool(md.get("tie_embeddings", True if year and year <= 2022 else False)),
                          dropout=float(dropout), moe=moe, mla=_mla(md, src, rid),
                          mtp_layers=md.get("mtp_layers") or 0, sliding_window=md.get("sliding_window"),
                          full_attention_every=md.get("full_attention_every"))
        chip_id = hw.get("chip")
        if not chip_id:
            hit = next(((pat, cid) for pat, cid in _GPU_MAP if re.search(pat, str(hw.get("gpu_model", "")), re.I)),
                       None)
            chip_id = hit[1] if hit else None
            if chip_id is None:
                why = "no chip file in the catalog for it" if hit else "unknown gpu_model"
                raise ValueError(f"{why}: {hw.get('gpu_model')!r}; add hardware.chip (a catalog id or a chip file)")
        if not isinstance(chip_id, str):
            raise InputError(src, f"rows[{rid}].hardware.chip", f"expected a chip id, got {chip_id!r}")
        chip_path = Path(src).parent / chip_id
        chip = catalog.chip(str(chip_path) if is_regular_file(chip_path) else chip_id, src,
                            f"rows[{rid}].hardware.chip")
        n, dpn = _count(hw, "num_gpus", None, src, rid), _count(hw, "gpus_per_node", 8, src, rid)
        nodes = max(1, n // dpn)
        nic = _opt_number(hw, "inter_node_bw_per_gpu_gbps", src, f"rows[{rid}].hardware")
        group = GroupSpec(name="g", chip=chip, nodes=nodes, devices_per_node=min(dpn, n),
                          scaleout_Gbps=nic if nic else None, chip_ref=chip.id)
        cluster = ClusterSpec(name=f"{chip.id}:{nodes}x{min(dpn, n)}", groups=(group,))
        def par_int(key: str, default: int | None = 1) -> int:
            v = _int_of(par, key, default, src, f"rows[{rid}].parallel")
            if v < 1:       # a parallel size or batch of 0 divides by zero further on (issue 19)
                raise InputError(src, f"rows[{rid}].parallel.{key}", f"must be a positive integer, got {v!r}")
            return v

        mb = par_int("micro_batch", None) if par.get("micro_batch") is not None else None
        if mb is None:
            mb = 1
            notes.append("micro-batch unstated: 1 used")
        pp = par_int("pp")
        vpp = par_int("vpp")
        if par.get("vpp") is None and pp > 1:
            notes.append("interleaving unstated: vpp 1 used")
        # Megatron --account-for-embedding/loss-in-pipeline-split: the embedding and the loss count as pipeline
        # layers (specs/strategy.py); otherwise an uneven split is DeepSpeed-style balanced
        acc_emb = bool(par.get("account_for_embedding") or par.get("account_for_embedding_in_pipeline_split"))
        acc_loss = bool(par.get("account_for_loss") or par.get("account_for_loss_in_pipeline_split"))
        runtime = par.get("runtime") or runtime_of(par.get("framework"), par.get("zero_or_sharding"))
        try:    # a runtime's name or a framework name (nemo, llm-foundry, ...: specs/runtimes ALIASES)
            runtime = runtimes.canonical(runtime)
        except SpecError:
            raise InputError(src, f"rows[{rid}].parallel.runtime",
                             f"unknown runtime {runtime!r} (one of {', '.join(runtimes.NAMES + runtimes.BACKTEST_ONLY)}"
                             f", or a framework name: {', '.join(sorted(runtimes.ALIASES))})") from None
        # DeepSpeed partitions uneven layer counts itself (StrategySpec.balanced_partition)
        balanced = runtimes.get(runtime).balanced_partition
        layout = parse_layout(par.get("pipeline_layout"))
        if layout is None and not (acc_emb or acc_loss) and model.mla is not None and _megatron_recipe(par) \
                and model.layers % (pp * vpp) and par.get("first_stage_layers") is None:
            layout = recipe_layout(model.layers, pp, vpp)
            notes.append(f"pipeline layout unstated: {list(layout)} (Megatron-Bridge's DeepSeek recipes: "
                         "recipes/deepseek/deepseek_v3.py layout_map)")
        first, last = (None, None) if acc_emb or acc_loss or balanced or layout else balanced_split(model.layers, pp)
        if first is not None:
            notes.append(f"uneven split: first/last stage {first}/{last} layers (embedding counted as a layer)")
        execution = par.get("execution") or _execution(par.get("framework"))
        # NeMo / Megatron-Bridge performance recipes run TE userbuffer TP-communication overlap
        fw = str(par.get("framework", "")).lower()
        tp_overlap = bool(par.get("tp_comm_overlap", "nemo" in fw or "megatron-bridge" in fw))
        zero3_impl = runtimes.get(runtime).zero3_impl
        if not par.get("execution"):
            notes.append(f"execution {execution} (framework {par.get('framework')!r})")
        sp = par.get("sequence_parallel")
        if sp is not None and not isinstance(sp, bool):     # 'no' as a string was True
            raise InputError(src, f"rows[{rid}].parallel.sequence_parallel", f"must be true, false or null, got {sp!r}")
        if sp is None and _megatron_recipe(par):
            # Megatron-Bridge recipes set sequence_parallel exactly when tensor_model_parallel_size > 1
            # (NVIDIA-NeMo/Megatron-Bridge@067f987d src/megatron/bridge/recipes/llama/h100/llama3.py)
            sp = par_int("tp") > 1
            notes.append(f"sequence parallelism unstated: {'on' if sp else 'off'} (Megatron-Bridge recipe default)")
        precision = _precision(par.get("precision"))
        strategy = StrategySpec(tp=par_int("tp"), pp=pp, dp=par_int("dp"), cp=par_int("cp"), ep=par_int("ep"),
                                etp=par_int("etp"), zero=_zero(par), micro_batch=mb, vpp=vpp,
                                recompute=_recompute(par.get("recompute")),
                                recompute_modules=_modelled_modules(par, notes),
                                sequence_parallel=bool(sp) if sp is not None else False,
                                attention=attention, first_stage_layers=first, last_stage_layers=last,
                                account_for_embedding=acc_emb, account_for_loss=acc_loss, pipeline_layout=layout,
                                execution=execution, zero3_impl=zero3_impl, tp_comm_overlap=tp_overlap,
                                runtime=runtime, attention_kernel=str(par.get("attention_kernel") or ""),
                                fp8_recipe=_fp8_recipe(par, precision, runtime, chip.id, notes),
                                balanced_partition=balanced,
                                fp8_output_proj=bool(par.get("fp8_output_proj", False)),
                                distribute_saved_activations=_distributed_saved(par, par_int("tp"), sp, notes),
                                # Megatron --use-tp-pp-dp-mapping (NeMo / MLPerf TP_PP_DP_MAPPING=True)
                                tp_pp_dp_mapping=par.get("tp_pp_dp_mapping") is True,
                                cp_comm=_cp_comm(par, runtime, par_int("cp"), notes),
                                eager_traffic=_eager_traffic(par, runtime, notes),
                                activation_offload_layers=_offload_layers(par, src, rid),
                                **dict(zip(("moe_token_drop", "cuda_graph_scope"),
                                           _moe_host_recipe(row, par, notes) if model.moe is not None else (False, ""),
                                           strict=True)),
                                moe_dispatcher=_moe_dispatcher(row, par, notes) if model.moe is not None else "",
                                moe_a2a_overlap=_moe_a2a_overlap(row, par, notes) if model.moe is not None else False,
                                moe_fused_mlp=_moe_fused_mlp(row, par, notes) if model.moe is not None else False,
                                recompute_early_stop=_recompute_early_stop(par, runtime, notes),
                                loss_kernel=_loss_kernel(par, notes),
                                # HSDP shard group (StrategySpec.fsdp_shard): FSDP1 HYBRID_SHARD / torchtitan
                                # dp_shard x cp / Megatron-FSDP dp·cp / --num-distributed-optimizer-instances
                                fsdp_shard=par_int("fsdp_shard") if par.get("fsdp_shard") not in (None, 0) else 0,
                                **dict(zip(("grad_reduce_bf16", "fp8_param_gather", "optimizer_bytes_per_param"),
                                           _recipe_memory(par, precision, runtime,
                                                          _zero(par), notes), strict=True)))
        job = JobSpec(global_batch=par_int("global_batch_seqs", None),
                      seq_len=_int_of(md, "seq_len", 2048, src, f"rows[{rid}].model"),
                      precision=precision)
        check_strategy(strategy, model, job, cluster.devices)    # what `backtest` will estimate must be valid
    except SpecError as e:
        raise InputError(src, f"rows[{rid}].{e.field}", e.reason) from None
    res, der = row.get("results") or {}, row.get("derived") or {}
    step = _opt_number(res, "step_time_s", src, f"rows[{rid}].results")
    if step is None:
        step = _opt_number(der, "step_time_s", src, f"rows[{rid}].derived")
        if step is not None:
            notes.append("step time derived from published TFLOP/s with the paper's FLOP formula")
    if step is not None and step < MIN_STEP_TIME_S:
        raise InputError(src, f"rows[{rid}].{'results' if res.get('step_time_s') is not None else 'derived'}"
                         ".step_time_s", f"must be at least {MIN_STEP_TIME_S:g} seconds, got {step!r}")
    mem = res.get("memory_gib")
    states = acts = peak = None
    if isinstance(mem, dict):
        states = _opt_number(mem, "params_grads_optimizer_gib", src, f"rows[{rid}].results.memory_gib")
        acts = _opt_number(mem, "activations_gib", src, f"rows[{rid}].results.memory_gib")
    elif mem is not None:
        peak = _opt_number(res, "memory_gib", src, f"rows[{rid}].results")
    if res.get("peak_memory_gib") is not None:
        peak = _opt_number(res, "peak_memory_gib", src, f"rows[{rid}].results")
    kind = str(res.get("peak_memory_kind") or "allocated")
    if kind not in ("allocated", "reserved"):
        raise InputError(src, f"rows[{rid}].results.peak_memory_kind", f"must be allocated or reserved, got {kind!r}")
    reserved = _opt_number(res, "reserved_memory_gib", src, f"rows[{rid}].results")
    # a measured device memory of 0 GiB is no measurement (the backtest divides by it)
    for key, v in (("peak_memory_gib" if res.get("peak_memory_gib") is not None else "memory_gib", peak),
                   ("reserved_memory_gib", reserved)):
        if v is not None and v <= 0:
            raise InputError(src, f"rows[{rid}].results.{key}", f"must be > 0 GiB, got {v!r}")
    excl = row.get("excluded")
    if excl is not None and (not isinstance(excl, str) or not excl.strip()):
        raise InputError(src, f"rows[{rid}].excluded", f"expected the reason as a non-empty string, got {excl!r}")
    return RunCase(rid, model, cluster, job, strategy, step, peak, states, acts, tuple(notes),
                   measured_memory_kind=kind, measured_reserved_gib=reserved, excluded=excl)


def _int_of(d: dict, key: str, default: int | None, src: str, path: str) -> int:
    """d[key] as an integer (None or missing: `default`, or an error naming the field when there is none)."""
    v = d.get(key)
    if v is None:
        if default is None:
            raise InputError(src, f"{path}.{key}", "required key is missing")
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise InputError(src, f"{path}.{key}", f"expected an integer, got {v!r}")
    return v


def _count(d: dict, key: str, default: int | None, src: str, rid: str) -> int:
    """A positive device count (at most MAX_DEVICES)."""
    v = d.get(key)
    if v is None or (v == 0 and default is not None):
        if default is None:
            raise InputError(src, f"rows[{rid}].hardware.{key}", "required key is missing")
        return default
    if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= MAX_DEVICES:
        raise InputError(src, f"rows[{rid}].hardware.{key}", f"must be an integer from 1 to {MAX_DEVICES:,}, "
                         f"got {v!r}")
    return v


def load_runs(path: str | Path, catalog: Catalog) -> list[RunCase]:
    doc = read_document(path)
    src = str(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise InputError(src, "rows", "expected a mapping with a 'rows:' list")
    if len(doc["rows"]) > MAX_RUN_ROWS:
        raise InputError(src, "rows", f"{len(doc['rows']):,} rows exceed the limit of {MAX_RUN_ROWS:,}")
    rows = apply_amendments(doc["rows"], path)      # <name>.amend.yaml beside it (io/run_amends.py)
    cases = [case_from_row(r, catalog, src, i) for i, r in enumerate(rows)]
    seen: set[str] = set()
    for c in cases:
        if c.id in seen:
            raise InputError(src, f"rows[{c.id}].id", f"id {c.id!r} is used by two rows")
        seen.add(c.id)
    return cases
