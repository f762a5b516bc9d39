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

import json
import re
from pathlib import Path
from typing import Any

import yaml

from baige_plan import __version__
from baige_plan.cost.estimate import Estimate, estimate
from baige_plan.errors import InputError, SpecError
from baige_plan.io.bands import estimate_band
from baige_plan.io.models import model_from_dict, model_to_dict
from baige_plan.io.plan_doc import (
    PLAN_SCHEMA,
    PLANS_SCHEMA,
    _sha,
    cluster_doc,
    hetero_estimate_dict,
    job_doc,
    matmul_precisions,
)
from baige_plan.io.serialize import Flow, estimate_dict, rnd, strategy_dict, to_yaml
from baige_plan.io.topologies import cluster_from_dict
from baige_plan.io.yamlio import check_keys, expect_schema, kind_of, read_document
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import StrategySpec, split_fields, stage_layers
from baige_plan.specs.topology import ClusterSpec

TOP_KEYS = ("schema", "tool", "inputs", "strategy", "pipelines", "estimate", "placement", "search")


# -- building ---------------------------------------------------------------------------------
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
        "estimate": estimate_dict(e, estimate_band(e, model, job)),
        "placement": place,
        "search": search_doc(result, file=True, runners_up=runners_up, max_memory_frac=max_memory_frac),
    }


def plans_doc(result, group: str, max_memory_frac: float, model: ModelSpec | None = None,
              job: JobSpec | None = None) -> dict:
    """`plan --format json|yaml` stdout: {"schema", "plans": [estimate + pipelines, ...], "search"}; with the
    model and job, every estimate carries its step_time_band_s."""
    plans = []
    for e in result.plans:
        band = estimate_band(e, model, job) if model is not None and job is not None else None
        d = estimate_dict(e, band)
        d["pipelines"] = pipelines_doc(e, group)
        plans.append(d)
    return {"schema": PLANS_SCHEMA, "plans": plans,
            "search": search_doc(result, file=False, runners_up=[], max_memory_frac=max_memory_frac)}


