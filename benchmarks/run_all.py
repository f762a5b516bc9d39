"""Benchmarks: `make bench` runs every function in BENCHMARKS and prints what it measured.

Add a benchmark by writing a function returning a dict of figures and appending it to BENCHMARKS.
Speed targets (issue 3, on a 2-core machine): gpt3-175b on a100-sxm4-80g:64x8, global batch 1536,
full search <= 1 s; gpt3-175b on a100-sxm4-80g:2048x8, global batch 8192, <= 5 s. Issue 4: llama3-70b on
a100-sxm4-80g:8x8+ascend-910b:8x8 (batch 512, seq 4096) <= 1 s; llama3-405b on 16,384 devices of three
families (batch 4096, seq 8192) <= 10 s. Issue 10: the cloud-style mixed cluster (A100-40GB and V100-16GB
VMs of 4 GPUs, ~20 Gb/s between VMs: topologies/cloud-a100-v100-{128,320,512}.yaml), OPT-350M, global batch
1024 x 2048 tokens, fp32 and fp16: search <= 1 s at 512 GPUs (the published planner, Sailor, reports 4.6 s).
Issue 18 (whole `baige-plan plan` processes, start-up and plan file included, cli_plan_*): the 512-GPU cloud
scenario (fp32) <= 0.5 s wall on 2 cores; the three-family 16,384-device plan <= 3 s wall, with its
heterogeneous efficiency.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from baige_plan.io.catalog import Catalog  # noqa: E402
from baige_plan.search.solver import search  # noqa: E402
from baige_plan.specs.job import JobSpec  # noqa: E402


def _inputs(model: str, cluster: str, global_batch: int, seq_len: int, precision: str = "bf16"):
    cat = Catalog.create()
    cl, _ = cat.cluster(cluster)
    return cat.model(model), cl, JobSpec(global_batch, seq_len, precision)


def _timed(run: Callable[[], object], repeats: int) -> tuple[object, float, float]:
    """(last result, best seconds, worst seconds); the first (cold) run counts."""
    times, r = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = run()
        times.append(time.perf_counter() - t0)
    return r, min(times), max(times)


def _search(model: str, cluster: str, global_batch: int, seq_len: int, target_s: float, repeats: int = 3) -> dict:
    m, cl, job = _inputs(model, cluster, global_batch, seq_len)
    r, dt, worst = _timed(lambda: search(m, cl, job), repeats)
    s = r.best.strategy
    return {"seconds_best": round(dt, 3), "seconds_worst": round(worst, 3), "target_s": target_s,
            "meets_target": worst <= target_s, "candidates": r.candidates, "feasible": r.feasible,
            "full_estimates": r.evaluated, "candidates_per_s": round(r.candidates / dt),
            "status": r.status, "best": f"tp{s.tp} pp{s.pp} dp{s.dp} cp{s.cp} zero{s.zero} mb{s.micro_batch} "
                                        f"vpp{s.vpp} {s.recompute} -> {r.best.step_time_s:.3f} s/step, "
                                        f"MFU {r.best.mfu:.1%}"}


def search_gpt3_512() -> dict:
    return _search("gpt3-175b", "a100-sxm4-80g:64x8", 1536, 2048, 1.0)


def search_gpt3_16384() -> dict:
    return _search("gpt3-175b", "a100-sxm4-80g:2048x8", 8192, 2048, 5.0)


def _hetero(model: str, cluster: str, global_batch: int, seq_len: int, target_s: float | None, repeats: int = 2,
            precision: str = "bf16") -> dict:
    from baige_plan.search.hetero import heterogeneous_efficiency, solve
    from baige_plan.specs import runtimes
    from baige_plan.specs.strategy import StrategySpec

    m, cl, job = _inputs(model, cluster, global_batch, seq_len, precision)
    # what `baige-plan plan` solves on a mixed cluster (cli/plan_hetero.py): the heterogeneous runtime's
    # semantics and shape rules, sequence parallelism on
    base = StrategySpec(sequence_parallel=True, **runtimes.knobs(runtimes.DEFAULT_HETEROGENEOUS))
    r, best, worst = _timed(lambda: solve(m, cl, job, base), repeats)
    shapes = "; ".join(f"{sh.replicas}x[" + " > ".join(f"{st.group} tp{st.tp} L{st.n_layers}" for st in sh.stages)
                       + f"] m{sh.micro_batches}" for sh in r.pipelines.shapes)
    out = {"seconds_best": round(best, 3), "seconds_worst": round(worst, 3), "target_s": target_s,
           "meets_target": worst <= target_s if target_s is not None else None, "devices": cl.devices,
           "devices_used": dict(sorted(r.pipelines.devices_by_group().items())), "templates": r.templates,
           "status": r.status, "gap": round(r.gap, 4), "step_time_s": round(r.estimate.step_time_s, 3),
           "tokens_per_s": round(r.estimate.tokens_per_s),
            "heterogeneous_efficiency": round(heterogeneous_efficiency(r.estimate.tokens_per_s, r.standalone), 4),
            "plan": shapes if len(shapes) < 400 else shapes[:400] + " ..."}
    if target_s is None:
        out.pop("meets_target")
    return out


def hetero_llama3_70b_128() -> dict:
    """Issue 4: llama3-70b on a100-sxm4-80g:8x8+ascend-910b:8x8, batch 512, seq 4096: <= 1 s."""
    return _hetero("llama3-70b", "a100-sxm4-80g:8x8+ascend-910b:8x8", 512, 4096, 1.0)


def hetero_llama3_405b_16384() -> dict:
    """Issue 4: llama3-405b on 16,384 devices of three families, batch 4096, seq 8192: <= 10 s."""
    return _hetero("llama3-405b", "a100-sxm4-80g:512x8+h100-sxm5-80g:512x8+ascend-910b:1024x8", 4096, 8192, 10.0)


def _cloud(gpus: int, precision: str) -> dict:
    """Issue 10's cloud scenario: OPT-350M, batch 1024 x 2048, on A100-40GB + V100-16GB VMs."""
    return _hetero("opt-350m", f"topologies/cloud-a100-v100-{gpus}.yaml", 1024, 2048, 1.0 if gpus == 512 else None,
                   precision=precision)


