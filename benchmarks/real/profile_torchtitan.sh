#!/usr/bin/env bash
# One profiled step (step 4, torch.profiler schedule: 2 warm-up steps before it) of each exported torchtitan 0.2.2
# plan, launched unchanged by run_torchtitan.sh with only the profiling flags added, then summarised on the device
# (traces can be hundreds of MB): trace_summary.py (busy / idle / NCCL-exposed) and trace_top.py (heaviest kernels,
# CUDA runtime calls and host ops) for ranks 0 and 1 -> $OUT/traces.jsonl, $OUT/traces_top.jsonl.
#   OUT=/tmp/out bash benchmarks/real/profile_torchtitan.sh EXPORT_DIR...
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:?set OUT}"
mkdir -p "$OUT"
EXTRA_ARGS="--profiling.enable_profiling --profiling.profile_freq 4 --profiling.profiler_warmup 2 --profiling.profiler_active 1 --profiling.save_traces_folder traces" \
  ITERS=${ITERS:-5} bash "$ROOT/benchmarks/real/run_torchtitan.sh" "$@" 2>&1 | grep -v "^GPU" | tail -8
for d in "$@"; do
  id=$(basename "$d")
  for r in 0 1; do
    for t in /tmp/torchtitan_out/"$id"/traces/iteration_*/rank${r}_trace.json; do
      [ -f "$t" ] || continue
      python3 "$ROOT/benchmarks/real/trace_summary.py" "$t" --id "$id/rank$r" >> "$OUT/traces.jsonl"
      python3 "$ROOT/benchmarks/real/trace_top.py" "$t" --id "$id/rank$r" >> "$OUT/traces_top.jsonl"
    done
  done
done
cat "$OUT/traces.jsonl"