# -- text -------------------------------------------------------------------------------------
def dumps(doc: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n"
    return plan_yaml(doc)


# libyaml's emitter (yaml.CSafeDumper) writes a plan of 16k devices ~3x faster than PyYAML's pure-Python one,
# with the same representers (io/serialize.py: flow lists and Flow mappings). The two emitters give the same
# bytes except on strings that need escapes: control characters (tabs, newlines), NEL, the line and paragraph
# separators, the byte-order mark, and characters beyond U+FFFF, where they quote and fold differently. A
# document holding such a string is written by the pure-Python emitter, so a plan file is byte-identical
# whichever is used (tests/test_terminal.py compares them).
_CDumper: type | None = None
if hasattr(yaml, "CSafeDumper"):
    from baige_plan.io.serialize import _Dumper

    class _CDumper(yaml.CSafeDumper):    # type: ignore[no-redef]
        pass

    _CDumper.yaml_representers = dict(_Dumper.yaml_representers)
    _CDumper.yaml_multi_representers = dict(_Dumper.yaml_multi_representers)

_PLAIN = re.compile("[^\x20-\x7e\xa0-\ud7ff\ue000-\ufefe\uff00-\ufffd]")   # any character outside these


def _plain_strings(doc: Any) -> bool:
    """Every string (key or value) in `doc` is printable text both emitters write alike (see above)."""
    stack = [doc]
    while stack:
        x = stack.pop()
        items = x.items() if isinstance(x, dict) else ((None, v) for v in x)
        for k, v in items:
            if isinstance(k, str) and _PLAIN.search(k):
                return False
            if isinstance(v, str):
                if _PLAIN.search(v):
                    return False
            elif isinstance(v, (dict, list, tuple)):
                stack.append(v)
    return True


def plan_yaml(doc: Any, width: int = 200, *, fast: bool = True) -> str:
    """A plan (or any output document) as YAML text: libyaml's emitter when available and `fast`, else
    PyYAML's; the same bytes either way. With libyaml, a top-level list of one-line rows (a plan's placement: a
    row per rank, 16,384 on the largest plans, where PyYAML's Python representer took 0.7 s) is written row by
    row from each distinct value's text as the emitter writes it (_flow_rows), the rest by the emitter."""
    if not (fast and _CDumper is not None and isinstance(doc, (dict, list)) and _plain_strings(doc)):
        return to_yaml(doc, width=width)
    if type(doc) is not dict:       # a list, or a one-line mapping (Flow)
        return _c_dump(doc, width)
    out: list[str] = []
    chunk: dict = {}
    for k, v in doc.items():
        rows = _flow_rows(v, width) if isinstance(k, str) and isinstance(v, list) and len(v) >= _ROWS_MIN else None
        key = _flow_scalar(k, width) if rows is not None else None
        if rows is None or key is None:
            chunk[k] = v
            continue
        if chunk:
            out.append(_c_dump(chunk, width))
            chunk = {}
        out.append(f"{key}:\n{rows}")
    if chunk or not out:
        out.append(_c_dump(chunk, width))
    return "".join(out)


_ROWS_MIN = 64      # shorter lists are left to the emitter (nothing to gain)


def _c_dump(doc: Any, width: int) -> str:
    return yaml.dump(doc, Dumper=_CDumper, sort_keys=False, allow_unicode=True, width=width, default_flow_style=False)


def _flow_scalar(v: Any, width: int, memo: dict | None = None) -> str | None:
    """The text the emitter writes for key or value v inside a one-line mapping (an int: its digits; a string: plain
    or quoted as the emitter decides, asked of it once per distinct string), or None for any other value."""
    if type(v) is int:
        return str(v)       # SafeRepresenter.represent_int
    if type(v) is not str:
        return None
    if memo is not None and v in memo:
        return memo[v]
    text = _c_dump(Flow(k=v), width)
    r = text[len("{k: "):-len("}\n")] if text.startswith("{k: ") and text.endswith("}\n") else None
    if r is not None and "\n" in r:
        r = None            # folded: leave it to the emitter
    if memo is not None:
        memo[v] = r
    return r


def _flow_rows(rows: list, width: int) -> str | None:
    """The YAML of a top-level block sequence of Flow mappings whose keys and values are ints and strings, as the
    emitter writes it ("- {k: v, ...}" per row), or None when a row is anything else or longer than `width` (the
    emitter breaks a flow mapping only past that column, so a row within it is one line)."""
    memo: dict = {}
    lines = []
    for row in rows:
        if type(row) is not Flow:
            return None
        parts = []
        for k, v in row.items():
            ks, vs = _flow_scalar(k, width, memo), _flow_scalar(v, width, memo)
            if ks is None or vs is None:
                return None
            parts.append(f"{ks}: {vs}")
        line = "- {" + ", ".join(parts) + "}\n"
        if len(line) > width or not parts:
            return None
        lines.append(line)
    return "".join(lines)


def format_for(path: Path) -> str:
    return "json" if Path(path).suffix.lower() == ".json" else "yaml"


# -- reading ----------------------------------------------------------------------------------
def read_plan(path: str | Path, doc: Any = None) -> dict:
    """The plan document at `path` with its schema and top-level keys checked; `doc`: the document already
    parsed from that file (validate reads each file once), else it is read here."""
    src = str(path)
    doc = expect_schema(read_document(path) if doc is None else doc, src, PLAN_SCHEMA)
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
              "account_for_embedding", "account_for_loss", "grad_reduce_bf16", "attention_kernel", "fp8_recipe",
              "moe_dispatcher", "recompute_early_stop", "loss_kernel", "moe_a2a_overlap", "pipeline_layout",
              "recompute_modules", "tp_pp_dp_mapping", "fsdp_shard", "distribute_saved_activations",
              "moe_fused_mlp"}
_KNOBS = {"micro_batch", "cp", "ep", "etp", "zero", "vpp", "recompute", "sequence_parallel"}


# the type of each strategy value in a plan file (the values themselves: StrategySpec's rules)
_INT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "etp", "zero", "micro_batch", "global_batch", "vpp")
_OPT_INT_FIELDS = ("first_stage_layers", "last_stage_layers", "fsdp_shard")
_STR_FIELDS = ("recompute", "attention", "execution", "runtime", "attention_kernel", "fp8_recipe", "moe_dispatcher",
               "recompute_early_stop", "loss_kernel", "recompute_modules")
_BOOL_FIELDS = ("sequence_parallel", "account_for_embedding", "account_for_loss", "grad_reduce_bf16", "moe_a2a_overlap",
                "tp_pp_dp_mapping", "distribute_saved_activations", "moe_fused_mlp")
_SHAPE_INT = ("micro_batch", "cp", "ep", "etp", "zero", "vpp")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_strategy_doc(sd: dict, src: str, path: str) -> None:
    """The type of every value of a plan's strategy mapping (keys: check_keys): integers, strings, booleans;
    InputError naming the field otherwise. The values' rules (positive, a known runtime, ...) are
    StrategySpec's and runtimes'."""
    for k, v in sd.items():
        if v is None and (k in _STRAT_OPT or k == "sequence_parallel"):
            continue            # optional values: null = not set (sequence_parallel: on when tp > 1)
        if k == "pipeline_layout":
            ok, want = isinstance(v, list) and all(_is_int(x) and x >= 0 for x in v), "a list of integers >= 0"
        elif k in _INT_FIELDS or k in _OPT_INT_FIELDS:
            ok, want = _is_int(v), "an integer"
        elif k in _STR_FIELDS:
            ok, want = isinstance(v, str), "a string"
        elif k in _BOOL_FIELDS:
            ok, want = isinstance(v, bool), "true or false"
        else:
            continue
        if not ok:
            raise InputError(src, f"{path}.{k}", f"expected {want}, got {kind_of(v)}")


