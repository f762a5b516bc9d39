#!/usr/bin/env bash
# The torchtitan 0.2.2 plans launched by run_torchtitan.sh: the planner's best `--runtime torchtitan` plans for
# Llama 2 7B and Llama 3 8B at global batch 16, seq 4096, on CHIP:1xN, each written as a plan file (pins below
# reproduce the searched rows; `plan --top 30` prints them) and exported with `--runtime-version 0.2`.
#   bash benchmarks/real/export_torchtitan.sh CHIP N OUTDIR [SET]     e.g. h200-sxm-141g 2 benchmarks/real/torchtitan_h200x2
# SET "unseen" (2026-11-27): Mistral 7B and Llama 2 13B, models no earlier run measured: the planner's top plan and the
# best of each other layout torchtitan 0.2.2 trains, chosen and predicted before any was launched.
# One folder per plan: plan.yaml + the export (torchtitan_args.txt, launch.sh, hostfile, slurm.sbatch,
# baige_torchtitan_config.py for models torchtitan does not ship). A plan the export refuses (torchtitan 0.2.x runs
# bf16 only through FSDP: TP/PP without data sharding, DDP with TP) is reported and skipped.
set -u
CHIP="${1:?CHIP}"; N="${2:?devices}"; OUT="${3:?OUTDIR}"; SET="${4:-base}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BP="${BAIGE_PLAN:-baige-plan}"
mkdir -p "$OUT"
# SET "moe" (2026-11-28): fine-grained MoE models no real run had measured, OLMoE-1B-7B (64 experts top-8) and
# Qwen3-30B-A3B (128 experts top-8; model files in benchmarks/real/catalog/models/), built as torchtitan 0.2.2 qwen3
# flavors by the export; the planner's top plan and the best of each other layout 0.2.2 trains, chosen and predicted
# before any was launched. A tenth column pins expert parallelism (default 1).
# model tp pp dp cp zero mb recompute vpp [ep] (the rows of `plan MODEL CHIP:1xN --global-batch 16 --seq-len 4096
# --runtime torchtitan --top 30` that torchtitan 0.2.2 trains in bf16: FSDP over dp or cp, and DDP)
case "$CHIP:$N:$SET" in
  h200-sxm-141g:4:moe) PLANS="
olmoe-1b-7b 1 1 4 1 2 4 none 1 1
olmoe-1b-7b 1 1 4 1 3 4 none 1 1
olmoe-1b-7b 1 1 4 1 3 2 none 1 1
olmoe-1b-7b 1 1 2 2 2 8 none 1 1
olmoe-1b-7b 2 1 2 1 2 8 none 1 1
olmoe-1b-7b 1 1 4 1 3 4 none 1 4
olmoe-1b-7b 1 1 4 1 3 4 none 1 2
olmoe-1b-7b 1 1 4 1 2 4 selective 1 1
qwen3-30b-a3b 2 1 2 1 3 1 full 1 1
qwen3-30b-a3b 2 1 2 1 3 1 full 1 4
" ;;
  h200-sxm-141g:4:unseen) PLANS="
mistral-7b 1 1 4 1 2 4 none 1
mistral-7b 1 1 4 1 3 4 none 1
mistral-7b 2 1 2 1 2 8 none 1
mistral-7b 1 1 2 2 2 8 none 1
llama2-13b 1 1 4 1 2 1 none 1
llama2-13b 1 1 4 1 3 2 none 1
llama2-13b 2 1 2 1 2 4 none 1
llama2-13b 1 1 2 2 2 2 none 1
" ;;
  h200-sxm-141g:2:base) PLANS="
llama2-7b 1 1 2 1 2 2 none 1
llama3-8b 1 1 2 1 2 2 none 1
llama2-7b 1 1 2 1 3 2 none 1
llama3-8b 1 1 2 1 3 2 none 1
llama2-7b 1 1 1 2 2 4 none 1
llama3-8b 1 1 1 2 2 4 none 1
llama2-7b 1 1 2 1 2 4 selective 1
llama3-8b 1 1 2 1 2 1 none 1
llama2-7b 1 1 2 1 0 1 none 1
llama2-7b 2 1 1 1 0 8 none 1
" ;;
  h100-sxm5-80g:2:base) PLANS="
llama2-7b 1 1 2 1 3 1 selective 1
llama3-8b 1 1 1 2 3 1 full 1
llama2-7b 1 1 1 2 3 2 selective 1
llama2-7b 1 1 2 1 3 4 full 1
llama2-7b 1 1 1 2 3 1 none 1
llama2-7b 2 1 1 1 0 2 none 1
" ;;
  h200-sxm-141g:4:base) PLANS="
llama2-7b 1 1 4 1 2 4 none 1
llama2-7b 1 1 4 1 3 4 none 1
llama2-7b 2 1 2 1 2 8 none 1
llama2-7b 1 1 2 2 2 8 none 1
llama3-8b 1 1 4 1 2 2 none 1
llama3-8b 1 1 4 1 3 2 none 1
llama3-8b 1 1 4 1 2 1 none 1
llama3-8b 2 1 2 1 2 4 none 1
llama3-8b 1 1 2 2 2 4 none 1
" ;;
  h100-sxm5-80g:4:base) PLANS="
llama2-7b 1 1 4 1 2 1 none 1
llama2-7b 1 1 4 1 3 2 none 1
llama2-7b 2 1 2 1 3 4 none 1
llama2-7b 1 1 2 2 3 4 none 1
llama3-8b 1 1 4 1 2 1 none 1
llama3-8b 1 1 4 1 3 1 none 1
llama3-8b 2 1 2 1 2 2 none 1
llama3-8b 1 1 2 2 3 2 none 1
" ;;
  *:1:base) PLANS="
llama2-7b 1 1 1 1 0 1 full 1
" ;;
  *) echo "no plan list for $CHIP:$N" >&2; exit 2 ;;
esac
n=0
while read -r model tp pp dp cp zero mb rc vpp ep; do
  [ -z "$model" ] && continue
  n=$((n + 1))
  ep="${ep:-1}"
  id="$(printf '%02d' $n)_${model}_tp${tp}_pp${pp}_dp${dp}_cp${cp}_z${zero}_mb${mb}_${rc:0:3}"
  [ "$ep" = 1 ] || id="${id}_ep${ep}"
  d="$OUT/$id"
  mkdir -p "$d"
  "$BP" -q plan "$model" "$CHIP:1x$N" --global-batch 16 --seq-len 4096 --runtime torchtitan \
    --catalog "$ROOT/benchmarks/real/catalog" --ep "$ep" \
    --tp "$tp" --pp "$pp" --dp "$dp" --cp "$cp" --zero "$zero" --micro-batch "$mb" --recompute "$rc" --vpp "$vpp" \
    --out "$d/plan.yaml" > /dev/null || { echo "$id: no plan" >&2; rm -rf "$d"; continue; }
  if "$BP" -q export "$d/plan.yaml" --to torchtitan --runtime-version 0.2 --out-dir "$d" > /dev/null 2> "$d/export.err"; then
    echo "$id: exported ($(grep -m1 '^step_time_s\|  step_time_s' "$d/plan.yaml" | tr -s ' '))"
  else
    echo "$id: refused: $(tail -1 "$d/export.err")"
    mv "$d/export.err" "$OUT/$id.refused.txt"; rm -rf "$d"
  fi
  [ -s "$d/export.err" ] || rm -f "$d/export.err"
done <<< "$PLANS"
