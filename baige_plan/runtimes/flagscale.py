"""FlagScale heterogeneous training (BAAI FlagScale, Megatron-LM based): the runtime for plans whose
pipelines put stages on different chip groups or families.

FlagScale extends Megatron-LM with `hetero` process meshes: each mesh has its own tp/cp/ep/dp/pp and
device type, pipeline layer splits are given per stage, and cross-family traffic goes through its
communication bridge. Execution follows Megatron-LM (it is a fork): gradients reduced once per step
overlapped with the last backward, distributed optimizer = ZeRO-1.
"""

from __future__ import annotations

from baige_plan.runtimes._common import Export, ExportFile, common_caveats, plan_info
from baige_plan.specs.runtime import GradSync, RuntimeSpec


def _grad_sync(zero: int, pp: int) -> GradSync:
    return GradSync(grads="step", overlap="backward", params="next_forward" if zero >= 1 else "none")


RUNTIME = RuntimeSpec(
    name="flagscale",
    title="FlagScale heterogeneous training (Megatron-LM fork, hetero process meshes)",
    package="flagscale",
    version="0.8.0",
    zero_stages=(0, 1),
    zero_stages_with_pp=(0, 1),
    interleaved=False,
    context_parallel=True,
    expert_parallel=True,
    expert_tensor_parallel=False,
    uneven_split=True,
    sequence_parallel="optional",
    recompute=("none", "selective", "full"),
    precisions=("bf16", "fp16", "fp32"),
    heterogeneous=True,
    schedules=("1F1B",),
    execution="fused",
    zero3_impl="fsdp",
    zero3_gather=lambda pp: "micro_batch",
    grad_sync=_grad_sync,
)


def export(doc: dict) -> Export:
    i = plan_info(doc)
    caveats = common_caveats(i)
    text = f"# {i['title']}\n# {RUNTIME.title} {RUNTIME.version}\n"
    return Export((ExportFile("flagscale_hetero.yaml", text),), tuple(caveats))
