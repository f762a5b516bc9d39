#!/usr/bin/env bash
# The megatron-local plans (Megatron-core without Transformer Engine) launched by run_megatron_local.sh on one host of
# N GPUs: the planner's best `--runtime megatron-local` plans for Llama 3.2 1B (global batch 32) and Llama 3 8B
# (global batch 16), seq 4096, on CHIP:1xN, plus the best plan of each other layout (tp, pp with interleaving),
# each written as a plan file (the pins reproduce searched rows; `plan --top 60` prints them) and exported unchanged.
#   bash benchmarks/real/export_megatron_local.sh CHIP N OUTDIR [SET]   e.g. h200-sxm-141g 4 benchmarks/real/megatron_local_h200x4
# SET "unseen" (2026-11-27): models no megatron-local run had measured, Mistral 7B and Llama 2 13B (global batch 16):
# the planner's top plan (after its tie order) and the best plan of each other layout, chosen before any was launched.
# One folder per plan: plan.yaml + the export (megatron_args.txt, launch.sh, hostfile, slurm.sbatch, baige_sdpa_spec.py).
set -u
CHIP="${1:?CHIP}"; N="${2:?devices}"; OUT="${3:?OUTDIR}"; SET="${4:-base}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BP="${BAIGE_PLAN:-baige-plan}"
mkdir -p "$OUT"
# model global-batch tp pp dp zero mb recompute vpp
case "$CHIP:$N:$SET" in
  h200-sxm-141g:4:unseen) PLANS="
mistral-7b 16 1 1 4 1 2 none 1
mistral-7b 16 2 1 2 1 4 none 1
mistral-7b 16 1 2 2 1 2 none 8
mistral-7b 16 4 1 1 1 8 none 1
llama2-13b 16 2 1 2 1 2 none 1
llama2-13b 16 1 2 2 1 1 none 10
llama2-13b 16 1 4 1 1 2 none 10
llama2-13b 16 4 1 1 1 4 none 1
" ;;
  h200-sxm-141g:4:base) PLANS="
llama3.2-1b 32 1 1 4 1 8 none 1
llama3.2-1b 32 1 1 4 1 2 none 1
llama3.2-1b 32 2 1 2 1 16 none 1
llama3.2-1b 32 1 2 2 1 4 none 8
llama3-8b 16 1 1 4 1 2 none 1
llama3-8b 16 2 1 2 1 4 none 1
llama3-8b 16 1 2 2 1 2 none 8
llama3-8b 16 4 1 1 1 8 none 1
" ;;
  h100-sxm5-80g:4:base) PLANS="
llama3.2-1b 32 1 1 4 1 4 none 1
llama3.2-1b 32 1 1 4 1 1 none 1
llama3.2-1b 32 2 1 2 1 8 none 1
llama3.2-1b 32 1 2 2 1 4 none 8
llama3-8b 16 2 1 2 1 1 none 1
llama3-8b 16 1 2 2 1 1 none 8
llama3-8b 16 1 2 2 1 1 none 1
llama3-8b 16 4 1 1 1 4 none 1
" ;;
  *) echo "no plan list for $CHIP:$N" >&2; exit 2 ;;
esac
n=0
while read -r model gb tp pp dp zero mb rc vpp; do
  [ -z "$model" ] && continue
  n=$((n + 1))
  id="$(printf '%02d' $n)_${model}_tp${tp}_pp${pp}_dp${dp}_z${zero}_mb${mb}_vpp${vpp}"
  d="$OUT/$id"
  mkdir -p "$d"
  "$BP" -q plan "$model" "$CHIP:1x$N" --catalog "$ROOT/benchmarks/real/catalog" --global-batch "$gb" --seq-len 4096 \
    --runtime megatron-local --tp "$tp" --pp "$pp" --dp "$dp" --zero "$zero" --micro-batch "$mb" --recompute "$rc" \
    --vpp "$vpp" --out "$d/plan.yaml" > /dev/null || { echo "$id: no plan" >&2; rm -rf "$d"; continue; }
  if "$BP" -q export "$d/plan.yaml" --out-dir "$d" --mock-data > /dev/null 2> "$d/export.err"; then
    echo "$id: exported ($(grep -m1 'step_time_s' "$d/plan.yaml" | tr -s ' '))"
  else
    echo "$id: refused: $(tail -1 "$d/export.err")"
    mv "$d/export.err" "$OUT/$id.refused.txt"; rm -rf "$d"
  fi
  [ -s "$d/export.err" ] || rm -f "$d/export.err"
done <<< "$PLANS"
