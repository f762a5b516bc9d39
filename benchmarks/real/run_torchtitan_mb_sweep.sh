#!/usr/bin/env bash
# Per-micro-batch cost of torchtitan 0.2.2 FSDP at small micro-batches (the 2-GPU plans predicted 17-24 % too fast,
# docs/VALIDATION.md): the same exported plans launched unchanged except for the global batch (so the number of
# micro-batches per step changes and nothing else), then, with PROFILE=1, one profiled step per plan summarised by
# benchmarks/real/trace_summary.py (GPU busy, NCCL exposed, idle).
#   OUT=/tmp/out SRC=benchmarks/real/torchtitan_h100x2 SWEEP="01:2,4,8,16 05:2,16 04:8,16" \
#     bash benchmarks/real/run_torchtitan_mb_sweep.sh
#   OUT=/tmp/out PROFILE=1 SWEEP="01:16 05:16 04:16" bash benchmarks/real/run_torchtitan_mb_sweep.sh
# A variant folder is a copy of the export with only `--training.global_batch_size` changed in torchtitan_args.txt
# (its plan.yaml is the original's), so torchtitan_log.py reads the batch that ran; an item's optional third field
# also changes `--activation_checkpoint.mode` (none | selective | full): "01:4:none".
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:?set OUT}"
SRC="${SRC:-$ROOT/benchmarks/real/torchtitan_h100x2}"
WORK="${WORK:-/tmp/tt_sweep}"
rm -rf "$WORK"; mkdir -p "$WORK" "$OUT"
dirs=()
for item in ${SWEEP:?set SWEEP, e.g. 01:2,4,8,16}; do
  IFS=: read -r nn gbs_list ac <<< "$item"
  src=$(ls -d "$SRC/${nn}_"* | grep -v refused | head -1)
  IFS=, read -r -a batches <<< "$gbs_list"
  for gbs in "${batches[@]}"; do
    d="$WORK/$(basename "$src")_gbs$gbs${ac:+_ac$ac}"
    cp -r "$src" "$d"
    sed -i "s/^--training.global_batch_size .*/--training.global_batch_size $gbs/" "$d/torchtitan_args.txt"
    [ -z "$ac" ] || sed -i "s/^--activation_checkpoint.mode .*/--activation_checkpoint.mode $ac/" "$d/torchtitan_args.txt"
    dirs+=("$d")
  done
done
if [ "${PROFILE:-0}" = 1 ]; then
  # profile step 6 (3 warm-up steps before it, torch.profiler schedule), then stop after step 7
  EXTRA_ARGS="--profiling.enable_profiling --profiling.profile_freq 6 --profiling.profiler_warmup 3 --profiling.profiler_active 1 --profiling.save_traces_folder traces" \
    ITERS=${ITERS:-7} bash "$ROOT/benchmarks/real/run_torchtitan.sh" "${dirs[@]}"
  for d in "${dirs[@]}"; do
    id=$(basename "$d")
    for t in /tmp/torchtitan_out/"$id"/traces/iteration_*/rank*_trace.json; do
      [ -f "$t" ] || continue
      python3 "$ROOT/benchmarks/real/trace_summary.py" "$t" --id "$id/$(basename "$t" .json)" | tee -a "$OUT/traces.jsonl"
    done
  done
else
  ITERS=${ITERS:-8} bash "$ROOT/benchmarks/real/run_torchtitan.sh" "${dirs[@]}"
fi
