"""Measured / analytical ratios of per-layer profiles (issue 10).

    .venv/bin/python benchmarks/profiles/compare.py [PROFILE.yaml ...] [--chip CHIP] [--execution fused|eager]

For every entry of each profile: the measured value over the cost model's own number for the same
(model, chip, seq_len, precision, tp, micro-batch, recompute) -- forward, backward (without
recomputation), one layer's forward + backward + recomputation, its stored activation bytes, the
output layer (logits + loss) forward + backward, and the optimizer step per parameter. The chip is
the profile's own (`--chip` compares against another catalog chip, e.g. a profiled one).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from baige_plan.cost.measured import compare_entry  # noqa: E402
from baige_plan.io.catalog import Catalog  # noqa: E402
from baige_plan.io.profiles import load_profile  # noqa: E402

COLS = ("forward", "backward", "layer_fwd_bwd", "activation_bytes", "logits_fwd_bwd", "optimizer_s_per_param")


def compare_file(path: Path, cat: Catalog, chip_id: str | None, execution: str) -> tuple[list[str], dict]:
    p = load_profile(path)
    model = cat.model(p.model.name)
    chip = cat.chip(chip_id or p.chip)
    rows = [f"{path.name}: {p.name} vs analytical on {chip.id} ({p.precision}, seq {p.seq_len}, {execution})",
            "  tp mb recompute  " + " ".join(f"{c[:14]:>14}" for c in COLS)]
    per: dict[str, list[float]] = {c: [] for c in COLS}
    for e in p.entries:
        r = compare_entry(model, chip, p, e, execution)
        for c in COLS:
            if c in r:
                per[c].append(r[c])
        rows.append(f"  {e.tp:2d} {e.micro_batch:2d} {e.recompute:9s}  "
                    + " ".join(f"{r[c]:14.2f}" if c in r else f"{'-':>14}" for c in COLS))
    med = {c: statistics.median(v) for c, v in per.items() if v}
    rows.append("  median         " + " ".join(f"{med[c]:14.2f}" if c in med else f"{'-':>14}" for c in COLS))
    return rows, med


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--chip")
    ap.add_argument("--execution", default="fused", choices=("fused", "eager"))
    a = ap.parse_args(argv)
    files = a.files or sorted(HERE.glob("*.yaml"))
    cat = Catalog.create()
    for f in files:
        rows, _ = compare_file(f, cat, a.chip, a.execution)
        print("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
