"""`make invariants`: random *valid* `plan` runs checked against the properties of invariants.py, the semantic
counterpart of `make fuzz` (which feeds malformed inputs). Each case draws a model, a cluster (one group or several),
a runtime, a batch and sequence length and a few options, runs `plan --format json --top 8 --out FILE` in-process,
and compares it with tp and recompute pinned to another value than its first plan's (on several groups: within
invariants.HETERO_PIN_GAP, and micro-batch too).

    python tests/fuzz/run_invariants.py [--seed 0] [--n 60]

Exit 0 when every case keeps them, 1 otherwise (each violation printed with its command line).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))

from invariants import plan_violations  # noqa: E402

MODELS = ["llama3-8b", "llama3-70b", "gpt3-175b", "mixtral-8x7b", "deepseek-v3", "llama2-7b", "opt-350m",
          "qwen3-235b-a22b"]
CLUSTERS = ["h100-sxm5-80g:4x8", "a100-sxm4-80g:16x8", "h200-sxm-141g:2x8", "b200:8x8", "mi300x:4x8", "ascend-910b:8x8",
            "gb200:2x36", "a100-sxm4-80g:4x8+h100-sxm5-80g:4x8", "a100-sxm4-80g:8x8+ascend-910b:8x8",
            "a100-sxm4-80g:4x8+h100-sxm5-80g:2x8+ascend-910b:4x8"]
RUNTIMES = [None, "megatron", "torchtitan", "deepspeed", "nemo", "paddle", "megatron-local"]
OPTIONS = [("--precision", ["bf16", "fp8", "fp16"]), ("--max-memory-frac", ["0.8", "1.0"]),
           ("--attention", ["flash", "standard"]), ("--micro-batch", ["1", "2"]), ("--recompute", ["none", "full"])]


def _other_pins(args: list[str]):
    """pins(first plan's strategy) for plan_violations: tp and recompute pinned to another value than the first
    plan's, where the case does not pin them itself."""
    def pins(s0: dict) -> list[list[str]]:
        out = [["--tp", str(8 if s0["tp"] != 8 else 4)], ["--recompute", "none" if s0["recompute"] != "none" else "full"]]
        if "+" in args[2]:      # several groups: the search is a heuristic there; a narrower tp and another micro-batch
            out += [["--tp", str(max(1, s0["tp"] // 2))], ["--micro-batch", "2" if s0["micro_batch"] == 1 else "1"]]
        return [p for p in out if p[0] not in args and p != ["--tp", str(s0["tp"])]]
    return pins


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
            for v in plan_violations(run, args, cluster, Path(d) / f"p{i}.yaml", 8, _other_pins(args)):
                n_bad += 1
                print(f"case {i}: {v}\n  baige-plan {' '.join(args[0:])}")
    print(f"cases: {a.n}, violations: {n_bad} (seed {a.seed})")
    return 1 if n_bad else 0


if __name__ == "__main__":
    sys.exit(main())
