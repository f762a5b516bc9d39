"""The pieces every plan document shares, homogeneous (io/plans.py) or over several groups
(io/hetero_plans.py): schema names, the embedded cluster and job, the input hash, and the estimate
block of a plan on several groups."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from baige_plan.cost.estimate import Estimate, engine_precision
from baige_plan.io.serialize import Flow, estimate_dict, rnd
from baige_plan.io.topologies import SCHEMA as TOPOLOGY_SCHEMA
from baige_plan.io.topologies import link_curve_extras
from baige_plan.specs.job import JobSpec
from baige_plan.specs.pipeline import PipelinesSpec
from baige_plan.specs.topology import ClusterSpec

PLAN_SCHEMA = "baige-plan/plan/v1"
PLANS_SCHEMA = "baige-plan/plans/v1"


def cluster_doc(cluster: ClusterSpec, chip_docs: dict[str, dict]) -> dict:
    """The topology-file form with each group's chip document embedded in full."""
    curve_groups, curve_bridges, curve_sources = link_curve_extras(cluster)
    groups = []
    for g in cluster.groups:
        d: dict[str, Any] = {"name": g.name, "chip": chip_docs[g.name], "nodes": g.nodes,
                             "devices_per_node": g.devices_per_node}
        if g.scaleup_GBps is not None:
            d["scaleup_GBps"] = g.scaleup_GBps
        if g.scaleout_Gbps is not None:
            d["scaleout_Gbps"] = g.scaleout_Gbps
        if g.nics_per_node is not None:   # NICs the node's devices share (cost/collectives.py _op_curves)
            d["nics_per_node"] = g.nics_per_node
        if g.fp32_matmul is not None:   # the group's fp32 matmul engine (issue 18, cost/estimate.py engine_precision)
            d["fp32_matmul"] = g.fp32_matmul
        if g.price_usd_per_device_hour is not None:   # the group's own price (issue 12, cost/money.py)
            d["price_usd_per_device_hour"] = g.price_usd_per_device_hour
        if g.profile is not None:   # measured per-layer profile, embedded so the plan re-evaluates as written
            from baige_plan.io.profiles import profile_to_dict
            d["profile"] = profile_to_dict(g.profile)
        d.update(curve_groups.get(g.name, {}))   # measured link curves, so the plan re-evaluates as written
        groups.append(d)
    doc: dict[str, Any] = {"schema": TOPOLOGY_SCHEMA, "name": cluster.name, "groups": groups}
    if cluster.bridges:
        doc["bridges"] = [{"groups": list(b.groups), "kind": b.kind, "GBps_per_node": b.GBps_per_node,
                           "latency_us": b.latency_us, **extra} for b, extra in zip(cluster.bridges, curve_bridges,
                                                                                   strict=True)]
    if curve_sources:
        doc["sources"] = dict(sorted(curve_sources.items()))
    return doc


def job_doc(job: JobSpec) -> dict:
    return {"global_batch": job.global_batch, "seq_len": job.seq_len, "precision": job.precision}


def _sha(doc: Any) -> str:
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def matmul_precisions(p: PipelinesSpec, cluster: ClusterSpec, job: JobSpec) -> dict[str, str]:
    """The precision each used group runs the job's matrix products in (cost/estimate.py engine_precision):
    e.g. an fp32 job on Megatron/FlagScale runs TF32 on A100 and IEEE fp32 on V100."""
    return {g: engine_precision(cluster.group(g), job.precision, p.runtime) for g in sorted(p.devices_by_group())}


def hetero_estimate_dict(e: Estimate, p: PipelinesSpec, standalone: dict[str, float],
                         idle: tuple[tuple[str, int, str], ...] = (), band: tuple[float, float] | None = None,
                         matmul: dict[str, str] | None = None) -> dict:
    """The contract estimate plus, for plans on several groups, `heterogeneous_efficiency` (SPEC §4),
    the per-group standalone throughputs it comes from, per-shape times and the bridge traffic. `band`: its
    step_time_band_s (io/bands.py band_for, from the class of the plan's strategy summary). `matmul`: each
    group's matmul precision (matmul_precisions)."""
    from baige_plan.search.hetero import heterogeneous_efficiency

    d = estimate_dict(e, band)
    if matmul:
        d["matmul_precision"] = dict(matmul)
    d["heterogeneous_efficiency"] = rnd(heterogeneous_efficiency(e.tokens_per_s, standalone))
    d["standalone_tokens_per_s"] = {g: rnd(v) for g, v in sorted(standalone.items())}
    d["devices_used"] = dict(sorted(p.devices_by_group().items()))
    if idle:
        d["idle_devices"] = [Flow(group=g, devices=n, why=why) for g, n, why in idle]
    d["shapes"] = [{"replicas": r, "micro_batches": m, "pipeline_time_s": rnd(t),
                    "stages": [Flow(layers=list(c.layers), time_per_micro_batch_s=rnd(c.time_s),
                                    memory_gib=rnd(c.memory_gib)) for c in costs]}
                   for r, m, costs, t in e.shapes]
    d["bridge_traffic"] = [Flow(groups=[a, b], traffic=kind, seconds_per_step=rnd(t)) for a, b, kind, t in e.bridge_traffic]
    return d
