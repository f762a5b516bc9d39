"""FlagScale heterogeneous training (BAAI FlagScale, a Megatron-LM fork): the runtime for plans whose
pipeline stages sit on different chip groups or families.

Pinned: PyPI `flag-scale==0.8.0` (wheel sha256 c3fbbcc5...c6). Its version number is not the git tag:
the wheel's training code (flagscale/train/arguments.py, flagscale/train/hetero/*, the Megatron-LM
patches under flagscale/backends/Megatron-LM/, flagscale/runner/utils.py) is byte-identical to
github.com/FlagOpen/FlagScale at commit da4935ec60193e735bc70b81e259ed04eefd0132 (2025-11-13; tag
v0.8.0 is 779a1e33, 2025-04-30, and differs), with Megatron-LM submodule NVIDIA/Megatron-LM 8479eb35
already patched into flag_scale/third_party/Megatron-LM. Paths below are in that commit.

What FlagScale's heterogeneous mode runs (`enable_hetero`):
- Process meshes = consecutive pipeline stages. `hetero_process_meshes` is a flat list of 5-tuples
  tp, cp, ep, dp, pp per mesh (flagscale/train/arguments.py FSTrainArguments.pre_validate_args:
  `hetero_process_meshes[0::5]` tp, [1::5] cp, [2::5] ep, [3::5] dp, [4::5] pp; the `--help` text in
  backends/Megatron-LM/megatron/training/arguments.py.patch `_add_hetero_args` still says
  "TP0, CP0, DP0, PP0", which is stale). `pipeline_model_parallel_size` must equal the sum of the
  meshes' pp; mesh k holds global pipeline stages sum(pp_<k) .. sum(pp_<=k)-1. There is ONE pipeline
  structure: the meshes are chained mesh 0 -> mesh 1 -> ... (ParallelContext.build_all_inter_mesh_
  process_groups links mesh i's last stage to mesh i+1's first; build_global_process_groups builds
  the global pp groups as paths through all meshes). Several pipelines holding the whole model on
  different meshes ("shapes" trained as data-parallel replicas of each other) are NOT expressible.
- Per-mesh tp and dp may differ: pre_validate_args sets each rank's tensor/context/expert/data/
  pipeline sizes from its own mesh; `data_parallel_size` := dp of mesh 0 and every mesh's micro-batch
  is rescaled, micro_batch_size_k = dp_0 * micro_batch_size / dp_k (asserted divisible), so every
  stage sees the same micro-batch of dp_0 * micro_batch_size sequences, split over its own dp ranks,
  and every rank runs the same number of micro-batches. Inter-mesh p2p slices activations along batch
  (dp) and sequence (tp*cp with SP) with `find_overlapped_mapping`
  (flagscale/train/hetero/parallel_context.py). Tested upstream: tests/functional_tests/test_cases/
  hetero_train/aquila/conf/train/{tp2pp1_tp4pp1_tp2pp1, tp2dp1pp1_tp2dp2pp1_tp1dp2pp1,
  dp2dp4_shared_embedding}.yaml. No uneven batch split across data-parallel replicas: replicas of a
  mesh all take the same share, and there is no data parallelism across meshes.
- Inter-mesh wiring defect (verified by running ParallelContext, tests/integration/check_flagscale.py):
  ProcessMesh.logical_coords_to_physical_ranks drops axis 3 of [tp, cp, ep, dp, pp] (dp, where the
  comment says ep), so a mesh's last-stage rank (tp i, dp k) is taken as i + tp*cp*(k + pp-1): right
  only when that mesh has pp == 1 or dp == 1. Otherwise get_inter_mesh_tensor_slices sends replica k's
  activations to another replica of the next mesh (e.g. [gpu tp4 dp8 pp2 > npu tp8 dp8 pp1]: rank 32,
  stage 1 replica 0, sends to rank 120, replica 7) and some last-stage ranks have no receiver. The
  upstream tests only use pp 1 meshes or dp 1. Work-around: one mesh per stage (same label), at the
  price of those stages' hops going through the inter-mesh path (CPU with hetero_use_cpu_communication).
  The expert coordinates drop ep the same way (idx != 2).
- Data-parallel gradient reduction stays inside a mesh (ParallelContext.get_data_parallel_group
  returns the current mesh's dp group); only the tied-embedding group (first and last stage,
  `embd`) and the model-parallel norm/loss-scale reductions cross meshes.
- Layer split: `hetero_pipeline_layer_split`, one count per global stage, sum = num_layers, length =
  pipeline_model_parallel_size (pre_validate_args); stage s builds layers
  offset = sum(split[:s]) .. +split[s] (backends/.../transformer_layer.py.patch, transformer_block.py.patch).
- cp: all meshes must have the same cp (pre_validate_args) and ParallelContext.__init__ asserts
  `context_parallel_size == 1, "Context parallelism is not supported."`: no CP in hetero mode.
- ep: per mesh (tuple element 2); expert tp per mesh via `expert_tensor_parallel_size_per_process_mesh`
  (default: the mesh's tp); ProcessMesh raises unless tp*cp*dp*pp is divisible by etp*ep*pp.
- Interleaving: refused (pre_validate_args asserts num_layers_per_virtual_pipeline_stage is None;
  validate_args patch: "num_layers_per_virtual_pipeline_stage is not supported with heterogeneous
  parallelism"). Schedule: Megatron's non-interleaved 1F1B with the hetero p2p functions
  (flagscale/train/hetero/p2p_communication.py).
- ZeRO: the distributed optimizer (ZeRO-1, `use_distributed_optimizer`, used by every hetero example)
  per mesh; ParallelContext asserts num_distributed_optimizer_instances == 1. No ZeRO-2/3/FSDP path in
  ParallelContext. standalone_embedding_stage must be False. Tied embeddings need tp_first == tp_last
  (and, with different dp and the distributed optimizer, use_partial_reduce_for_shared_embedding).
- Device types and rank order: `hetero_device_types` (one label per mesh) and
  `hetero_current_device_type` (the node's label; the runner overwrites it from the hostfile's
  `type=` per node, flagscale/runner/runner_train.py SSHTrainRunner._run_each). RankMapper
  (parallel_context.py) sorts physical ranks by the index of their label in hetero_device_types
  (first occurrence), then by rank; meshes take consecutive logical ranks, inside a mesh in
  Megatron's order tp-cp-ep-dp-pp (tp fastest). So a label's meshes must be consecutive: a group
  that reappears later in the pipeline needs its own label and whole nodes. Labels are free strings.
- Cross-vendor communication: `hetero_use_cpu_communication` makes the default process group
  `cpu:gloo` (arguments.py _initialize_distributed, backends/.../initialize.py.patch); the global
  (inter-mesh) pp / tp-pp / embedding groups use it and p2p tensors are copied to host
  (p2p_communication.py: `.cpu()` when the group is cpu:gloo), while intra-mesh groups keep
  `distributed_backend` (nccl, or the vendor library of a hardware build). Alternatively
  `distributed_backend: flagcx` ("cpu:gloo,cuda:flagcx"): FlagCX, BAAI's cross-chip collective
  library (github.com/FlagOpen/FlagCX: NCCL/IXCCL/CNCL/HCCL/... adaptors, C2C algorithm,
  device-buffer RDMA). Vendor builds come from hardware/<Vendor_Model>/ patches
  (Huawei_Atlas800TA3, Cambricon_MLU, NVIDIA_CambriconMLU (commit 631ebb86 "[Hetero] Adapt the
  training code backend for NVIDIA + Cambricon"), Hygon, Metax, Kunlunxin, MUSA, BI_V150, ...),
  selected per node with the config's `device_type_specific.<label>.build_dir`.
- Launch: `flagscale train MODEL YAML` / `python run.py --config-path DIR --config-name NAME action=run`
  (Hydra); the runner flattens train.{system,model,data} into Megatron arguments, writes one torchrun
  script per hostfile line (`HOST slots=N type=LABEL`, flagscale/runner/utils.py parse_hostfile: all
  lines typed or none) and starts it over ssh; examples/aquila/conf/train_hetero.yaml:
  "rdzv_backend: static # hetero training only supports static". `action=dryrun` writes the scripts
  without running them (what tests/integration/check_flagscale.py uses).
Non-hetero mode (one group, one tp, Megatron-expressible split) is plain Megatron-LM (the fork
merged upstream Megatron-LM on 2025-09-22, commit 5992b4cf): CP, interleaving, first/last uneven
stages and EP/ETP as in specs/runtimes/megatron.py.

Baige-plan mapping (shape_refusal, export): a plan runs on FlagScale when its pipeline shapes are one
pipeline (identical shapes are merged: their replicas add up); each maximal run of consecutive stages
on the same group with the same tp becomes one mesh (dp = replicas, pp = run length); the label of a
mesh is its group name. FlagScale can also give stages different dp, which baige-plan's shapes
(one replica count per shape) do not express.

Other heterogeneous-training systems: HetHub (arXiv:2405.16256, unified communicator over AMD +
NVIDIA + other accelerators, automatic planner), Metis (USENIX ATC'24, "Fast Automatic Distributed
Training on Heterogeneous GPUs": per-stage heterogeneous DP/TP planning), Hetu v2 HSPMD
(arXiv:2504.20490, github.com/PKU-DAIR/Hetu: asymmetric sharding), H2 / HeteroPP + DiComm
(arXiv:2505.17548: >1,000 chips of several vendors, device-direct RDMA), FlagCX (above). None of
them is a pip-installable training runtime with a config format this exporter could target.
Execution follows Megatron-LM: gradients reduced once per step per mesh, overlapped with the last
backward (--overlap-grad-reduce, set by the export); ZeRO-1 parameter all-gather overlapped with the
next forward (--overlap-param-gather). FlagScale's own hetero examples leave both off; they are
standard Megatron DDP options applied per mesh.
"""

