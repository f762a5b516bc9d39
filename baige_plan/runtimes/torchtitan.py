"""torchtitan: FSDP2 / HSDP + TP (+ async TP) + torch.distributed.pipelining schedules + CP, eager
PyTorch unless compiled.

Space (torchtitan/distributed/parallel_dims.py, torchtitan/models/*/parallelize.py):
- data parallel as DDP (data_parallel_replicate_degree, ZeRO-0) or FSDP2 full shard
  (data_parallel_shard_degree, ZeRO-3); no ZeRO-1/2 as such.
- TP always shards norms along the sequence (SP on with TP); PP schedules 1F1B, Interleaved1F1B
  (vpp > 1), GPipe, ZBV...; CP (ring attention over SDPA); EP / ETP for MoE models.
- fp16 is not a training dtype (mixed_precision_param is bfloat16 or float32); fp8 via float8 converters.
Execution semantics:
- pp == 1: the training loop calls backward per micro-batch with no no_sync, so DDP all-reduces and
  FSDP2 reduce-scatters every micro-batch (overlapped with that backward), and FSDP2 gathers the
  parameters for every micro-batch's forward and backward.
- pp > 1: torch.distributed.pipelining's stage runs backward_maybe_with_nosync: gradient sync and
  resharding are off for all but the last micro-batch, so one gather and one reduce per step, with
  the stage's unsharded parameters and gradients resident through the step.
- eager kernels (cost/execution.py) unless torch.compile.
"""

from __future__ import annotations

from baige_plan.runtimes._common import Export, ExportFile, common_caveats, plan_info
from baige_plan.specs.runtime import GradSync, RuntimeSpec


def _grad_sync(zero: int, pp: int) -> GradSync:
    return GradSync(grads="micro_batch" if pp == 1 else "step", overlap="backward", params="none")


RUNTIME = RuntimeSpec(
    name="torchtitan",
    title="torchtitan (FSDP2/HSDP, TP, pipelining schedules, CP)",
    package="torchtitan",
    version="0.2.2",
    zero_stages=(0, 3),
    zero_stages_with_pp=(0, 3),
    interleaved=True,
    context_parallel=True,
    expert_parallel=True,
    expert_tensor_parallel=True,
    uneven_split=False,
    sequence_parallel="always",
    recompute=("none", "selective", "full"),
    precisions=("bf16", "fp8", "fp32"),
    heterogeneous=False,
    schedules=("1F1B", "Interleaved1F1B"),
    execution="eager",
    zero3_impl="fsdp",
    zero3_gather=lambda pp: "micro_batch" if pp == 1 else "step",
    grad_sync=_grad_sync,
    notes=("torch/distributed/pipelining/stage.py backward_maybe_with_nosync",
           "torchtitan/train.py: backward per micro-batch without no_sync"),
)


def export(doc: dict) -> Export:
    i = plan_info(doc)
    s = i["s"]
    caveats = common_caveats(i)
    rep, shard = (s["dp"], 1) if s["zero"] == 0 else (1, s["dp"])
    sched = "Interleaved1F1B" if s["vpp"] > 1 else "1F1B"
    local = s["micro_batch"] * i["m"] if s["pp"] > 1 else s["micro_batch"]
    lines = [f"# {i['title']}", f"# {RUNTIME.title} {RUNTIME.package}=={RUNTIME.version}"]
    lines += [f"# cannot express: {c}" for c in caveats] + [
        "[training]",
        f"local_batch_size = {local}",
        f"global_batch_size = {i['gb']}",
        f"seq_len = {i['job']['seq_len']}",
        f"mixed_precision_param = \"{'float32' if i['job'].get('precision') == 'fp32' else 'bfloat16'}\"",
        "",
        "[parallelism]",
        f"data_parallel_replicate_degree = {rep}",
        f"data_parallel_shard_degree = {shard}",
        f"tensor_parallel_degree = {s['tp']}",
        f"pipeline_parallel_degree = {s['pp']}",
        f"context_parallel_degree = {s['cp']}",
        f"expert_parallel_degree = {s['ep']}",
        f"pipeline_parallel_schedule = \"{sched}\"",
        f"pipeline_parallel_microbatch_size = {s['micro_batch']}",
        "", "[activation_checkpoint]", f"mode = \"{s['recompute']}\""]
    return Export((ExportFile("torchtitan.toml", "\n".join(lines) + "\n"),), tuple(caveats))
