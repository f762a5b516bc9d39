"""Plain PyTorch training loops as benchmarks/real/harness.py runs them (the runtime of our own measured
runs in benchmarks/real/runs_*.yaml): DDP with no_sync over accumulation steps (one bucketed all-reduce
in the last micro-batch's backward), FSDP2 fully_shard (gather and reduce-scatter every micro-batch),
Megatron-style TP on plain tensors, torch.distributed.pipelining 1F1B, eager kernels under autocast.

Not offered to `plan` (it is a benchmark harness, not a framework a user launches a model with): the
backtest uses it so that our runs are costed as they were executed.
"""

from __future__ import annotations

from baige_plan.specs.runtime import (
    GradSync,
    MemorySemantics,
    RuntimeSpec,
)

# What the harness allocates (benchmarks/real/harness.py; cost/memory.py state_bytes): fp32 parameters, grads and
# AdamW states; bf16 autocast keeps each weight's cast for its backward (DDP, TP, PP); FSDP2 fully_shard with
# MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) gathers bf16 blocks instead.
MEMORY = MemorySemantics(
    master="params", autocast_fp32_params=True, zero3_param_bytes=2, zero3_reduce_bytes=4,
    selective="core_attention", interleave_group="pp",
    sources=("benchmarks/real/harness.py: torch.autocast(bfloat16) over fp32 modules; fully_shard(mp_policy=mp)",),
)

RUNTIME = RuntimeSpec(
    name="pytorch",
    title="plain PyTorch (benchmarks/real/harness.py: DDP no_sync, FSDP2, pipelining)",
    package="torch",
    version="2.11.0",
    zero_stages=(0, 3),
    zero_stages_with_pp=(0,),
    interleaved=False,
    context_parallel=False,
    expert_parallel=True,
    expert_tensor_parallel=False,
    uneven_split=False,
    sequence_parallel="optional",
    recompute=("none", "full"),
    precisions=("bf16", "fp16", "fp32", "tf32"),
    heterogeneous=False,
    schedules=("1F1B",),
    execution="eager",
    zero3_impl="fsdp",
    zero3_gather=lambda pp: "micro_batch",
    grad_sync=lambda zero, pp: GradSync(grads="step", overlap="backward", params="none"),
    memory=MEMORY,
    # harness.py: checkpoint(blk, x, use_reentrant=False) on torch 2.11, early stop on by default
    recompute_early_stop=True,
)
