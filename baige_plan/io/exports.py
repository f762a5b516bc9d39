"""Plan -> launch configuration for training frameworks. Each exporter returns (text, caveats):
caveats name what the framework cannot express; they go to stderr and, where the format has
comments, into the text.

Argument names (checked against each project's sources/docs):
- Megatron-LM (megatron/training/arguments.py): --tensor-model-parallel-size,
  --pipeline-model-parallel-size, --num-virtual-stages-per-pipeline-rank (newer; older releases:
  --num-layers-per-virtual-pipeline-stage), --decoder-first/last-pipeline-num-layers,
  --sequence-parallel, --context-parallel-size, --expert-model-parallel-size,
  --expert-tensor-parallel-size, --use-distributed-optimizer, --recompute-granularity,
  --recompute-method, --recompute-num-layers, --micro-batch-size, --global-batch-size, --seq-length.
- DeepSpeed config JSON: train_batch_size = train_micro_batch_size_per_gpu x
  gradient_accumulation_steps x data-parallel size; zero_optimization.stage; bf16/fp16.enabled.
- torchtitan job TOML: [parallelism] data_parallel_replicate_degree, data_parallel_shard_degree,
  tensor_parallel_degree, pipeline_parallel_degree, context_parallel_degree,
  expert_parallel_degree, expert_tensor_parallel_degree, pipeline_parallel_schedule,
  pipeline_parallel_microbatch_size; [training] local_batch_size, global_batch_size, seq_len;
  [activation_checkpoint] mode, selective_ac_option.
- PaddlePaddle fleet: DistributedStrategy.hybrid_configs {dp_degree, mp_degree, pp_degree,
  sharding_degree, sep_degree, ...}, pipeline_configs {accumulate_steps, micro_batch_size}.
"""

from __future__ import annotations

import json

from baige_plan.errors import InputError

TARGETS = ("megatron", "deepspeed", "torchtitan", "paddle", "hostfile")


def _info(doc: dict) -> dict:
    s = dict(doc["strategy"])
    pipes = doc["pipelines"]
    p0 = pipes[0]
    s.update(p0.get("strategy") or {})          # heterogeneous plans: the first shape's own knobs
    counts = [st["layers"][1] - st["layers"][0] for st in p0["stages"]]
    s["pp"] = len(counts)
    s["tp"] = p0["stages"][0]["tp"]
    s["dp"] = p0["replicas"]
    m = p0["micro_batches"]
    model = doc["inputs"]["model"]
    job = doc["inputs"]["job"]
    cluster = doc["inputs"]["cluster"]
    est = doc.get("estimate") or {}
    return {"s": s, "m": m, "counts": counts, "model": model, "job": job, "cluster": cluster,
            "gb": s["dp"] * m * s["micro_batch"], "layers": model["layers"], "shapes": len(pipes),
            "stage_tps": [st["tp"] for st in p0["stages"]], "stage_groups": [st["group"] for st in p0["stages"]],
            "shape_groups": [sorted({st["group"] for st in p["stages"]}) for p in pipes],
            "title": (f"{model['name']} on {cluster['name']}: predicted {est.get('step_time_s', 0):.4g} s/step, "
                      f"MFU {est.get('mfu', 0):.1%} (baige-plan)")}


def _common_caveats(i: dict) -> list[str]:
    c = []
    if i["shapes"] > 1:
        groups = "; ".join(f"shape {k}: {', '.join(g)}" for k, g in enumerate(i["shape_groups"]))
        c.append(f"this plan has {i['shapes']} pipeline shapes ({groups}) trained as data-parallel replicas of "
                 "each other; one launch config cannot express that: only shape 0 is exported (its global batch "
                 "is shape 0's share), and the shapes' gradients must be synchronised across them")
    if len(set(i["stage_tps"])) > 1:
        c.append(f"per-stage tensor parallelism (stage tp {i['stage_tps']}) is not expressible: exported with "
                 f"tp={i['stage_tps'][0]} for every stage")
    if len(set(i["stage_groups"])) > 1:
        c.append(f"stages run on different groups ({' > '.join(i['stage_groups'])}); groups of different chip "
                 "families need their own launcher and collective library, bridged for the pipeline hops")
    if len({st for st in i["counts"][1:-1]}) > 1:
        c.append(f"free-form layer split {i['counts']}: only uneven first/last stages are exported")
    return c


