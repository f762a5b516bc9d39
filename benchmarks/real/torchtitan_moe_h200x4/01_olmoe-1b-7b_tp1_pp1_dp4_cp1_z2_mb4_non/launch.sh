#!/usr/bin/env bash
# olmoe-1b-7b on h200-sxm-141g:1x4: predicted 0.3794 s/step, MFU 34.3% (baige-plan)
# torchtitan==0.2.2 (torch==2.11): run this same script on each of the 1 node(s) with
# NODE_RANK=0..NNODES-1; they rendezvous at MASTER_ADDR (default: localhost: one node).
# Extra torchtitan flags given to this script go after the exported ones (tyro: the last one wins).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NNODES=1
NPROC_PER_NODE=4
NODE_RANK="${NODE_RANK:-0}"
MASTER_ADDR="${MASTER_ADDR:-localhost}"
MASTER_PORT="${MASTER_PORT:-29500}"
# Data, tokenizer and run length: set these variables, nothing else needs editing
#   BAIGE_DATA_PATH: a Hugging Face datasets folder or hub name with a text column (load_dataset(PATH, split=train): torchtitan's dataset_path, read by its c4_test loader)
#   BAIGE_TOKENIZER: the model's Hugging Face tokenizer folder (tokenizer.json: torchtitan's hf_assets_path)
#   BAIGE_TRAIN_ITERS: optimizer steps to run (default 100)
#   BAIGE_MOCK_DATA=1: the c4_test sample of a torchtitan checkout (TORCHTITAN_ROOT/tests/assets; tokenizer default TORCHTITAN_ROOT/tests/assets/tokenizer), no BAIGE_DATA_PATH needed
BAIGE_MOCK_DATA="${BAIGE_MOCK_DATA:-0}"
BAIGE_TRAIN_ITERS="${BAIGE_TRAIN_ITERS:-100}"
case "$BAIGE_TRAIN_ITERS" in ""|*[!0-9]*) echo "launch.sh: BAIGE_TRAIN_ITERS must be a whole number of steps, not '$BAIGE_TRAIN_ITERS'" >&2; exit 2 ;; esac
if [ "$BAIGE_MOCK_DATA" != 1 ]; then
  : "${BAIGE_DATA_PATH:?set BAIGE_DATA_PATH to a Hugging Face datasets folder or hub name with a text column (load_dataset(PATH, split=train): torchtitans dataset_path, read by its c4_test loader) -- or BAIGE_MOCK_DATA=1 for mock data}"
  : "${BAIGE_TOKENIZER:?set BAIGE_TOKENIZER to the models Hugging Face tokenizer folder (tokenizer.json: torchtitans hf_assets_path)}"
fi
# versions: torchtitan>=0.2.0,<0.3, torch>=2.11,<2.13; the launch stops on any other (BAIGE_SKIP_VERSION_CHECK=1 skips the check; PYTHON names the interpreter, default python3)
PYTHON="${PYTHON:-python3}"
if [ "${BAIGE_SKIP_VERSION_CHECK:-0}" != 1 ]; then
  "$PYTHON" - <<'BAIGE_VERSIONS' || exit 3
WHO = 'launch.sh'
TARGET = 'torchtitan==0.2.2 on torch >=2.11,<2.13'
CHECKS = [('torchtitan', '0.2.0', '0.3', ('torchtitan',), ()), ('torch', '2.11', '2.13', ('torch',), ())]
PROBES = [('torchtitan/config/job_config.py', 'local_batch_size', 'this torchtitan has no 0.2.x JobConfig with training.local_batch_size (a checkout of main or 0.3.x): export with --runtime-version 0.3.0 for a 0.3.x release')]
import os, re, sys
from importlib import metadata

def rel(v):
    out = []
    for part in re.split(r"[.+-]", v)[:3]:
        m = re.match(r"\d+", part)
        out.append(int(m.group()) if m else 0)
        if not m or m.group() != part:
            break
    return tuple(out + [0] * (3 - len(out)))

def find(path):
    for d in sys.path:
        p = os.path.join(d or ".", path)
        if os.path.isfile(p):
            return p
    return None

def from_files(files):
    for f in files:
        p = find(f)
        if p:
            v = dict(re.findall(r"^(MAJOR|MINOR|PATCH)\s*=\s*(\d+)", open(p).read(), re.M))
            if len(v) == 3:
                return "%s.%s.%s" % (v["MAJOR"], v["MINOR"], v["PATCH"])
    return None

bad = []
for label, low, high, dists, files in CHECKS:
    found = from_files(files)
    for d in dists:
        if found is None:
            try:
                found = metadata.version(d)
            except metadata.PackageNotFoundError:
                pass
    want = label + ">=" + low + ("," + "<" + high if high else "")
    if found is None:
        bad.append("%s is not installed for %s (supported: %s)" % (label, sys.executable, want))
    elif rel(found) < rel(low) or (high and rel(found) >= rel(high)):
        bad.append("%s %s is outside the supported range %s" % (label, found, want))
for path, needle, why in PROBES:
    p = find(path)
    if not bad and (p is None or needle not in open(p).read()):
        bad.append(why + (" (%s)" % p if p else ""))
if bad:
    for b in bad:
        print(WHO + ": " + b, file=sys.stderr)
    print(WHO + ": these launch files were written for " + TARGET + "; install that, or export again for "
          "your stack (BAIGE_SKIP_VERSION_CHECK=1 skips this check)", file=sys.stderr)
    sys.exit(3)
BAIGE_VERSIONS
fi
flags=(); subcommands=()
while read -r -a words; do
  [ "${#words[@]}" -eq 0 ] && continue
  case "${words[0]}" in
    "#"*) ;;
    -*) flags+=("${words[@]}") ;;
    *) subcommands+=("${words[@]}") ;;
  esac
done < "$HERE/torchtitan_args.txt"
if [ "$BAIGE_MOCK_DATA" = 1 ]; then
  : "${TORCHTITAN_ROOT:?set TORCHTITAN_ROOT to a torchtitan checkout: mock data is its tests/assets/c4_test sample}"
  DATA_FLAGS=(--training.dataset c4_test --training.dataset_path "$TORCHTITAN_ROOT/tests/assets/c4_test" --model.hf_assets_path "${BAIGE_TOKENIZER:-$TORCHTITAN_ROOT/tests/assets/tokenizer}")
else
  DATA_FLAGS=(--training.dataset c4_test --training.dataset_path "$BAIGE_DATA_PATH" --model.hf_assets_path "$BAIGE_TOKENIZER")
fi
# logs, traces and checkpoints: BAIGE_OUTPUT_DIR (default: outputs/ beside this script)
DATA_FLAGS+=(--training.steps "$BAIGE_TRAIN_ITERS" --job.dump_folder "${BAIGE_OUTPUT_DIR:-$HERE/outputs}")
export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"   # baige_torchtitan_config.py (--experimental.custom_import baige_torchtitan_config)
export PYTORCH_ALLOC_CONF="${PYTORCH_ALLOC_CONF:-expandable_segments:True}"
exec torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" --node-rank "$NODE_RANK" \
  --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "${RDZV_ID:-baige-plan}" \
  -m torchtitan.train "${flags[@]}" "${DATA_FLAGS[@]}" "$@" "${subcommands[@]}"
