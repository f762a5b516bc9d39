#!/usr/bin/env bash
# Everything measured on one host of N GPUs in one go (nvidia-h100-x4 / nvidia-h200-x4; docs/VALIDATION.md,
# "4 GPUs"). Run from the repo root:
#   OUT=/tmp/out bash benchmarks/real/run_h100x4.sh
# NGPU (default: the GPUs nvidia-smi lists) picks the plans plans/h100x$NGPU{,_pp,_moe}.yaml (override
# with PLANS="a.yaml b.yaml", each run in its own torchrun under its own timeout, T_RUN seconds each
# unless the plan has its own in T_<name>); world-1 entries of a plan run one process per GPU first.
# COLLECTIVES=0 skips the NCCL curves (baige_plan.profile.measure --collectives-only: group sizes 2, 4,
# ... up to NGPU; raw JSON + fitted links in $OUT/<chip>-links.raw.json / .yaml).
# The runs land in $OUT/runs_<gpu>x<N>.yaml (<gpu> = h200 or h100, from the device name).
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}; mkdir -p "$O"; L=$O/logs; mkdir -p "$L"
N=${NGPU:-$(nvidia-smi -L | grep -c '^GPU')}
P=benchmarks/real/plans
PLANS=${PLANS:-"$P/h100x$N.yaml $P/h100x${N}_pp.yaml $P/h100x${N}_moe.yaml"}
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$L/main.log" >&2; }
{ nvidia-smi; nvidia-smi topo -m; python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"; } > "$L/env.log" 2>&1
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$NAME" in *H200*) CHIP=h200-sxm-141g GPU=h200 ;; *) CHIP=h100-sxm5-80g GPU=h100 ;; esac
el "$N x $NAME ($CHIP); plans: $PLANS"
parts=()
for plan in $PLANS; do
  [ -f "$plan" ] || { el "no plan $plan"; continue; }
  b=$(basename "$plan" .yaml)
  if grep -q 'world: 1[,}]' "$plan"; then
    el "$b: single-GPU entries (one process per GPU, in parallel)"
    for g in $(seq 0 $((N - 1))); do
      CUDA_VISIBLE_DEVICES=$g timeout ${T_SINGLE:-100} python3 benchmarks/real/harness.py --plan "$plan" \
        --only-world 1 --part $g/$N --out "$O/part_${b}_s$g.yaml" > "$L/${b}_single$g.log" 2>&1 &
      parts+=("part_${b}_s$g.yaml")
    done
    wait
  fi
  tv="T_${b//[^A-Za-z0-9]/_}"
  el "$b: $N-GPU entries (timeout ${!tv:-${T_RUN:-200}}s)"
  timeout ${!tv:-${T_RUN:-200}} torchrun --standalone --nproc_per_node $N benchmarks/real/harness.py --plan "$plan" \
    --only-world $N --out "$O/part_${b}.yaml" > "$L/${b}.log" 2>&1
  el "$b rc=$?"
  parts+=("part_${b}.yaml")
done
if [ "${COLLECTIVES:-1}" != 0 ] && [ "$N" -ge 2 ]; then
  el "collectives on $N GPUs"
  timeout ${T_COLL:-150} python3 -m baige_plan.profile.measure --devices $N --collectives-only \
    ${COLL_QUICK:+--quick} --id $CHIP-profiled --base tests/data/$CHIP.datasheet.yaml \
    --out "$O/$CHIP-links.yaml" > "$L/collectives.log" 2>&1
  el "collectives rc=$?"
fi
python3 - "$O" "${GPU}x$N" "${parts[@]}" <<'PY'
import sys, yaml, pathlib
sys.path.insert(0, "benchmarks/real")
import config as C
o = pathlib.Path(sys.argv[1])
for name in sys.argv[3:]:
    p = o / name
    if p.exists():
        for r in (yaml.safe_load(p.read_text()) or {}).get("rows", []):
            C.append_row(o / f"runs_{sys.argv[2]}.yaml", r)
        p.unlink()
PY
grep -h '^{' "$L"/*.log | tee "$O/summary.jsonl"
grep -h "FAILED\|Error\|error:" "$L"/*.log | head -20
tar -C "$O" -czf "$O/logs.tgz" logs && rm -rf "$L"
ls -la "$O"
