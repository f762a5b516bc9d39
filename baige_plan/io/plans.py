"""Plan files (SPEC §4, schema baige-plan/plan/v1): build, write (YAML or JSON by extension, atomic),
read, and re-estimate as written.

Determinism: keys in a fixed order, floats of the estimate rounded to 6 significant digits
(`serialize.rnd`), inputs copied as read, and no wall-clock time in the file (`search.seconds` is
0.0 there; the measured time goes to stdout JSON and stderr only) -- so the same inputs give
byte-identical files.

Re-estimating (`evaluate_plan_file`): the stored `estimate.strategy` is the plan as written by the
tool. If the user edited `strategy` (tp, pp, dp, micro-batch, ...) but not `pipelines`, the
strategy wins; otherwise `pipelines` are authoritative for tp, pp, dp (replicas), the layer split
and the micro-batches per replica, and `strategy` for the rest (cp, ep, etp, zero, micro_batch,
vpp, recompute, sequence_parallel, attention). Uneven layer ranges map to the Megatron rule that builds
them with the plan's vpp (specs/strategy.py split_fields: the plan's account_for_embedding/loss flags, first/last
stage layers, or the accounting flags); other splits, and several pipeline shapes, go to the heterogeneous cost
model.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from baige_plan import __version__, runtimes
from baige_plan.cost.estimate import Estimate, estimate
from baige_plan.errors import InputError, SpecError
from baige_plan.io.models import model_from_dict, model_to_dict
from baige_plan.io.serialize import Flow, estimate_dict, rnd, strategy_dict, to_yaml
from baige_plan.io.topologies import SCHEMA as TOPOLOGY_SCHEMA
from baige_plan.io.topologies import cluster_from_dict
from baige_plan.io.yamlio import check_keys, expect_schema, read_document
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import StrategySpec, split_fields, stage_layers
from baige_plan.specs.topology import ClusterSpec

PLAN_SCHEMA = "baige-plan/plan/v1"
PLANS_SCHEMA = "baige-plan/plans/v1"
TOP_KEYS = ("schema", "tool", "inputs", "strategy", "pipelines", "estimate", "placement", "search")


# -- building ---------------------------------------------------------------------------------
def cluster_doc(cluster: ClusterSpec, chip_docs: dict[str, dict]) -> dict:
    """The topology-file form with each group's chip document embedded in full."""
    from baige_plan.io.topologies import link_curve_extras

    curve_groups, curve_bridges, curve_sources = link_curve_extras(cluster)
    groups = []
    for g in cluster.groups:
        d: dict[str, Any] = {"name": g.name, "chip": chip_docs[g.name], "nodes": g.nodes,
                             "devices_per_node": g.devices_per_node}
        if g.scaleup_GBps is not None:
            d["scaleup_GBps"] = g.scaleup_GBps
        if g.scaleout_Gbps is not None:
            d["scaleout_Gbps"] = g.scaleout_Gbps
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


def chip_docs_from_catalog(cat, cluster: ClusterSpec) -> dict[str, dict]:
    """Re-read each group's chip file as the catalog resolved it (raw YAML, for embedding)."""
    out = {}
    for g in cluster.groups:
        ref = g.chip_ref or g.chip.id
        p = Path(ref)
        path = p if p.suffix in (".yaml", ".yml", ".json") and p.is_file() else cat.find("chips", ref)
        if path is None:
            raise InputError("CLUSTER", f"{g.name}.chip", f"cannot find the chip file of {ref!r} to embed in the plan")
        out[g.name] = read_document(path)
    return out


def job_doc(job: JobSpec) -> dict:
    return {"global_batch": job.global_batch, "seq_len": job.seq_len, "precision": job.precision}


def _sha(doc: Any) -> str:
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def pipelines_doc(e: Estimate, group: str) -> list[dict]:
    s = e.strategy
    stages = [Flow(index=st.index, group=group, layers=list(st.layers), tp=s.tp,
                   time_per_micro_batch_s=rnd(st.time_s), memory_gib=rnd(st.memory_gib)) for st in e.stages]
    return [{"replicas": s.dp, "micro_batches": e.micro_batches, "stages": stages}]


