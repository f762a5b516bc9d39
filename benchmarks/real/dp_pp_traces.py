"""Exposed data-parallel reduction with pipelines (issue 18 item 2; docs/VALIDATION.md, "Exposed DP reduction with
pipelines"), from runs_h200x4_dp_pp.yaml and the profiled-step traces of PP2 x DP2 at 4 micro-batches
(raw_h200x4_dp_pp/traces_pp2_dp2_ga4.tgz, ranks 0 = stage 0 and 2 = stage 1). No torch.

  python benchmarks/real/dp_pp_traces.py

Prints (1) the step time against the micro-batch count, measured and predicted, as slope (per micro-batch) and
intercept (what a step costs once: bubble, exposed DP, optimizer); (2) stage 0's compute segments (kernels joined
across gaps < 1.5 ms): the last backward, under the DDP all-reduce, against the backward before it, alone."""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def segments(events: list[dict], gap_us: float = 1500.0) -> list[tuple[float, float, float]]:
    """(start ms, length ms, kernel-busy ms) of the non-NCCL kernels joined across gaps shorter than gap_us."""
    ks = sorted((e for e in events if e.get("cat") == "kernel" and "nccl" not in e["name"].lower()),
                key=lambda e: e["ts"])
    t0, out, cur = ks[0]["ts"], [], None
    for e in ks:
        s, end = e["ts"], e["ts"] + e["dur"]
        if cur and s - cur[1] < gap_us:
            cur[1], cur[2] = max(cur[1], end), cur[2] + e["dur"]
        else:
            if cur:
                out.append(cur)
            cur = [s, end, e["dur"]]
    out.append(cur)
    return [((a - t0) / 1e3, (b - a) / 1e3, c / 1e3) for a, b, c in out]


def main() -> int:
    from baige_plan.io.catalog import Catalog
    from baige_plan.reports.backtest import backtest_file

    path = HERE / "runs_h200x4_dp_pp.yaml"
    ga_of = {r["id"]: float(r["parallel"]["grad_accum"]) for r in yaml.safe_load(path.read_text())["rows"]}
    rows = backtest_file(path, Catalog.create())["rows"]
    print("1. step time against micro-batches (ms): measured / predicted")
    for tag in ("pp2_dp2", "pp4"):
        sel = [r for r in rows if f"_{tag}_mb1_" in r["id"]]
        ga = [ga_of[r["id"]] for r in sel]
        meas = [r["measured_step_time_s"] * 1e3 for r in sel]
        pred = [r["predicted_step_time_s"] * 1e3 for r in sel]
        (sm, im), (sp, ip) = _fit(ga, meas), _fit(ga, pred)
        print(f"   {tag}: micro-batches {[int(g) for g in ga]}  measured {[round(x, 1) for x in meas]}  "
              f"predicted {[round(x, 1) for x in pred]}")
        print(f"   {tag}: slope {sm:.1f} / {sp:.1f} ms per micro-batch, intercept {im:.1f} / {ip:.1f} ms")
    print("2. stage 0 compute segments, PP2 x DP2, 4 micro-batches (start, length, kernel-busy ms)")
    with tarfile.open(HERE / "raw_h200x4_dp_pp" / "traces_pp2_dp2_ga4.tgz") as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("_r0.json.gz"))
        doc = json.loads(gzip.decompress(tf.extractfile(member).read()))
    ev = doc["traceEvents"] if isinstance(doc, dict) else doc
    segs = segments(ev)
    for s in segs:
        print(f"   {s[0]:8.1f} {s[1]:6.1f} {s[2]:6.1f}")
    ar = [e for e in ev if e.get("cat") == "kernel" and "AllReduce" in e["name"]]
    print(f"   DDP all-reduce kernels {sum(e['dur'] for e in ar) / 1e3:.1f} ms; last backward (under them) "
          f"{segs[-2][2]:.1f} ms busy in {segs[-2][1]:.1f} ms, the backward before it (alone) {segs[-3][2]:.1f} ms "
          f"busy in {segs[-3][1]:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
