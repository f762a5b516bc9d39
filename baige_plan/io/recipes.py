"""Published recipes (issue 16 item 5): a compact index of the validation corpus' runs, the nearest one to a
user's model and cluster, adapted and estimated beside the top plan.

The index (baige_plan/data/recipes.yaml, shipped in the wheel) is written by `make recipes`
(benchmarks/corpus/make_recipes.py) from tests/data/published_calibration.yaml,
benchmarks/published_heldout.yaml and benchmarks/corpus/*.yaml: one row per run as io/runs.py loads it, a
table (one flow list per line, the values in `columns` order) so that it stays small and loads fast:

    schema: baige-plan/recipes/v1
    computed_from: {files: [{path, sha256}, ...]}
    sources: {nemo_perf_2502: https://..., ...}       # source key -> url
    columns: [id, source, model, layers, hidden, heads, kv_heads, ffn_hidden, vocab, experts, top_k,
              expert_ffn_hidden, params, chip, family, gpus, gpus_per_node, tp, pp, cp, ep, etp, vpp, micro_batch,
              zero, recompute, sequence_parallel, first_stage_layers, last_stage_layers, account_for_embedding,
              account_for_loss, pipeline_layout, recompute_modules, tp_pp_dp_mapping, fsdp_shard, moe_dispatcher,
              moe_a2a_overlap, precision, seq_len, global_batch, runtime, measured_step_time_s]
    rows:
    - ["nemo_perf_2502_gpt3_175b_b200_512gpu_fp8", "nemo_perf_2502", "GPT-3 175B ...", 96, 12288, ...]

(model: the model's name in the source; chip: the catalog id, or for a run the corpus does not score (row key
`excluded`) the device as its source names it, which may be a part the catalog has no file for; experts, top_k,
expert_ffn_hidden 0: a dense model; params: total parameters, cost/params.py; first/last_stage_layers null: not set;
pipeline_layout: transformer layers per virtual stage, null: not set; recompute_modules: Megatron's beyond core_attn
under selective recompute, "" none; tp_pp_dp_mapping: Megatron's tp-cp-ep-pp-dp rank order; fsdp_shard: the
hybrid-sharding group, 0 full sharding; moe_dispatcher: the MoE token dispatcher as the run's recipe set it, ""
alltoall; moe_a2a_overlap: Megatron-core's EP all-to-all overlap; measured_step_time_s null: not published.)

The nearest recipe (`candidates`, `nearest`): a recipe is near when it ran on the user's chip family and its
model has the user's shape (layers, hidden, heads, kv_heads, ffn_hidden, vocab, experts, top_k,
expert_ffn_hidden) or a parameter count within 2x and the same kind (MoE or dense: a dense run's layout says
little about expert parallelism, and the reverse). Nearest first: the same shape, else the closest parameter
count; then the same chip, else the same family; then the plan's runtime (a recipe another runtime ran is
kept, after); then the closest GPU count (by ratio; the smaller count on equal ratios); then the job's
precision; then the fastest measured (tokens/s per GPU: the recipe worth copying); then the id. The first one
that adapts is taken (`adapt`): its tp,
pp, cp, ep, etp, vpp, micro-batch, recompute, ZeRO stage (hybrid sharding's group where it divides the new dp x cp and
the runtime runs it, else full sharding), sequence parallelism, layer split (first / last stage
layers, or the explicit pipeline layout: DeepSeek-V3's 61 layers on pp 4 x vpp 4) and an MoE recipe's dispatcher and EP
all-to-all overlap (where they apply to the new layout, else the defaults) are kept, dp =
devices / (tp·pp·cp); a recipe whose tp·pp·cp does not divide the devices, whose batch does not split over
dp x micro-batch, that the model's shape refuses (heads, layers, experts) or that the runtime does not run is
skipped. Its estimate is the cost model's on the user's cluster, job and runtime, whether or not it fits.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from baige_plan.cost.estimate import Estimate, estimate
from baige_plan.cost.params import total_params
from baige_plan.errors import InputError, SpecError
from baige_plan.io.yamlio import check_keys, kind_of, read_document
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import RECOMPUTE, StrategySpec, check_strategy
from baige_plan.specs.topology import ClusterSpec

RECIPES_SCHEMA = "baige-plan/recipes/v1"
PARAMS_RATIO = 2.0      # a model of another shape is near when its parameters are within this factor
SHAPE = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "experts", "top_k", "expert_ffn_hidden")
LAYOUT = ("tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch", "zero", "recompute", "sequence_parallel",
          "first_stage_layers", "last_stage_layers", "account_for_embedding", "account_for_loss", "pipeline_layout",
          "recompute_modules", "tp_pp_dp_mapping", "fsdp_shard", "moe_dispatcher", "moe_a2a_overlap")
COLUMNS = ("id", "source", "model", *SHAPE, "params", "chip", "family", "gpus", "gpus_per_node", *LAYOUT,
           "precision", "seq_len", "global_batch", "runtime", "measured_step_time_s")
_STR = {"id", "source", "model", "chip", "family", "precision", "runtime", "recompute_modules", "moe_dispatcher"}
_BOOL = {"sequence_parallel", "account_for_embedding", "account_for_loss", "tp_pp_dp_mapping", "moe_a2a_overlap"}
_OPT_INT = {"first_stage_layers", "last_stage_layers"}
_MIN = {"zero": 0, "fsdp_shard": 0, **{k: 0 for k in SHAPE}}   # other integers are >= 1


@dataclass(frozen=True)
class Recipe:
    """One published run of the index."""

    id: str
    source: str
    url: str
    name: str                            # the model's name in the source
    shape: tuple[int, ...]               # SHAPE
    params: int
    chip: str
    family: str
    gpus: int
    gpus_per_node: int
    layout: tuple[tuple[str, Any], ...]  # (LAYOUT key, value)
    precision: str
    seq_len: int
    global_batch: int
    runtime: str
    measured_step_time_s: float | None

    def get(self, key: str) -> Any:
        return dict(self.layout)[key]


def shipped_recipes_path() -> Path:
    return Path(__file__).resolve().parents[1] / "data" / "recipes.yaml"


def shape_of(model: ModelSpec) -> tuple[int, ...]:
    moe = model.moe
    return (model.layers, model.hidden, model.heads, model.kv_heads, model.ffn_hidden, model.vocab,
            moe.experts if moe else 0, moe.top_k if moe else 0, moe.expert_ffn_hidden if moe else 0)


# -- the index file -----------------------------------------------------------------------------
def _value(k: str, v: Any, src: str, where: str) -> Any:
    if k in _STR:
        ok = isinstance(v, str)
    elif k in _BOOL:
        ok = isinstance(v, bool)
    elif k == "recompute":
        ok = v in RECOMPUTE
    elif k == "measured_step_time_s":
        ok = v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0)
    elif k == "pipeline_layout":      # transformer layers per virtual stage (StrategySpec.pipeline_layout)
        ok = v is None or (isinstance(v, list) and all(type(x) is int and x >= 0 for x in v))
        if ok and v is not None:
            return tuple(v)
    else:
        ok = (v is None and k in _OPT_INT) or (isinstance(v, int) and not isinstance(v, bool) and v >= _MIN.get(k, 1))
    if not ok:
        raise InputError(src, where, f"invalid {k}: {v!r}")
    return float(v) if k == "measured_step_time_s" and v is not None else v


def parse_recipes(doc: Any, src: str) -> tuple[Recipe, ...]:
    """A recipes document -> Recipe rows; InputError naming the file, field and reason."""
    d = check_keys(doc, src, "", {"schema", "columns", "rows", "sources"}, {"computed_from", "note"})
    if d["schema"] != RECIPES_SCHEMA:
        raise InputError(src, "schema", f"expected {RECIPES_SCHEMA!r}, got {d['schema']!r}")
    if d["columns"] != list(COLUMNS):
        raise InputError(src, "columns", f"expected [{', '.join(COLUMNS)}]")
    urls = d["sources"]
    if not isinstance(urls, dict) or not all(isinstance(v, str) for v in urls.values()):
        raise InputError(src, "sources", f"expected a mapping of source key to url, got {kind_of(urls)}")
    if not isinstance(d["rows"], list):
        raise InputError(src, "rows", f"expected a list, got {kind_of(d['rows'])}")
    out = []
    for i, row in enumerate(d["rows"]):
        if not isinstance(row, list) or len(row) != len(COLUMNS):
            raise InputError(src, f"rows[{i}]", f"expected a list of {len(COLUMNS)} values, got {kind_of(row)}")
        r = {k: _value(k, v, src, f"rows[{i}].{k}") for k, v in zip(COLUMNS, row, strict=True)}
        if r["source"] not in urls:
            raise InputError(src, f"rows[{i}].source", f"{r['source']!r} is not in sources")
        out.append(Recipe(
            id=r["id"], source=r["source"], url=urls[r["source"]], name=r["model"],
            shape=tuple(r[k] for k in SHAPE), params=r["params"], chip=r["chip"], family=r["family"],
            gpus=r["gpus"], gpus_per_node=r["gpus_per_node"], layout=tuple((k, r[k]) for k in LAYOUT),
            precision=r["precision"], seq_len=r["seq_len"], global_batch=r["global_batch"], runtime=r["runtime"],
            measured_step_time_s=r["measured_step_time_s"]))
    return tuple(out)


@functools.lru_cache(maxsize=4)
def load_recipes(path: str | None = None) -> tuple[Recipe, ...]:
    """The index at `path` (default: the shipped one), read once per path (a pure loader, cached)."""
    p = Path(path) if path is not None else shipped_recipes_path()
    return parse_recipes(read_document(p), str(p))


def recipe_row(case, hardware: str | None = None) -> list:
    """One index row (COLUMNS, without the source) of a loaded run (io/runs.py RunCase). `hardware`: the device as
    the source names it, written as the chip of a run the corpus does not score (its row's `excluded`): such a row
    may be loaded on a stand-in chip file (an H100 96GB HBM2e at 500 W on h100-sxm5-80g, a GB300 on b300), so its
    catalog id would misstate where it was measured, and it never counts as the user's own chip."""
    m, s, g = case.model, case.strategy, case.cluster.groups[0]
    step = case.measured_step_time_s
    vals = {"id": case.id, "model": m.name, **dict(zip(SHAPE, shape_of(m), strict=True)), "params": total_params(m),
            "chip": hardware or g.chip.id, "family": g.chip.family, "gpus": case.cluster.devices,
            "gpus_per_node": g.devices_per_node,
            **{k: getattr(s, k) for k in LAYOUT}, "sequence_parallel": bool(s.sequence_parallel),
            "pipeline_layout": None if s.pipeline_layout is None else list(s.pipeline_layout),
            "precision": case.job.precision, "seq_len": case.job.seq_len, "global_batch": case.job.global_batch,
            "runtime": s.runtime, "measured_step_time_s": None if step is None else float(f"{step:.6g}")}
    return [vals[k] for k in COLUMNS if k != "source"]


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)     # a JSON string is a YAML double-quoted scalar
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    return repr(v)


