"""flagscale: plan -> launch files (export). Its execution semantics, the RuntimeSpec the cost model and the
search read, are in baige_plan/specs/runtimes/flagscale.py."""

from __future__ import annotations

import re

import yaml

from baige_plan.errors import SpecError
from baige_plan.exports._build import (
    as_config,
    megatron_model_args,
    megatron_moe_router_args,
    moe_fusion_args,
    recorded,
)
from baige_plan.exports._common import (
    DATA_VAR,
    ITERS_VAR,
    MOCK_VAR,
    TOKENIZER_VAR,
    Export,
    ExportFile,
    VersionCheck,
    data_lines,
    host_names,
    plan_info,
    slurm_file,
    version_check_lines,
)
from baige_plan.specs.runtimes.flagscale import (
    COMMIT,
    RUNTIME,
    merge_shapes,
    meshes,
    miswired,
    needs_hetero,
    shape_refusal,
)

PYPI = "flag-scale==0.8.0"
WHEEL_SHA256 = "c3fbbcc585266a320c72805aee037d2f60085234e1a1432b75321e32284007c6"
ENTRYPOINT = "flagscale/train/train_gpt.py"
CONFIG = "flagscale_train.yaml"

# the *_VISIBLE_DEVICES variable each family's runtime reads (the runner counts processes from it)
_VISIBLE = {"nvidia": "CUDA_VISIBLE_DEVICES", "ascend": "ASCEND_RT_VISIBLE_DEVICES",
            "cambricon": "MLU_VISIBLE_DEVICES", "amd": "HIP_VISIBLE_DEVICES", "hygon": "HIP_VISIBLE_DEVICES",
            "kunlun": "XPU_VISIBLE_DEVICES", "musa": "MUSA_VISIBLE_DEVICES"}


# ----------------------------------------------------------------------------------------------- export

def _family(cluster: dict, group: str) -> str:
    for g in cluster.get("groups", []):
        if g["name"] == group:
            chip = g.get("chip") or {}
            return str(chip.get("family") or chip.get("vendor") or "nvidia") if isinstance(chip, dict) else "nvidia"
    return "nvidia"


def _group(cluster: dict, name: str) -> dict:
    for g in cluster.get("groups", []):
        if g["name"] == name:
            return g
    raise KeyError(name)


def _host(group: str, node: int) -> str:
    return f"{group}-node{node:04d}"


def _logical_slots(ms: list[dict], stages: tuple, members: list) -> list[tuple]:
    """FlagScale's logical rank order: meshes in pipeline order, inside a mesh tp-cp-ep-dp-pp (tp fastest).
    Each slot (mesh index, stage, replica, tp_rank, cp_rank, shape index, replica within that shape)."""
    rep_of = []
    for j, r in members:
        rep_of += [(j, k) for k in range(r)]
    out = []
    for k, x in enumerate(ms):
        for s in range(x["pp"]):
            for d in range(x["dp"]):
                for c in range(x["cp"]):
                    for t in range(x["tp"]):
                        out.append((k, x["first_stage"] + s, d, t, c) + rep_of[d])
    return out


