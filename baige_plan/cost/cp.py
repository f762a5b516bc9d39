"""Context parallelism: the attention of one layer on one CP rank, as the runtime's CP implementation runs it.

Every CP rank holds s/cp of the sequence (causal load balancing: chunks r and 2cp-1-r of 2cp, so every rank
does 1/cp of the causal attention work) and needs every earlier key and value. Two implementations:

"p2p" -- Transformer Engine's AttnFuncWithCPAndKVP2P (Megatron-core's default `--cp-comm-type p2p`;
transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py @ d0067d0). The attention is
split into cp steps; step i computes the local queries against the K/V block received at step i-1 while the
block for step i+1 travels to the next rank of the ring (send/recv on a side stream, double-buffered):
    forward  = c_f + (cp-1) * max(c_f, k)        c_f = one step's attention (1/cp of the rank's work)
    backward = c_b + (cp-1) * max(c_b, 2k)       the ring carries K/V and the dK/dV partials (p2p_comm_buffers
                                                  [[kv, dkv_send_buffer], ...], 2 blocks per step)
    k = p2p(K/V block) = p2p(2 * b * s/cp * kv_heads*head_dim/tp * bytes)
so the exposed communication is (cp-1) * max(k - c, K min(k, c)) per pass: the part of the exchange longer than the
step, or, where the step hides it, what the exchange's NCCL send/recv kernels take from the attention beside them
(CP_P2P_CONTENTION_K, measured). Each step is its own attention launch over
1/cp of the rank's work, so its kernel efficiency is read at that size. Memory-bound extras (not
communication): the forward keeps every step's partial output and merges them into an fp32 output
(flash_attn_fwd_out_correction: read the 16-bit step output, read + write the fp32 accumulator; then one
cast to 16 bits), and the backward accumulates dQ and dK/dV per step in 16 bits (`dq.add_(dq_)`: read two,
write one).

"allgather" -- K/V all-gathered over the CP ranks before the local attention and dK/dV reduce-scattered
after it, not overlapped with it (torchtitan 0.3.0's FlexAttention CP: the K/V all-gather of
torch.distributed.tensor.experimental context_parallel; Transformer Engine's `--cp-comm-type all_gather`
overlaps only the second half of the attention with the gather and is costed the same way here):
    forward exposed = all_gather(cp * K/V block),  backward exposed = reduce_scatter(cp * K/V block)

"torch_ring" -- PyTorch's ring attention for SDPA (torch.distributed.tensor.experimental context_parallel with
the all-gather rotation and round-robin load balance, torchtitan's default before 0.3.0 and NeMo Automodel's;
torch/distributed/tensor/experimental/_context_parallel/_attention.py `_templated_ring_attention` and
`_templated_ring_attention_backward`, torch 2.11). K/V are all-gathered once per pass (asynchronously, waited at
step 1: hidden under step 0's attention); each of the cp steps is its own SDPA launch over 1/cp of the rank's work;
the step outputs are merged in fp32 (`_SDPAMerger`); the backward accumulates dQ, dK, dV in fp32 and passes the
dK/dV partials to the next rank after every step (all-to-all `permute_tensor`, fp32), each waited at the next step
(hidden under its attention backward) except the last. Memory-bound bytes per query element Q and K/V element K
(torchtitan repeats GQA K/V heads before SDPA, so K = Q; TORCH_RING_* below), counted from that code:
    forward  = 16 K (K/V .contiguous() + torch.cat for the exchange) + 12 Q (first step's and the result's casts)
               + (cp - 1) x 42 Q (per later step: fp32 cast 6, out - block 12, x sigmoid 8, subtract 12, partial
               update 4 on average)
    backward = 10 Q + 36 K (fp32 zeros for dQ, dK, dV; K/V contiguous + cat; the final casts) + cp x (14 Q + 44 K)
               (per step: dQ += 10 + partial 4; dK, dV += 20; fp32 cat for the send 16; partial 8)
    exposed  = max(0, all_gather(K/V) - step 0) forward and backward + p2p(fp32 dK/dV block) once (the last)
Measured on 2 and 4 H200 (benchmarks/real/cp_ring_overhead.py, benchmarks/real/cp_ring_h200x4.raw.json): the ring's
device time over the rank's share of one whole-sequence SDPA was +4.3 ms per layer (fwd + bwd) at cp 2 and 8192
tokens per rank, 32 heads (this rule: see tests/test_cp.py), and the host issued a layer's ring in 3.4-4.3 ms at cp 2
(TORCH_RING_HOST_S: DTensor dispatch + the ring's Python; 49 kernels where a plain SDPA launches 9).
"""

from __future__ import annotations

from dataclasses import dataclass

from baige_plan.cost import collectives as C

