"""What full activation recomputation re-runs, as the runtime's checkpoint implementation runs it.

Megatron-family and DeepSpeed checkpoints (reentrant autograd Functions of their own) re-run each layer's whole
forward in the backward. PyTorch's non-reentrant checkpoint (torch.utils.checkpoint, use_reentrant=False; what
FSDP training loops wrap their blocks with: Composer/LLM Foundry, IBM fms-fsdp, torchtitan, our harness) stops the
recomputation early since torch 2.1 (`early_stop=True` by default; torch/utils/checkpoint.py _StopRecomputationError,
set_checkpoint_early_stop): once the last tensor the backward needs has been saved again. An op's inputs are
saved before the op computes (autograd's generated VariableType code packs the SavedVariables, then
redispatches), so the layer's last GEMM -- the MLP output projection, whose input the activation saved just
before it -- never runs again, nor what follows it (its TP collective, the residual add).

Measured (benchmarks/real/recompute_cost.py, 1x H200, torch 2.11, eager bf16, SDPA flash, 2 checkpointed layers
of MPT-7B/13B/30B and Llama 2 70B shapes at micro-batch 1-8 x 2048 tokens; recompute_cost_h200.raw.json): the
recomputation took 0.70-0.87 of the forward (median 0.76), where the forward less the MLP output GEMM is 0.67
(MPT: 4h^2 of 12h^2 weights) to 0.73 (Llama 2 70B) of the GEMM time; a whole forward would be 1.0.

Not for an MoE layer (its last op, the weighted combine of the experts' outputs, saves those outputs, so the
expert GEMMs run again) nor for a compiled block (one autograd Function whose saved tensors are packed after its
whole forward), nor where a runtime turns early stop off (torchtitan since 2025-08-29: specs/runtimes/torchtitan.py).
"""

from __future__ import annotations

from baige_plan.cost.compute import ChipRates, gemm_time_s
from baige_plan.cost.flops import Gemm
from baige_plan.specs import runtimes
from baige_plan.specs.strategy import StrategySpec

LAST_GEMM = "mlp_down"   # cost/flops.py linear_gemms: a dense layer's last GEMM


def recompute_early_stop(s: StrategySpec) -> bool:
    """Whether full recomputation stops early: the strategy's setting ("on"/"off", from a run's versions), else the
    runtime's (RuntimeSpec.recompute_early_stop); only eager execution (module docstring: compiled blocks)."""
    if s.recompute != "full" or s.execution != "eager":
        return False
    if s.recompute_early_stop:
        return s.recompute_early_stop == "on"
    return runtimes.get(s.runtime).recompute_early_stop


def early_stop_skip_s(lin: list[Gemm], r: ChipRates, last_collective_s: float,
                      tp: int) -> tuple[float, float, float]:
    """(GEMM seconds, TP-collective seconds, FLOPs) of a dense layer's forward that early-stopped recomputation skips:
    the last GEMM and, with tp > 1, the collective after it (reduce-scatter with sequence parallelism, else
    all-reduce)."""
    last = [x for x in lin if x.name == LAST_GEMM]
    return sum(gemm_time_s(x, r) for x in last), (last_collective_s if tp > 1 else 0.0), sum(x.flops for x in last)