def search_doc(result, *, file: bool, runners_up: list[Estimate], max_memory_frac: float) -> dict:
    d = {"candidates": result.candidates, "feasible": result.feasible,
         "seconds": 0.0 if file else round(result.seconds, 3), "solver": result.solver,
         "status": result.status, "gap": rnd(result.gap), "evaluated": result.evaluated,
         "max_memory_frac": max_memory_frac}
    if runners_up:
        d["runners_up"] = [{"strategy": Flow(strategy_dict(r.strategy, r.global_batch)),
                            "step_time_s": rnd(r.step_time_s), "mfu": rnd(r.mfu),
                            "peak_memory_gib": rnd(r.peak_memory_gib), "bottleneck": r.bottleneck}
                           for r in runners_up]
    return d


def plan_doc(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, e: Estimate, result, chip_docs: dict[str, dict],
             max_memory_frac: float, runners_up: list[Estimate], slots: list) -> dict:
    """The SPEC §4 plan document for one estimate of a homogeneous cluster; `slots` is the finished
    placement (search/placement.py), every rank once."""
    g = cluster.groups[0]
    s = e.strategy
    mdoc, cdoc, jdoc = model_to_dict(model), cluster_doc(cluster, chip_docs), job_doc(job)
    place = [Flow(x.as_dict()) for x in slots]
    return {
        "schema": PLAN_SCHEMA,
        "tool": Flow(name="baige-plan", version=__version__),
        "inputs": {"model": mdoc, "cluster": cdoc, "job": jdoc,
                   "sha256": {"model": _sha(mdoc), "cluster": _sha(cdoc), "job": _sha(jdoc)}},
        "strategy": Flow(strategy_dict(s, e.global_batch)),
        "pipelines": pipelines_doc(e, g.name),
        "estimate": estimate_dict(e),
        "placement": place,
        "search": search_doc(result, file=True, runners_up=runners_up, max_memory_frac=max_memory_frac),
    }


def plans_doc(result, group: str, max_memory_frac: float) -> dict:
    """`plan --format json|yaml` stdout: {"schema", "plans": [estimate + pipelines, ...], "search"}."""
    plans = []
    for e in result.plans:
        d = estimate_dict(e)
        d["pipelines"] = pipelines_doc(e, group)
        plans.append(d)
    return {"schema": PLANS_SCHEMA, "plans": plans,
            "search": search_doc(result, file=False, runners_up=[], max_memory_frac=max_memory_frac)}