def megatron(doc: dict) -> tuple[str, list[str]]:
    i = _info(doc)
    s, counts, L = i["s"], i["counts"], i["layers"]
    caveats = _common_caveats(i)
    args: list[tuple[str, object]] = [
        ("--tensor-model-parallel-size", s["tp"]), ("--pipeline-model-parallel-size", s["pp"]),
        ("--context-parallel-size", s["cp"])]
    if s.get("sequence_parallel") and s["tp"] > 1:
        args.append(("--sequence-parallel", None))
    if s["ep"] > 1 or s.get("etp", 1) > 1:
        args += [("--expert-model-parallel-size", s["ep"]), ("--expert-tensor-parallel-size", s.get("etp", 1))]
    if s["vpp"] > 1:
        args.append(("--num-virtual-stages-per-pipeline-rank", s["vpp"]))
    if s["pp"] > 1 and len(set(counts)) > 1:
        mid = counts[1:-1]
        even = mid[0] if mid else None
        if counts[0] != even:
            args.append(("--decoder-first-pipeline-num-layers", counts[0]))
        if counts[-1] != even:
            args.append(("--decoder-last-pipeline-num-layers", counts[-1]))
    z = s["zero"]
    if z >= 1:
        args.append(("--use-distributed-optimizer", None))
    if z == 2:
        caveats.append("zero 2: Megatron's distributed optimizer shards optimizer states and reduce-scatters "
                       "gradients; it keeps a full fp32 gradient buffer, so memory is ZeRO-1-like")
    if z == 3:
        caveats.append("zero 3: Megatron-LM shards parameters only through its FSDP path "
                       "(--use-torch-fsdp2, or Megatron-core custom FSDP); check your release's flag")
    if s["recompute"] == "selective":
        args.append(("--recompute-granularity", "selective"))
    elif s["recompute"] == "full":
        args += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                 ("--recompute-num-layers", 1)]
    args += [("--micro-batch-size", s["micro_batch"]), ("--global-batch-size", i["gb"]),
             ("--seq-length", i["job"]["seq_len"]), ("--num-layers", L)]
    prec = i["job"].get("precision", "bf16")
    if prec in ("bf16", "fp8"):
        args.append(("--bf16", None))
    elif prec == "fp16":
        args.append(("--fp16", None))
    if prec == "fp8":
        args.append(("--fp8-format", "hybrid"))
    lines = [f"# {i['title']}", "# Megatron-LM pretrain_gpt.py arguments (one per line; shlex-parsable)"]
    if s["vpp"] > 1:
        lines.append(f"# older Megatron-LM: --num-layers-per-virtual-pipeline-stage {L // (s['pp'] * s['vpp'])}")
    lines += [f"# cannot express: {c}" for c in caveats]
    lines += [k if v is None else f"{k} {v}" for k, v in args]
    return "\n".join(lines) + "\n", caveats


def deepspeed(doc: dict) -> tuple[str, list[str]]:
    i = _info(doc)
    s = i["s"]
    caveats = _common_caveats(i)
    if s["tp"] > 1 or s["pp"] > 1 or s["cp"] > 1 or s["ep"] > 1:
        caveats.append(f"tp={s['tp']} pp={s['pp']} cp={s['cp']} ep={s['ep']} are not DeepSpeed config keys: set them "
                       "in the model code (Megatron-DeepSpeed: --tensor-model-parallel-size, "
                       "--pipeline-model-parallel-size; pipeline via deepspeed.pipe.PipelineModule(num_stages=pp))")
    if s["recompute"] == "selective":
        caveats.append("selective recomputation is a model-code choice; activation_checkpointing configures "
                       "deepspeed.checkpointing for the layers the model checkpoints")
    if s["vpp"] > 1:
        caveats.append(f"vpp={s['vpp']}: DeepSpeed's pipeline engine has no interleaved schedule")
    prec = i["job"].get("precision", "bf16")
    cfg = {
        "train_batch_size": i["gb"],
        "train_micro_batch_size_per_gpu": s["micro_batch"],
        "gradient_accumulation_steps": i["m"],
        "bf16": {"enabled": prec in ("bf16", "fp8")},
        "fp16": {"enabled": prec == "fp16"},
        "zero_optimization": {"stage": s["zero"], "overlap_comm": True, "contiguous_gradients": True,
                              "reduce_scatter": True},
        "activation_checkpointing": {"partition_activations": bool(s.get("sequence_parallel")),
                                     "contiguous_memory_optimization": False, "cpu_checkpointing": False},
        "gradient_clipping": 1.0,
        "steps_per_print": 10,
        "wall_clock_breakdown": False,
    }
    if s["pp"] > 1:
        cfg["pipeline"] = {"stages": s["pp"], "partition": "uniform"}
    return json.dumps(cfg, indent=2) + "\n", caveats


