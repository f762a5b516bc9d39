"""How a framework executes the model's non-GEMM work: Megatron-style fused kernels, or eager
PyTorch (autocast over fp32 master weights, unfused norms/activations/casts, fp32 loss).

`fused` is the per-kernel byte accounting of compute.layer_memory_bytes (Megatron/TE fused
LayerNorm, bias-GeLU, bias-dropout-add, vocab-parallel cross-entropy).

`eager` bytes were measured, not assumed: kernel traces of benchmarks/real/harness.py (PyTorch
2.11 eager, bf16 autocast, fp32 AdamW master weights) on 2x H200, every non-GEMM, non-attention,
non-optimizer kernel (copies/casts, elementwise, norms, reductions) summed per run and fitted by
non-negative least squares over 10 single-GPU and DDP runs (125M-1.3B, micro-batch 1-8,
recompute on/off); residuals within 8% (docs/VALIDATION.md, "eager execution"):
  non-GEMM traffic = 409 B x tokens x layers x hidden (+105 B with full recomputation)
                   + 24.3 B x parameters x micro-batches  (fp32 -> bf16 weight casts, fp32 grad accumulation)
                   + 26.5 B x logits                         (fp32 upcast / copies of the logits)
and the fp32 softmax + NLL kernels of the loss move 34 B per logit (forward + backward).
Stored activations (peak allocated memory of the same runs, without recomputation, regressed on
parameters, tokens x layers x hidden and logits): eager keeps ~53 B per token x layer x hidden where
the fused accounting of this GPT family gives 34 B (fp32 LayerNorm inputs under autocast, q/k/v and
attention-output layout copies kept for backward), and ~9 B per logit instead of 6 (bf16 logits,
their fp32 copy and the fp32 log-softmax output).
"""

from __future__ import annotations

from dataclasses import dataclass

EXECUTIONS = ("fused", "eager")


# Eager kernels do not speed up with HBM alone. The same harness ran on one H100 (runs_h100.yaml) and one H200
# (runs_h200.yaml), same torch 2.11, same kernels: the non-GEMM, non-attention, non-optimizer kernel time (copies and
# casts, elementwise, norms, reductions, loss, other; `kernel_time_by_kind_s`) is 1.185-1.213x longer on the H100 over
# the six dense model pairs (gpt-125m..1.3b, micro-batch 1-8, recompute on and off; median 1.193; the two MoE pairs
# 1.13/1.15), where the two chips' 1 GiB copy bandwidths differ 4247 / 3012 = 1.41x (their GEMM time 1.00-1.04x).
# Both parts are the GH100 die (132 SMs, same clocks): these small kernels are held by what the SMs keep in flight
# as much as by HBM, so bandwidth alone does not scale them. EagerTraffic's bytes were fitted on the H200 at its copy
# bandwidth; on the H100 they move at 4247 / 1.193 = 3560 GB/s (ChipSpec.eager_hbm_efficiency 1.063 of its 3350 GB/s
# datasheet figure: a rate in the fit's units, not a claim that HBM runs above its peak). Chips without that
# measurement keep their copy bandwidth (hbm_efficiency), as before: which of the two limits holds on them (fewer SMs,
# other clocks, other memory) was not measured.
EAGER_H100_OVER_H200_TIME = 1.193