CP_COMM_TYPES = ("p2p", "allgather", "torch_ring")
OUT_MERGE_BYTES = 2 + 4 + 4     # per output element per step: read the 16-bit step output, read + write fp32 out
OUT_CAST_BYTES = 4 + 2          # fp32 out -> the 16-bit layer output, once
GRAD_ACC_BYTES = 3 * 2          # dq.add_(dq_) / dkv.add_(dkv_) in 16 bits: read two, write one
# torch ring attention (module docstring): bytes per query / key-value element
TORCH_RING_FWD_Q, TORCH_RING_FWD_K, TORCH_RING_FWD_Q_STEP = 12, 16, 42
TORCH_RING_BWD_Q, TORCH_RING_BWD_K, TORCH_RING_BWD_Q_STEP, TORCH_RING_BWD_K_STEP = 10, 36, 14, 44
# Host seconds to issue one layer's ring attention, forward + backward, eager (DTensor dispatch of the SDPA op and the
# ring's Python loop): measured 3.4-4.3 ms at cp 2 on the device machine's host (cp_ring_h200x4.raw.json, median of
# 5 shapes 4.0 ms, less a plain SDPA's ~0.1 ms); at cp 4 the ring synchronised with the device inside the iteration
# and its host time could not be isolated: the cp 2 figure is used for every cp
TORCH_RING_HOST_S = 3.9e-3
TORCH_RING_HOST_FWD_SHARE = 0.4   # the forward's share of the ring's host ops (about 25 of 63, counted from the code)
# A ring exchange running beside the attention it overlaps stretches it by K x the exchange's own time (the share of
# the GPU its send/recv kernels hold: K / (1 + K)): measured with benchmarks/real/cp_p2p_contention.py (batched
# isend/irecv to the next rank on a side stream during causal flash attention forward + backward chains, bf16, head
# dim 128) on 2 and 4 H200 over NVLink: median K 0.146 (0.09-0.43) over the 8 points whose exchange took >= 0.25 ms
# (4-256 MiB; shorter ones are within the chains' run-to-run noise), cp_p2p_contention_h200x{2,4}.raw.json. Lower
# than the collectives' (0.26-0.63, collective_contention.py) and the EP all-to-all's (A2A_OVERLAP_CONTENTION_SHARE
# 0.40): a p2p ring moves one block a step. Across nodes the same K is used (not measured: one host). Applied to
# Transformer Engine's p2p ring only: torch's ring attention overlaps one all-gather per pass (its contention was not
# measured in that form; the torchtitan CP runs, benchmarks/real/runs_torchtitan_*.yaml, are costed as before).
CP_P2P_CONTENTION_K = 0.146


def overlapped_exposed_s(comm_s: float, compute_s: float, k: float = CP_P2P_CONTENTION_K) -> float:
    """Seconds a transfer of `comm_s` adds to `compute_s` of attention it runs beside: the step takes
    max(comm, compute + k min(comm, compute)) (CP_P2P_CONTENTION_K)."""
    return max(comm_s - compute_s, k * min(comm_s, compute_s))


@dataclass(frozen=True)
class CpAttention:
    """Per layer, per micro-batch, on one CP rank (seconds)."""

    exposed_fwd_s: float     # ring/all-gather communication the attention does not hide (forward)
    exposed_bwd_s: float
    extra_fwd_s: float       # memory-bound merging of per-step outputs
    extra_bwd_s: float       # per-step dQ / dK/dV accumulation


def cp_attention(cp: int, comm: str, attn_fwd_step_s: float, attn_bwd_step_s: float, q_elems: float,
                 kv_block_bytes: float, act_bytes: int, hbm_Bps: float, link: C.Link) -> CpAttention:
    """CP cost of one layer's attention (module docstring). `attn_*_step_s`: one step's attention compute
    (1/cp of the rank's attention, timed at that launch size); `q_elems`: the rank's query/output
    elements (b * s/cp * heads*head_dim/tp); `kv_block_bytes`: one K/V block (K and V of the rank's
    s/cp tokens)."""
    if cp <= 1:
        return CpAttention(0.0, 0.0, 0.0, 0.0)
    if comm not in CP_COMM_TYPES:
        raise ValueError(f"unknown CP communication {comm!r}: one of {CP_COMM_TYPES}")
    kv_elems = kv_block_bytes / act_bytes
    if comm == "torch_ring":
        # K/V repeated to the query heads before SDPA (torchtitan repeat_kv / enable_gqa): K = Q per tensor
        k_el = q_elems
        ag = C.all_gather_s(2 * k_el * act_bytes * cp, link)
        exposed_f = max(0.0, ag - attn_fwd_step_s)
        exposed_b = max(0.0, ag - attn_bwd_step_s) + C.p2p_s(2 * k_el * 4, link)
        fwd_b = TORCH_RING_FWD_K * k_el + (TORCH_RING_FWD_Q + (cp - 1) * TORCH_RING_FWD_Q_STEP) * q_elems
        bwd_b = (TORCH_RING_BWD_Q + cp * TORCH_RING_BWD_Q_STEP) * q_elems \
            + (TORCH_RING_BWD_K + cp * TORCH_RING_BWD_K_STEP) * k_el
        return CpAttention(exposed_f, exposed_b, fwd_b / hbm_Bps, bwd_b / hbm_Bps)
    if comm == "allgather":
        full = kv_block_bytes * cp
        return CpAttention(C.all_gather_s(full, link), C.reduce_scatter_s(full, link), 0.0, 0.0)
    k = C.p2p_s(kv_block_bytes, link)
    k_b = C.p2p_s(2 * kv_block_bytes, link)
    exposed_f = (cp - 1) * overlapped_exposed_s(k, attn_fwd_step_s)
    exposed_b = (cp - 1) * overlapped_exposed_s(k_b, attn_bwd_step_s)
    merge_f = (cp * OUT_MERGE_BYTES + OUT_CAST_BYTES) * q_elems / hbm_Bps
    acc_b = cp * GRAD_ACC_BYTES * (q_elems + kv_elems) / hbm_Bps
    return CpAttention(exposed_f, exposed_b, merge_f, acc_b)
