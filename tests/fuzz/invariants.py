"""The properties every `plan` result keeps, checked against independent computations (the 2026-11-28 audits found
five breaks of them; docs/VALIDATION.md "Invariant audits"): used by tests/test_plan_invariants.py on fixed cases and
by run_invariants.py (`make invariants`) on random ones.
  - no internal error (an exception, or an exit code outside 0-3);
  - the breakdown adds up to the step time (SPEC §3: every part of the step is stated); no part is negative;
  - the step time lies inside its band, and no two rows share step time and peak memory;
  - on one chip group, cp across nodes costs something (cp_comm > 0 when tp x cp exceeds a node);
  - `evaluate --plan FILE` gives the step time and breakdown the file was written with;
  - on one chip group the search is exact: pinning a knob never finds a faster plan than the unpinned search's
    fastest (the min over its --top; the first shown may be a simpler tie); on several groups the search is a
    heuristic (templates, then a climb), so a pin may beat it by at most HETERO_PIN_GAP (the 2026-11-29 audit found
    pins 2-22 % faster there, docs/VALIDATION.md "Pins against the heterogeneous search")."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from baige_plan.cli.app import app

HETERO_PIN_GAP = 0.01       # how much faster a pinned run may be than the heterogeneous search's fastest


def devices_per_node(cluster: str) -> int | None:
    """Devices per node of a one-group shorthand (None for several groups)."""
    return None if "+" in cluster else int(cluster.split(":")[1].split("x")[1])


def plan_violations(run: CliRunner, args: list[str], cluster: str, out: Path, top: int,
                    pins: Callable[[dict], list[list[str]]], must_plan: bool = False) -> list[str]:
    """The violations of one `plan ARGS` case (empty: none); `pins(first plan's strategy)`: the pinned runs compared
    with it (on several groups within HETERO_PIN_GAP); `must_plan`: the case is known to have a plan (no plan is then
    a violation too)."""
    res = run.invoke(app, args + ["--format", "json", "--top", str(top), "--out", str(out)])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        return [f"exception {res.exception!r}"]
    if res.exit_code not in (0, 1, 2, 3):
        return [f"exit {res.exit_code}"]
    if res.exit_code != 0:
        return [f"no plan: exit {res.exit_code}: {res.output[-200:]}"] if must_plan else []
    bad: list[str] = []
    plans = json.loads(res.stdout)["plans"]
    dpn = devices_per_node(cluster)
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
    fastest = min(p["step_time_s"] for p in plans)
    slack = HETERO_PIN_GAP if dpn is None else 1e-9
    for pin in pins(plans[0]["strategy"]):
        rp = run.invoke(app, args + pin + ["--format", "json", "--top", str(top)])
        if rp.exit_code not in (0, 1, 2):
            bad.append(f"pinned {' '.join(pin)}: exit {rp.exit_code}")   # no plan with it, or refused: 1 or 2
        elif rp.exit_code == 0:
            pinned = min(p["step_time_s"] for p in json.loads(rp.stdout)["plans"])
            if pinned < fastest * (1 - slack):
                bad.append(f"pinned {' '.join(pin)} finds {pinned} s < unpinned fastest {fastest} s")
    return bad