@dataclass(frozen=True)
class EagerTraffic:
    # fitted as kernel time x the H200's copy bandwidth (4247 GB/s): they move at ChipRates.eager_Bps
    bytes_per_token_layer_hidden: float = 409.0
    recompute_bytes_per_token_layer_hidden: float = 105.0
    bytes_per_param_per_micro_batch: float = 24.3
    loss_bytes_per_logit: float = 26.5 + 34.0
    fwd_share: float = 1.0 / 3.0        # forward : backward = 1 : 2 of the per-layer traffic
    extra_activation_bytes_per_token_layer_hidden: float = 53.0 - 34.0   # of which 4 B: fp32 LayerNorm
    replicated_extra_activation_bytes: float = 4.0                       # inputs, replicated over TP ranks
    extra_loss_activation_bytes_per_logit: float = 9.0 - 6.0
    # Under tensor parallelism without SP only part of the per-layer traffic is repeated on every rank:
    # LayerNorms (forward, backward, gamma/beta reductions), the fp32 residual adds, the casts of the
    # LayerNorm outputs to bf16 and the row-parallel bias adds act on all h features; GeLU and its
    # backward, the attention-output layout copy and the q/k/v gradient concatenation act on this
    # rank's ffn/tp or h/tp features. Measured share of the replicated part: 0.49, from the kernel
    # traces of gpt-1.3b TP4 vs TP2 x DP2 at micro-batch 16 on 4x H200 (equal tokens per rank;
    # benchmarks/real/raw_h200x4_mb/, tp_mb_traces.py): per-layer non-GEMM kernels (loss, embedding,
    # optimizer and DDP copies excluded) 102.2 ms at tp 4, 123.5 ms at tp 2 -> replicated R = 2 T4 - T2
    # = 80.9 ms, sharded S = 4 (T2 - T4) = 85.2 ms, share 0.487 (rank 3: 0.499; micro-batch 4: 0.453);
    # R + S = 166 ms is the 409 B x tokens x layers x hidden of the tp = 1 fit (155 ms at 4.25 TB/s) + casts.
    tp_replicated_share: float = 0.49
    # Bytes of a backward TP all-reduce (`f`, the input gradient of a column-parallel layer) per byte of
    # the forward one's: 1, the gradient is in the autocast dtype because the harness (like Megatron)
    # casts to bf16 before `f` (benchmarks/real/harness.py `copy_to_tp`); the TP4 traces show 97 of
    # 97 NCCL all-reduces per step as AllReduce_Sum_bf16 (the 4 fp32 ones: embedding and loss).
    tp_grad_comm_scale: float = 1.0


@dataclass(frozen=True)
class Bf16EagerTraffic:
    """Eager PyTorch on bf16 parameters without autocast, norms fused (StrategySpec / RuntimeSpec eager_traffic
    "bf16"): torchtitan on FSDP2's bf16 param_dtype with torch >= 2.8, whose nn.RMSNorm runs one fused kernel
    (aten._fused_rms_norm, pytorch#153666; before it, a composite of fp32 elementwise ops: the harness figure EAGER
    stands in for that). Measured on one H100 (benchmarks/real/recompute_kernels_h100.raw.json, torch 2.11, bf16
    parameters, SDPA flash; benchmarks/real/README.md "What the 2-GPU torchtitan runs say about eager costs"): the
    non-GEMM, non-attention kernels of a layer's forward + backward move 135-145 B per token x layer x hidden for MPT
    shapes (LayerNorm, GeLU 4h) and about 270 B for Llama 2 70B (RMSNorm, SwiGLU 3.5h):
        84 B x hidden + 16.1 B x the MLP's elementwise width (ffn for GeLU; 3 ffn for SwiGLU's gate, up, product)
    per token and layer, and 6 B per parameter per micro-batch (FSDP2's cast of the bf16 gradients to its fp32
    reduce dtype). Full recomputation re-runs the forward's share (EAGER.fwd_share) of the per-layer traffic."""

    bytes_per_token_layer_hidden: float = 84.0
    bytes_per_token_layer_mlp_width: float = 16.1
    bytes_per_param_per_micro_batch: float = 6.0


EAGER_TRAFFIC_KINDS = ("autocast_fp32", "bf16")