def _check_pipelines_doc(pipes: Any, src: str) -> None:
    """The shape of `pipelines`: a non-empty list of shapes, each with integer replicas and micro-batches, an
    optional strategy of per-shape knobs, and a non-empty list of stages {group, layers: [start, end), tp}.
    InputError naming the field otherwise (the rules between them: specs/pipeline.py check_pipelines)."""
    if not isinstance(pipes, list) or not pipes:
        raise InputError(src, "pipelines", f"must be a non-empty list of pipeline shapes, got {kind_of(pipes)}")
    for i, p in enumerate(pipes):
        w = f"pipelines[{i}]"
        check_keys(p, src, w, {"replicas", "micro_batches", "stages"}, {"strategy"})
        for k in ("replicas", "micro_batches"):
            if not _is_int(p[k]) or p[k] < 1:
                raise InputError(src, f"{w}.{k}", f"expected an integer >= 1, got {kind_of(p[k])}")
        if p.get("strategy") is not None:
            kn = check_keys(p["strategy"], src, f"{w}.strategy", set(), _KNOBS)
            for k, v in kn.items():
                if v is None:
                    continue
                if k in _SHAPE_INT and not _is_int(v):
                    raise InputError(src, f"{w}.strategy.{k}", f"expected an integer, got {kind_of(v)}")
                if k == "recompute" and not isinstance(v, str):
                    raise InputError(src, f"{w}.strategy.{k}", f"expected a string, got {kind_of(v)}")
                if k == "sequence_parallel" and not isinstance(v, bool):
                    raise InputError(src, f"{w}.strategy.{k}", f"expected true or false, got {kind_of(v)}")
        if not isinstance(p["stages"], list) or not p["stages"]:
            raise InputError(src, f"{w}.stages", f"must be a non-empty list of stages, got {kind_of(p['stages'])}")
        for j, st in enumerate(p["stages"]):
            ws = f"{w}.stages[{j}]"
            check_keys(st, src, ws, {"group", "layers", "tp"}, {"index", "time_per_micro_batch_s", "memory_gib"})
            if not isinstance(st["group"], str):
                raise InputError(src, f"{ws}.group", f"expected a group name, got {kind_of(st['group'])}")
            lay = st["layers"]
            if not (isinstance(lay, list) and len(lay) == 2 and all(_is_int(x) and x >= 0 for x in lay)):
                raise InputError(src, f"{ws}.layers", "expected [start, end): two integers >= 0, got "
                                 + (repr(lay) if isinstance(lay, list) and len(repr(lay)) <= 60 else kind_of(lay)))
            if not _is_int(st["tp"]) or st["tp"] < 1:
                raise InputError(src, f"{ws}.tp", f"expected an integer >= 1, got {kind_of(st['tp'])}")
            if st.get("index") is not None and not _is_int(st["index"]):
                raise InputError(src, f"{ws}.index", f"expected an integer, got {kind_of(st['index'])}")
            if st.get("index") is not None and st["index"] != j:     # the stage's position in its pipeline
                raise InputError(src, f"{ws}.index", f"must be {j} (the stage's position), got {st['index']}")
            for k in ("time_per_micro_batch_s", "memory_gib"):
                v = st.get(k)
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                    raise InputError(src, f"{ws}.{k}", f"expected a number, got {kind_of(v)}")


