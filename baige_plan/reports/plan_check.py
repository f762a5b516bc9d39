"""Validating a plan file as a whole: the one check `validate`, `check` and `diff` share.

`read_plan` checks the top-level keys and re-estimating (`estimate_plan_full`) checks what the cost model
reads (inputs, strategy, pipelines). The stored sections are checked here too, because `check` compares
against the baseline's *stored* estimate and `diff` shows the stored documents as written: the estimate
(SPEC §3 keys, nothing unknown, `fits` a boolean, every number finite and non-negative, step time
positive), `search` (known keys, `max_memory_frac` in (0, 1]), `tool` and `placement` (known keys,
non-negative integers). Every error is an InputError naming the file, the field and the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from baige_plan.cost.estimate import Estimate
from baige_plan.errors import InputError
from baige_plan.io.plans import _STRAT_KEYS, _STRAT_OPT, _check_strategy_doc, estimate_plan_full, read_plan
from baige_plan.io.serialize import ESTIMATE_SCHEMA
from baige_plan.io.yamlio import check_keys, kind_of

_EST_REQUIRED = {"schema", "strategy", "fits", "step_time_s", "tokens_per_s", "tokens_per_s_per_device",
                 "model_tflops_per_device", "mfu", "hfu", "peak_memory_gib", "breakdown_s", "memory_gib"}
# every key estimate_dict / hetero_estimate_dict may write beyond the SPEC §3 ones: a new one goes here too
# (tests/test_check_inputs.py validates freshly written plans and fails otherwise)
_EST_OPTIONAL = {"memory_capacity_gib", "max_memory_frac", "memory_margin_gib", "reserved_peak_gib", "micro_batches", "devices", "bottleneck", "stages", "conventions",
                 # plans on several groups (io/hetero_plans.py)
                 "heterogeneous_efficiency", "standalone_tokens_per_s", "devices_used", "idle_devices", "shapes",
                 "bridge_traffic",
                 # each used group's matmul precision (cost/estimate.py engine_precision, issue 18)
                 "matmul_precision",
                 # which parts are measured (--profile, specs/profile.py) and which analytical
                 "sources",
                 # time and money to train --tokens (cost/money.py, issue 12)
                 "training",
                 # SPEC §3: the range the step time is expected in (cost/bands.py, io/bands.py)
                 "step_time_band_s"}
_BREAKDOWN = {"compute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "pp_bubble", "dp_comm_exposed", "optimizer"}
# what the host adds where it sets the pace (cost/estimate.py host_breakdown): written only when not zero
_BREAKDOWN_OPTIONAL = {"host"}
_MEMORY = {"weights", "grads", "optimizer", "activations", "other"}
_SEARCH = {"candidates", "feasible", "seconds", "solver", "status", "gap", "evaluated", "max_memory_frac",
           "runners_up", "batch_tolerance",
           # replan (reports/replan_doc.py new_plan_doc): the physical node behind each node index, and the spares
           "node_map", "spare_nodes"}
_RUNNER = {"strategy", "step_time_s", "mfu", "peak_memory_gib", "bottleneck"}
_PLACEMENT = {"rank", "group", "node", "device", "pipeline", "replica", "stage", "tp_rank", "cp_rank"}


def _numbers(x: Any, src: str, where: str) -> None:
    """Every number inside `x` is finite and >= 0 (booleans are not numbers here)."""
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return
    if isinstance(x, (int, float)):
        if not math.isfinite(x):
            raise InputError(src, where, f"must be a finite number, got {x}")
        if x < 0:
            raise InputError(src, where, f"must be >= 0, got {x}")
        return
    if isinstance(x, dict):
        for k, v in x.items():
            _numbers(v, src, f"{where}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            _numbers(v, src, f"{where}[{i}]")
    else:
        raise InputError(src, where, f"unexpected value of type {type(x).__name__}")


def _check_estimate(est: Any, src: str) -> None:
    check_keys(est, src, "estimate", _EST_REQUIRED, _EST_OPTIONAL)
    if est["schema"] != ESTIMATE_SCHEMA:
        raise InputError(src, "estimate.schema", f"expected {ESTIMATE_SCHEMA!r}, got {est['schema']!r}")
    check_keys(est["strategy"], src, "estimate.strategy", _STRAT_KEYS, _STRAT_OPT)
    if not isinstance(est["fits"], bool):
        raise InputError(src, "estimate.fits", f"must be true or false, got {est['fits']!r}")
    check_keys(est["breakdown_s"], src, "estimate.breakdown_s", _BREAKDOWN, _BREAKDOWN_OPTIONAL)
    check_keys(est["memory_gib"], src, "estimate.memory_gib", _MEMORY)
    for k in sorted(_EST_REQUIRED - {"schema", "strategy", "fits", "breakdown_s", "memory_gib"}):
        if isinstance(est[k], bool) or not isinstance(est[k], (int, float)):
            raise InputError(src, f"estimate.{k}", f"must be a number, got {est[k]!r}")
    # memory_margin_gib is signed (negative: over the limit by that much); every other number is >= 0
    margin = est.get("memory_margin_gib", 0.0)
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin):
        raise InputError(src, "estimate.memory_margin_gib", f"must be a finite number, got {margin!r}")
    _numbers({k: v for k, v in est.items() if k != "memory_margin_gib"}, src, "estimate")
    if est["step_time_s"] <= 0:
        raise InputError(src, "estimate.step_time_s", f"must be > 0, got {est['step_time_s']}")


def _check_runners_up(runners: Any, src: str) -> None:
    """search.runners_up (what `explain` shows): a list of {strategy, step_time_s, mfu, peak_memory_gib,
    bottleneck[, template]}, the strategy as in `strategy`, step time > 0, the numbers finite and >= 0
    (_numbers on the whole search), bottleneck and template strings."""
    if runners is None:
        return
    if not isinstance(runners, list):
        raise InputError(src, "search.runners_up", f"must be a list of runners-up, got {kind_of(runners)}")
    for i, r in enumerate(runners):
        w = f"search.runners_up[{i}]"
        check_keys(r, src, w, _RUNNER, {"template"})
        check_keys(r["strategy"], src, f"{w}.strategy", _STRAT_KEYS, _STRAT_OPT)
        _check_strategy_doc(r["strategy"], src, f"{w}.strategy")
        for k in ("step_time_s", "mfu", "peak_memory_gib"):
            v = r[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise InputError(src, f"{w}.{k}", f"must be a finite number >= 0, got {kind_of(v)}")
        if r["step_time_s"] <= 0:
            raise InputError(src, f"{w}.step_time_s", f"must be > 0, got {r['step_time_s']}")
        for k in ("bottleneck", "template"):
            if k in r and not isinstance(r[k], str):
                raise InputError(src, f"{w}.{k}", f"expected a string, got {kind_of(r[k])}")


def _check_stored(doc: dict, src: str) -> None:
    check_keys(doc["tool"], src, "tool", {"name", "version"})
    _check_estimate(doc["estimate"], src)
    search = check_keys(doc["search"], src, "search", set(), _SEARCH)
    _numbers(search, src, "search")
    frac = search.get("max_memory_frac", 1.0)
    if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0 < frac <= 1:
        raise InputError(src, "search.max_memory_frac", f"must be a number in (0, 1], got {frac!r}")
    for k in ("solver", "status"):
        if search.get(k) is not None and not isinstance(search[k], str):
            raise InputError(src, f"search.{k}", f"expected a string, got {kind_of(search[k])}")
    _check_runners_up(search.get("runners_up"), src)
    if not isinstance(doc["placement"], list):
        raise InputError(src, "placement", f"must be a list, got {type(doc['placement']).__name__}")
    for i, p in enumerate(doc["placement"]):
        check_keys(p, src, f"placement[{i}]", _PLACEMENT)
        for k in sorted(_PLACEMENT - {"group"}):
            if isinstance(p[k], bool) or not isinstance(p[k], int) or p[k] < 0:
                raise InputError(src, f"placement[{i}].{k}", f"must be an integer >= 0, got {p[k]!r}")
    _numbers(doc["pipelines"], src, "pipelines")


def validate_plan_file(path: str | Path, doc: Any = None, step: Callable[[str], None] | None = None
                       ) -> tuple[dict, Estimate]:
    """(the plan document, its re-estimate as written) after every check `baige-plan validate` makes;
    InputError (file, field, reason) on the first problem. `doc`: the document already parsed from `path`
    (read_document), so a large plan is parsed once; None reads the file. `step(text)`, when given, is told
    each stage (for a progress line: a plan of 16k devices takes seconds)."""
    src = str(path)
    tell = step or (lambda text: None)
    if doc is None:
        tell(f"{src}: reading")
    doc = read_plan(path, doc)
    tell(f"{src}: checking the stored estimate, search and placement")
    _check_stored(doc, src)
    _check_cluster_size(doc, src)
    tell(f"{src}: re-estimating the plan as written")
    e, *_ = estimate_plan_full(doc, src)
    _check_placement(doc, src, e)
    return doc, e


def _check_cluster_size(doc: dict, src: str) -> None:
    """A plan claiming 10^6 nodes is refused before anything is built from it (limits.py)."""
    from baige_plan.limits import MAX_DEVICES, MAX_DEVICES_PER_NODE
    inputs = doc.get("inputs")
    cluster = inputs.get("cluster") if isinstance(inputs, dict) else None
    groups = cluster.get("groups") if isinstance(cluster, dict) else None
    if not isinstance(groups, list):
        return
    total = 0
    for i, g in enumerate(groups):
        if not isinstance(g, dict):
            return
        n, d = g.get("nodes"), g.get("devices_per_node")
        if isinstance(d, int) and not isinstance(d, bool) and d > MAX_DEVICES_PER_NODE:
            raise InputError(src, f"inputs.cluster.groups[{i}].devices_per_node", f"{d:,} exceeds the limit of "
                             f"{MAX_DEVICES_PER_NODE:,} devices in one node")
        if isinstance(n, int) and isinstance(d, int) and not isinstance(n, bool) and not isinstance(d, bool):
            total += max(n, 0) * max(d, 0)
            if total > MAX_DEVICES:
                raise InputError(src, f"inputs.cluster.groups[{i}].nodes", f"the cluster has more than the limit "
                                 f"of {MAX_DEVICES:,} devices")


def _check_placement(doc: dict, src: str, e: Estimate) -> None:
    """SPEC §4: every rank exactly once -- ranks 0..N-1, N the devices the plan runs on, no device twice."""
    rows = doc["placement"]
    used = e.devices - sum(int(n) for n in (getattr(e, "idle_devices", None) or {}).values()) \
        if isinstance(getattr(e, "idle_devices", None), dict) else e.devices
    if not rows:
        raise InputError(src, "placement", f"is empty: the plan runs {used:,} ranks, each needs its device")
    if len(rows) != used:
        raise InputError(src, "placement", f"has {len(rows):,} rows, the plan runs {used:,} ranks (one row each)")
    ranks, devs = set(), set()
    for i, p in enumerate(rows):
        if p["rank"] in ranks:
            raise InputError(src, f"placement[{i}].rank", f"rank {p['rank']} is placed twice")
        if p["rank"] >= len(rows):
            raise InputError(src, f"placement[{i}].rank", f"{p['rank']} is out of range: ranks are 0-{len(rows) - 1}")
        ranks.add(p["rank"])
        if not isinstance(p["group"], str):
            raise InputError(src, f"placement[{i}].group", f"expected a group name, got {kind_of(p['group'])}")
        key = (p["group"], p["node"], p["device"])
        if key in devs:
            raise InputError(src, f"placement[{i}]", f"device {p['group']}:{p['node']}:{p['device']} hosts two ranks")
        devs.add(key)
