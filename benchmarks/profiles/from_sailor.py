"""Convert Sailor's published per-layer OPT-350M profiles into baige-plan profile files (issue 10).

Source: Strati et al., "Sailor: Automating Distributed Training over Dynamic, Heterogeneous, and
Geo-distributed Clusters" (SOSP'25), github.com/eth-easl/sailor at commit cf2c8e3:
  - sailor/Planner/sailor_planner/profiles/OPT-350/{A100-40,V100-16}/profile.json: timing,
    profile[micro_batch][tp][layer] = [forward_s, backward_s, update_s] (the same numbers as
    sailor/Planner/simulations/profiles_tmp.json, which this script checks); layer 0 = embedding,
    1..24 = transformer layers (1 is the first profiled layer, 2..24 copies of the second),
    25 = final norm + logits + loss (third_party/Megatron-DeepSpeed/megatron/training.py,
    `--sailor-profile`); update_s = DeepSpeed's optimizer step of the profiled 2-layer model,
    stamped on every layer (runtime_simulator.py takes one per stage).
  - sailor/Planner/llm_info.json: memory, llm_info[model][tp][layer] = {params_floats,
    act_output_floats, act_mem_floats, ...} at micro-batch 1 (the simulator multiplies by the
    micro-batch and the float size).
Precision fp32: third_party/Megatron-DeepSpeed/profile_all.py passes neither --fp16 nor --bf16, the
DeepSpeed configs have no fp16/bf16 section, and params_bytes = 4 x params_floats in llm_info.json.
The A100 ran its fp32 matmuls as TF32 (the NGC image nvcr.io/nvidia/pytorch:24.10 of the Dockerfile
enables TF32 for cuBLAS; in any case its layer, ~206 GFLOP forward + backward at micro-batch 1, took
8.2 ms = 25 TFLOP/s, above the A100's 19.5 TFLOP/s IEEE-fp32 peak): the A100 file still says
`precision: fp32`, the job precision Sailor trained in, so it applies to fp32 jobs (Sailor's mixed
A100 + V100 scenario) with the TF32 speed the A100 really had; the V100 has no TF32. Attention is
Megatron's standard (non-flash) core attention (no --use-flash-attn), dropout 0.1 (Megatron defaults),
no activation recomputation, Megatron's GPT-2 vocabulary padded to 50304 (128 x tp).

Only tp = 1 is converted by default: Sailor measured tp > 1 with real tensor parallelism on tp GPUs, so those
times include the TP all-reduces, which the cost model adds itself. `--all-tp` (issue 18) also writes
opt-350m.CHIP.fp32.sailor-alltp.yaml with every tp that fits the cloud topology's 4-GPU VMs, the cost model's own
TP all-reduces of one layer on that VM group taken out of Sailor's times (half forward, half backward): without it
tp > 1 stays analytical, and the analytical A100 TF32 layer is 1.3x (tp 1) to 2.1x (tp 4, micro-batch 1) faster
than Sailor measured, which sends too many layers to A100 tp 4 stages. `--report` compares every entry,
tp > 1 included (against the analytical compute + TP communication), with the analytical model.

    .venv/bin/python benchmarks/profiles/from_sailor.py [--repo /work/.mirror/eth-easl+sailor/repo] [--report]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from baige_plan.cost.measured import analytical_entry, profiled_model  # noqa: E402
from baige_plan.io.catalog import Catalog  # noqa: E402
from baige_plan.io.profiles import dump_profile  # noqa: E402
from baige_plan.specs.profile import (  # noqa: E402
    LayerProfile,
    PartProfile,
    ProfileEntry,
    ProfileSpec,
    Provenance,
)
from baige_plan.specs.strategy import StrategySpec  # noqa: E402

COMMIT = "cf2c8e3"
REPO_URL = "https://github.com/eth-easl/sailor"
GPUS = {"a100-sxm4-40g": "A100-40", "v100-sxm2-16g": "V100-16"}
PROFILE = "sailor/Planner/sailor_planner/profiles/OPT-350/{gpu}/profile.json"
PROFILES_TMP = "sailor/Planner/simulations/profiles_tmp.json"
LLM_INFO = "sailor/Planner/llm_info.json"
FLOAT = 4               # fp32
FIRST, STEADY, EMB, HEAD = "1", "2", "0", "25"


def git_show(repo: Path, path: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "show", f"{COMMIT}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def load(repo: Path) -> tuple[dict, dict, dict]:
    prof = {chip: json.loads(git_show(repo, PROFILE.format(gpu=g))) for chip, g in GPUS.items()}
    tmp = json.loads(git_show(repo, PROFILES_TMP))["OPT-350"]
    for chip, g in GPUS.items():
        if tmp[g] != prof[chip]:
            raise SystemExit(f"{PROFILE.format(gpu=g)} and {PROFILES_TMP} disagree for {g}")
    info = json.loads(git_show(repo, LLM_INFO))["OPT-350"]
    return prof, tmp, info


def optimizer_params(info_tp: dict, hidden: int) -> int:
    """Parameters of Sailor's profiled model: embedding (tied with the head) + 2 layers + final norm."""
    return info_tp[EMB]["params_floats"] + 2 * info_tp[STEADY]["params_floats"] + 2 * hidden


