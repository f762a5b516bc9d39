#!/usr/bin/env bash
# phi3-mini on h200-sxm-141g:1x2: predicted 1.951 s/step, MFU 42.0% (baige-plan)
# Megatron-LM launch (megatron-core==0.19.2, no Transformer Engine; pretrain_gpt.py from Megatron-LM core_r0.19.0).
# Run once on every node: NODE_RANK=0..0 (line order of ./hostfile), MASTER_ADDR = node 0.
# MEGATRON_LM: the Megatron-LM checkout (default: the current folder); extra arguments are passed on
# to pretrain_gpt.py after those in megatron_args.txt (MEGATRON_ARGS overrides that file's path).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NNODES=1
NPROC_PER_NODE=2
NODE_RANK="${NODE_RANK:-0}"
MASTER_ADDR="${MASTER_ADDR:-localhost}"
MASTER_PORT="${MASTER_PORT:-6000}"
MEGATRON_LM="${MEGATRON_LM:-$PWD}"
# Data, tokenizer and run length: set these variables, nothing else needs editing
#   BAIGE_DATA_PATH: Megatron indexed data: a PREFIX of PREFIX.bin/.idx, or 'WEIGHT PREFIX WEIGHT PREFIX ...' (--data-path)
#   BAIGE_TOKENIZER: a Hugging Face tokenizer folder or hub name (--tokenizer-type HuggingFaceTokenizer --tokenizer-model)
#   BAIGE_TRAIN_ITERS: optimizer steps to run (default 100)
#   BAIGE_MOCK_DATA=1: Megatron mock tokens with NullTokenizer (--mock-data), no BAIGE_DATA_PATH needed (the default of this export: --mock-data; set 0 for real data)
BAIGE_MOCK_DATA="${BAIGE_MOCK_DATA:-1}"
BAIGE_TRAIN_ITERS="${BAIGE_TRAIN_ITERS:-100}"
case "$BAIGE_TRAIN_ITERS" in ""|*[!0-9]*) echo "launch.sh: BAIGE_TRAIN_ITERS must be a whole number of steps, not '$BAIGE_TRAIN_ITERS'" >&2; exit 2 ;; esac
if [ "$BAIGE_MOCK_DATA" != 1 ]; then
  : "${BAIGE_DATA_PATH:?set BAIGE_DATA_PATH to Megatron indexed data: a PREFIX of PREFIX.bin/.idx, or WEIGHT PREFIX WEIGHT PREFIX ... (--data-path) -- or BAIGE_MOCK_DATA=1 for mock data}"
  : "${BAIGE_TOKENIZER:?set BAIGE_TOKENIZER to a Hugging Face tokenizer folder or hub name (--tokenizer-type HuggingFaceTokenizer --tokenizer-model)}"
fi
# versions: megatron-core>=0.19.0,<0.21, torch>=2.6.0; the launch stops on any other (BAIGE_SKIP_VERSION_CHECK=1 skips the check; PYTHON names the interpreter, default python3)
PYTHON="${PYTHON:-python3}"
if [ "${BAIGE_SKIP_VERSION_CHECK:-0}" != 1 ]; then
  PYTHONPATH="$MEGATRON_LM${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" - <<'BAIGE_VERSIONS' || exit 3
WHO = 'launch.sh'
TARGET = 'megatron-core==0.19.2 (or Megatron-LM core_r0.19.0 or newer) on torch'
CHECKS = [('megatron-core', '0.19.0', '0.21', ('megatron-core',), ('megatron/core/package_info.py',)), ('torch', '2.6.0', None, ('torch',), ())]
PROBES = []
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
# tp > 1 or cp > 1: megatron/training/arguments.py validate_args asserts this before Blackwell
export CUDA_DEVICE_MAX_CONNECTIONS=1
# the SDPA attention layer spec (--spec baige_sdpa_spec layer_spec) lives beside this script
export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"
ARGS_FILE="${MEGATRON_ARGS:-$HERE/megatron_args.txt}"
# one argument per line, shell-quoted; lines starting with # are comments
eval "ARGS=($(grep -v '^[[:space:]]*#' "$ARGS_FILE"))"
if [ "$BAIGE_MOCK_DATA" = 1 ]; then
  DATA_ARGS=(--mock-data --tokenizer-type NullTokenizer --vocab-size 32064)
else
  read -r -a DATA_PATHS <<< "$BAIGE_DATA_PATH"   # a prefix, or "WEIGHT PREFIX WEIGHT PREFIX ..."
  DATA_ARGS=(--data-path "${DATA_PATHS[@]}" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$BAIGE_TOKENIZER")
fi
DATA_ARGS+=(--train-iters "$BAIGE_TRAIN_ITERS")
exec torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" --node-rank "$NODE_RANK" \
  --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" \
  "$MEGATRON_LM/pretrain_gpt.py" "${ARGS[@]}" "${DATA_ARGS[@]}" "$@"