from __future__ import annotations

from dataclasses import replace

from baige_plan.specs.runtimes import megatron

COMMIT = "da4935ec60193e735bc70b81e259ed04eefd0132"


# A Megatron-LM fork: Megatron's space and execution semantics (specs/runtimes/megatron.py), plus heterogeneous
# stages. Megatron's MoE/SP refusal is not carried over: it was checked against megatron-core, not FlagScale.
RUNTIME = replace(
    megatron.RUNTIME,
    name="flagscale",
    title="FlagScale heterogeneous training (Megatron-LM fork, hetero process meshes)",
    package="flag-scale",
    version="0.8.0",
    heterogeneous=True,         # interleaving and cp: non-hetero mode only; shape_refusal refuses them in hetero mode
    precisions=("bf16", "fp16", "fp8", "fp32", "tf32"),   # NVFP4 (Megatron-core 0.14+) not checked against the fork
    zero_stages=(0, 1),         # Megatron-FSDP (megatron zero 3) is not checked against FlagScale's fork
    tp_comm_overlap=False,      # TE userbuffers across hetero meshes not checked against FlagScale
    uneven_interleaved=False,   # not checked against FlagScale's Megatron fork: its export writes first/last
    split_accounting=False,     # counts only, for vpp 1 (see the export below)
    bf16_grad_reduce=False,     # not checked against FlagScale's fork; its export does not write it
    tp_pp_dp_mapping=False,     # not checked against FlagScale's fork; its export does not write it
    distribute_saved_activations="",   # the fork has Megatron's flag, but its export (hetero meshes) does not write it
    model_features=(),          # MLA / MTP not checked against FlagScale's fork; its export does not write them
    notes=(f"FlagOpen/FlagScale@{COMMIT[:8]} flagscale/train/arguments.py FSTrainArguments.pre_validate_args",
           "flagscale/train/hetero/parallel_context.py RankMapper, ProcessMesh, ParallelContext",
           "heterogeneous plans: shape_refusal(pipelines) in this module"),
    extra_refusal=None,
)