def entry(times: dict, info_tp: dict, tp: int, mb: int, hidden: int, tp_comm_s: float = 0.0) -> ProfileEntry:
    """`tp_comm_s`: the cost model's TP communication of one layer per micro-batch (forward + backward, half each:
    two all-reduces per pass), taken out of Sailor's tp > 1 times, which include it (--all-tp)."""
    fwd, bwd, upd = times[STEADY]
    fwd, bwd = fwd - tp_comm_s / 2, bwd - tp_comm_s / 2
    lay = info_tp[STEADY]
    return ProfileEntry(
        tp=tp, micro_batch=mb, recompute="none", sequence_parallel=False,
        layer=LayerProfile(forward_s=fwd, backward_s=bwd, recompute_s=0.0,
                           activation_bytes=float(lay["act_mem_floats"] * mb * FLOAT),
                           output_bytes=float(lay["act_output_floats"] * mb * FLOAT),
                           parameter_bytes=float(lay["params_floats"] * FLOAT)),
        embedding=PartProfile(forward_s=times[EMB][0], backward_s=times[EMB][1],
                              activation_bytes=float(info_tp[EMB]["act_mem_floats"] * mb * FLOAT),
                              parameter_bytes=float(info_tp[EMB]["params_floats"] * FLOAT)),
        logits=PartProfile(forward_s=times[HEAD][0], backward_s=times[HEAD][1],
                           activation_bytes=float(info_tp[HEAD]["act_mem_floats"] * mb * FLOAT),
                           parameter_bytes=float(info_tp[HEAD]["params_floats"] * FLOAT)),
        optimizer_s_per_param=upd / optimizer_params(info_tp, hidden))


def tp_comm_s(model, group, tp: int, mb: int) -> float:
    """The cost model's TP all-reduces of one transformer layer, forward + backward, per micro-batch, on `group`
    (the cloud topology's VM group: its scale-up figures), fp32 activations, no sequence parallelism."""
    from baige_plan.cost.estimate import stage_cost
    from baige_plan.specs.job import JobSpec
    s = StrategySpec(tp=tp, pp=3, micro_batch=mb, recompute="none", attention="standard", sequence_parallel=False)
    one = stage_cost(model, group, JobSpec(mb, 2048, "fp32"), s, 1, 1, 1, 1)
    return one.tp_s


def convert(prof: dict, info: dict, chip: str, model, tps: tuple[int, ...] = (1,), group=None) -> ProfileSpec:
    """`tps` beyond 1 need `group` (the cluster group whose TP links the planner will cost): Sailor's tp > 1 times
    include TP all-reduces, so the model's own TP communication on that group is taken out of them."""
    entries = []
    for mb in sorted(prof[chip], key=int):
        for tp in tps:
            if str(tp) in prof[chip][mb]:
                if tp > 1 and tp > group.devices_per_node:
                    continue        # Sailor measured it inside one larger VM; the planned VMs have fewer GPUs
                comm = tp_comm_s(model, group, tp, int(mb)) if tp > 1 else 0.0
                entries.append(entry(prof[chip][mb][str(tp)], info[str(tp)], tp, int(mb), model.hidden, comm))
    g = GPUS[chip]
    source = (f"Strati et al., Sailor (SOSP'25), {REPO_URL} commit {COMMIT}: {PROFILE.format(gpu=g)} "
              f"(= {PROFILES_TMP}) and {LLM_INFO}")
    notes = ("converted by benchmarks/profiles/from_sailor.py. Megatron-DeepSpeed (deepspeed 0.16.5, "
             "nvcr.io/nvidia/pytorch:24.10) in fp32 (" + ("matmuls ran as TF32: 25 TFLOP/s per layer, above the "
                                                          "19.5 TFLOP/s IEEE-fp32 peak" if chip.startswith("a100")
                                                          else "IEEE fp32, no TF32 on Volta")
             + "), standard attention, dropout 0.1, no recomputation, GPT-2 vocabulary padded to 50304; "
             "layer 2 (steady state) taken as every transformer layer (layer 1, the first, differs by <10%); "
             "update = DeepSpeed AdamW step of the profiled model (embedding + 2 layers), per parameter; "
             "memory = llm_info.json floats x micro-batch x 4 B. Only tp = 1: Sailor's tp > 1 times were "
             "measured with real TP and include its all-reduces, which the cost model adds itself.")
    if tps != (1,):
        notes = notes.replace("Only tp = 1: Sailor's tp > 1 times were measured with real TP and include its "
                              "all-reduces, which the cost model adds itself.",
                              f"tp {', '.join(map(str, tps))} (--all-tp): Sailor's tp > 1 times were measured with "
                              "real TP and include its all-reduces; the cost model's own TP all-reduces of one layer "
                              "on the cloud topology's VM group (topologies/cloud-a100-v100-128.yaml) are taken out, "
                              "half from forward, half from backward, since the planner adds them itself.")
    suffix = "" if tps == (1,) else "-alltp"
    return ProfileSpec(name=f"opt-350m@{chip}-fp32-sailor{suffix}", model=profiled_model(model), chip=chip, seq_len=2048,
                       precision="fp32", entries=tuple(entries), attention="standard",
                       provenance=Provenance(method="published", device=f"{g} (Sailor's label; GCP)", source=source,
                                             command="python benchmarks/profiles/from_sailor.py", notes=notes))


