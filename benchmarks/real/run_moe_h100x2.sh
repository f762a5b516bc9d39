#!/usr/bin/env bash
# The mixture-of-experts runs on nvidia-h100-x2 in one go (docs/VALIDATION.md, "MoE / expert
# parallelism"). Run from the repo root:   OUT=/tmp/out bash benchmarks/real/run_moe_h100x2.sh
# The runs land in $OUT/runs_<gpu>.yaml (<gpu> = h200 or h100, from the device name).
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}; mkdir -p "$O"; L=$O/logs; mkdir -p "$L"
PLAN=benchmarks/real/plans/h100x2_moe.yaml
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$L/main.log" >&2; }
{ nvidia-smi; nvidia-smi topo -m; python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"; } > "$L/env.log" 2>&1
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$NAME" in *H200*) GPU=h200 ;; *) GPU=h100 ;; esac
el "single-GPU MoE runs on $NAME (one process per GPU, in parallel)"
for g in 0 1; do
  CUDA_VISIBLE_DEVICES=$g timeout ${T_SINGLE:-80} python3 benchmarks/real/harness.py --plan $PLAN \
    --only-world 1 --part $g/2 --out "$O/runs_s$g.yaml" > "$L/single$g.log" 2>&1 &
done
wait
el "single done"
timeout ${T_TWO:-170} torchrun --standalone --nproc_per_node 2 benchmarks/real/harness.py --plan $PLAN \
  --only-world 2 --out "$O/runs_2gpu.yaml" > "$L/twogpu.log" 2>&1
el "2-GPU rc=$?"
python3 - "$O" "$GPU" <<'PY'
import sys, yaml, pathlib
sys.path.insert(0, "benchmarks/real")
import config as C
o = pathlib.Path(sys.argv[1])
for name in ("runs_s0.yaml", "runs_s1.yaml", "runs_2gpu.yaml"):
    p = o / name
    if p.exists():
        for r in (yaml.safe_load(p.read_text()) or {}).get("rows", []):
            C.append_row(o / f"runs_{sys.argv[2]}.yaml", r)
        p.unlink()
PY
grep -h '^{' "$L"/*.log | tee "$O/summary.jsonl"
grep -h "FAILED\|Error" "$L"/*.log | head -20
tar -C "$O" -czf "$O/logs.tgz" logs && rm -rf "$L"
ls -la "$O"