@dataclass(frozen=True)
class EagerHost:
    """Host (CPU) dispatch of eager PyTorch, counted in aten ops per micro-batch (fwd + bwd) from the
    harness traces (`cpu_ops_per_step`): 290 per transformer layer (125M/350M/1.3B and per PP stage
    alike), +133 per layer recomputed, +36 per layer of DDP hooks, +179 of FSDP2 hooks (counted only:
    FSDP2's host time is its measured hook time, `Fsdp2Host`, not counted ops), +18 of TP collectives (counted
    only: TP's host time is its measured per-call time, `tp_collective_s`); an MoE layer with a looped expert
    dispatcher adds 120 + 84 per local expert; ~120 per step outside the layers.

    Seconds per op, one process on its host (host_contention scales it for several):
    - dense_us_per_op, the ops of the layers' dense part (norms, attention, MLP, their casts and autograd): 6.47 us,
      the median over the four machines (leases) on which a single-process dense step was measured with its host
      time not bounded by the device (`host_step_s` / `cpu_ops_per_step` of steps under the 1,021-launch queue, or
      the 6- minus 2-layer difference): 4.64 (host_launch_h200.raw.json `eager`, dense at 64 and 4,096 tokens),
      5.75 (runs_h100.yaml gpt-125m mb 8), 7.18 (runs_h200.yaml gpt-125m mb 8), 9.67 (runs_h100_checkpoint_host.yaml:
      the median of its h768 6- and 12-layer and gpt-125m mb 4 steps, 7.27 / 10.03 / 9.67). Hosts differ, so host-bound
      steps carry that spread. Check: x the 4-rank contention (1.39) it is 8.97 us, where the slowest of 4 ranks ran
      9.3 us (runs_h200x4_mb.yaml gpt-1.3b TP4 mb 1: 83.7 ms host less 96 TP calls, 7,480 ops) and at most 9.2 us
      (runs_h200x4_dp_pp.yaml DDP4: 382.7 ms for 38,590 ops, an upper bound: that step is device-bound).
    - moe_us_per_op, the ops an MoE layer adds (router, permutation, per-expert loop, all-to-alls): 4.13 us, what
      is left of the host-bound MoE step runs_h200.yaml h200_moe350m8e_single_mb2_noac (0.12359 s for 26,005
      ops, 6,082 launches) after its 24 x 290 dense ops at 6.47 us, over its 24 x 792 MoE ops. One rate of 4.75 us
      for both kinds (that step's mean) had every dense host-bound step of the harness 10-65 % too fast
      (docs/VALIDATION.md "Dense eager ops at their own rate").
    Expert-parallel all-to-alls with data-dependent split sizes synchronise host and device at every
    MoE layer, so their host and device time add instead of overlapping.

    MoE layers (docs/COST_MODEL.md, "MoE"): the expert loop launches per local expert (84 ops: fc1,
    GeLU, fc2 forward and backward); DDP's per-parameter gradient hooks scale with the parameter tensors
    it reduces: 36 ops per GPT layer of 12 tensors = 3 per tensor, so an MoE layer swaps the MLP's 4
    (fc1/fc2 weight + bias) for the router's 1 and, when DDP reduces the replicated experts (expert
    data parallelism > 1, no EP), 4 per local expert; expert parallelism adds 67 ops per MoE layer
    (two all-to-all autograd functions and the chunk regrouping, forward and backward: the ep = 2 rows'
    20,281 ops less the 18,672 counted without them, over 24 layers); full recomputation re-runs the
    MoE forward, 133/290 of the layer's ops as for a dense layer. Checked against the traces' op counts:
    DDP ep 1 29,040 vs 28,969 measured, ep 2 20,281 (by construction), ep 2 recompute 29,233 vs 28,585."""

    dense_us_per_op: float = 6.47
    moe_us_per_op: float = 4.13
    # the measured machines' extremes, for the step-time band of host-bound plans (io/bands.py estimate_band): the
    # fastest single-process host (host_launch_h200.raw.json, dense), the slowest rank of the slowest 4-rank host
    # (runs_h200x4_unseen.yaml gpt-760m DDP4 mb 2: 110.9 ms for 7,945 ops; docs/VALIDATION.md "Thirteen 4-GPU
    # configurations")
    fastest_host_us_per_op: float = 4.64
    slowest_4_rank_host_us_per_op: float = 13.96
    ops_per_layer: float = 290.0
    recompute_ops_per_layer: float = 133.0
    # torchtitan's op-level selective AC (torch.utils.checkpoint with a policy: a Python TorchDispatchMode sees every
    # op of the block's forward and of its recomputation), in dense ops of host per layer: torchtitan 0.2.2's own
    # Llama block under its own apply_ac, device work nil (benchmarks/real/sac_host.py, two 2x H200 leases): 7.99 /
    # 10.96 ms per layer where the same layer without AC took 2.07 / 1.76 ms, i.e. 2.86 / 5.23 x the layer's own host
    # on top; their mean x 290 ops (docs/VALIDATION.md "torchtitan op-level selective AC at micro-batch 1")
    op_sac_ops_per_layer: float = 1173.0
    ddp_ops_per_layer: float = 36.0
    fsdp_ops_per_layer: float = 179.0      # counted; costed by Fsdp2Host instead
    tp_ops_per_layer: float = 18.0        # counted; costed by tp_collective_s / tp_passthrough_s instead
    # Megatron-style TP on plain tensors (benchmarks/real/harness.py `_tp_layers`): per layer and pass two
    # autograd Functions issue an NCCL all-reduce through ProcessGroupNCCL (`g` forward,
    # `f` backward) and two pass a tensor through (`f` forward, `g` backward). Host time per call, from
    # the profiled steps of gpt-1.3b TP4 at micro-batch 1 and 4 on 4x H200 (host-bound; ranks 0 and 3;
    # top-level `_Reduce` / `_CopyBackward` ranges, nested c10d::allreduce_ included, each trace scaled by
    # its rank's unprofiled / profiled host time 0.57-0.78; benchmarks/real/tp_mb_traces.py): 120-142 us,
    # median 136 us per all-reduce call; the pass-through ones 9.4-12.0 us, median 10.4 us.
    # Full recomputation re-runs the forward's calls.
    tp_collective_s: float = 136e-6
    tp_passthrough_s: float = 10.4e-6
    # Several training processes on one host: every rank dispatches its own ops and a step waits for the slowest
    # (its collectives). The slowest of the 4 ranks of the 4x H200 harness host dispatched the eager MoE DDP step
    # (micro-batch 4, 28,969 ops) at 7.33 us per op against 5.29 us for the same step alone on one H200
    # (runs_h200.yaml h200_moe350m8e_single_mb4_noac: 0.13761 s / 26,005 ops): 1.386x. `host_contention` takes 1 for
    # one rank, this at 4 and more (more ranks per host are not measured), linear in between (2 ranks: not
    # measured separately; their median rank ran 5.66 us). The FSDP2 hook and TP per-call times above were
    # measured on 4-rank hosts already and are not scaled again.
    slowest_of_4_ranks: float = 7.33 / 5.29
    moe_ops_per_layer: float = 120.0
    moe_ops_per_local_expert: float = 84.0
    ops_per_step: float = 120.0
    ddp_ops_per_param: float = 36.0 / 12.0
    mlp_param_tensors: float = 4.0       # fc1/fc2 weight + bias of the dense MLP an MoE layer replaces
    router_param_tensors: float = 1.0    # bias-free router
    expert_param_tensors: float = 4.0    # fc1/fc2 weight + bias per expert
    ep_ops_per_moe_layer: float = 67.0

    @property
    def host_fast_factor(self) -> float:
        """The fastest host measured over the modelled one, per op (one process)."""
        return self.fastest_host_us_per_op / self.dense_us_per_op

    @property
    def host_slow_factor(self) -> float:
        """The slowest host measured over the modelled one, per op, both at 4 ranks on a host."""
        return self.slowest_4_rank_host_us_per_op / (self.dense_us_per_op * self.slowest_of_4_ranks)


