#!/bin/bash
# Measure the per-layer profiles in this folder on one GPU (issue 10): OPT-350M in bf16, fp16 and fp32,
# Llama-3-8B in bf16, tp 1,2 x micro-batch 1,2 x recompute none,selective,full.
#   OUT=benchmarks/profiles bash benchmarks/profiles/measure_h100.sh
set -euo pipefail
OUT=${OUT:-benchmarks/profiles}
run() { python3 -m baige_plan.profile.layers "$@"; }
for p in bf16 fp16 fp32; do
  run --model opt-350m --precision $p --tp 1,2 --micro-batch 1,2 --out "$OUT/opt-350m@h100-sxm5-80g-$p.yaml"
done
run --model llama3-8b --precision bf16 --tp 1,2 --micro-batch 1,2 --out "$OUT/llama3-8b@h100-sxm5-80g-bf16.yaml"