# One pipeline structure per job (process meshes chained in order; no data parallelism across meshes):
# the heterogeneous search skips templates of several pipeline shapes on different groups.
ONE_PIPELINE = True

_KNOB_DEFAULTS = {"micro_batch": 1, "cp": 1, "ep": 1, "etp": 1, "zero": 1, "vpp": 1, "recompute": "selective",
                  "sequence_parallel": True}
_KNOBS = tuple(_KNOB_DEFAULTS)


def _knobs(p: dict, defaults: dict | None) -> dict:
    out = {}
    for k in _KNOBS:
        v = (p.get("strategy") or {}).get(k)
        if v is None:
            v = (defaults or {}).get(k)
        out[k] = _KNOB_DEFAULTS[k] if v is None else v
    out["sequence_parallel"] = bool(out["sequence_parallel"])
    return out


def _stages(p: dict) -> tuple:
    return tuple((st["group"], int(st["layers"][0]), int(st["layers"][1]), int(st["tp"])) for st in p["stages"])


def merge_shapes(pipelines: list[dict], defaults: dict | None = None) -> list[dict]:
    """Identical shapes (same stages, groups, tp, layer ranges, micro-batches and knobs) are one FlagScale
    pipeline with their replicas added. Returns [{stages, replicas, micro_batches, knobs, members}] in
    first-appearance order; members = [(shape index, its replicas), ...]."""
    out: list[dict] = []
    for j, p in enumerate(pipelines):
        kn = _knobs(p, defaults)
        key = (_stages(p), int(p["micro_batches"]), tuple(sorted(kn.items())))
        for m in out:
            if m["key"] == key:
                m["replicas"] += int(p["replicas"])
                m["members"].append((j, int(p["replicas"])))
                break
        else:
            out.append({"key": key, "stages": _stages(p), "replicas": int(p["replicas"]),
                        "micro_batches": int(p["micro_batches"]), "knobs": kn, "members": [(j, int(p["replicas"]))]})
    return out


