"""`make invariants`: random *valid* `plan` runs checked against properties an independent computation gives, the
semantic counterpart of `make fuzz` (which feeds malformed inputs). Each case draws a model, a cluster (one group or
several), a runtime, a batch and sequence length and a few options, runs `plan --format json --top 8 --out FILE`
in-process, and checks:
  - no internal error (an exception, or an exit code outside 0-3);
  - the breakdown adds up to the step time; no part is negative; the step lies in its band;
  - no two rows share step time and peak memory;
  - on one group, cp across nodes costs (cp_comm > 0 when tp x cp exceeds the node);
  - `evaluate --plan FILE` gives the step time and breakdown the file was written with;
  - on one group, pinning tp or recompute to another value never finds a faster plan than the unpinned search's
    fastest (the search is exact there; the first plan shown may be a simpler tie).
The 2026-11-28 audits these came from found five breaks (tests/test_plan_invariants.py and the tests named in its
docstring keep them fixed).

    python tests/fuzz/run_invariants.py [--seed 0] [--n 60]

Exit 0 when every case keeps them, 1 otherwise (each violation printed with its command line).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

from typer.testing import CliRunner

from baige_plan.cli.app import app

MODELS = ["llama3-8b", "llama3-70b", "gpt3-175b", "mixtral-8x7b", "deepseek-v3", "llama2-7b", "opt-350m",
          "qwen3-235b-a22b"]
CLUSTERS = ["h100-sxm5-80g:4x8", "a100-sxm4-80g:16x8", "h200-sxm-141g:2x8", "b200:8x8", "mi300x:4x8", "ascend-910b:8x8",
            "gb200:2x36", "a100-sxm4-80g:4x8+h100-sxm5-80g:4x8", "a100-sxm4-80g:8x8+ascend-910b:8x8",
            "a100-sxm4-80g:4x8+h100-sxm5-80g:2x8+ascend-910b:4x8"]
RUNTIMES = [None, "megatron", "torchtitan", "deepspeed", "nemo", "paddle", "megatron-local"]
OPTIONS = [("--precision", ["bf16", "fp8", "fp16"]), ("--max-memory-frac", ["0.8", "1.0"]),
           ("--attention", ["flash", "standard"]), ("--micro-batch", ["1", "2"]), ("--recompute", ["none", "full"])]


def _devices_per_node(cluster: str) -> int | None:
    return None if "+" in cluster else int(cluster.split(":")[1].split("x")[1])


def check_case(run: CliRunner, args: list[str], cluster: str, out: Path) -> list[str]:
    """The violations of one `plan` case (empty: none)."""
    bad: list[str] = []
    res = run.invoke(app, args + ["--format", "json", "--top", "8", "--out", str(out)])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        return [f"exception {res.exception!r}"]
    if res.exit_code not in (0, 1, 2, 3):
        return [f"exit {res.exit_code}"]
    if res.exit_code != 0:
        return []
    plans = json.loads(res.stdout)["plans"]
    dpn = _devices_per_node(cluster)
    seen = set()
    for k, p in enumerate(plans):
        b, st = p["breakdown_s"], p["step_time_s"]
        if abs(sum(b.values()) - st) > 2e-4 * st + 1e-5:
            bad.append(f"plan {k}: breakdown {sum(b.values()):.6g} s != step {st} s")
        if any(v < 0 for v in b.values()):
            bad.append(f"plan {k}: negative breakdown part {b}")
        lo, hi = p["step_time_band_s"]
        if not lo <= st <= hi:
            bad.append(f"plan {k}: step {st} outside its band [{lo}, {hi}]")
        key = (st, p["peak_memory_gib"])
        if key in seen:
            bad.append(f"plan {k}: same step and memory as an earlier row")
        seen.add(key)
        s = p["strategy"]
        if dpn is not None and s["cp"] > 1 and s["tp"] * s["cp"] > dpn and b["cp_comm"] <= 0:
            bad.append(f"plan {k}: cp {s['cp']} x tp {s['tp']} crosses nodes at cp_comm 0")
    ev = run.invoke(app, ["evaluate", "--plan", str(out), "--format", "json"])
    if ev.exit_code != 0:
        bad.append(f"evaluate --plan exit {ev.exit_code}: {ev.output[-200:]}")
    else:
        again = json.loads(ev.stdout)
        if again["step_time_s"] != plans[0]["step_time_s"] or again["breakdown_s"] != plans[0]["breakdown_s"]:
            bad.append(f"evaluate --plan {again['step_time_s']} s != written {plans[0]['step_time_s']} s")
    if dpn is not None:
        fastest = min(p["step_time_s"] for p in plans)
        s0 = plans[0]["strategy"]
        for pin in (["--tp", str(8 if s0["tp"] != 8 else 4)], ["--recompute", "none" if s0["recompute"] != "none"
                                                                 else "full"]):
            if pin[0] in args:
                continue
            rp = run.invoke(app, args + pin + ["--format", "json", "--top", "8"])
            if rp.exit_code == 0:
                pinned = min(p["step_time_s"] for p in json.loads(rp.stdout)["plans"])
                if pinned < fastest * (1 - 1e-9):
                    bad.append(f"pinned {' '.join(pin)} finds {pinned} s < unpinned fastest {fastest} s")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=60)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    run = CliRunner()
    n_bad = 0
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.n):
            cluster = rng.choice(CLUSTERS)
            args = ["plan", rng.choice(MODELS), cluster, "--global-batch", str(rng.choice([64, 128, 256, 512, 1024])),
                    "--seq-len", str(rng.choice([2048, 4096, 8192, 32768]))]
            rt = rng.choice(RUNTIMES)
            if rt:
                args += ["--runtime", rt]
            for k, vals in rng.sample(OPTIONS, rng.randint(0, 2)):
                args += [k, rng.choice(vals)]
            for v in check_case(run, args, cluster, Path(d) / f"p{i}.yaml"):
                n_bad += 1
                print(f"case {i}: {v}\n  baige-plan {' '.join(args[0:])}")
    print(f"cases: {a.n}, violations: {n_bad} (seed {a.seed})")
    return 1 if n_bad else 0


if __name__ == "__main__":
    sys.exit(main())
