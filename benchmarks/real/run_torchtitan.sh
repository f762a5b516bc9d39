#!/usr/bin/env bash
# Launch exported torchtitan 0.2.2 plans (`baige-plan export --runtime-version 0.2`) unchanged on this host's GPUs,
# one after another, each with its own timeout: only the documented variables are set (BAIGE_DATA_PATH,
# BAIGE_TOKENIZER, BAIGE_TRAIN_ITERS; BAIGE_OUTPUT_DIR for the dump folder), nothing is added to the launch.
#   OUT=/tmp/out bash benchmarks/real/run_torchtitan.sh EXPORT_DIR...
# torchtitan comes from $TT (default .torchtitan/, git-ignored, carried to the device):
#   wheels/    torchtitan-0.2.2 and what the device image lacks (torchdata 0.11.0, datasets 4.7.0, dill 0.4.0,
#              multiprocess 0.70.18, tyro 1.0.17, docstring-parser 0.18.0, typeguard 4.6.1), installed with
#              pip --no-index --no-deps into $SITE unless torchtitan already imports;
#   fallback/  huggingface-hub 1.33.0, fsspec 2026.2.0, hf-xet, click, httpx/httpcore/h11/anyio, typing-extensions:
#              installed only when `import torchtitan.train` fails with the image's own;
#   assets/tokenizer  torchtitan v0.2.2 tests/assets/tokenizer (BPE of 2,002 tokens; its BOS/EOS get ids 2002/2003)
# Data: $TT/assets/synth_text/data.json (written here if missing: 400 JSON lines of seeded random words), read by the
# export's c4_test loader (load_dataset(BAIGE_DATA_PATH, split="train")). Token ids stay below every vocab here.
# Results: $OUT/summary.jsonl (benchmarks/real/torchtitan_log.py per plan), $OUT/logs.tgz (every log), $OUT/env.txt.
# EXTRA_ARGS: torchtitan flags appended to every launch (measurement only, e.g. --profiling.enable_profiling).
# DEADLINE_S: skip the plans not started after that many seconds of this script (a device call's limit).
# FAIL_FAST=1 (default) stops after the first plan when it logs no step (a broken stack, not a plan).
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:?set OUT}"
TT="${TT:-$ROOT/.torchtitan}"
SITE="${SITE:-/tmp/torchtitan_site}"
LOGS="${LOGS:-/tmp/torchtitan_logs}"
mkdir -p "$OUT" "$LOGS"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
pipi() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$@"; }
if ! python3 -c "import torchtitan" 2>/dev/null; then
  pipi "$TT"/wheels/*.whl || exit 4
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! python3 -c "import torchtitan.train" > "$OUT/import.txt" 2>&1; then
  echo "import torchtitan.train failed with the image's packages; adding fallback/" | tee -a "$OUT/env.txt"
  tail -3 "$OUT/import.txt"
  pipi "$TT"/fallback/*.whl || exit 4
  python3 -c "import torchtitan.train" >> "$OUT/import.txt" 2>&1 || { tail -20 "$OUT/import.txt"; exit 4; }
fi
DATA="$TT/assets/synth_text"
if [ ! -s "$DATA/data.json" ]; then
  mkdir -p "$DATA"
  python3 - "$DATA/data.json" <<'PY'
import json, random, sys
rng = random.Random(17)
words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(5000)]
with open(sys.argv[1], "w") as f:
    for _ in range(400):
        f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(700)) + "."}) + "\n")
PY
fi
export BAIGE_DATA_PATH="$DATA" BAIGE_TOKENIZER="$TT/assets/tokenizer" BAIGE_TRAIN_ITERS="${ITERS:-8}"
GPUS=$(nvidia-smi -L | grep -c '^GPU')
{ nvidia-smi -L; python3 -c "import torch, sys; print(sys.version); print('torch', torch.__version__, torch.version.cuda)";
  python3 -c "import torchtitan, datasets, tyro, torchdata; from importlib.metadata import version as v
print('torchtitan', v('torchtitan'), 'datasets', datasets.__version__, 'tyro', tyro.__version__, 'torchdata', v('torchdata'))"
} >> "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
port=29600
first=1
for d in "$@"; do
  [ -d "$d" ] || continue                 # NN_*.refused.txt beside the export folders
  id="$(basename "$d")"
  if [ -n "${DEADLINE_S:-}" ] && [ $SECONDS -gt "$DEADLINE_S" ]; then
    echo "$id: skipped (DEADLINE_S=$DEADLINE_S reached)" | tee -a "$OUT/env.txt"; continue; fi
  need=$(awk -F= '/^NNODES=/{n=$2} /^NPROC_PER_NODE=/{p=$2} END{print n*p}' "$d/launch.sh")
  if [ "$need" -gt "$GPUS" ]; then echo "$id: needs $need GPUs, $GPUS here: skipped" | tee -a "$OUT/env.txt"; continue; fi
  port=$((port + 1))
  start=$(date +%s)
  MASTER_PORT=$port BAIGE_OUTPUT_DIR="/tmp/torchtitan_out/$id" timeout "${PLAN_TIMEOUT:-200}" bash "$d/launch.sh" \
    ${EXTRA_ARGS:-} > "$LOGS/$id.log" 2>&1
  rc=$?
  echo "$id rc=$rc wall=$(( $(date +%s) - start ))s" | tee -a "$OUT/env.txt"
  if python3 "$ROOT/benchmarks/real/torchtitan_log.py" "$LOGS/$id.log" "$d" --id "$id" >> "$OUT/summary.jsonl"; then
    tail -1 "$OUT/summary.jsonl"
  else
    echo "{\"id\": \"$id\", \"rc\": $rc}" >> "$OUT/summary.jsonl"
    grep -v "^\s*$" "$LOGS/$id.log" | grep -E "Error|error|Traceback|OOM|out of memory" | tail -8
    tail -4 "$LOGS/$id.log"
    if [ "$first" = 1 ] && [ "${FAIL_FAST:-1}" = 1 ]; then echo "first plan failed: stopping (FAIL_FAST=1)"; break; fi
  fi
  first=0
  tar czf "$OUT/logs.tgz" -C "$LOGS" .      # after every plan: a run cut off at its limit still returns them
done
tar czf "$OUT/logs.tgz" -C "$LOGS" .
