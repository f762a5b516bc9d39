"""PaddlePaddle hybrid parallel through PaddleFormers' Trainer (TrainingArguments).

Space (paddleformers/trainer/training_args.py; paddle.distributed.fleet hybrid_configs):
- dp, tensor (mp), pipeline (pp, with virtual pp = interleaved), sharding stage 1/2/3 (ZeRO-1/2/3);
  with pipeline parallelism only sharding stage 1 (TrainingArguments refuses stage 2/3 with pp).
- context parallel (ring flash attention), expert parallel; SP optional with TP.
Execution semantics:
- dp: gradients accumulate under no_sync and are all-reduced (fused buckets) in the last
  micro-batch's backward; sharding stage 1: reduce(-scatter) of gradients before the optimizer step
  and a parameter broadcast/all-gather after it, both exposed; stage 2: reduced during every
  micro-batch's backward; with pp > 1 gradients are reduced after the pipeline flush.
"""

from __future__ import annotations

import json

from baige_plan.runtimes._common import Export, ExportFile, common_caveats, plan_info
from baige_plan.specs.runtime import GradSync, RuntimeSpec


def _grad_sync(zero: int, pp: int) -> GradSync:
    if zero == 2:
        return GradSync(grads="micro_batch", overlap="backward", params="after_step")
    if zero == 1:
        return GradSync(grads="step", overlap="none", params="after_step")
    return GradSync(grads="step", overlap="none" if pp > 1 else "backward", params="none")


RUNTIME = RuntimeSpec(
    name="paddle",
    title="PaddlePaddle hybrid parallel (PaddleFormers Trainer)",
    package="paddleformers",
    version="1.2.0",
    zero_stages=(0, 1, 2, 3),
    zero_stages_with_pp=(0, 1),
    interleaved=True,
    context_parallel=True,
    expert_parallel=True,
    expert_tensor_parallel=False,
    uneven_split=False,
    sequence_parallel="optional",
    recompute=("none", "selective", "full"),
    precisions=("bf16", "fp16", "fp32"),
    heterogeneous=False,
    schedules=("1F1B", "VPP"),
    execution="fused",
    zero3_impl="fsdp",
    zero3_gather=lambda pp: "micro_batch",
    grad_sync=_grad_sync,
    notes=("paddleformers/trainer/training_args.py: sharding stage2/3 refused with pipeline parallel",),
)


def export(doc: dict) -> Export:
    i = plan_info(doc)
    s = i["s"]
    caveats = common_caveats(i)
    z = s["zero"]
    args = {"tensor_parallel_degree": s["tp"], "pipeline_parallel_degree": s["pp"],
            "sharding_parallel_degree": s["dp"] if z else 1, "sharding": f"stage{z}" if z else "",
            "per_device_train_batch_size": s["micro_batch"], "gradient_accumulation_steps": i["m"],
            "max_seq_length": i["job"]["seq_len"]}
    text = f"# {i['title']}\n# {RUNTIME.title} {RUNTIME.package}=={RUNTIME.version}\n" + json.dumps(args, indent=2) + "\n"
    return Export((ExportFile("paddleformers_args.json", text),), tuple(caveats))