def _megatron_split(counts: list[int]) -> bool:
    """Megatron's --decoder-first/last-pipeline-num-layers express it: the middle stages are equal."""
    return len(set(counts[1:-1])) <= 1


def needs_hetero(stages: tuple) -> bool:
    """The merged pipeline needs FlagScale's hetero mode: several groups, several tp, or a layer split
    that Megatron's first/last uneven stages cannot express."""
    counts = [b - a for _, a, b, _ in stages]
    return len({g for g, *_ in stages}) > 1 or len({t for *_, t in stages}) > 1 or not _megatron_split(counts)


def meshes(stages: tuple, replicas: int, knobs: dict, split: bool = False) -> list[dict]:
    """FlagScale process meshes in pipeline order, each {group, tp, cp, ep, dp, pp, first_stage, run, label}:
    maximal runs of consecutive stages on the same group with the same tp, or (split) one mesh per stage.
    The label is the group name, suffixed _1, _2, ... when the group hosts separate parts of the pipeline."""
    return _meshes([(g, tp, 1) for g, _a, _b, tp in stages], replicas, knobs, split)


def _meshes(segs: list[tuple[str, int, int]], replicas: int, knobs: dict, split: bool = False) -> list[dict]:
    """`meshes` of stages given as runs (group, tp, consecutive stages)."""
    out: list[dict] = []
    i = 0
    for g, tp, n in segs:
        if out and not split and out[-1]["group"] == g and out[-1]["tp"] == tp:
            out[-1]["pp"] += n
        elif split:
            out += [{"group": g, "tp": tp, "cp": knobs["cp"], "ep": knobs["ep"], "dp": replicas, "pp": 1,
                     "first_stage": i + k} for k in range(n)]
        else:
            out.append({"group": g, "tp": tp, "cp": knobs["cp"], "ep": knobs["ep"], "dp": replicas, "pp": n,
                        "first_stage": i})
        i += n
    # one label per run of consecutive meshes on the same group (RankMapper sorts ranks by label)
    runs: dict[str, int] = {}
    prev = None
    for m in out:
        if m["group"] != prev:
            runs[m["group"]] = runs.get(m["group"], 0) + 1
            prev = m["group"]
        m["run"] = runs[m["group"]]
    for m in out:
        m["label"] = m["group"] if runs[m["group"]] == 1 else f"{m['group']}_{m['run']}"
    return out