@dataclass(frozen=True)
class Fsdp2Host:
    """Host time of FSDP2 (`torch.distributed.fsdp.fully_shard`) beyond the eager ops of the model it wraps,
    measured from the Chrome traces of benchmarks/real/harness.py (gpt-350m/760m/1.3b FSDP over 4x H100,
    torch 2.11, ranks 0 and 3 each; benchmarks/real/raw_h100x4/, benchmarks/real/fsdp_host_traces.py,
    docs/VALIDATION.md "FSDP host").

    FSDP2 runs Python hooks around every fully_shard unit (torch/distributed/fsdp/_fully_shard/
    _fsdp_param_group.py): `pre_forward` (unshard = `foreach_all_gather`: copy-in, all-gather on the
    all-gather stream; `wait_for_unshard`: stream wait + `foreach_all_gather_copy_out`, then swapping every
    parameter to its unsharded tensor, `_register_post_backward_hook`), `post_forward` (reshard),
    `pre_backward` (unshard again, reshard_after_forward=True, + `_backward_prefetch` of the next unit) and
    `post_backward` (accumulate, reshard, `foreach_reduce`: chunk_cat copy-in, reduce-scatter, division),
    plus the root's `_root_pre_forward` / `_root_post_backward_final_callback` (_fsdp_state.py). Their
    `FSDP::*` record_function ranges sum to 2.7-3.4 ms per unit per micro-batch (median 2.97 ms), the
    nested aten ops included, after scaling each trace by its rank's unprofiled / profiled host time
    (0.66-0.93). AdamW over the sharded DTensor parameters dispatches every foreach op through DTensor
    (1,782 aten ops instead of 2 for DDP's plain tensors): 11-25 ms per step (median 15.2 ms) for 25 units
    (24 blocks + root: 292 parameter tensors), 0.61 ms per unit.

    Why it sets the step: the all-gather of unit i is issued only when the host reaches unit i's
    `pre_forward` (implicit prefetch; `_backward_prefetch` in backward is one unit ahead) and every rank's
    compute stream waits on it (`wait_for_unshard` -> _fsdp_collectives.py `foreach_all_gather_copy_out`:
    `current_stream().wait_event(all_gather_event)`), so once the host is
    not ahead of the device each unit starts when the slowest rank's host has issued its all-gather:
    the step is host-bound (measured: host until the last launch 0.14-0.20 s, step 0.16-0.21 s, for
    gpt-350m to 1.3b alike; NCCL all-gather kernels of the waiting ranks stay resident 56-102 ms)."""

    unit_s: float = 2.97e-3              # per fully_shard unit (blocks + root) per micro-batch
    optimizer_unit_s: float = 0.61e-3    # per unit per optimizer step (AdamW over DTensor shards)