def _devices(doc: dict, slots: list[tuple], ms: list[dict]) -> tuple[list[tuple[str, int, int]], list[str]]:
    """(group, node, device) of every logical slot: the plan's placement when it has one and FlagScale can
    follow it, else the group's devices filled in FlagScale's order. Returns (devices, caveats)."""
    cluster = doc["inputs"]["cluster"]
    place = {(p["pipeline"], p["replica"], p["stage"], p["tp_rank"], p.get("cp_rank", 0)): (p["group"], p["node"], p["device"])
             for p in doc.get("placement") or []}
    caveats: list[str] = []
    if place:
        devs = [place.get((j, rj, s, t, c)) for (_k, s, _d, t, c, j, rj) in slots]
        if None not in devs and _node_contiguous(devs, slots, ms):
            return devs, caveats
        caveats.append("the plan's rank placement is not one FlagScale can follow (its ranks go mesh by mesh in "
                       "pipeline order, tp, then cp, then dp, then pp, each node's devices in order); the hostfile "
                       "fills each group's nodes in FlagScale's order instead")
    nxt: dict[str, int] = {}
    devs = []
    prev_label = None
    for (k, *_rest) in slots:
        x = ms[k]
        g = _group(cluster, x["group"])
        dpn = int(g["devices_per_node"])
        d = nxt.get(x["group"], 0)
        if x["label"] != prev_label and d % dpn:      # a new label starts on a new node
            d += dpn - d % dpn
        prev_label = x["label"]
        devs.append((x["group"], d // dpn, d % dpn))
        nxt[x["group"]] = d + 1
    return devs, caveats


def _node_contiguous(devs: list, slots: list[tuple], ms: list[dict]) -> bool:
    """Logical order visits each node once, devices 0, 1, 2, ... in order, and a node has one label."""
    seen, cur, nxt_dev = set(), None, 0
    label_of: dict = {}
    for (g, n, d), (k, *_r) in zip(devs, slots, strict=True):
        if label_of.setdefault((g, n), ms[k]["label"]) != ms[k]["label"]:
            return False
        if (g, n) != cur:
            if (g, n) in seen:
                return False
            seen.add((g, n))
            cur, nxt_dev = (g, n), 0
        if d != nxt_dev:
            return False
        nxt_dev += 1
    return True


def _model_args(model: dict, job: dict, caveats: list[str] | None = None) -> dict:
    """Megatron model arguments as FlagScale config keys; `caveats` collects what its bundled Megatron-LM
    cannot build of the model's recorded build fields (exports/_build.py)."""
    h, heads = int(model["hidden"]), int(model["heads"])
    kv = int(model.get("kv_heads") or heads)
    swiglu = model.get("activation", "swiglu") == "swiglu"
    seq = int(job["seq_len"])
    a: dict = {"num_layers": int(model["layers"]), "hidden_size": h, "ffn_hidden_size": int(model["ffn_hidden"]),
               "num_attention_heads": heads}
    hd = model.get("head_dim")
    if hd and int(hd) * heads != h:
        a["kv_channels"] = int(hd)
    if kv != heads:
        a.update(group_query_attention=True, num_query_groups=kv)
    a.update(seq_length=seq, max_position_embeddings=max(seq, int(model.get("seq_len") or seq)))
    if recorded(model):   # bundled Megatron-LM (flag_scale/third_party/Megatron-LM) takes the same flags
        build, build_caveats, _ = megatron_model_args(model, "FlagScale's Megatron-LM")
        a.update(as_config(build))
        if caveats is not None:
            caveats += build_caveats
    elif swiglu:
        a.update(swiglu=True, normalization="RMSNorm", position_embedding_type="rope", disable_bias_linear=True)
    else:
        a.update(position_embedding_type="learned_absolute")
    a["untie_embeddings_and_output_weights"] = not model.get("tie_embeddings", False)
    drop = float(model.get("dropout") or 0.0)
    a.update(attention_dropout=drop, hidden_dropout=drop)
    moe = model.get("moe")
    if moe:
        a.update(num_experts=int(moe["experts"]), moe_router_topk=int(moe["top_k"]),
                 moe_ffn_hidden_size=int(moe["expert_ffn_hidden"]))
        if int(moe.get("shared_experts") or 0):
            a["moe_shared_expert_intermediate_size"] = int(moe["shared_experts"]) * int(moe["expert_ffn_hidden"])
        # the bundled Megatron-LM has --moe-router-pre-softmax but no --moe-shared-expert-gate (its arguments.py)
        router, router_caveats = megatron_moe_router_args(moe, "FlagScale's Megatron-LM", gate_flag=False)
        a.update(as_config(router + moe_fusion_args(model)))
        if caveats is not None:
            caveats += router_caveats
        L, first, freq = int(model["layers"]), int(moe.get("first_dense_layers") or 0), int(moe.get("layer_freq") or 1)
        if first or freq > 1:
            pat = [0 if i < first or (i - first) % freq else 1 for i in range(L)]
            a["moe_layer_freq"] = "[" + ",".join(map(str, pat)) + "]"
    return a


def _precision(prec: str) -> dict:
    p: dict = {}
    if prec in ("bf16", "fp8"):
        p["bf16"] = True
    elif prec == "fp16":
        p.update(fp16=True, initial_loss_scale=65536)
    if prec == "fp8":
        p["fp8_format"] = "hybrid"
    if prec != "fp32":
        p.update(attention_softmax_in_fp32=True, accumulate_allreduce_grads_in_fp32=True)
    return p


def _recompute(kind: str) -> dict:
    if kind == "selective":
        return {"recompute_granularity": "selective"}
    if kind == "full":
        return {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    return {}


def export(doc: dict) -> Export:
    i = plan_info(doc)
    model, job, cluster = i["model"], i["job"], i["cluster"]
    defaults = dict(doc.get("strategy") or {})
    merged = merge_shapes(doc["pipelines"], defaults)
    caveats: list[str] = []
    reason = shape_refusal(doc["pipelines"], defaults,
                           devices_per_node={g["name"]: int(g["devices_per_node"]) for g in cluster.get("groups", [])},
                           tie_embeddings=bool(model.get("tie_embeddings", False)),
                           families={g["name"]: _family(cluster, g["name"]) for g in cluster.get("groups", [])})
    if reason:   # exit 2: FlagScale refuses the plan (exports/files.py)
        raise SpecError("pipelines", f"flagscale refuses this plan: {reason}")
    m = merged[0]
    if len(merged) > 1:
        caveats.append(f"exported only shape {m['members'][0][0]} (the pipeline FlagScale runs), with its "
                       f"{m['replicas'] * m['micro_batches'] * m['knobs']['micro_batch']} sequences of the plan's "
                       f"global batch {job['global_batch']}; the other shapes' devices stay idle")
    kn, stages = m["knobs"], m["stages"]
    counts = [b - a for _, a, b, _ in stages]
    hetero = needs_hetero(stages)
    ms = meshes(stages, m["replicas"], kn)
    if hetero and miswired(ms):
        bad = ", ".join(f"{x['group']} tp{x['tp']} dp{x['dp']} pp{x['pp']}" for x in miswired(ms))
        ms = meshes(stages, m["replicas"], kn, split=True)
        caveats.append(f"FlagScale (da4935ec) wires a mesh with pp > 1 and dp > 1 before the last mesh to the next one "
                       f"through the wrong ranks ({bad}); exported with one mesh per pipeline stage, so those "
                       "stages' pipeline hops use FlagScale's inter-mesh path (the CPU path with "
                       "hetero_use_cpu_communication)")
    slots = _logical_slots(ms, stages, m["members"])
    devs, c2 = _devices(doc, slots, ms)
    caveats += c2
    gb = m["replicas"] * m["micro_batches"] * kn["micro_batch"]

    system: dict = {"tensor_model_parallel_size": ms[0]["tp"], "pipeline_model_parallel_size": len(stages)}
    if not hetero:
        system["context_parallel_size"] = kn["cp"]
        if kn["vpp"] > 1:
            system["num_virtual_stages_per_pipeline_rank"] = kn["vpp"]
        if len(stages) > 1 and len(set(counts)) > 1:
            mid = counts[1:-1]
            even = mid[0] if mid else None
            if counts[0] != even:
                system["decoder_first_pipeline_num_layers"] = counts[0]
            if counts[-1] != even:
                system["decoder_last_pipeline_num_layers"] = counts[-1]
        if kn["ep"] > 1 or kn["etp"] > 1:
            system.update(expert_model_parallel_size=kn["ep"], expert_tensor_parallel_size=kn["etp"])
        if defaults.get("moe_a2a_overlap"):
            # the bundled Megatron-LM's overlap_moe_expert_parallel_comm (flagscale/train/train_gpt.py builds the
            # combined 1F1B's schedule plan with it), as costed (cost/moe.py a2a_overlap_pair_s)
            system["overlap_moe_expert_parallel_comm"] = True
    if kn["sequence_parallel"] and any(x["tp"] > 1 for x in ms):
        system["sequence_parallel"] = True
    if kn["zero"] >= 1:
        system.update(use_distributed_optimizer=True, overlap_param_gather=True)
    system["overlap_grad_reduce"] = True
    families = {_family(cluster, x["group"]) for x in ms}
    if hetero:
        h: dict = {"enable_hetero": True}
        cross = len(families) > 1
        bridge_kind = None
        if cross:
            kinds = {b.get("kind") for b in cluster.get("bridges", []) or []}
            bridge_kind = "rdma" if kinds == {"rdma"} else "cpu-forwarding"
            if bridge_kind == "cpu-forwarding":
                h["hetero_use_cpu_communication"] = True
        h["hetero_pipeline_layer_split"] = counts
        h["hetero_process_meshes"] = [v for x in ms for v in (x["tp"], x["cp"], x["ep"], x["dp"], x["pp"])]
        h["hetero_device_types"] = [x["label"] for x in ms]
        h["hetero_current_device_type"] = ms[0]["label"]
        h["standalone_embedding_stage"] = False
        if kn["ep"] > 1 or kn["etp"] > 1:
            h["expert_tensor_parallel_size_per_process_mesh"] = [kn["etp"]] * len(ms)
        system["hetero"] = h
        if bridge_kind == "rdma":
            system["distributed_backend"] = "flagcx"
            caveats.append("cross-family traffic goes through FlagCX (distributed_backend: flagcx): the flagcx "
                           "Python package must be installed on every node")
    system["precision"] = _precision(job.get("precision", "bf16"))
    rc = _recompute(kn["recompute"])
    if rc:
        system["recompute"] = rc
    system["logging"] = {"log_interval": 1, "log_throughput": True}
    system["checkpoint"] = {"save_interval": 1000000, "ckpt_format": "torch"}

    margs = _model_args(model, job, caveats)
    margs.update(micro_batch_size=kn["micro_batch"], global_batch_size=gb, train_iters=100, seed=1234,
                 clip_grad=1.0, init_method_std=0.02)
    margs["optimizer"] = {"weight_decay": 0.1, "adam_beta1": 0.9, "adam_beta2": 0.95,
                          "lr_scheduler": {"lr": 3.0e-4, "min_lr": 3.0e-5, "lr_warmup_fraction": 0.01,
                                           "lr_decay_style": "cosine"}}
    data = {"mock_data": True, "split": "1",
            "tokenizer": {"tokenizer_type": "NullTokenizer", "vocab_size": int(model["vocab"]) - 1}}

    # hostfile in FlagScale's logical order: nodes in order of first use, one label per node
    nodes: list[tuple[str, int]] = []
    used: dict[tuple[str, int], int] = {}
    label_of: dict[tuple[str, int], str] = {}
    for (g, n, d), (k, *_r) in zip(devs, slots, strict=True):
        if (g, n) not in used:
            nodes.append((g, n))
        used[(g, n)] = max(used.get((g, n), 0), d + 1)
        if label_of.setdefault((g, n), ms[k]["label"]) != ms[k]["label"]:
            caveats.append(f"node {_host(g, n)} would carry two FlagScale device-type labels "
                           f"({label_of[(g, n)]}, {ms[k]['label']}); a hostfile line has one")
    names = host_names(i)     # --hostfile's hosts (in `export --to hostfile` order), else placeholders
    hostfile = [f"# FlagScale hostfile ({PYPI}): HOST slots=N type=LABEL, in FlagScale's rank order",
                "# replace the placeholder host names with the nodes' addresses (keep the order)"
                if not i["opts"].hosts else "# hosts from --hostfile"]
    for g, n in nodes:
        hostfile.append(f"{names.get((g, n), _host(g, n))} slots={used[(g, n)]}"
                        + (f" type={label_of[(g, n)]}" if hetero else ""))

    # 1 orders TP/CP communication before compute; megatron's validate_args asks for more connections for the EP
    # all-to-all overlap (a warning, "1 or 32" when both), so 32 where no TP or CP needs the 1
    a2a_only = defaults.get("moe_a2a_overlap") and all(x["tp"] == 1 for x in ms) and kn["cp"] == 1
    envs: dict = {"CUDA_DEVICE_MAX_CONNECTIONS": 32 if a2a_only else 1}
    if hetero:
        per: dict = {}
        for x in ms:
            g = _group(cluster, x["group"])
            var = _VISIBLE.get(_family(cluster, x["group"]), "CUDA_VISIBLE_DEVICES")
            per[x["label"]] = {var: ",".join(str(d) for d in range(int(g["devices_per_node"])))}
        envs["device_type_specific"] = per
    else:
        g = _group(cluster, ms[0]["group"])
        envs[_VISIBLE.get(_family(cluster, ms[0]["group"]), "CUDA_VISIBLE_DEVICES")] = \
            ",".join(str(d) for d in range(int(g["devices_per_node"])))
    name = f"{model['name']}-{cluster['name']}".replace("/", "-")
    config = {
        "experiment": {
            "exp_name": name, "exp_dir": f"./outputs/{name}",
            "task": {"type": "train", "backend": "megatron", "entrypoint": ENTRYPOINT},
            "runner": {"backend": "torchrun", "hostfile": "hostfile", "rdzv_backend": "static", "ssh_port": 22},
            "envs": envs,
        },
        "action": "run",
        "hydra": {"run": {"dir": "${experiment.exp_dir}/hydra"}},
        "train": {"system": system, "model": margs, "data": data},
    }
    head = [f"# {i['title']}", f"# {RUNTIME.title}: {PYPI} (FlagOpen/FlagScale@{COMMIT[:8]})",
            _mode_line(ms, hetero),
            f"# data: mock data and a NullTokenizer of the model's vocabulary; launch.sh replaces them with {DATA_VAR} and "
            f"{TOKENIZER_VAR} unless {MOCK_VAR}=1, and sets train_iters from {ITERS_VAR}"]
    if hetero and len(families) > 1:
        head.append("# vendor builds: set device_type_specific: {LABEL: {build_dir: /path/to/FlagScale-for-that-chip}} "
                    "(hardware/<Vendor_Model> patches) for labels whose nodes need another build")
    head += [f"# cannot express: {c}" for c in caveats]
    text = "\n".join(head) + "\n" + yaml.safe_dump(config, sort_keys=False, default_flow_style=None, width=120)

    launch = "\n".join([
        "#!/bin/bash",
        f"# {i['title']}",
        f"# {RUNTIME.title}: {PYPI} (FlagOpen/FlagScale@{COMMIT[:8]}); install it on every node:",
        f"#   pip install {PYPI}",
        "# FlagScale's runner reads the hostfile next to this script (BAIGE_HOSTFILE names another), writes one",
        "# torchrun script per node and starts it over ssh: this folder must be at the same path on every node,",
        "# or set experiment.runner.no_shared_fs: true. Nothing is written inside the installed package: logs,",
        "# hydra files and checkpoints go to BAIGE_OUTPUT_DIR (default: outputs/ beside this script).",
        "# Dry run (writes the per-node scripts only): append action=dryrun.",
        "set -euo pipefail",
        'DIR="$(cd "$(dirname "$0")" && pwd)"',
        *data_lines(**DATA_HELP, mock_default=i["opts"].mock_data),
        *version_check_lines(f"{PYPI} on torch {VERSIONS[1].range[len('torch'):]}", VERSIONS),
        f'OUT="${{BAIGE_OUTPUT_DIR:-$DIR/outputs/{re.sub(r"[^A-Za-z0-9._-]", "-", name)}}}"',
        'HOSTFILE="${BAIGE_HOSTFILE:-$DIR/hostfile}"',
        f'if [ "${MOCK_VAR}" = 1 ]; then',
        "  DATA=()   # the config's mock data and NullTokenizer",
        "else",
        f'  DATA=(train.data.mock_data=false "+train.data.data_path=${DATA_VAR}" '
        'train.data.tokenizer.tokenizer_type=HuggingFaceTokenizer '
        f'"+train.data.tokenizer.tokenizer_model=${TOKENIZER_VAR}" "~train.data.tokenizer.vocab_size")',
        "fi",
        'FLAGSCALE_ROOT="$("$PYTHON" -c \'import flag_scale, os; print(os.path.dirname(flag_scale.__file__))\')"',
        'cd "$DIR"   # not into the installed package: the runner resolves exp_dir and hydra.run.dir from here',
        f'exec "$PYTHON" "$FLAGSCALE_ROOT/run.py" --config-path "$DIR" --config-name {CONFIG.rsplit(".", 1)[0]} '
        'experiment.runner.hostfile="$HOSTFILE" experiment.exp_dir="$OUT" hydra.run.dir="$OUT/hydra" \\',
        f'  train.model.train_iters="${ITERS_VAR}" ${{DATA[@]+"${{DATA[@]}}"}} "$@"',
    ]) + "\n"
    slurm = slurm_file(
        i, nnodes=len(nodes), gpus=max(used.values()), runtime="flagscale", data_kw=DATA_HELP, per_node=False,
        note="FlagScale's own runner starts every node over ssh from the first one (passwordless ssh between them)",
        pre=["# the allocation's hosts, in SLURM's order, with this hostfile's slots and device types",
             'HOSTFILE="$HERE/hostfile.slurm-$SLURM_JOB_ID"',
             "k=0",
             'while read -r host rest; do',
             '  case "$host" in ""|"#"*) continue ;; esac',
             '  echo "${NODES[$k]} $rest"',
             "  k=$((k + 1))",
             'done < "$HERE/hostfile" > "$HOSTFILE.tmp"',
             'mv -f "$HOSTFILE.tmp" "$HOSTFILE"',
             'export BAIGE_HOSTFILE="$HOSTFILE"'])
    rows = ["rank,host,local_rank,device_type,mesh,stage,layers_start,layers_end,replica,tp_rank,cp_rank,group,node,device"]
    base: dict[tuple[str, int], int] = {}
    acc = 0
    for g, n in nodes:
        base[(g, n)] = acc
        acc += used[(g, n)]
    for (g, n, d), (k, s, rep, t, c, _j, _rj) in sorted(zip(devs, slots, strict=True), key=lambda z: base[z[0][:2]] + z[0][2]):
        a, b = stages[s][1], stages[s][2]
        rows.append(f"{base[(g, n)] + d},{names.get((g, n), _host(g, n))},{d},{ms[k]['label'] if hetero else ''},{k},{s},{a},{b},"
                    f"{rep},{t},{c},{g},{n},{d}")
    return Export((ExportFile(CONFIG, text), ExportFile("launch.sh", launch),
                   ExportFile("hostfile", "\n".join(hostfile) + "\n"),
                   ExportFile("rank_map.csv", "\n".join(rows) + "\n"), slurm), tuple(caveats))


# What launch.sh reads from the data variables (exports/_common.py data_lines) as Hydra overrides of train.data,
# and the versions it accepts: the pinned flag-scale line on the torch its wheel declares (torch==2.7.1).
DATA_HELP = {"data": "Megatron indexed data: a PREFIX of PREFIX.bin/.idx (train.data.data_path)",
             "tokenizer": "a Hugging Face tokenizer folder or hub name (train.data.tokenizer: HuggingFaceTokenizer)",
             "mock": "Megatron mock data with a NullTokenizer (the config as written)"}
VERSIONS = (VersionCheck("flag-scale", "0.8.0", "0.9", dists=("flag-scale", "flag_scale")),
            VersionCheck("torch", "2.7", "2.8", dists=("torch",)))


def _mode_line(ms: list[dict], hetero: bool) -> str:
    if not hetero:
        return "# Megatron-LM mode (one group, one tp): no hetero section"
    return "# heterogeneous mode, meshes: " + " > ".join(
        f"{x['label']} tp{x['tp']} cp{x['cp']} ep{x['ep']} dp{x['dp']} pp{x['pp']}" for x in ms)
