#!/usr/bin/env bash
# Write the plan files of ten scenarios (homogeneous, heterogeneous, cloud fp32, 16,384 devices) into OUTDIR, to
# check that a change leaves plans byte-identical: run it on two revisions and `diff -r` the two folders.
# Usage: bash benchmarks/plan_files.sh OUTDIR [BAIGE_PLAN_COMMAND]   (default: .venv/bin/baige-plan)
set -uo pipefail
out=$1
bp=${2:-.venv/bin/baige-plan}
cd "$(dirname "$0")/.."
mkdir -p "$out"
run() {  # NAME ARGS...: plan ARGS --out OUTDIR/NAME.yaml
    local name=$1; shift
    $bp plan "$@" --out "$out/$name.yaml" > /dev/null 2>&1 || echo "failed: $name"
}
run c512 opt-350m topologies/cloud-a100-v100-512.yaml --precision fp32 --global-batch 1024 --seq-len 2048 --top 3
run c320 opt-350m topologies/cloud-a100-v100-320.yaml --precision fp32 --global-batch 1024 --seq-len 2048
run c128 opt-350m topologies/cloud-a100-v100-128.yaml --precision fp32 --global-batch 1024 --seq-len 2048
run c320bt opt-350m topologies/cloud-a100-v100-320.yaml --precision fp32 --global-batch 1024 --seq-len 2048 \
    --batch-tolerance 2
run h16k llama3-405b a100-sxm4-80g:512x8+h100-sxm5-80g:512x8+ascend-910b:1024x8 --global-batch 4096 --seq-len 8192
run hh llama3-70b topologies/hetero-h100-a100.yaml
run m128 llama3-70b topologies/mixed-a100-910b-128.yaml
run a8 llama3-8b a100-sxm4-80g:8x8+ascend-910b:8x8 --global-batch 512 --seq-len 4096
run g512 gpt3-175b a100-sxm4-80g:64x8 --global-batch 1536 --seq-len 2048
run m3 llama3-70b topologies/mixed-3family-1024.yaml