@dataclass(frozen=True)
class LaunchHost:
    """Host (CPU) seconds per launch of GPU work from PyTorch, measured on one x86 H200 host (benchmarks/real/
    host_launch.py -> host_launch_h200.raw.json, torch 2.11, device idle at the start, fewer launches than the queue
    holds; docs/COST_MODEL.md §2c "Host-bound MoE layers"); what cost/moe.py `fused_moe_host` multiplies its
    launch counts by. The same host's `torch.mm` (16.8 us) matches the 13.5 us CPU time of a torch Linear forward on
    an H100 DGX (Xeon 8480C; TransformerEngine issue #2053), so it stands for a DGX-class x86 host.

    eager_kernel_s: per kernel of an eager PyTorch training layer, forward + backward with autograd (the harness's
      dense block 16.5-18.8 us, its MoE block 15.9-20.1 us per kernel at 64 and 4096 tokens; `eager`);
    gemm_s: per cuBLAS GEMM (torch.mm at Qwen3-30B-A3B expert shapes: output allocation, cuBLASLt heuristic and
      launch; median of 18 points 15.8-17.7 us; a TorchScript loop, i.e. issued from C++ as Transformer Engine's
      per-expert loop is, cost the same 11.9 vs 11.2 us on a second host: the cost is not Python's; `gemm`);
    small_kernel_s: per elementwise kernel launched without autograd (8.7 us add_, 7.9 us mm(out=) behind a busy
      device; `queue`): TE's per-expert fp8 quantisation kernels (with their output allocations);
    te_module_over_torch: a Transformer Engine module call costs this many torch Linear calls of host: te.Linear
      BF16 forward 99.66 vs torch 37.08 us CPU on GB200, 90.53 vs 33.17 on GH200 (TransformerEngine issue #2053,
      2025-08; 2.69, 2.73): prepare_forward, fp8 metadata and quantizer bookkeeping in Python;
    collective_s: per NCCL collective issued through an autograd Function and c10d (EagerHost.tp_collective_s,
      measured on 4x H200);
    grace_host_factor: host code on a Grace CPU (GB200/GH200) over an H100 DGX's Xeon: torch Linear CPU time 37.08
      / 13.48 us (TransformerEngine issue #2053);
    queue_depth: kernel launches the host may run ahead of the device before a launch blocks (1,021 on H200, both
      for add_ and mm; `queue`);
    moe_plumbing_over_eager: a kernel of Megatron-core's MoE router (TopKRouter: aux loss, forced balance) and
      alltoall token dispatcher (preprocess, permutation, all-to-alls, combine) costs this many plain eager kernels
      of host: Megatron-core 0.19.2's MoELayer with its experts stubbed, ep 1 / 2, 512 / 4,096 tokens, its host
      seconds per launched kernel over the same process's plain autograd chain, on two x86 hosts: a 2x H200 one
      (1 and 2 processes; 43.6 vs 16.0 us alone; ten points, median 2.51) and a 1x H100 one (two runs; its plain
      chain 32-33 us; four points, median 2.0): 2.45 over the fourteen (1.70-3.05; benchmarks/real/
      megatron_moe_host.py -> megatron_moe_host_*.raw.json) -- Megatron's own Python around each kernel (config
      checks, aux-loss tracking, autograd Functions)."""

    eager_kernel_s: float = 17.5e-6
    gemm_s: float = 16.8e-6
    small_kernel_s: float = 8.3e-6
    te_module_over_torch: float = 2.7
    collective_s: float = 136e-6
    grace_host_factor: float = 2.75
    queue_depth: int = 1021
    moe_plumbing_over_eager: float = 2.4

    @property
    def te_module_s(self) -> float:
        """One Transformer Engine module call (its Python and its kernels' launches)."""
        return self.te_module_over_torch * self.gemm_s

    @property
    def moe_plumbing_kernel_s(self) -> float:
        """One kernel of Megatron-core's MoE router or alltoall dispatcher (its Python around the launch)."""
        return self.moe_plumbing_over_eager * self.eager_kernel_s