def recipes_text(rows: list[tuple[str, str, list]], files: list[dict]) -> str:
    """The index file's text: `rows` are (source key, url, recipe_row) in file order; `files` {path, sha256}.
    One row per line (flow lists), so the file stays small and diffs line by line; the same rows give the
    same bytes."""
    urls: dict[str, str] = {}
    for key, url, _ in rows:
        urls.setdefault(key, url)
    out = [f"schema: {RECIPES_SCHEMA}",
           "note: " + _scalar("published runs of the validation corpus (make recipes: benchmarks/corpus/"
                              "make_recipes.py); io/recipes.py finds the nearest to a plan's model and cluster"),
           "computed_from:", "  files:"]
    out += [f"  - {{path: {_scalar(f['path'])}, sha256: {f['sha256']}}}" for f in files]
    out.append("sources:")
    out += [f"  {_scalar(k)}: {_scalar(u)}" for k, u in urls.items()]
    out.append("columns: [" + ", ".join(COLUMNS) + "]")
    out.append("rows:")
    for key, _, vals in rows:
        vals = [vals[0], key, *vals[1:]]
        out.append("- [" + ", ".join(_scalar(v) for v in vals) + "]")
    return "\n".join(out) + "\n"


# -- the nearest recipe ---------------------------------------------------------------------------
def candidates(recipes: Sequence[Recipe], model: ModelSpec, chip: str, family: str, devices: int,
               precision: str = "", runtime: str = "") -> list[Recipe]:
    """The near recipes, nearest first (module docstring)."""
    shape, params = shape_of(model), total_params(model)
    moe = model.moe is not None
    keyed = []
    for r in recipes:
        if r.family != family:
            continue
        exact = r.shape == shape
        ratio = r.params / params
        if not exact and (not 1 / PARAMS_RATIO <= ratio <= PARAMS_RATIO or (r.shape[SHAPE.index("experts")] > 0) != moe):
            continue
        # among equally near runs, the fastest measured (tokens per second per GPU) is the recipe to show
        speed = (r.global_batch * r.seq_len / (r.measured_step_time_s * r.gpus)) if r.measured_step_time_s else 0.0
        keyed.append(((0 if exact else 1, 0.0 if exact else round(abs(math.log(ratio)), 9), r.chip != chip,
                       r.runtime != runtime, round(abs(math.log(r.gpus / devices)), 9), r.gpus,
                       r.precision != precision, -round(speed, 6), r.id), r))
    keyed.sort(key=lambda x: x[0])
    return [r for _, r in keyed]