def report(prof: dict, info: dict, cat: Catalog, model) -> list[str]:
    """measured / analytical per layer (fwd + bwd), logits and optimizer, every (tp, micro-batch); tp > 1
    against the analytical compute plus its TP all-reduces (Sailor's times include them)."""
    from baige_plan.cost.estimate import stage_cost
    from baige_plan.specs.job import JobSpec
    from baige_plan.specs.topology import GroupSpec
    out = []
    for chip, prec in [(c, p) for c in GPUS for p in (("fp32", "tf32") if c.startswith("a100") else ("fp32",))]:
        ch = cat.chip(chip)
        group = GroupSpec(name=chip, chip=ch, nodes=1, devices_per_node=8)
        rows = []
        for mb in sorted(prof[chip], key=int):
            for tp in sorted(prof[chip][mb], key=int):
                t = prof[chip][mb][tp]
                s = StrategySpec(tp=int(tp), pp=3, micro_batch=int(mb), recompute="none", attention="standard",
                                 sequence_parallel=False)
                a = analytical_entry(model, ch, 2048, prec, s)
                job = JobSpec(int(mb), 2048, prec)
                mid = stage_cost(model, group, job, s, 1, 1, 1, 1)       # one middle layer incl. TP comm
                layer_a = mid.time_s - mid.pp_s
                meas = t[STEADY][0] + t[STEADY][1]
                opt_a = a.optimizer_s_per_param
                opt_m = t[STEADY][2] / optimizer_params(info[tp], model.hidden)
                head_m = t[HEAD][0] + t[HEAD][1]
                head_a = a.logits.forward_s + a.logits.backward_s
                rows.append((int(tp), int(mb), meas, layer_a, meas / layer_a, head_m / head_a, opt_m / opt_a,
                             (info[tp][STEADY]["act_mem_floats"] * int(mb) * FLOAT) / a.layer.activation_bytes))
        out.append(f"{chip} ({GPUS[chip]}), OPT-350M seq 2048, standard attention: Sailor's fp32 run / analytical "
                   f"{prec}")
        out.append("  tp mb  layer fwd+bwd meas (s)  analytical (s)  ratio  logits  optimizer/param  act bytes")
        for tp, mb, m, a, r, h, o, act in rows:
            out.append(f"  {tp:2d} {mb:2d}  {m:22.5f}  {a:14.5f}  {r:5.2f}  {h:6.2f}  {o:15.2f}  {act:9.2f}")
        for tp in sorted({r[0] for r in rows}):
            sel = [r for r in rows if r[0] == tp]
            out.append(f"  tp {tp} median: layer {statistics.median(r[4] for r in sel):.2f}, logits "
                       f"{statistics.median(r[5] for r in sel):.2f}, optimizer {statistics.median(r[6] for r in sel):.2f}"
                       f", activations {statistics.median(r[7] for r in sel):.2f}")
        out.append("")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, default=Path("/work/.mirror/eth-easl+sailor/repo"),
                    help="a clone (or bare mirror) of eth-easl/sailor holding commit " + COMMIT)
    ap.add_argument("--out-dir", type=Path, default=HERE)
    ap.add_argument("--report", action="store_true", help="print measured / analytical ratios")
    ap.add_argument("--all-tp", action="store_true", help="also write opt-350m.CHIP.fp32.sailor-alltp.yaml with "
                    "every tp Sailor measured, the model's TP all-reduces on the cloud VM groups taken out (issue 18)")
    a = ap.parse_args(argv)
    prof, _, info = load(a.repo)
    cat = Catalog.create()
    model = cat.model("opt-350m")
    cloud = cat.cluster("cloud-a100-v100-128")[0]
    variants = [("", (1,))] + ([("-alltp", (1, 2, 4, 8))] if a.all_tp else [])
    for (suffix, tps), chip in [(v, c) for v in variants for c in GPUS]:
        group = next(g for g in cloud.groups if g.chip.id == chip)
        p = convert(prof, info, chip, model, tps, group)
        path = a.out_dir / f"opt-350m.{chip}.fp32.sailor{suffix}.yaml"
        path.write_text(dump_profile(p, f"# Published per-layer profile converted from Sailor ({REPO_URL} @ {COMMIT}); "
                                        "see provenance"), encoding="utf-8")
        print(f"wrote {path} ({len(p.entries)} entries)", file=sys.stderr)
    if a.report:
        print("\n".join(report(prof, info, cat, model)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