EAGER = EagerTraffic()
EAGER_BF16 = Bf16EagerTraffic()
EAGER_HOST = EagerHost()
FSDP2_HOST = Fsdp2Host()
LAUNCH_HOST = LaunchHost()


# Hosts with a Grace CPU (GB200 / GB300 trays, GH200): LaunchHost.grace_host_factor, ranks_per_cpu
GRACE_HOST_CHIPS = ("gb200", "gb300", "gh200")


def ranks_per_cpu(chip_id: str, ranks_on_node: int) -> int:
    """Training processes that share one host CPU, which `host_contention` takes. A Grace CPU serves one GPU on GH200
    and two on a GB200 / GB300 compute tray (2 Grace CPUs, 4 GPUs: NVIDIA GB200 NVL72 datasheet); the job's node
    there is the NVLink domain (up to 72 GPUs), not the host. On x86 servers the ranks of a node share its CPUs, as
    on the 4-GPU host the contention was measured on (host_contention caps the count at the measured 4)."""
    c = chip_id.lower()
    if c.startswith("gh200"):
        return 1
    if c.startswith(GRACE_HOST_CHIPS):
        return max(1, min(ranks_on_node, 2))
    return max(1, ranks_on_node)


def host_contention(ranks_per_host: int) -> float:
    """The slowest rank's per-op host cost over one process alone, with `ranks_per_host` training processes on
    the host (EagerHost.slowest_of_4_ranks: 1 at one rank, the measured 4-rank value at 4 and more)."""
    r = max(1, min(ranks_per_host, 4))
    return 1.0 + (EAGER_HOST.slowest_of_4_ranks - 1.0) * (r - 1) / 3


