"""DeepSpeed (with Megatron-DeepSpeed for TP and its PipelineEngine for PP).

Space (deepspeed/runtime/pipe/engine.py, deepspeed/runtime/engine.py):
- ZeRO 0/1/2/3 without pipeline parallelism; with pp > 1 the PipelineEngine asserts
  zero_optimization_stage < 2 ("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism").
- no interleaved schedule (TrainSchedule is plain 1F1B), no ring-attention CP (DeepSpeed-Ulysses is a
  different algorithm), no Megatron first/last-stage layer counts (PipelineModule partitions by
  `partition_method`). MoE (DeepSpeed-MoE, --ep-world-size) without pipeline parallelism only.
Execution semantics (DeepSpeedEngine.allreduce_gradients, PipelineEngine._exec_reduce_grads):
- ZeRO-0/1: gradients reduced once, at the gradient-accumulation boundary, after the backward pass
  (pp > 1: after the pipeline flush, ReduceGrads instruction): exposed. ZeRO-1/2 all-gather the
  updated 16-bit parameters right after the optimizer step: exposed.
- ZeRO-2: gradients reduced (reduce-scatter into partitions, overlap_comm) during every micro-batch's
  backward, so traffic is m times the ZeRO-1 volume.
- ZeRO-3: parameters gathered per weight per micro-batch (fetch/prefetch), gradients reduce-scattered
  per micro-batch.
"""

from __future__ import annotations

import json

from baige_plan.runtimes._common import Export, ExportFile, common_caveats, plan_info
from baige_plan.specs.runtime import GradSync, RuntimeSpec


def _grad_sync(zero: int, pp: int) -> GradSync:
    if zero == 2:
        return GradSync(grads="micro_batch", overlap="backward", params="after_step")
    return GradSync(grads="step", overlap="none", params="after_step" if zero == 1 else "none")


def _refusal(s, model, job) -> str | None:
    if s.ep > 1 and s.pp > 1:
        return f"DeepSpeed-MoE expert parallelism (ep={s.ep}) does not run under the PipelineEngine (pp={s.pp})"
    return None


RUNTIME = RuntimeSpec(
    name="deepspeed",
    title="DeepSpeed (Megatron-DeepSpeed: TP, PipelineEngine, ZeRO)",
    package="deepspeed",
    version="0.18.2",
    zero_stages=(0, 1, 2, 3),
    zero_stages_with_pp=(0, 1),
    interleaved=False,
    context_parallel=False,
    expert_parallel=True,
    expert_tensor_parallel=False,
    uneven_split=False,
    sequence_parallel="optional",
    recompute=("none", "selective", "full"),
    precisions=("bf16", "fp16", "fp32"),
    heterogeneous=False,
    schedules=("1F1B",),
    execution="fused",
    zero3_impl="deepspeed",
    zero3_gather=lambda pp: "micro_batch",
    grad_sync=_grad_sync,
    extra_refusal=_refusal,
    notes=("deepspeed/runtime/engine.py allreduce_gradients: ZeRO>=2 reduces every micro-batch, "
           "ZeRO-0/1 at the accumulation boundary",
           "deepspeed/runtime/pipe/engine.py: assert zero stage < 2; _exec_reduce_grads after the flush"),
)


def export(doc: dict) -> Export:
    i = plan_info(doc)
    s = i["s"]
    caveats = common_caveats(i)
    prec = i["job"].get("precision", "bf16")
    cfg = {
        "train_batch_size": i["gb"],
        "train_micro_batch_size_per_gpu": s["micro_batch"],
        "gradient_accumulation_steps": i["m"],
        "bf16": {"enabled": prec == "bf16"},
        "fp16": {"enabled": prec == "fp16"},
        "zero_optimization": {"stage": s["zero"], "overlap_comm": True, "contiguous_gradients": True,
                              "reduce_scatter": True},
        "gradient_clipping": 1.0,
        "steps_per_print": 10,
        "wall_clock_breakdown": False,
    }
    if s["pp"] > 1:
        cfg["pipeline"] = {"stages": s["pp"], "partition": "uniform"}
    return Export((ExportFile("ds_config.json", json.dumps(cfg, indent=2) + "\n"),), tuple(caveats))