def _strategy(d: dict, **over) -> StrategySpec:
    kw = {k: d[k] for k in ("tp", "pp", "dp", "cp", "ep", "zero", "micro_batch", "vpp", "recompute",
                            "sequence_parallel")}
    kw.update(runtimes.knobs(d.get("runtime") or runtimes.DEFAULT))
    for k in _STRAT_OPT:
        if d.get(k) is not None:
            kw[k] = tuple(d[k]) if k == "pipeline_layout" else d[k]
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
    _check_strategy_doc(sd, src, "strategy")
    est = doc["estimate"]
    orig = sd
    if isinstance(est, dict) and est.get("strategy") is not None:
        # the strategy as the tool wrote it (estimate.strategy): tells a hand-edited `strategy` apart
        orig = check_keys(est["strategy"], src, "estimate.strategy", _STRAT_KEYS, _STRAT_OPT)
        _check_strategy_doc(orig, src, "estimate.strategy")
    pipes = doc["pipelines"]
    _check_pipelines_doc(pipes, src)
    g = cluster.groups[0].name
    strat_edited = any(sd.get(k) != orig.get(k) for k in _STRAT_KEYS | _STRAT_OPT)
    if strat_edited and not cluster.is_heterogeneous and len(pipes) == 1:
        try:
            expected = _expected_pipes(orig, model, g)
        except SpecError as e:
            raise InputError(src, f"estimate.strategy.{e.field}", e.reason) from None
        if _shape_summary(pipes) == expected:
            try:
                return _strategy(sd), JobSpec(sd["global_batch"], job.seq_len, job.precision), None
            except SpecError as e:
                raise InputError(src, f"strategy.{e.field}", e.reason) from None
    try:
        return _from_pipelines(sd, pipes, src, model, cluster, job)
    except SpecError as e:
        raise InputError(src, f"strategy.{e.field}", e.reason) from None


def _from_pipelines(sd: dict, pipes: list, src: str, model: ModelSpec, cluster: ClusterSpec, job: JobSpec):
    mb = sd["micro_batch"]
    gb = sum(p["replicas"] * p["micro_batches"] * _shape_micro_batch(p, mb) for p in pipes)
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
        # the runtime's own split of the plan's strategy first (DeepSpeed balances uneven counts itself:
        # RuntimeSpec.balanced_partition), as the plan was estimated
        try:
            s_rt = _strategy(sd, tp=tp, pp=pp, dp=dp)
            if tuple(counts) == stage_layers(s_rt, model.layers):
                return s_rt, job2, None
        except SpecError:
            pass        # not the runtime's split of a valid strategy: Megatron's rules below, else free-form
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


def _shape_micro_batch(p: dict, plan_wide: int) -> int:
    v = (p.get("strategy") or {}).get("micro_batch")
    return plan_wide if v is None else v


def _pipelines_spec(sd: dict, pipes: list, src: str):
    from baige_plan.specs.pipeline import PipelineShape, PipelinesSpec, ShapeKnobs, StageSpec
    if sd.get("fsdp_shard"):
        # cost/hetero.py costs each shape's data parallelism without hybrid sharding: refuse rather than ignore it
        raise InputError(src, "strategy.fsdp_shard", f"hybrid sharding (fsdp_shard={sd['fsdp_shard']}) is costed for "
                         "one-group plans of one pipeline shape; this plan's pipelines are not: remove it")
    shapes = []
    for p in pipes:
        kn = dict(p.get("strategy") or {})
        for k in ("cp", "ep", "etp", "vpp"):   # plan-wide values apply to shapes that do not set their own
            if k not in kn and sd.get(k, 1) != 1:
                kn[k] = sd[k]
        knobs = ShapeKnobs(**kn)        # keys and types checked by _check_pipelines_doc
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
            return estimate(model, used_part(cluster, s), job2, s, frac), model, cluster, job2, None
        from baige_plan.cost.hetero import estimate_pipelines
        return estimate_pipelines(model, cluster, job2, pspec, frac), model, cluster, job2, pspec
    except SpecError as e:
        raise InputError(src, e.field, e.reason) from None


def used_part(cluster: ClusterSpec, s: StrategySpec) -> ClusterSpec:
    """The nodes a homogeneous plan runs on: a plan may leave whole nodes of its cluster idle (search/partial.py:
    fewer nodes, --exclude); the cost model needs tp·pp·cp·dp = the devices it is given. Other worlds are left
    for the estimate to refuse, naming the numbers."""
    from dataclasses import replace
    g = cluster.groups[0]
    if s.world < cluster.devices and s.world % g.devices_per_node == 0:
        return replace(cluster, groups=(replace(g, nodes=s.world // g.devices_per_node),))
    return cluster


def evaluate_plan_file(path: str | Path) -> tuple[dict, bool]:
    """Re-estimate a plan file as written: (estimate JSON, fits). Plans on several groups add the
    heterogeneous efficiency, recomputing each group's best standalone plan (SPEC §4)."""
    doc = read_plan(path)
    e, model, cluster, job, pspec = estimate_plan_full(doc, str(path))
    if pspec is not None and (len(pspec.devices_by_group()) > 1 or cluster.is_heterogeneous):
        from baige_plan.search.hetero import standalone_throughputs
        frac = float((doc.get("search") or {}).get("max_memory_frac", 1.0))
        return hetero_estimate_dict(e, pspec, standalone_throughputs(model, cluster, job, frac),
                                    band=estimate_band(e, model, job),
                                    matmul=matmul_precisions(pspec, cluster, job)), e.fits
    return estimate_dict(e, estimate_band(e, model, job)), e.fits