def miswired(ms: list[dict]) -> list[dict]:
    """Meshes whose link to the next mesh FlagScale computes wrongly: ProcessMesh.logical_coords_to_physical_ranks
    (parallel_context.py) drops the dp axis instead of ep from [tp, cp, ep, dp, pp] ("idx != 3"), so the
    last-stage rank of (tp i, dp k) is taken as i + tp*cp*(k + pp-1): right only when pp == 1 or dp == 1.
    Otherwise the inter-mesh p2p slices and global pipeline groups pair the wrong replicas (and some
    last-stage ranks get no receiver). Every mesh but the last is affected. The expert coordinates drop ep
    the same way (pp > 1 with ep > 1 is wrong too)."""
    return [x for x in ms[:-1] if x["pp"] > 1 and (x["dp"] * x["cp"] > 1 or x["ep"] > 1)]


def split_free_refusal(shape: dict, defaults: dict | None = None, *, devices_per_node: dict[str, int] | None = None,
                       tie_embeddings: bool = False, families: dict[str, str] | None = None) -> str | None:
    """`shape_refusal` of every plan of one pipeline shape given as runs of stages, whatever its layer split (at
    least one layer per stage), or None when the split may change the answer (then ask `shape_refusal` of the
    split plan). `shape`: {replicas, optional strategy, segments: [(group, tp, stages), ...] in pipeline order};
    `defaults` and the keywords as in `shape_refusal`. Stages on several groups or at several tp always need the
    hetero mode, and from there on the rule reads the meshes and knobs, never a layer range: the answer is
    `shape_refusal`'s, word for word. One group at one tp may run as plain Megatron-LM or not, by its split.
    Lets the search skip a template refused whatever its split. Pure."""
    segs = [(g, int(tp), int(n)) for g, tp, n in shape["segments"]]
    if any(n < 1 for *_, n in segs) or (len({g for g, *_ in segs}) <= 1 and len({t for _, t, _ in segs}) <= 1):
        return None
    kn = _knobs(shape, defaults)
    if kn["zero"] not in (0, 1):
        return _ZERO_REFUSAL.format(zero=kn["zero"])
    # the meshes of any split of these stages (meshes() reads their groups and tp, not their layers)
    return _hetero_refusal(_meshes(segs, int(shape["replicas"]), kn), kn, devices_per_node, tie_embeddings, families)


def shape_refusal(pipelines: list[dict], defaults: dict | None = None, *,
                  devices_per_node: dict[str, int] | None = None, tie_embeddings: bool = False,
                  families: dict[str, str] | None = None) -> str | None:
    """Why FlagScale (flag-scale 0.8.0) cannot run these pipeline shapes (plan-file `pipelines` entries:
    replicas, micro_batches, stages [{group, layers, tp}], optional per-shape `strategy`), or None.
    `defaults`: the plan-wide strategy the shapes' missing knobs fall back to. `devices_per_node`
    (group -> devices per node), when given, lets a group reappear later in the pipeline on whole nodes.
    `families` (group -> chip family), when given and the pipeline stays in one family, allows meshes
    with pp > 1 and dp > 1 before the last one (the export then gives each stage its own mesh, whose
    hops run on the same collective library); across families (or unknown) those hops would go through
    the CPU-forwarding path, so they are refused. Pure."""
    if not pipelines:
        return "no pipeline shapes"
    merged = merge_shapes(pipelines, defaults)
    if len(merged) > 1:
        same_stages = len({m["stages"] for m in merged}) == 1
        if same_stages:
            what = ", ".join(f"shape {m['members'][0][0]}: {m['micro_batches']} micro-batches, "
                             + " ".join(f"{k} {v}" for k, v in sorted(m["knobs"].items())) for m in merged)
            return ("FlagScale gives every data-parallel replica of its one pipeline the same micro-batch size and "
                    f"count (no uneven batch split across replicas, no per-replica knobs): {what}")
        groups = "; ".join(f"shape {m['members'][0][0]}: " + " > ".join(f"{g} tp{t} [{a},{b})" for g, a, b, t in m["stages"])
                           for m in merged)
        return (f"FlagScale runs one pipeline (its process meshes are consecutive pipeline stages, data parallelism "
                f"stays inside each mesh), not {len(merged)} different pipeline shapes trained as data-parallel "
                f"replicas of each other ({groups})")
    m = merged[0]
    st, kn = m["stages"], m["knobs"]
    counts = [b - a for _, a, b, _ in st]
    if any(c < 1 for c in counts):
        return f"FlagScale builds at least one layer per pipeline stage (layer split {counts})"
    if kn["zero"] not in (0, 1):
        return _ZERO_REFUSAL.format(zero=kn["zero"])
    if not needs_hetero(st):
        return None     # plain Megatron-LM mode: RUNTIME.refusal covers the strategy
    return _hetero_refusal(meshes(st, m["replicas"], kn), kn, devices_per_node, tie_embeddings, families)