def tier(cands: Sequence[Recipe]) -> list[Recipe]:
    """The recipes of the nearest model among `cands` (all of the model's shape when any has it)."""
    if not cands:
        return []
    first = cands[0].shape
    return [r for r in cands if r.shape == first]


def adapt(r: Recipe, model: ModelSpec, devices: int, job: JobSpec, runtime: str, attention: str = "flash"
          ) -> StrategySpec | None:
    """The recipe's layout on `devices` for `job` and `runtime` (module docstring), or None: skipped."""
    tp, pp, cp, mb = r.get("tp"), r.get("pp"), r.get("cp"), r.get("micro_batch")
    if devices % (tp * pp * cp):
        return None
    dp = devices // (tp * pp * cp)
    if job.global_batch % (dp * mb):
        return None
    splits = [{k: r.get(k) for k in ("first_stage_layers", "last_stage_layers", "account_for_embedding",
                                     "account_for_loss", "pipeline_layout")}]
    modules = r.get("recompute_modules") if r.get("recompute") == "selective" else ""
    if r.shape != shape_of(model):   # another model: its layer split may not apply; the even split may
        splits.append({"first_stage_layers": None, "last_stage_layers": None, "account_for_embedding": False,
                       "account_for_loss": False, "pipeline_layout": None})
    rt = runtimes.get(runtime)
    # the recipe's hybrid-sharding group where StrategySpec and the runtime take it on these devices, else full
    shards = (r.get("fsdp_shard"), 0) if r.get("fsdp_shard") else (0,)
    # an MoE recipe's dispatcher and EP all-to-all overlap as it ran them, where they apply here, else the defaults
    moe_knobs = [{}]
    if model.moe is not None and (r.get("moe_dispatcher") or r.get("moe_a2a_overlap")):
        moe_knobs.insert(0, {"moe_dispatcher": r.get("moe_dispatcher"), "moe_a2a_overlap": r.get("moe_a2a_overlap")})
    for split, fs, moe in itertools.product(splits, shards, moe_knobs):
        try:
            s = StrategySpec(tp=tp, pp=pp, dp=dp, cp=cp, ep=r.get("ep"), etp=r.get("etp"), zero=r.get("zero"),
                             micro_batch=mb, vpp=r.get("vpp"), recompute=r.get("recompute"),
                             sequence_parallel=r.get("sequence_parallel") and tp > 1, attention=attention,
                             recompute_modules=modules,
                             tp_pp_dp_mapping=r.get("tp_pp_dp_mapping") and rt.tp_pp_dp_mapping,
                             fsdp_shard=fs, **split, **moe, **runtimes.knobs(runtime))
            check_strategy(s, model, job, devices)
        except SpecError:
            continue
        if rt.refusal(s, model, job) is None:
            return s
    return None


