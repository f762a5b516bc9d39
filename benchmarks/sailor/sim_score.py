"""Score baige-plan heterogeneous plans with Sailor's public simulator (eth-easl/sailor@cf2c8e3,
sailor/Planner/simulations/runtime_simulator.py Simulator.simulate_iteration_time): its per-layer profiles
(profiles_tmp.json), its network fits and its sync model, on the OPT-350M GCP scenario (issue 18).

Usage: python benchmarks/sailor/sim_score.py --sailor-root DIR PLAN.json [PLAN.json ...]
DIR holds the Sailor checkout as DIR/sailor (the simulator reads DIR/sailor/sailor/providers/...). Each PLAN is
`baige-plan plan --format json` output (the first plan is scored). The simulator imports torch and pandas for
helpers it does not use on this path; stubs stand in for them (no GPU is touched). Prints one JSON line per plan:
the simulated iteration time, whether it fits Sailor's memory model, and the plan in Sailor's form.
"""

from __future__ import annotations

import argparse
import json
import sys
import types

GPU_TYPE = {"a100-sxm4-40g": "A100-40", "v100-sxm2-16g": "V100-16"}   # Sailor's names for the catalog chips
ZONE = "us-central1-a"        # topologies/cloud-a100-v100-*.yaml: Sailor's trace zone
GPUS_PER_VM = 4


def _stub_imports() -> None:
    for name in ("torch", "pandas"):
        if name not in sys.modules:
            sys.modules[name] = types.ModuleType(name)


def sailor_plan(doc: dict, chip_of_group: dict[str, str], layers: int) -> dict:
    """Sailor's plan form (runtime_simulator.convert_homogeneous 'pipeline_list'): per pipeline its stages' layer
    ids (0 = embedding, 1..L transformer layers, L+1 = final norm + head), per stage one [VMs, tp] per replica."""
    p = doc["plans"][0] if "plans" in doc else doc
    mbs = int(p["strategy"]["micro_batch"])
    out = []
    for sh in p["pipelines"]:
        r = int(sh["replicas"])
        stages, tmp = [], []
        n = len(sh["stages"])
        for i, st in enumerate(sh["stages"]):
            a, b = st["layers"]
            ids = list(range(a + 1, b + 1))
            if i == 0:
                ids = [0] + ids
            if i == n - 1:
                ids = ids + [layers + 1]
            stages.append(ids)
            gt = GPU_TYPE[chip_of_group[st["group"]]]
            tmp.append([[[[gt, GPUS_PER_VM, ZONE]], int(st["tp"])] for _ in range(r)])
        out.append({"num_stages": n, "layers_per_stage": stages, "tmp_per_stage": tmp, "dp": [r] * n})
    return {"mbs": mbs, "pipeline_list": out}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sailor-root", required=True)
    ap.add_argument("--chips", default="a100=a100-sxm4-40g,v100=v100-sxm2-16g")
    ap.add_argument("plans", nargs="+")
    a = ap.parse_args()
    sys.path.insert(0, f"{a.sailor_root}/sailor")
    _stub_imports()
    import contextlib
    import io

    from sailor.Planner.simulations import runtime_simulator as rs

    base = f"{a.sailor_root}/sailor/sailor"
    tc = json.load(open(f"{base}/Planner/simulations/configs/training_config_opt_350.json"))
    llm = json.load(open(f"{base}/Planner/llm_info.json"))
    prof = json.load(open(f"{base}/Planner/simulations/profiles_tmp.json"))
    sim = rs.Simulator(a.sailor_root, tc, llm, False, prof, ZONE)   # fp32 (fp16=False), as the scenario
    chips = dict(kv.split("=") for kv in a.chips.split(","))
    for path in a.plans:
        doc = json.load(open(path))
        plan = sailor_plan(doc, chips, tc["num_layers"])
        with contextlib.redirect_stdout(io.StringIO()):
            t, _, _ = sim.simulate_iteration_time(plan)
            fits = sim.check_config_fits(plan)
            t_sync = sim.estimate_sync_time(rs.convert_homogeneous(plan, tc))
        print(json.dumps({"plan": path, "iteration_s": round(t, 4), "sync_s": round(t_sync, 4), "fits": fits,
                          "sequences": tc["global_batch_size"], "sailor_plan": plan}))


if __name__ == "__main__":
    main()
