"""Random two-group clusters: does any single pin find a faster plan than the unpinned heterogeneous search?

The homogeneous search is exact (a pin never beats it: tests/fuzz/invariants.py); the heterogeneous one is a
heuristic (templates, then a climb; docs/DESIGN.md "Solver"), and this audit measures how often and by how much it
misses (docs/VALIDATION.md "Pins against the heterogeneous search"). Each case draws a model, two chip groups of 1-8
nodes, a batch and sequence length, runs `plan --format json` unpinned and with each of PINS, and prints every pin
that beats it (`BEAT ...`, with the margin), then `done K ARGS`; cases without a plan print `nofree ARGS`.

    python tests/fuzz/run_hetero_pins.py [--seed 11] [--n 30]

Exit 0 when no pin beats the search by more than --slack percent (default 1), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import sys

from typer.testing import CliRunner

from baige_plan.cli.app import app

MODELS = ["llama3-8b", "llama2-13b", "llama3-70b", "llama2-70b", "mixtral-8x7b", "gpt3-175b"]
CHIPS = ["a100-sxm4-40g", "a100-sxm4-80g", "h100-sxm5-80g", "h200-sxm-141g", "v100-sxm2-32g", "ascend-910b", "mi300x"]
PINS = [["--micro-batch", "1"], ["--micro-batch", "2"], ["--micro-batch", "4"], ["--recompute", "none"],
        ["--recompute", "selective"], ["--recompute", "full"], ["--zero", "0"], ["--zero", "1"],
        ["--no-sequence-parallel"], ["--sequence-parallel"], ["--tp", "1"], ["--tp", "2"], ["--tp", "4"], ["--tp", "8"],
        ["--max-pp", "8"], ["--max-pp", "16"]]


def _step(run: CliRunner, args: list[str]) -> float | None:
    r = run.invoke(app, ["plan", *args, "--format", "json"])
    return json.loads(r.stdout)["plans"][0]["step_time_s"] if r.exit_code == 0 else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--slack", type=float, default=1.0, help="percent a pin may beat the search by")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    run = CliRunner()
    worst = 0.0
    for i in range(a.n):
        m = rng.choice(MODELS)
        g1, g2 = rng.sample(CHIPS, 2)
        cl = f"{g1}:{rng.choice([1, 2, 4, 8])}x8+{g2}:{rng.choice([1, 2, 4, 8])}x8"
        args = [m, cl, "--global-batch", str(rng.choice([64, 128, 256, 512])), "--seq-len",
                str(rng.choice([2048, 4096]))]
        free = _step(run, args)
        if free is None:
            print("nofree", " ".join(args), flush=True)
            continue
        for pin in PINS:
            t = _step(run, args + pin)
            if t is not None and t < free * (1 - 1e-9):
                gap = (free / t - 1) * 100
                worst = max(worst, gap)
                print(f"BEAT {' '.join(args)} {' '.join(pin)}: {free:.4f} -> {t:.4f} ({gap:.2f}%)", flush=True)
        print("done", i, " ".join(args), flush=True)
    print(f"worst margin {worst:.2f}% (seed {a.seed}, {a.n} cases)")
    return 1 if worst > a.slack else 0


if __name__ == "__main__":
    sys.exit(main())
