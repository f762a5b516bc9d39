"""Runs file (the schema of runs_h200.yaml; `baige-plan backtest` reads it) from launched megatron-local exports:
each export folder's plan.yaml (what was planned and exported) and the summary lines run_megatron_local.sh wrote
(benchmarks/real/megatron_log.py), no torch.

  python benchmarks/real/megatron_local_runs.py EXPORTS_DIR SUMMARY.jsonl... --gpu "NVIDIA H200" \
      --chip h200-sxm-141g --out runs.yaml"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

MODEL_KEYS = ("name", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "activation",
              "tie_embeddings", "head_dim", "dropout")


def row(plan: dict, summ: dict, gpu: str, chip: str, env: dict) -> dict:
    s, m, job = plan["strategy"], plan["inputs"]["model"], plan["inputs"]["job"]
    groups = plan["inputs"]["cluster"]["groups"]
    n = sum(g["nodes"] * g["devices_per_node"] for g in groups)
    model = {k: m[k] for k in MODEL_KEYS if m.get(k) is not None}
    model["seq_len"] = job["seq_len"]
    model["type"] = "dense"
    att = s.get("attention", "flash")
    return {
        "id": summ["id"],
        "source": {"key": "baige-real-megatron-local-2026",
                   "citation": (f"baige-plan export --to megatron-local of {summ['id']}/plan.yaml, launched unchanged by "
                                "benchmarks/real/run_megatron_local.sh (BAIGE_MOCK_DATA=1, BAIGE_TRAIN_ITERS="
                                f"{summ['iterations']}, --log-memory-interval) on {n}x {gpu}, 2026-11-26")},
        "model": model,
        "hardware": {"gpu_model": gpu, "chip": chip, "num_gpus": n, "gpus_per_node": n, **env},
        "parallel": {
            "tp": s["tp"], "pp": s["pp"], "dp": s["dp"], "cp": s.get("cp", 1), "zero": s.get("zero", 0),
            "sequence_parallel": bool(s.get("sequence_parallel")), "micro_batch": s["micro_batch"],
            "global_batch_seqs": job["global_batch"], "recompute": s.get("recompute", "none"),
            "vpp": s.get("vpp", 1), "precision": job["precision"], "attention": att,
            "distribute_saved_activations": bool(s.get("distribute_saved_activations")),
            # Megatron's --account-for-embedding/loss-in-pipeline-split (uneven interleaved plans)
            "account_for_embedding": bool(s.get("account_for_embedding")),
            "account_for_loss": bool(s.get("account_for_loss")),
            # the export carried no --cross-entropy-loss-fusion when these ran: Megatron's unfused loss
            "loss_kernel": s.get("loss_kernel") or "megatron_unfused",
            "runtime": "megatron-local", "execution": "fused", "tp_comm_overlap": False,
            "framework": ("megatron-core 0.19.2 (Megatron-LM core_r0.19.0 pretrain_gpt.py), no Transformer Engine, "
                          "no apex: --transformer-impl local, "
                          + ("torch SDPA attention core (--spec baige_sdpa_spec)" if att != "standard"
                             else "Megatron unfused DotProductAttention, torch softmax (--no-masked-softmax-fusion)")
                          + ", torch AdamW (foreach)"),
        },
        "results": {"step_time_s": summ["step_time_s"],
                    "step_time_samples_s": summ["step_times_s"][5:],
                    "peak_memory_gib": summ["peak_memory_gib"], "peak_memory_kind": "allocated",
                    "reserved_memory_gib": summ["reserved_memory_gib"],
                    "predicted_at_export_s": plan["estimate"]["step_time_s"]},
        "notes": ("median of the iterations after the first 5 (Megatron 'elapsed time per iteration', log interval 1); "
                  "peak = largest torch.cuda.max_memory_allocated over the reporting ranks "
                  f"({summ['memory_ranks']}) after the last iteration"),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("exports")
    ap.add_argument("summaries", nargs="+")
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--chip", required=True)
    ap.add_argument("--torch", default="2.11.0+cu130")
    ap.add_argument("--out", required=True)
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
                            {"torch": a.torch, "cuda": "13.0"}))
    Path(a.out).write_text(yaml.safe_dump({"schema_version": 1, "rows": rows}, sort_keys=False, width=120))
    print(f"{len(rows)} rows -> {a.out}")


if __name__ == "__main__":
    main()