def eager_host_s(n_layers: int, n_moe: int, local_experts: float, recompute_full: bool, dp: int, zero: int,
                 tp: int, ep: int = 1, expert_ddp: bool = False, micro_batches: int = 1,
                 ranks_per_host: int = 1, op_sac: bool = False) -> float:
    """Host dispatch time of one micro-batch on one stage (eager PyTorch). `expert_ddp`: DDP reduces
    the (replicated) expert parameters too (EP < the data-parallel size: expert data parallelism > 1).
    ZeRO-3 is FSDP2: its hooks cost `FSDP2_HOST.unit_s` per unit (the stage's layers + its root) per
    micro-batch instead of `fsdp_ops_per_layer` counted ops, and its DTensor optimizer step
    `FSDP2_HOST.optimizer_unit_s` per unit, spread over the step's `micro_batches`. `op_sac`: torchtitan's op-level
    selective AC, whose dispatch mode adds `op_sac_ops_per_layer` to every dense layer."""
    h = EAGER_HOST
    per_layer = h.ops_per_layer + (h.recompute_ops_per_layer if recompute_full else 0.0) \
        + (h.op_sac_ops_per_layer if op_sac else 0.0)
    ddp = zero < 3 and dp > 1
    fsdp = 0.0
    if zero >= 3:
        units = n_layers + 1
        fsdp = units * (FSDP2_HOST.unit_s + FSDP2_HOST.optimizer_unit_s / max(1, micro_batches))
    elif ddp:
        per_layer += h.ddp_ops_per_layer
    tp_s = 0.0
    if tp > 1:
        # calls of each kind (all-reduce, pass-through): 2 per pass per dense layer (attention + MLP),
        # forward and backward; an MoE layer's attention half; full recomputation repeats the forward's
        calls = (4 * (n_layers - n_moe) + 2 * n_moe) * (1.5 if recompute_full else 1.0)
        tp_s = calls * (h.tp_collective_s + h.tp_passthrough_s)
    dense_s = n_layers * per_layer * h.dense_us_per_op * 1e-6
    moe_s = n_moe * eager_moe_layer_ops(local_experts, recompute_full, ddp, ep, expert_ddp) * h.moe_us_per_op * 1e-6
    return (dense_s + moe_s) * host_contention(ranks_per_host) + fsdp + tp_s


def eager_moe_layer_ops(local_experts: float, recompute_full: bool, ddp: bool, ep: int, expert_ddp: bool) -> float:
    """Host ops an MoE layer adds to a dense layer's (EagerHost docstring): router, permutation and the
    per-expert loop, EP all-to-alls, their recomputation, and the DDP hooks of its parameter tensors."""
    h = EAGER_HOST
    ops = h.moe_ops_per_layer + h.moe_ops_per_local_expert * local_experts
    if ep > 1:
        ops += h.ep_ops_per_moe_layer
    if recompute_full:
        ops *= 1.0 + h.recompute_ops_per_layer / h.ops_per_layer
    if ddp:
        tensors = h.router_param_tensors - h.mlp_param_tensors
        if expert_ddp:
            tensors += h.expert_param_tensors * local_experts
        ops += h.ddp_ops_per_param * tensors
    return ops
# fp32 vocab-parallel cross-entropy in fused kernels, HBM bytes per logit (forward, backward): ~4 passes of 4 bytes,
# half in each direction (NeMo / Megatron-Bridge recipes run a fused loss: cross_entropy_loss_fusion)
FUSED_LOSS_BYTES_PER_LOGIT = (8.0, 8.0)
# Megatron's unfused vocab-parallel loss (megatron-core 0.19.2 tensor_parallel/cross_entropy.py, the path without
# --cross-entropy-loss-fusion and the only one of Megatron-LM before megatron-core): one op per step over the
# logits -- cast to fp32 (read 2, write 4), max (4), subtract in place (4 + 4), exp in place (4 + 4), sum (4),
# softmax division in place (4 + 4); backward: the in-place multiply by the loss gradient (4 + 4) and autograd's
# cast of the fp32 gradient to the logits' 16-bit dtype (4 + 2).
MEGATRON_UNFUSED_LOSS_BYTES_PER_LOGIT = (38.0, 14.0)
# Transformer Engine's parallel_cross_entropy, v2.2 (8ca2caf8a, 2025-02) to v2.17 (Megatron
# --cross-entropy-fusion-impl te; Megatron-Bridge's performance scripts set it for every model, NeMo 2's from v2.4.0 =
# 25.07, scripts/performance/helpers.py set_primary_perf_configs), per 16-bit logit byte: forward = online_softmax_kernel
# reads the logits (1), cross_entropy_kernel reads them again and writes the gradient in place over them (1 + 1);
# backward = element_mul_kernel scales that gradient in place by the per-token loss gradient (1 + 1). It saves the
# logits tensor (now the gradient) and nothing else. From v2.18 (01bbe3eea, 2026-07) the gradient is a new fp32
# tensor instead, as in the native fused loss.
TE_XENT_PASSES_PER_LOGIT = (3.0, 2.0)