@dataclass(frozen=True)
class Published:
    """The nearest published recipe, adapted, and our estimate of it."""

    recipe: Recipe
    strategy: StrategySpec
    estimate: Estimate


def nearest(recipes: Sequence[Recipe], model: ModelSpec, cluster: ClusterSpec, job: JobSpec, runtime: str,
            max_memory_frac: float, attention: str = "flash") -> Published | None:
    """The nearest recipe that adapts to the one-group `cluster`, estimated; None when none is near."""
    g = cluster.groups[0]
    for r in candidates(recipes, model, g.chip.id, g.chip.family, cluster.devices, job.precision, runtime):
        s = adapt(r, model, cluster.devices, job, runtime, attention)
        if s is None:
            continue
        try:
            e = estimate(model, cluster, job, s, max_memory_frac)
        except SpecError:
            continue
        return Published(r, s, e)
    return None


def layouts(recipes: Sequence[Recipe], model: ModelSpec, cluster: ClusterSpec) -> frozenset[tuple[int, ...]]:
    """(tp, pp, cp, ep, vpp) of the nearest model's recipes on the cluster's chip family (search/ranking.py's
    "a published recipe's layout")."""
    g = cluster.groups[0]
    near = tier(candidates(recipes, model, g.chip.id, g.chip.family, cluster.devices))
    return frozenset((r.get("tp"), r.get("pp"), r.get("cp"), r.get("ep"), r.get("vpp")) for r in near)


def published_doc(p: Published, strategy: dict, estimate_doc: dict) -> dict:
    """The `published_recipe` of `plan --format json`: {source, id, url, strategy, estimate,
    measured_step_time_s, measured_gpus} (strategy and estimate in the SPEC §3 form, io/serialize.py)."""
    r = p.recipe
    return {"source": r.source, "id": r.id, "url": r.url, "strategy": strategy, "estimate": estimate_doc,
            "measured_step_time_s": r.measured_step_time_s, "measured_gpus": r.gpus,
            "measured_on": {"chip": r.chip, "precision": r.precision, "seq_len": r.seq_len,
                            "global_batch": r.global_batch, "runtime": r.runtime, "model": r.name}}
