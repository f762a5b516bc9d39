"""Megatron-LM / Megatron-core (what NeMo and Megatron-Bridge run): the default runtime.

Why the default: every published run the cost model is calibrated on (Megatron-LM 2021/2022 tables,
NeMo and Megatron-Bridge performance recipes) ran it, and it is the one open runtime that runs
every dimension the planner searches (TP+SP, PP with interleaving and uneven first/last stages, CP,
EP/ETP, distributed optimizer).

Space (megatron/training/arguments.py validate_args, megatron-core distributed/):
- ZeRO 0 (DDP grad buffer) and 1 (--use-distributed-optimizer: optimizer states sharded, gradients
  reduce-scattered once per step from a full-size buffer). No ZeRO-2 (the grad buffer is never
  sharded); ZeRO-3 only through the separate Megatron-FSDP path, not planned here.
- interleaved 1F1B (--num-virtual-stages-per-pipeline-rank), needs micro-batches % pp == 0;
  uneven first/last stages (--decoder-first/last-pipeline-num-layers); CP (ring attention, TE);
  EP/ETP (MoE), SP optional with TP.
Execution semantics:
- gradients: accumulated in an fp32 main-grad buffer over all micro-batches, reduced once per step
  in buckets overlapped with the last micro-batch's backward (--overlap-grad-reduce, which the export
  sets); the distributed optimizer's 16-bit parameter all-gather overlaps the next forward
  (--overlap-param-gather). With pp > 1 each stage starts its reduction in its own last backward.
- fused kernels (TE / apex), TP communication exposed unless --tp-comm-overlap (not planned: needs
  TE userbuffers bootstrapped at launch).
"""

from __future__ import annotations

from baige_plan.runtimes._common import Export, ExportFile, common_caveats, plan_info
from baige_plan.specs.runtime import GradSync, RuntimeSpec


def _grad_sync(zero: int, pp: int) -> GradSync:
    return GradSync(grads="step", overlap="backward", params="next_forward" if zero >= 1 else "none")


RUNTIME = RuntimeSpec(
    name="megatron",
    title="Megatron-LM / Megatron-core (NeMo, Megatron-Bridge)",
    package="megatron-core",
    version="0.16.1",
    zero_stages=(0, 1),
    zero_stages_with_pp=(0, 1),
    interleaved=True,
    context_parallel=True,
    expert_parallel=True,
    expert_tensor_parallel=True,
    uneven_split=True,
    sequence_parallel="optional",
    recompute=("none", "selective", "full"),
    precisions=("bf16", "fp16", "fp8", "fp32"),
    heterogeneous=False,
    schedules=("1F1B", "interleaved-1F1B"),
    execution="fused",
    zero3_impl="fsdp",
    zero3_gather=lambda pp: "micro_batch",
    grad_sync=_grad_sync,
    notes=("megatron/core/distributed/distributed_data_parallel.py: grad buffer, overlap_grad_reduce",
           "megatron/core/optimizer/distrib_optimizer.py: reduce-scatter grads, all-gather params"),
)


def export(doc: dict) -> Export:
    i = plan_info(doc)
    s, counts, L = i["s"], i["counts"], i["layers"]
    caveats = common_caveats(i)
    args: list[tuple[str, object]] = [
        ("--tensor-model-parallel-size", s["tp"]), ("--pipeline-model-parallel-size", s["pp"]),
        ("--context-parallel-size", s["cp"])]
    if s.get("sequence_parallel") and s["tp"] > 1:
        args.append(("--sequence-parallel", None))
    if s["ep"] > 1 or s.get("etp", 1) > 1:
        args += [("--expert-model-parallel-size", s["ep"]), ("--expert-tensor-parallel-size", s.get("etp", 1))]
    if s["vpp"] > 1:
        args.append(("--num-virtual-stages-per-pipeline-rank", s["vpp"]))
    if s["pp"] > 1 and len(set(counts)) > 1:
        mid = counts[1:-1]
        even = mid[0] if mid else None
        if counts[0] != even:
            args.append(("--decoder-first-pipeline-num-layers", counts[0]))
        if counts[-1] != even:
            args.append(("--decoder-last-pipeline-num-layers", counts[-1]))
    if s["zero"] >= 1:
        args.append(("--use-distributed-optimizer", None))
    if s["recompute"] == "selective":
        args.append(("--recompute-granularity", "selective"))
    elif s["recompute"] == "full":
        args += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                 ("--recompute-num-layers", 1)]
    args += [("--micro-batch-size", s["micro_batch"]), ("--global-batch-size", i["gb"]),
             ("--seq-length", i["job"]["seq_len"]), ("--num-layers", L)]
    prec = i["job"].get("precision", "bf16")
    if prec in ("bf16", "fp8"):
        args.append(("--bf16", None))
    elif prec == "fp16":
        args.append(("--fp16", None))
    if prec == "fp8":
        args.append(("--fp8-format", "hybrid"))
    lines = [f"# {i['title']}", f"# {RUNTIME.title} {RUNTIME.package}=={RUNTIME.version}: pretrain_gpt.py arguments"]
    lines += [f"# cannot express: {c}" for c in caveats]
    lines += [k if v is None else f"{k} {v}" for k, v in args]
    return Export((ExportFile("megatron_args.txt", "\n".join(lines) + "\n"),), tuple(caveats))