_ZERO_REFUSAL = "FlagScale runs ZeRO 0 and 1 (distributed optimizer), not zero={zero}"


def _hetero_refusal(ms: list[dict], kn: dict, devices_per_node: dict[str, int] | None, tie_embeddings: bool,
                    families: dict[str, str] | None) -> str | None:
    """`shape_refusal` of one pipeline in hetero mode, from its meshes and knobs."""
    layout = " > ".join(f"{x['group']} tp{x['tp']} pp{x['pp']}" for x in ms)
    if kn["cp"] != 1:
        return (f"FlagScale's heterogeneous mode has no context parallelism (ParallelContext asserts "
                f"context_parallel_size == 1): cp={kn['cp']} on {layout}")
    if kn["vpp"] != 1:
        return f"FlagScale's heterogeneous mode has no interleaved pipeline schedule (vpp={kn['vpp']}) on {layout}"
    seen: dict[str, int] = {}
    for x in ms:
        seen.setdefault(x["group"], 0)
        seen[x["group"]] = max(seen[x["group"]], x["run"])
    for g, runs in seen.items():
        if runs == 1:
            continue
        if devices_per_node is None or g not in devices_per_node:
            return (f"group {g} hosts stages in {runs} separate parts of the pipeline ({layout}); FlagScale orders "
                    "ranks by device-type label, so each part needs its own label on whole nodes (pass "
                    "devices_per_node to check that)")
        for r in range(1, runs + 1):
            used = sum(x["tp"] * x["cp"] * x["dp"] * x["pp"] for x in ms if x["group"] == g and x["run"] == r)
            if used % devices_per_node[g]:
                return (f"group {g} hosts stages in {runs} separate parts of the pipeline ({layout}); part {r} "
                        f"uses {used} devices, not whole nodes of {devices_per_node[g]}: a node has one "
                        "FlagScale device-type label")
    bad = miswired(ms)
    fams = {(families or {}).get(x["group"]) for x in ms}
    if bad and (families is None or None in fams or len(fams) > 1):
        x = bad[0]
        return (f"FlagScale (da4935ec) links mesh {x['group']} tp{x['tp']} dp{x['dp']} pp{x['pp']} to the next mesh "
                "through the wrong ranks when a mesh before the last has pp > 1 and dp > 1 "
                "(ProcessMesh.logical_coords_to_physical_ranks drops the dp axis); splitting it into one mesh per "
                f"stage would send its inner pipeline hops through the cross-family path ({layout})")
    if kn["ep"] > 1 or kn["etp"] > 1:
        for x in ms:
            if (x["tp"] * x["dp"]) % (kn["etp"] * kn["ep"]):
                return (f"FlagScale mesh {x['group']} tp{x['tp']} dp{x['dp']}: tp*dp={x['tp'] * x['dp']} is not "
                        f"divisible by etp*ep={kn['etp'] * kn['ep']} (ProcessMesh expert rank generator)")
    if kn["ep"] > 1 and len(ms) > 1:
        for x in ms[:-1]:
            edp = x["tp"] * x["cp"] * x["dp"] // max(1, kn["etp"] * kn["ep"])
            if edp > 1:
                return (f"FlagScale (da4935ec) links the expert groups of mesh {x['group']} tp{x['tp']} dp{x['dp']} "
                        f"to the next mesh through the wrong ranks when ep > 1 and expert-dp > 1 (ep={kn['ep']}, "
                        f"expert dp {edp}; logical_coords_to_physical_ranks drops the ep axis)")
    if tie_embeddings and ms[0]["tp"] != ms[-1]["tp"]:
        return (f"FlagScale needs the first and last mesh to have the same tp with tied embeddings "
                f"(tp {ms[0]['tp']} and {ms[-1]['tp']})")
    return None
