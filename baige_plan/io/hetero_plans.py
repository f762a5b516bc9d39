"""Plan documents for heterogeneous clusters (several groups / chip families): the SPEC §4 plan
file with one `pipelines` entry per pipeline shape, stages on their own group and tp, per-shape
strategy knobs, the heterogeneous efficiency, and which traffic crosses which bridge."""

from __future__ import annotations

from typing import Any

from baige_plan import __version__
from baige_plan.cost.estimate import Estimate
from baige_plan.io.bands import band_for
from baige_plan.io.models import model_to_dict
from baige_plan.io.plan_doc import (
    PLAN_SCHEMA,
    PLANS_SCHEMA,
    _sha,
    cluster_doc,
    hetero_estimate_dict,
    job_doc,
    matmul_precisions,
)
from baige_plan.io.serialize import Flow, rnd, strategy_dict
from baige_plan.search.hetero import HeteroResult
from baige_plan.search.ranking import HETERO_ORDER_RULE, fastest_first_ties
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.pipeline import PipelinesSpec
from baige_plan.specs.topology import ClusterSpec

SOLVER = ("per pipeline template: an exact layer sweep (one shape) or OR-Tools CP-SAT over layer splits and batch "
          "shares (several shapes), + exact-model polish")


def hetero_pipelines_doc(p: PipelinesSpec, e: Estimate) -> list[dict]:
    out = []
    for sh, (_, _, costs, _) in zip(p.shapes, e.shapes, strict=True):
        d: dict[str, Any] = {"replicas": sh.replicas, "micro_batches": sh.micro_batches}
        if sh.knobs.items():
            d["strategy"] = Flow(sh.knobs.items())
        d["stages"] = [Flow(index=i, group=st.group, layers=list(st.layers), tp=st.tp,
                            time_per_micro_batch_s=rnd(c.time_s), memory_gib=rnd(c.memory_gib))
                       for i, (st, c) in enumerate(zip(sh.stages, costs, strict=True))]
        out.append(d)
    return out


def _search_doc(r: HeteroResult, file: bool, max_memory_frac: float) -> dict:
    return {"candidates": r.templates, "feasible": r.solves, "seconds": 0.0 if file else round(r.seconds, 3),
            "solver": SOLVER, "status": r.status, "gap": rnd(r.gap), "max_memory_frac": max_memory_frac,
            "runners_up": [{"template": lab, "strategy": Flow(strategy_dict(e.strategy, e.global_batch)),
                            "step_time_s": rnd(e.step_time_s), "mfu": rnd(e.mfu),
                            "peak_memory_gib": rnd(e.peak_memory_gib), "bottleneck": e.bottleneck}
                           for lab, e in r.runners_up]}


def hetero_plan_doc(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, r: HeteroResult,
                    chip_docs: dict[str, dict], max_memory_frac: float, slots: list) -> dict:
    mdoc, cdoc, jdoc = model_to_dict(model), cluster_doc(cluster, chip_docs), job_doc(job)
    e, p = r.estimate, r.pipelines
    return {
        "schema": PLAN_SCHEMA,
        "tool": Flow(name="baige-plan", version=__version__),
        "inputs": {"model": mdoc, "cluster": cdoc, "job": jdoc,
                   "sha256": {"model": _sha(mdoc), "cluster": _sha(cdoc), "job": _sha(jdoc)}},
        "strategy": Flow(strategy_dict(e.strategy, e.global_batch)),
        "pipelines": hetero_pipelines_doc(p, e),
        "estimate": hetero_estimate_dict(e, p, r.standalone, r.idle, band_for(e.step_time_s, model, job, e.strategy),
                                         matmul_precisions(p, cluster, job)),
        "placement": [Flow(x.as_dict()) for x in slots],
        "search": _search_doc(r, True, max_memory_frac),
    }


def _plan_entry(e: Estimate, p: PipelinesSpec, standalone: dict[str, float], idle, model: ModelSpec | None,
                job: JobSpec | None, cluster: ClusterSpec | None) -> dict:
    """One entry of `plans`: the estimate (with its band and matmul precisions where model, job and cluster are
    given) and its pipelines."""
    band = band_for(e.step_time_s, model, job, e.strategy) if model is not None and job is not None else None
    d = hetero_estimate_dict(e, p, standalone, idle, band,
                             matmul_precisions(p, cluster, job) if cluster is not None and job is not None else None)
    d["pipelines"] = hetero_pipelines_doc(p, e)
    return d


def hetero_plans_doc(r: HeteroResult, max_memory_frac: float, model: ModelSpec | None = None,
                     job: JobSpec | None = None, cluster: ClusterSpec | None = None) -> dict:
    d = _plan_entry(r.estimate, r.pipelines, r.standalone, r.idle, model, job, cluster)
    plans = [d]
    if not r.alternatives:
        return {"schema": PLANS_SCHEMA, "plans": plans, "search": _search_doc(r, False, max_memory_frac)}
    # `plan --top K` (K > 1): the next distinct plans the search estimated, fastest first, ties marked
    # (search/ranking.py fastest_first_ties); each plan names its pipeline template
    d["template"] = r.label
    for a in r.alternatives:
        x = _plan_entry(a.estimate, a.pipelines, r.standalone, a.idle, model, job, cluster)
        x["template"] = a.label
        plans.append(x)
    bands = [p.get("step_time_band_s") for p in plans]
    order = fastest_first_ties([p["step_time_s"] for p in plans], None if None in bands else bands)
    for p, o in zip(plans, order, strict=True):
        p["tie"] = o.tie
        if o.tie:
            p["tie_group"] = o.tie_group
    return {"schema": PLANS_SCHEMA, "plans": plans, "search": _search_doc(r, False, max_memory_frac),
            "ordering": HETERO_ORDER_RULE}