# -- text -------------------------------------------------------------------------------------
def dumps(doc: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n"
    return to_yaml(doc, width=200)


def format_for(path: Path) -> str:
    return "json" if Path(path).suffix.lower() == ".json" else "yaml"


# -- reading ----------------------------------------------------------------------------------
def read_plan(path: str | Path) -> dict:
    src = str(path)
    doc = expect_schema(read_document(path), src, PLAN_SCHEMA)
    check_keys(doc, src, "", set(TOP_KEYS), set())
    return doc


def plan_inputs(doc: dict, src: str) -> tuple[ModelSpec, ClusterSpec, JobSpec]:
    inputs = check_keys(doc["inputs"], src, "inputs", {"model", "cluster", "job"}, {"sha256"})
    model = model_from_dict(inputs["model"], src)

    def resolve(ref: str, source: str, field: str):
        from baige_plan.io.catalog import Catalog  # a hand-edited plan may name a catalog chip
        return Catalog.create().chip(ref, source, field)

    cluster = cluster_from_dict(inputs["cluster"], src, resolve)
    j = check_keys(inputs["job"], src, "inputs.job", {"global_batch", "seq_len"}, {"precision"})
    try:
        job = JobSpec(global_batch=j["global_batch"], seq_len=j["seq_len"], precision=j.get("precision", "bf16"))
    except SpecError as e:
        raise InputError(src, f"inputs.job.{e.field}", e.reason) from None
    return model, cluster, job


_STRAT_KEYS = {"tp", "pp", "dp", "cp", "ep", "zero", "micro_batch", "global_batch", "vpp", "recompute",
               "sequence_parallel"}
_STRAT_OPT = {"etp", "attention", "first_stage_layers", "last_stage_layers", "execution", "runtime",
              "account_for_embedding", "account_for_loss", "grad_reduce_bf16"}
_KNOBS = {"micro_batch", "cp", "ep", "etp", "zero", "vpp", "recompute", "sequence_parallel"}


def _strategy(d: dict, **over) -> StrategySpec:
    kw = {k: d[k] for k in ("tp", "pp", "dp", "cp", "ep", "zero", "micro_batch", "vpp", "recompute",
                            "sequence_parallel")}
    kw.update(runtimes.knobs(d.get("runtime") or runtimes.DEFAULT))
    for k in _STRAT_OPT:
        if d.get(k) is not None:
            kw[k] = d[k]
    kw.update(over)
    return StrategySpec(**kw)


def _shape_summary(pipes: list) -> list:
    return [(p.get("replicas"), p.get("micro_batches"),
             [(s.get("group"), list(s.get("layers", [])), s.get("tp")) for s in p.get("stages", [])]) for p in pipes]


def _expected_pipes(sd: dict, model: ModelSpec, group: str) -> list:
    s = _strategy(sd)
    counts, f, stages = stage_layers(s, model.layers), 0, []
    for n in counts:
        stages.append((group, [f, f + n], s.tp))
        f += n
    return [(s.dp, sd["global_batch"] // (s.dp * s.micro_batch), stages)]


def plan_strategy(doc: dict, src: str, model: ModelSpec, cluster: ClusterSpec, job: JobSpec
                  ) -> tuple[StrategySpec | None, JobSpec, Any]:
    """(homogeneous strategy or None, job, PipelinesSpec for the heterogeneous model or None)."""
    sd = check_keys(doc["strategy"], src, "strategy", _STRAT_KEYS, _STRAT_OPT)
    orig = doc["estimate"].get("strategy", sd) if isinstance(doc["estimate"], dict) else sd
    pipes = doc["pipelines"]
    if not isinstance(pipes, list) or not pipes:
        raise InputError(src, "pipelines", "must be a non-empty list of pipeline shapes")
    for i, p in enumerate(pipes):
        check_keys(p, src, f"pipelines[{i}]", {"replicas", "micro_batches", "stages"}, {"strategy"})
        if p.get("strategy") is not None:
            check_keys(p["strategy"], src, f"pipelines[{i}].strategy", set(), _KNOBS)
        if not isinstance(p["stages"], list) or not p["stages"]:
            raise InputError(src, f"pipelines[{i}].stages", "must be a non-empty list")
        for j, st in enumerate(p["stages"]):
            check_keys(st, src, f"pipelines[{i}].stages[{j}]", {"group", "layers", "tp"},
                       {"index", "time_per_micro_batch_s", "memory_gib"})
    g = cluster.groups[0].name
    try:
        strat_edited = any(sd.get(k) != orig.get(k) for k in _STRAT_KEYS | _STRAT_OPT)
        if strat_edited and not cluster.is_heterogeneous and len(pipes) == 1 \
                and _shape_summary(pipes) == _expected_pipes(orig, model, g):
            s = _strategy(sd)
            return s, JobSpec(sd["global_batch"], job.seq_len, job.precision), None
        return _from_pipelines(sd, pipes, src, model, cluster, job)
    except SpecError as e:
        raise InputError(src, f"strategy.{e.field}", e.reason) from None
    except (KeyError, TypeError) as e:
        raise InputError(src, "strategy", f"malformed value: {e}") from None


def _from_pipelines(sd: dict, pipes: list, src: str, model: ModelSpec, cluster: ClusterSpec, job: JobSpec):
    mb = sd["micro_batch"]
    gb = sum(p["replicas"] * p["micro_batches"] * (p.get("strategy") or {}).get("micro_batch", mb) for p in pipes)
    job2 = JobSpec(gb, job.seq_len, job.precision)
    st0 = pipes[0]["stages"]
    homogeneous = (len(pipes) == 1 and not cluster.is_heterogeneous and not pipes[0].get("strategy")
                   and len({s["tp"] for s in st0}) == 1 and all(s["group"] == cluster.groups[0].name for s in st0))
    if homogeneous:
        counts = [s["layers"][1] - s["layers"][0] for s in st0]
        pp, tp, dp = len(st0), st0[0]["tp"], pipes[0]["replicas"]
        starts = [s["layers"][0] for s in st0]
        if starts != [sum(counts[:i]) for i in range(pp)] or sum(counts) != model.layers:
            raise InputError(src, "pipelines[0].stages", f"layer ranges must cover [0, {model.layers}) contiguously")
        # Megatron's rule that builds these stage counts (the plan's account_for_* flags first): specs/strategy.py
        kw = split_fields(counts, sd.get("vpp", 1), (bool(sd.get("account_for_embedding")),
                                                      bool(sd.get("account_for_loss"))))
        if kw is None:
            return None, job2, _pipelines_spec(sd, pipes, src)
        s = _strategy(sd, tp=tp, pp=pp, dp=dp, **kw)
        if tuple(counts) != stage_layers(s, model.layers):
            return None, job2, _pipelines_spec(sd, pipes, src)
        return s, job2, None
    return None, job2, _pipelines_spec(sd, pipes, src)


def _pipelines_spec(sd: dict, pipes: list, src: str):
    from baige_plan.specs.pipeline import PipelineShape, PipelinesSpec, ShapeKnobs, StageSpec
    shapes = []
    for i, p in enumerate(pipes):
        kn = dict(p.get("strategy") or {})
        for k in ("cp", "ep", "etp", "vpp"):   # plan-wide values apply to shapes that do not set their own
            if k not in kn and sd.get(k, 1) != 1:
                kn[k] = sd[k]
        try:
            knobs = ShapeKnobs(**kn)
        except TypeError as e:
            raise InputError(src, f"pipelines[{i}].strategy", str(e)) from None
        shapes.append(PipelineShape(replicas=p["replicas"], micro_batches=p["micro_batches"], knobs=knobs,
                                    stages=tuple(StageSpec(s["group"], tuple(s["layers"]), s["tp"])
                                                 for s in p["stages"])))
    shapes = tuple(shapes)
    return PipelinesSpec(shapes=shapes, micro_batch=sd["micro_batch"], zero=sd["zero"], recompute=sd["recompute"],
                         sequence_parallel=bool(sd["sequence_parallel"]), attention=sd.get("attention", "flash"),
                         runtime=sd.get("runtime") or runtimes.DEFAULT_HETEROGENEOUS)


def estimate_plan(doc: dict, src: str) -> tuple[Estimate, ModelSpec, ClusterSpec, JobSpec]:
    e, model, cluster, job, _ = estimate_plan_full(doc, src)
    return e, model, cluster, job


def estimate_plan_full(doc: dict, src: str):
    """(estimate, model, cluster, job, PipelinesSpec or None) of a plan document as written."""
    model, cluster, job = plan_inputs(doc, src)
    frac = float((doc.get("search") or {}).get("max_memory_frac", 1.0))
    s, job2, pspec = plan_strategy(doc, src, model, cluster, job)
    try:
        if s is not None and not cluster.is_heterogeneous:
            return estimate(model, cluster, job2, s, frac), model, cluster, job2, None
        from baige_plan.cost.hetero import estimate_pipelines
        return estimate_pipelines(model, cluster, job2, pspec, frac), model, cluster, job2, pspec
    except SpecError as e:
        raise InputError(src, e.field, e.reason) from None


def evaluate_plan_file(path: str | Path) -> tuple[dict, bool]:
    """Re-estimate a plan file as written: (estimate JSON, fits). Plans on several groups add the
    heterogeneous efficiency, recomputing each group's best standalone plan (SPEC §4)."""
    doc = read_plan(path)
    e, model, cluster, job, pspec = estimate_plan_full(doc, str(path))
    if pspec is not None and (len(pspec.devices_by_group()) > 1 or cluster.is_heterogeneous):
        from baige_plan.io.hetero_plans import hetero_estimate_dict
        from baige_plan.search.hetero import standalone_throughputs
        frac = float((doc.get("search") or {}).get("max_memory_frac", 1.0))
        return hetero_estimate_dict(e, pspec, standalone_throughputs(model, cluster, job, frac)), e.fits
    return estimate_dict(e), e.fits
