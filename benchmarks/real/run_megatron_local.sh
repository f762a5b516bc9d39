#!/usr/bin/env bash
# Launch exported megatron-local plans unchanged on this host's GPUs (Megatron-core without Transformer Engine),
# one after another, each with its own timeout: only the documented variables are set (BAIGE_MOCK_DATA=1,
# BAIGE_TRAIN_ITERS), plus --log-memory-interval so every tensor/pipeline rank reports its peak memory.
#   OUT=/tmp/out bash benchmarks/real/run_megatron_local.sh EXPORT_DIR...
# Megatron comes from .megatron/ (git-ignored, carried to the device): site/megatron = the megatron-core 0.19.2
# wheel's package, lm/ = pretrain_gpt.py, gpt_builders.py, model_provider.py of Megatron-LM core_r0.19.0.
# FAIL_FAST=1 (default) stops after the first plan when it logs no step (a broken stack, not a plan).
# DEADLINE_S: skip the plans not started after that many seconds of this script (a device call's limit).
# Results: $OUT/summary.jsonl (benchmarks/real/megatron_log.py per plan), $OUT/logs.tgz (every log), $OUT/env.txt.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:?set OUT}"
LOGS="${LOGS:-/tmp/megatron_local_logs}"
mkdir -p "$OUT" "$LOGS"
export PYTHONPATH="$ROOT/.megatron/site${PYTHONPATH:+:$PYTHONPATH}"
export MEGATRON_LM="$ROOT/.megatron/lm"
export BAIGE_MOCK_DATA=1 BAIGE_TRAIN_ITERS="${ITERS:-25}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ nvidia-smi -L; python3 -c "import torch, sys; print(sys.version); print('torch', torch.__version__, torch.version.cuda)";
  python3 -c "import transformer_engine" 2>&1 | tail -1; python3 -c "import apex" 2>&1 | tail -1; } > "$OUT/env.txt" 2>&1
port=6000
for d in "$@"; do
  id="$(basename "$d")"
  if [ -n "${DEADLINE_S:-}" ] && [ $SECONDS -gt "$DEADLINE_S" ]; then
    echo "$id: skipped (DEADLINE_S=$DEADLINE_S reached)" | tee -a "$OUT/env.txt"; continue; fi
  port=$((port + 1))
  start=$(date +%s)
  MASTER_PORT=$port timeout "${PLAN_TIMEOUT:-180}" bash "$d/launch.sh" --log-memory-interval "$BAIGE_TRAIN_ITERS" \
    > "$LOGS/$id.log" 2>&1
  rc=$?
  echo "$id rc=$rc wall=$(( $(date +%s) - start ))s" | tee -a "$OUT/env.txt"
  if python3 "$ROOT/benchmarks/real/megatron_log.py" "$LOGS/$id.log" --id "$id" >> "$OUT/summary.jsonl"; then
    tail -5 "$LOGS/$id.log"
  else
    echo "{\"id\": \"$id\", \"rc\": $rc}" >> "$OUT/summary.jsonl"
    grep -E "Error|Traceback|out of memory" "$LOGS/$id.log" | sort | uniq -c | sort -rn | head -8
    if [ "${first:-1}" = 1 ] && [ "${FAIL_FAST:-1}" = 1 ]; then
      echo "first plan failed: stopping (FAIL_FAST=1)"; tar czf "$OUT/logs.tgz" -C "$LOGS" .; break; fi
  fi
  first=0
  tar czf "$OUT/logs.tgz" -C "$LOGS" .      # after every plan: a run cut off at its limit still returns them
done
tar czf "$OUT/logs.tgz" -C "$LOGS" .
