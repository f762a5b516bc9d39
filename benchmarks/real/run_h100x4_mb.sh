#!/usr/bin/env bash
# TP against micro-batch size and pipelines against micro-batch count on one host of 4 GPUs, in one go
# (docs/VALIDATION.md, "TP and micro-batch on 4x H100"). Run from the repo root:
#   OUT=/tmp/out bash benchmarks/real/run_h100x4_mb.sh
# Runs plans/h100x4_mb.yaml (TP4, TP2 x DP2) and plans/h100x4_mb_pp.yaml (PP4, PP2 x DP2) through
# run_h100x4.sh (each in its own torchrun under its own timeout; no collective curves) and keeps the
# profiled step's Chrome trace of ranks 0 and 3 of the runs matching TRACE_MATCH, tarred into
# $OUT/traces.tgz. Rows land in $OUT/runs_h100x4.yaml (runs_h200x4.yaml on H200).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export BAIGE_TRACE_DIR=$O/traces BAIGE_TRACE_RANKS=${BAIGE_TRACE_RANKS:-0,3}
export BAIGE_TRACE_MATCH=${TRACE_MATCH:-'gpt1p3b_tp4_mb(1|4|16)_|gpt1p3b_tp2_dp2_mb(4|16)_|pp2_dp2_mb4_ga(4|16)_|pp4_mb4_ga16_'}
P=benchmarks/real/plans
PLANS="$P/h100x4_mb.yaml $P/h100x4_mb_pp.yaml" COLLECTIVES=0 \
  T_h100x4_mb=${T_MB:-150} T_h100x4_mb_pp=${T_PP:-85} bash benchmarks/real/run_h100x4.sh
[ -d "$O/traces" ] && tar -C "$O" -czf "$O/traces.tgz" traces && rm -rf "$O/traces"
ls -la "$O"