def torchtitan(doc: dict) -> tuple[str, list[str]]:
    i = _info(doc)
    s = i["s"]
    caveats = _common_caveats(i)
    z = s["zero"]
    rep, shard = (s["dp"], 1) if z == 0 else (1, s["dp"])
    if z in (1, 2):
        caveats.append(f"zero {z}: torchtitan shards with FSDP2; fsdp_reshard_after_forward = \"never\" keeps "
                       "parameters gathered after forward (ZeRO-2-like), ZeRO-1 alone is not available")
    if s["tp"] > 1 and not s.get("sequence_parallel"):
        caveats.append("torchtitan's tensor parallel always shards norms/dropout along the sequence (SP on)")
    sched = "Interleaved1F1B" if s["vpp"] > 1 else "1F1B"
    local = s["micro_batch"] * i["m"] if s["pp"] > 1 else s["micro_batch"]
    lines = [f"# {i['title']}"] + [f"# cannot express: {c}" for c in caveats] + [
        "[training]",
        f"local_batch_size = {local}",
        f"global_batch_size = {i['gb']}",
        f"seq_len = {i['job']['seq_len']}",
        f"mixed_precision_param = \"{'float32' if i['job'].get('precision') == 'fp32' else 'bfloat16'}\"",
        "",
        "[parallelism]",
        f"data_parallel_replicate_degree = {rep}",
        f"data_parallel_shard_degree = {shard}",
        f"tensor_parallel_degree = {s['tp']}",
        f"pipeline_parallel_degree = {s['pp']}",
        f"context_parallel_degree = {s['cp']}",
        f"expert_parallel_degree = {s['ep']}",
        f"expert_tensor_parallel_degree = {s.get('etp', 1)}",
        f"pipeline_parallel_schedule = \"{sched}\"",
        f"pipeline_parallel_microbatch_size = {s['micro_batch']}",
    ]
    if s["vpp"] > 1:
        lines.append(f"pipeline_parallel_layers_per_stage = {i['layers'] // (s['pp'] * s['vpp'])}")
    if z in (1, 2):
        lines.append("fsdp_reshard_after_forward = \"never\"")
    lines += ["", "[activation_checkpoint]", f"mode = \"{s['recompute']}\""]
    if s["recompute"] == "selective":
        lines.append("selective_ac_option = \"op\"")
    return "\n".join(lines) + "\n", caveats


def paddle(doc: dict) -> tuple[str, list[str]]:
    i = _info(doc)
    s = i["s"]
    caveats = _common_caveats(i)
    z = s["zero"]
    dp, sharding = (s["dp"], 1) if z == 0 else (1, s["dp"])
    if s["cp"] > 1:
        caveats.append(f"cp={s['cp']} maps to sep_degree (Paddle's sequence parallel over attention segments); "
                       "its communication differs from ring attention")
    if s["ep"] > 1:
        caveats.append(f"ep={s['ep']}: expert parallelism is configured in the MoE layer (moe_group), "
                       "not in hybrid_configs on every Paddle release")
    if s["vpp"] > 1:
        caveats.append(f"vpp={s['vpp']}: set pipeline_configs['schedule_mode'] = 'VPP' and the model's "
                       "num_virtual_pipeline_stages (PaddleNLP virtual_pp_degree)")
    hybrid = {"dp_degree": dp, "mp_degree": s["tp"], "pp_degree": s["pp"], "sharding_degree": sharding,
              "sep_degree": s["cp"]}
    pipe = {"accumulate_steps": i["m"], "micro_batch_size": s["micro_batch"]}
    lines = [f"# {i['title']}", "# PaddlePaddle fleet hybrid parallel setup (collective mode)"]
    lines += [f"# cannot express: {c}" for c in caveats]
    lines += [f"# sharding stage: {'none' if z == 0 else f'stage{z}'} (PaddleNLP --sharding stage{max(z, 1)}); "
              f"recompute: {s['recompute']}; sequence parallel: {bool(s.get('sequence_parallel'))}",
              "import paddle.distributed.fleet as fleet", "",
              "strategy = fleet.DistributedStrategy()",
              f"strategy.hybrid_configs = {json.dumps(hybrid)}",
              f"strategy.pipeline_configs = {json.dumps(pipe)}"]
    if s["recompute"] == "full":
        lines.append("strategy.recompute = True")
    lines.append("fleet.init(is_collective=True, strategy=strategy)")
    return "\n".join(lines) + "\n", caveats


def hostfile(doc: dict) -> tuple[str, list[str]]:
    i = _info(doc)
    groups = i["cluster"].get("groups", [])
    lines = [f"# {i['title']}", "# one line per node: HOSTNAME slots=DEVICES (placeholder names: replace with yours);",
             "# ranks follow the plan's placement: node n holds ranks n*slots .. n*slots + slots - 1"]
    total_nodes, dpn0 = 0, None
    for g in groups:
        dpn = g["devices_per_node"]
        dpn0 = dpn0 or dpn
        for n in range(g["nodes"]):
            lines.append(f"{g['name']}-node{n:04d} slots={dpn}")
        total_nodes += g["nodes"]
    first = f"{groups[0]['name']}-node0000" if groups else "localhost"
    lines.append(f"# torchrun --nnodes {total_nodes} --nproc-per-node {dpn0} --node-rank $NODE_RANK "
                 f"--master-addr {first} --master-port 29500 train.py")
    caveats = []
    if len(groups) > 1:
        caveats.append("several groups: torchrun needs the same --nproc-per-node on every node; launch each "
                       "family with its own launcher")
    return "\n".join(lines) + "\n", caveats


def export_plan(doc: dict, target: str) -> tuple[str, list[str]]:
    fn = {"megatron": megatron, "deepspeed": deepspeed, "torchtitan": torchtitan, "paddle": paddle,
          "hostfile": hostfile}.get(target)
    if fn is None:
        raise InputError("--to", "", f"unknown target {target!r} (one of {', '.join(TARGETS)})")
    try:
        return fn(doc)
    except (KeyError, TypeError, IndexError) as e:
        raise InputError("PLAN", "", f"plan is missing what the {target} export needs: {e}") from None