def cloud_fp32_128() -> dict:
    return _cloud(128, "fp32")


def cloud_fp32_320() -> dict:
    return _cloud(320, "fp32")


def cloud_fp32_512() -> dict:
    return _cloud(512, "fp32")


def cloud_fp16_128() -> dict:
    return _cloud(128, "fp16")


def cloud_fp16_320() -> dict:
    return _cloud(320, "fp16")


def cloud_fp16_512() -> dict:
    return _cloud(512, "fp16")


def _cli(args: list[str], target_s: float | None, repeats: int = 3) -> dict:
    """Whole `baige-plan plan` processes (start-up, catalog loading, search, writing the plan file), as a user
    runs them: wall seconds (min / median / max of `repeats`, the first cold run counted) and the CPU
    seconds of the same runs (user + system of the child, from getrusage)."""
    import resource
    import subprocess
    import tempfile

    exe = os.path.join(os.path.dirname(sys.executable), "baige-plan")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "baige_plan.cli.app"]
    walls, cpus = [], []
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "plan.yaml")
        for _ in range(repeats):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            done = subprocess.run(cmd + ["plan", *args, "--out", out], capture_output=True, text=True, check=False)
            walls.append(time.perf_counter() - t0)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
        ok = done.returncode == 0
        eff = None
        if ok:
            import yaml
            with open(out) as f:
                doc = yaml.safe_load(f)
            eff = (doc.get("estimate") or {}).get("heterogeneous_efficiency")
    walls.sort()
    cpus.sort()
    res = {"wall_s_min": round(walls[0], 3), "wall_s_median": round(walls[len(walls) // 2], 3),
           "wall_s_max": round(walls[-1], 3), "cpu_s_median": round(cpus[len(cpus) // 2], 3),
           "target_wall_s": target_s, "meets_target": (walls[len(walls) // 2] <= target_s) if target_s else None,
           "exit": done.returncode, "load_avg_1min": round(os.getloadavg()[0], 2)}
    if eff is not None:
        res["heterogeneous_efficiency"] = eff
    if not ok:
        res["stderr"] = done.stderr.strip()[-300:]
    return res


def cli_plan_cloud_fp32_512() -> dict:
    """Issue 18 acceptance: `baige-plan plan` of the 512-GPU cloud scenario (OPT-350M, fp32, batch 1024 x 2048,
    flagscale) <= 0.5 s wall on 2 cores, whole process."""
    return _cli(["opt-350m", "topologies/cloud-a100-v100-512.yaml", "--precision", "fp32", "--global-batch", "1024",
                 "--seq-len", "2048"], 0.5)


def cli_plan_llama3_405b_16384() -> dict:
    """Issue 18 acceptance: the three-family 16,384-device plan (llama3-405b, batch 4096 x 8192) <= 3 s wall,
    whole process, with its heterogeneous efficiency."""
    return _cli(["llama3-405b", "a100-sxm4-80g:512x8+h100-sxm5-80g:512x8+ascend-910b:1024x8", "--global-batch",
                 "4096", "--seq-len", "8192"], 3.0, repeats=2)


BENCHMARKS: list[Callable[[], dict]] = [search_gpt3_512, search_gpt3_16384, hetero_llama3_70b_128,
                                        hetero_llama3_405b_16384, cloud_fp32_128, cloud_fp32_320, cloud_fp32_512,
                                        cloud_fp16_128, cloud_fp16_320, cloud_fp16_512]


def replan_gpt3_512_lose_one_node(repeats: int = 3) -> dict:
    """Issue 12 item 3: `replan` of the 512-GPU gpt3-175b plan (`plan gpt3-175b a100-sxm4-80g:64x8 --global-batch
    1536 --seq-len 2048 --out p.yaml`) after losing node 17: <= 2 s on a 2-core machine (reading the plan, the
    searches, placement and bytes, the new plan document), moving less than a fresh plan."""
    import subprocess
    import tempfile
    from pathlib import Path

    from typer.testing import CliRunner

    from baige_plan.cli.app import app
    from baige_plan.io.plans import dumps
    from baige_plan.reports.replan_doc import load_old, new_plan_doc
    from baige_plan.search.replan import replan
    from baige_plan.search.replan_world import apply_changes

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "p.yaml"
        r = CliRunner().invoke(app, ["plan", "gpt3-175b", "a100-sxm4-80g:64x8", "--global-batch", "1536", "--seq-len",
                                     "2048", "--out", str(p)])
        assert r.exit_code == 0, r.output
        node = "a100-sxm4-80g:17"

        def run():
            old = load_old(p)
            w = apply_changes(old.cluster, old.slots, [node], [], [], [])
            res = replan(old.model, old.job, old.cluster, old.estimate, old.strategy, old.pipelines, old.slots, w,
                         frac=old.frac)
            dumps(new_plan_doc(old.model, old.job, res.chosen, res, old.chip_docs, old.frac), "yaml")
            return res

        res, best, worst = _timed(run, repeats)
        t0 = time.perf_counter()
        cli = subprocess.run([sys.executable, "-m", "baige_plan", "replan", str(p), "--drop", node, "--out",
                              str(Path(d) / "n.yaml"), "--format", "json"], capture_output=True, text=True)
        cli_s = time.perf_counter() - t0
    c, f = res.chosen, res.fresh
    assert f is not None and cli.returncode == 0, cli.stderr
    return {"seconds_best": round(best, 3), "seconds_worst": round(worst, 3), "target_s": 2.0,
            "meets_target": worst <= 2.0 and c.bytes_moved < f.bytes_moved, "cli_seconds": round(cli_s, 3),
            "plans_considered": res.considered,
            "old": f"{res.old.tokens_per_s:,.0f} tokens/s on {res.old_devices} GPUs",
            "chosen": f"{c.label}: {c.tokens_per_s:,.0f} tokens/s ({c.tokens_per_s / res.old.tokens_per_s - 1:+.1%}), "
                      f"moves {c.params_bytes / 1e9:,.0f} GB parameters + {c.optimizer_bytes / 1e9:,.0f} GB optimizer",
            "fresh": f"{f.label}: {f.tokens_per_s:,.0f} tokens/s, moves {f.params_bytes / 1e9:,.0f} GB parameters + "
                     f"{f.optimizer_bytes / 1e9:,.0f} GB optimizer (surviving nodes in order)"}


BENCHMARKS.append(replan_gpt3_512_lose_one_node)


def _partial(model: str, cluster: str, global_batch: int, seq_len: int, repeats: int = 3) -> dict:
    """Issue 12 item 2: what `plan` runs on one chip group (search/partial.py: the node counts C(N), the compute
    floor skipping those that cannot win) next to the full-cluster search alone, measured in the same run."""
    from baige_plan.search.partial import search_partial

    m, cl, job = _inputs(model, cluster, global_batch, seq_len)
    full, f_best, _ = _timed(lambda: search(m, cl, job), repeats)
    r, best, worst = _timed(lambda: search_partial(m, cl, job), repeats)
    e = r.result.best
    return {"seconds_best": round(best, 3), "seconds_worst": round(worst, 3),
            "full_count_search_seconds_best": round(f_best, 3), "overhead_s": round(best - f_best, 3),
            "counts": ", ".join(f"{c.nodes}: " + ("skipped (compute floor)" if c.skipped else
                                                   f"{c.result.best.tokens_per_s:,.0f} tokens/s" if c.result and
                                                   c.result.plans else "no plan") for c in r.counts),
            "chosen": f"{r.nodes} of {cl.groups[0].nodes} nodes, {e.tokens_per_s:,.0f} tokens/s" if e else "none",
            "full_count": f"{full.best.tokens_per_s:,.0f} tokens/s" if full.plans else "no plan"}


def partial_gpt3_512() -> dict:
    return _partial("gpt3-175b", "a100-sxm4-80g:64x8", 1536, 2048)


def partial_gpt3_16384() -> dict:
    return _partial("gpt3-175b", "a100-sxm4-80g:2048x8", 8192, 2048)


def partial_gpt3_800() -> dict:
    return _partial("gpt3-175b", "a100-sxm4-80g:100x8", 1600, 2048)


def partial_llama3_70b_800() -> dict:
    return _partial("llama3-70b", "h100-sxm5-80g:100x8", 1024, 8192)


BENCHMARKS += [partial_gpt3_512, partial_gpt3_16384, partial_gpt3_800, partial_llama3_70b_800]
BENCHMARKS += [cli_plan_cloud_fp32_512, cli_plan_llama3_405b_16384]


def main() -> int:
    print(f"# baige-plan benchmarks ({os.cpu_count()} CPUs visible)")
    failed = 0
    for fn in BENCHMARKS:
        out = fn()
        failed += out.get("meets_target") is False
        print(f"{fn.__name__}:")
        for k, v in out.items():
            print(f"  {k}: {v}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
