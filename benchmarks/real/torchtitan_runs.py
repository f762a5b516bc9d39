"""Runs file (the schema of runs_h200.yaml; `baige-plan backtest` reads it) from launched torchtitan 0.2.2 exports:
each export folder's plan.yaml (what was planned and exported) and the summary lines run_torchtitan.sh wrote
(benchmarks/real/torchtitan_log.py), no torch.

  python benchmarks/real/torchtitan_runs.py EXPORTS_DIR SUMMARY.jsonl... --gpu "NVIDIA H200" \\
      --chip h200-sxm-141g --out runs.yaml"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

MODEL_KEYS = ("name", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "activation",
              "tie_embeddings", "head_dim", "dropout")


def row(plan: dict, summ: dict, gpu: str, chip: str, env: dict, skip: int, date: str, compiled: bool = False) -> dict:
    s, m, job = plan["strategy"], plan["inputs"]["model"], plan["inputs"]["job"]
    groups = plan["inputs"]["cluster"]["groups"]
    n = sum(g["nodes"] * g["devices_per_node"] for g in groups)
    model = {k: m[k] for k in MODEL_KEYS if m.get(k) is not None}
    model["seq_len"] = job["seq_len"]
    model["type"] = "moe" if m.get("moe") else "dense"
    if m.get("moe"):
        model["moe"] = {k: m["moe"][k] for k in ("experts", "top_k", "expert_ffn_hidden", "shared_experts",
                                                  "layer_freq", "first_dense_layers") if k in m["moe"]}
    zero = s.get("zero", 0)
    fsdp = {0: "no FSDP", 2: "FSDP2 reshard_after_forward never (ZeRO-2)", 3: "FSDP2 full shard (ZeRO-3)"}.get(
        zero, f"FSDP2 (zero {zero})")
    if s.get("cp", 1) > 1:
        fsdp += f", parameters sharded over the cp={s['cp']} ranks"
    return {
        "id": summ["id"],
        "source": {"key": "baige-real-torchtitan-2026",
                   "citation": (f"baige-plan export --to torchtitan --runtime-version 0.2 of {summ['id']}/plan.yaml, "
                                "launched unchanged by benchmarks/real/run_torchtitan.sh (BAIGE_DATA_PATH = seeded "
                                "synthetic text, BAIGE_TOKENIZER = torchtitan v0.2.2 tests/assets/tokenizer, "
                                f"BAIGE_TRAIN_ITERS={summ['steps']}) on {n}x {gpu}, {date}")},
        "model": model,
        "hardware": {"gpu_model": gpu, "chip": chip, "num_gpus": n, "gpus_per_node": n, **env},
        "parallel": {
            "tp": s["tp"], "pp": s["pp"], "dp": s["dp"], "cp": s.get("cp", 1),
            **({"ep": s.get("ep", 1), "etp": s.get("etp", 1)} if m.get("moe") else {}), "zero": zero,
            "sequence_parallel": bool(s.get("sequence_parallel")), "micro_batch": s["micro_batch"],
            "global_batch_seqs": job["global_batch"], "recompute": s.get("recompute", "none"),
            "precision": job["precision"], "attention": s.get("attention", "flash"),
            "runtime": "torchtitan", "execution": "fused" if compiled else s.get("execution", "eager"),
            "tp_comm_overlap": False,
            "framework": (f"torchtitan 0.2.2 (PyPI wheel) on torch {env['torch']}: {fsdp}, bf16 params / fp32 "
                          "reduce (MixedPrecisionPolicy), SDPA causal attention, "
                          + ("torch.compile (model and loss; EXTRA_ARGS=--compile.enable)" if compiled
                             else "eager (no torch.compile)")
                          + (", op-level selective AC" if s.get("recompute") == "selective" else "")),
        },
        "results": {"step_time_s": summ["step_time_s"],
                    "step_time_samples_s": summ["step_times_s"][skip:],
                    "peak_memory_gib": summ["peak_reserved_gib"], "peak_memory_kind": "reserved",
                    "predicted_at_export_s": plan["estimate"]["step_time_s"],
                    "predicted_reserved_at_export_gib": plan["estimate"].get("reserved_peak_gib")},
        "notes": (f"median of the steps after the first {skip} (torchtitan logs tps at --metrics.log_freq 1; step "
                  "time = global batch x seq_len / (world x tps) of the slowest rank); peak = torchtitan's logged "
                  "memory (torch.cuda max reserved), largest over ranks and steps"),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("exports")
    ap.add_argument("summaries", nargs="+")
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--chip", required=True)
    ap.add_argument("--torch", default="2.11.0+cu130")
    ap.add_argument("--skip", type=int, default=3)
    ap.add_argument("--date", default="2026-11-26")
    ap.add_argument("--out", required=True)
    ap.add_argument("--compiled", action="store_true", help="the runs were launched with EXTRA_ARGS=--compile.enable")
    a = ap.parse_args()
    summ = {}
    for f in a.summaries:
        for ln in open(f):
            d = json.loads(ln)
            if d.get("step_time_s"):
                summ[d["id"]] = d
    rows = []
    for d in sorted(Path(a.exports).iterdir()):
        if d.name in summ and (d / "plan.yaml").is_file():
            rows.append(row(yaml.safe_load((d / "plan.yaml").read_text()), summ[d.name], a.gpu, a.chip,
                            {"torch": a.torch, "cuda": "13.0"}, a.skip, a.date, a.compiled))
    Path(a.out).write_text(yaml.safe_dump({"schema_version": 1, "rows": rows}, sort_keys=False, width=120))
    print(f"{len(rows)} rows -> {a.out}")


if __name__ == "__main__":
    main()
