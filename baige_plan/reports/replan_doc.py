"""`baige-plan replan` documents: read the old plan (structure, placement, embedded chips), write the new
plan (the SPEC §4 plan file, as `plan --out` writes it) and the re-plan report (schema
baige-plan/replan/v1: stdout JSON/YAML, and the table's source).

The plan file keeps the plan-file contract unchanged (its top-level keys are fixed, so the report is not
stored in it): node indices are the new cluster's, and the report's `node_map` names the physical node
(old name, GROUP:INDEX) behind each index.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from baige_plan.cost.estimate import Estimate, estimate
from baige_plan.errors import InputError, SpecError
from baige_plan.io.serialize import Flow, rnd, strategy_dict
from baige_plan.search.placement import Slot
from baige_plan.search.replan import change_pct
from baige_plan.search.replan_placement import node_range, nodes_text
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.pipeline import PipelinesSpec
from baige_plan.specs.strategy import StrategySpec
from baige_plan.specs.topology import ClusterSpec

REPLAN_SCHEMA = "baige-plan/replan/v1"


@dataclass
class OldPlan:
    doc: dict
    src: str
    model: ModelSpec
    cluster: ClusterSpec
    job: JobSpec
    strategy: StrategySpec | None
    pipelines: PipelinesSpec | None
    estimate: Estimate
    frac: float
    slots: list[Slot]
    chip_docs: dict[str, dict]


def load_old(path: str | Path, cat=None) -> OldPlan:
    """The plan file as `validate` checks it, re-estimated as written, with its placement."""
    from baige_plan.io.plans import plan_inputs, plan_strategy, used_part
    from baige_plan.reports.plan_check import validate_plan_file

    src = str(path)
    doc, _ = validate_plan_file(path)
    model, cluster, job = plan_inputs(doc, src)
    s, job2, pspec = plan_strategy(doc, src, model, cluster, job)
    frac = float((doc.get("search") or {}).get("max_memory_frac", 1.0))
    try:
        if s is not None and not cluster.is_heterogeneous:
            e = estimate(model, used_part(cluster, s), job2, s, frac)   # a plan may leave nodes idle
        else:
            from baige_plan.cost.hetero import estimate_pipelines
            e = estimate_pipelines(model, cluster, job2, pspec, frac)
            s = None
    except SpecError as ex:
        raise InputError(src, ex.field, ex.reason) from None
    slots = _slots(doc["placement"], src, cluster, s, pspec)
    chip_docs = {}
    for g, gd in zip(cluster.groups, doc["inputs"]["cluster"]["groups"], strict=True):
        if isinstance(gd.get("chip"), dict):
            chip_docs[g.name] = gd["chip"]
    if len(chip_docs) < len(cluster.groups):
        from baige_plan.io.catalog import Catalog
        from baige_plan.io.plans import chip_docs_from_catalog
        rest = ClusterSpec(name=cluster.name, groups=tuple(g for g in cluster.groups if g.name not in chip_docs))
        chip_docs.update(chip_docs_from_catalog(cat or Catalog.create(), rest))
    return OldPlan(doc, src, model, cluster, job2, s, pspec, e, frac, slots, chip_docs)


def _slots(rows: list, src: str, cluster: ClusterSpec, s: StrategySpec | None, p: PipelinesSpec | None) -> list[Slot]:
    """The old placement, checked against the plan's cluster and pipelines (every rank on a real device,
    its pipeline, stage, replica, tp and cp rank in range, no device twice)."""
    if s is not None:
        shapes = [(s.dp, s.cp, [s.tp] * s.pp)]
    else:
        assert p is not None
        shapes = [(sh.replicas, p.knob(sh, "cp"), [st.tp for st in sh.stages]) for sh in p.shapes]
    groups = {g.name: g for g in cluster.groups}
    out, seen = [], set()
    for i, r in enumerate(rows):
        where = f"placement[{i}]"
        g = groups.get(r["group"])
        if g is None:
            raise InputError(src, f"{where}.group", f"unknown group {r['group']!r} (groups: {', '.join(groups)})")
        if r["node"] >= g.nodes or r["device"] >= g.devices_per_node:
            raise InputError(src, where, f"node {r['node']} device {r['device']} is not in group {g.name!r} "
                             f"({g.nodes} nodes x {g.devices_per_node} devices)")
        if r["pipeline"] >= len(shapes):
            raise InputError(src, f"{where}.pipeline", f"{r['pipeline']} is out of range: the plan has "
                             f"{len(shapes)} pipeline shape(s)")
        reps, cp, tps = shapes[r["pipeline"]]
        if r["stage"] >= len(tps) or r["replica"] >= reps or r["tp_rank"] >= tps[r["stage"]] or r["cp_rank"] >= cp:
            raise InputError(src, where, "stage, replica, tp_rank or cp_rank is out of range for its pipeline shape")
        key = (g.name, r["node"], r["device"])
        if key in seen:
            raise InputError(src, where, f"device {g.name}:{r['node']}:{r['device']} hosts two ranks")
        seen.add(key)
        out.append(Slot(rank=r["rank"], group=g.name, node=r["node"], device=r["device"], pipeline=r["pipeline"],
                        replica=r["replica"], stage=r["stage"], tp_rank=r["tp_rank"], cp_rank=r["cp_rank"]))
    return out


def new_plan_doc(model: ModelSpec, job: JobSpec, c, res, chip_docs: dict[str, dict], frac: float) -> dict:
    """The plan file of candidate `c` (search/replan_candidates.py Candidate) as `plan --out` writes it, with
    `search.node_map`: the physical node (the old plan's name) behind each node index of its placement, per group,
    and `search.spare_nodes`, so the file alone says where to launch it (its nodes are numbered 0..n-1)."""
    doc = _new_plan_doc(model, job, c, res, chip_docs, frac)
    if c.node_map:
        doc["search"]["node_map"] = {g: list(names) for g, names in sorted(c.node_map.items())}
        doc["search"]["spare_nodes"] = list(c.spare)
    return doc


def _new_plan_doc(model: ModelSpec, job: JobSpec, c, res, chip_docs: dict[str, dict], frac: float) -> dict:
    from baige_plan.io.plans import plan_doc
    if c.strategy is not None:
        r = c.result
        info = SimpleNamespace(candidates=res.considered, feasible=len(res.candidates), seconds=0.0,
                               solver=f"baige-plan replan ({c.family}: {c.label})",
                               status=getattr(r, "status", "FEASIBLE") if c.family == "fresh" else "FEASIBLE",
                               gap=0.0, evaluated=res.considered)
        return plan_doc(model, c.cluster, job, c.estimate, info, chip_docs, frac, [], c.slots)
    from baige_plan.io.hetero_plans import hetero_plan_doc
    from baige_plan.search.hetero import HeteroResult
    r = c.result
    if isinstance(r, HeteroResult):
        standalone = r.standalone
    else:
        standalone = {g.name: res.standalone.get(g.name, 0.0) for g in c.cluster.groups}
    hr = HeteroResult(c.pipelines, c.estimate, getattr(r, "status", "FEASIBLE"), 0.0, res.considered,
                      len(res.candidates), 0.0, standalone, (), getattr(r, "idle", ()))
    return hetero_plan_doc(model, c.cluster, job, hr, chip_docs, frac, c.slots)


def _gb(x: float) -> float:
    return rnd(x / 1e9)


def candidate_doc(c, old_tokens: float, with_map: bool = True) -> dict:
    e = c.estimate
    d: dict[str, Any] = {
        "plan": c.label, "family": c.family,
        "tokens_per_s": rnd(e.tokens_per_s), "change": rnd(change_pct(e.tokens_per_s, old_tokens)),
        "step_time_s": rnd(e.step_time_s), "mfu": rnd(e.mfu), "peak_memory_gib": rnd(e.peak_memory_gib),
        "devices": e.devices,
        "devices_by_group": ({g.name: e.devices for g in c.cluster.groups} if c.strategy is not None
                             else dict(sorted(c.pipelines.devices_by_group().items()))),
        "strategy": Flow(strategy_dict(e.strategy, e.global_batch)),
        "ranks": {"total": c.ranks, "kept": c.ranks_kept, "moved": c.ranks - c.ranks_kept},
        "bytes_moved_gb": {"parameters": _gb(c.params_bytes), "optimizer": _gb(c.optimizer_bytes),
                           "total": _gb(c.bytes_moved)},
    }
    if with_map:
        d["node_map"] = {g: [node_range(x) for x in _runs(ns)] for g, ns in c.node_map.items()}
        d["spare_nodes"] = [node_range(x) for x in _runs(c.spare)]
        d["moves"] = [Flow(role=m.role, nodes=nodes_text(m.nodes), parameters_gb=_gb(m.params_bytes),
                           optimizer_gb=_gb(m.optimizer_bytes)) for m in c.moves]
    return d


def _runs(names: list[str]) -> list[list[str]]:
    """Consecutive physical nodes of one group, in the order given: [[gpu:0, gpu:1, ...], [gpu:9], ...]."""
    out: list[list[str]] = []
    for n in names:
        grp, _, i = n.rpartition(":")
        if out:
            g0, _, i0 = out[-1][-1].rpartition(":")
            if g0 == grp and int(i) == int(i0) + 1:
                out[-1].append(n)
                continue
        out.append([n])
    return out


def _distinct(cands: list) -> list[Flow]:
    """The settled candidates, best first, one per (tokens/s, bytes) pair (e.g. recompute none and selective
    of one layout at the same speed are listed once)."""
    out, seen = [], set()
    for c in cands:
        key = (rnd(c.tokens_per_s), _gb(c.bytes_moved))
        if key not in seen:
            seen.add(key)
            out.append(Flow(plan=c.label, family=c.family, tokens_per_s=key[0], bytes_moved_gb=key[1]))
    return out


def report_doc(res, old_tokens: float, out: Path | None) -> dict:
    """The re-plan report (schema baige-plan/replan/v1)."""
    w = res.world
    d: dict[str, Any] = {
        "schema": REPLAN_SCHEMA,
        "changes": {"dropped_nodes": [node_range(x) for x in _runs(w.dropped)],
                    "added_nodes": [node_range(x) for x in _runs(w.added)],
                    "dropped_bridges": list(w.dropped_bridges)},
        "old": {"tokens_per_s": rnd(res.old.tokens_per_s), "step_time_s": rnd(res.old.step_time_s),
                "devices": res.old_devices, "strategy": Flow(strategy_dict(res.old.strategy, res.old.global_batch))},
        "new": candidate_doc(res.chosen, old_tokens),
        "fresh": (dict(candidate_doc(res.fresh, old_tokens, with_map=False),
                       placement="the surviving nodes in order, as `plan` on the new cluster places them")
                  if res.fresh is not None else None),
        "choice": res.reason,
        "candidates": _distinct(res.candidates)[:10],
        "considered": res.considered,
        "seconds": round(res.seconds, 3),
    }
    if out is not None:
        d["out"] = str(out)
    return d

