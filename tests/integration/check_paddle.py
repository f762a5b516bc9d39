"""Does PaddleFormers accept baige-plan's Paddle export, unchanged, and does it mean the plan?

    .venv-it/paddle/bin/python tests/integration/check_paddle.py DIR [DIR...]

Each DIR holds a plan (plan.yaml / plan.yml / plan.json, as written by `baige-plan plan --out`) and the files
`baige-plan export PLAN --to paddle --out-dir DIR` wrote next to it (paddleformers_args.yaml, config.json,
launch.sh, hostfile). Runs in the runtime venv (tests/integration/requirements-paddle.txt: paddleformers 1.2.0 on
paddlepaddle 3.3.1, CPU build), never imports baige_plan, needs no GPU.

For each DIR, in a fresh interpreter (fleet state is process-global) with the plan's world size in the
environment (PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ID=0, PADDLE_TRAINER_ENDPOINTS, ... as
`python -m paddle.distributed.launch` sets them for rank 0):
  1. parses the arguments exactly as `paddleformers-cli train FILE` does on every rank
     (paddleformers/cli/launcher.py -> cli/train/tuner.py:run_tuner -> cli/hparams/parser.py:read_args, then
     get_train_args: PdArgumentParser([ModelArguments, DataArguments, End2EndProcessorArguments,
     GeneratingArguments, FinetuningArguments]).parse_dict, which refuses unknown keys), with launch.sh's
     overrides (model_name_or_path=DIR, input_dir=...) on the command line. FinetuningArguments is
     TrainingArguments: its __post_init__ runs all of PaddleFormers' consistency checks and then Paddle's own
     fleet.init(is_collective=True, strategy) -> Fleet._init_hybrid_parallel_env -> the real
     CommunicateTopology / HybridCommunicateGroup / EPHybridCommunicateGroup, with their assertions
     (degrees multiply to the world size, sharding stage vs pipeline, EP/CP topology, ...).
     Stubbed, and only these, because they need other live processes and a GPU communicator:
       paddle.distributed.init_parallel_env (TCP store + NCCL), paddle.distributed.new_group (returns a Group
       over the requested ranks, checked to lie inside the world, with no communicator), and the collectives
       fleet calls while building groups (all_reduce, broadcast, barrier: no-ops); for the model skeleton
       (step 2), ParallelEnv's GPU device id (0), which the CPU build does not have.
  2. runs what run_sft (cli/train/sft/workflow.py) does before touching a GPU: AutoConfig.from_pretrained(DIR)
     on the exported config.json, LlmMetaConfig.set_llm_config(config, training_args), the pretraining-data
     preconditions (create_pretrained_dataset: input_dir "WEIGHT PREFIX", max_steps > 0, check_data_split), and
     resolves the model class AutoModelForCausalLM[Pipe] would build, and builds it on the CPU with narrow
     widths but the exported layers, heads, kv heads and parallel layout, so that Paddle's PipelineLayer /
     SegmentLayers (pp, vpp, pp_seg_method) and tensor-parallel layers run their own checks and report the
     stage boundaries (the PaddleFleet MoE classes need paddlefleet, which is not on PyPI: their config is
     checked, the class is not built, and a note says so).
  3. checks the parsed values and Paddle's topology against the plan (degrees, sharding stage and group,
     micro-batch, accumulation steps, global batch, sequence length, precision, recompute, model shape), plus
     two trainer-time rules that need a model to trigger and are therefore re-stated here with their source:
     paddle/distributed/fleet/model.py:distributed_model (interleaved 1F1B needs accumulate_steps >= 2·pp) and
     paddleformers/trainer/trainer.py:Trainer._wrap_model (sharding stage3 is refused with tensor parallel).
Prints `ok DIR` or `FAIL DIR: reason` per DIR (indented `note:` lines may follow), then `N passed, M failed`;
exits 1 if any failed.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _checklib import load_plan

ARGS_FILE = "paddleformers_args.yaml"
CONFIG_FILE = "config.json"
DATA = "1.0 /nonexistent/pretrain_text_document"   # what launch.sh passes as input_dir (DATA)


# ----------------------------------------------------------------------------------------------- the plan
def plan_facts(doc: dict) -> dict:
    """What the export must mean, from the plan document (shape 0 of a heterogeneous plan)."""
    s = dict(doc["strategy"])
    p0 = doc["pipelines"][0]
    s.update(p0.get("strategy") or {})
    counts = [st["layers"][1] - st["layers"][0] for st in p0["stages"]]
    tp, pp, dp = p0["stages"][0]["tp"], len(counts), p0["replicas"]
    cp, ep = s.get("cp", 1), s.get("ep", 1)
    groups = doc["inputs"]["cluster"].get("groups", [])
    return {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "etp": s.get("etp", 1), "zero": s.get("zero", 0),
            "vpp": s.get("vpp", 1), "mb": s["micro_batch"], "m": p0["micro_batches"], "counts": counts,
            "sp": bool(s.get("sequence_parallel")) and tp > 1, "recompute": s.get("recompute", "none"),
            "world": tp * pp * dp * cp, "gb": dp * p0["micro_batches"] * s["micro_batch"],
            "seq": doc["inputs"]["job"]["seq_len"], "precision": doc["inputs"]["job"].get("precision", "bf16"),
            "model": doc["inputs"]["model"],
            "devices_per_node": groups[0]["devices_per_node"] if groups else 8}


# -------------------------------------------------------------------------------------------- one DIR (child)
def _environment(world: int, per_node: int) -> None:
    eps = [f"127.0.0.{1 + r // per_node}:{6170 + r % per_node}" for r in range(world)]
    os.environ.update({
        "PADDLE_TRAINERS_NUM": str(world), "PADDLE_TRAINER_ID": "0", "PADDLE_RANK_IN_NODE": "0",
        "PADDLE_TRAINER_ENDPOINTS": ",".join(eps), "PADDLE_CURRENT_ENDPOINT": eps[0],
        "PADDLE_LOCAL_SIZE": str(min(per_node, world)), "PADDLE_NNODES": str(-(-world // per_node)),
        "PADDLE_LOCAL_DEVICE_IDS": ",".join(str(i) for i in range(min(per_node, world))),
        "PADDLE_WORLD_DEVICE_IDS": ",".join(str(r % per_node) for r in range(world)),
        "CUDA_VISIBLE_DEVICES": "", "FLAGS_set_to_1d": "False"})


def _stub_communication(world: int) -> None:
    """Only what needs other processes / a GPU communicator (see the module docstring)."""
    import paddle.distributed as dist
    from paddle.distributed.communication.group import Group

    made = [0]

    def new_group(ranks=None, *args, **kwargs):
        ranks = sorted(range(world) if ranks is None else ranks)
        bad = [r for r in ranks if not 0 <= r < world]
        if bad:
            raise AssertionError(f"Paddle asked for a communication group over ranks {bad} outside world {world}")
        made[0] += 1
        return Group(ranks.index(0) if 0 in ranks else -1, made[0], ranks)

    def noop(*args, **kwargs):
        return None

    dist.new_group = new_group
    dist.init_parallel_env = noop
    for name in ("all_reduce", "broadcast", "barrier"):
        setattr(dist, name, noop)


def _build_skeleton(cls, cfg, ta, notes: list) -> list[str]:
    """Build the model class on the CPU (rank 0's part) with the exported layer count, heads, kv heads and
    the parsed parallel layout, but narrow widths (head_dim 8, ffn 16·tp, vocab 64·tp): Paddle's own
    PipelineLayer / SegmentLayers (pp, vpp, pp_seg_method) and tensor-parallel layers (heads and kv heads
    over tp) run their checks. Paddle's pipeline segmentation is kept in `cfg._segments`."""
    import paddle
    import paddle.distributed as dist
    dist.ParallelEnv._device_id = 0   # the CPU build has no GPU device id; PipelineLayer reads it
    small = copy.deepcopy(cfg)
    tp = max(ta.tensor_model_parallel_size, 1)
    small.head_dim = 8
    small.hidden_size = small.num_attention_heads * 8
    small.intermediate_size = 16 * tp
    small.vocab_size = 64 * tp
    small.max_position_embeddings = small.seq_length = small.max_sequence_length = 64
    paddle.set_device("cpu")
    model = cls._from_config(small, dtype="float32")
    parts = getattr(model, "segment_parts", None)
    cfg._segments = list(parts) if parts is not None else None
    n = sum(int(p.numel()) for p in model.parameters())
    notes.append(f"built {cls.__name__} skeleton (narrow widths) on CPU: {n:,} parameters on rank 0"
                 + (f", pipeline segments {list(parts)}" if parts is not None else ""))
    return []


def _same(errors: list, what: str, got, want) -> None:
    if got != want:
        errors.append(f"{what} = {got!r}, plan needs {want!r}")


def check_dir(d: Path) -> tuple[list[str], list[str]]:
    """(errors, notes) for one export folder; raises when PaddleFormers/Paddle refuse it."""
    f = plan_facts(load_plan(d))
    _environment(f["world"], f["devices_per_node"])
    _stub_communication(f["world"])
    errors: list[str] = []
    notes: list[str] = []

    # 1. exactly what `paddleformers-cli train FILE key=value ...` runs on each rank
    from paddleformers.cli.hparams.parser import get_train_args, read_args
    sys.argv = ["paddleformers/cli/launcher.py", "train", str(d / ARGS_FILE),
                f"model_name_or_path={d}", f"input_dir={DATA}"]
    model_args, data_args, _pre, _gen, ta = get_train_args(read_args())

    import paddle.distributed as dist
    from paddle.distributed import fleet

    # 2. run_sft's model-config and data preconditions (cli/train/sft/workflow.py)
    from paddleformers.data.causal_dataset import check_data_split
    from paddleformers.transformers import AutoConfig
    from paddleformers.transformers.configuration_utils import LlmMetaConfig
    if data_args.dataset_type != "pretrain":
        errors.append(f"dataset_type = {data_args.dataset_type!r}: the export targets the pretraining data path")
    if len(data_args.input_dir.split()) <= 1:   # create_pretrained_dataset's assertion
        errors.append(f"input_dir {data_args.input_dir!r} is not 'WEIGHT PREFIX ...'")
    check_data_split(data_args.split, ta.do_train, ta.do_eval, ta.do_predict)
    if ta.max_steps <= 0:
        errors.append(f"max_steps = {ta.max_steps}: the pretraining dataset needs max_steps > 0")
    dtype = ("bfloat16" if ta.bf16 else "float16" if ta.fp16 else "float32") if ta.fp16_opt_level == "O2" else "float32"
    cfg = AutoConfig.from_pretrained(model_args.model_name_or_path, dtype=dtype)
    LlmMetaConfig.set_llm_config(cfg, ta)
    cfg.pp_seg_method = model_args.pp_seg_method          # as run_sft sets them
    cfg.seq_length = cfg.max_sequence_length = data_args.max_seq_len
    cfg._attn_implementation = model_args._attn_implementation
    cfg.is_lora = model_args.lora
    pipe = ta.pipeline_model_parallel_size > 1
    from paddleformers.transformers.auto.modeling import AutoModelForCausalLM, AutoModelForCausalLMPipe
    auto = AutoModelForCausalLMPipe if pipe else AutoModelForCausalLM
    try:
        cls = auto._get_model_class_from_config(None, None, cfg)
    except ImportError as e:    # gpt_provider: PaddleFleet models need paddlefleet (not on PyPI)
        cls = None
        notes.append(f"model class for {cfg.architectures} not importable here ({str(e).splitlines()[0][:90]}); "
                     f"config checked as {type(cfg).__name__}")
    if cls is not None:
        errors += _build_skeleton(cls, cfg, ta, notes)

    # 3. the plan, as PaddleFormers and Paddle now hold it
    hybrid = ta.use_hybrid_parallel

    def deg(v):
        return max(v, 1)
    _same(errors, "tensor_model_parallel_size", deg(ta.tensor_model_parallel_size), f["tp"])
    _same(errors, "pipeline_model_parallel_size", deg(ta.pipeline_model_parallel_size), f["pp"])
    _same(errors, "virtual_pipeline_model_parallel_size (model config)",
          deg(getattr(cfg, "virtual_pipeline_model_parallel_size", 1)), f["vpp"] if f["pp"] > 1 else 1)
    stage = f"stage{f['zero']}" if f["zero"] else None
    got_stage = [getattr(o, "value", o) for o in ta.sharding]
    _same(errors, "sharding", got_stage, [stage] if stage else [])
    _same(errors, "dataset_world_size (data-parallel replicas)", ta.dataset_world_size, f["dp"])
    _same(errors, "per_device_train_batch_size", ta.per_device_train_batch_size, f["mb"])
    _same(errors, "gradient_accumulation_steps", ta.gradient_accumulation_steps, f["m"])
    _same(errors, "global_batch_size", ta.global_batch_size, f["gb"])
    _same(errors, "max_seq_len", data_args.max_seq_len, f["seq"])
    _same(errors, "sequence_parallel", bool(ta.sequence_parallel), f["sp"])
    _same(errors, "context_parallel_size", deg(ta.context_parallel_size), f["cp"])
    _same(errors, "expert_model_parallel_size", deg(ta.expert_model_parallel_size), f["ep"])
    if f["ep"] > 1 and not ta.use_expert_parallel:
        errors.append("use_expert_parallel is off with ep > 1")
    if dist.get_world_size() != f["world"]:
        errors.append(f"world size {dist.get_world_size()} != plan's {f['world']}")
    if hybrid:
        hcg = fleet.get_hybrid_communicate_group()
        topo = {"model": hcg.get_model_parallel_world_size(), "pipe": hcg.get_pipe_parallel_world_size(),
                "data": hcg.get_data_parallel_world_size(), "sharding": hcg.get_sharding_parallel_world_size()}
        _same(errors, "Paddle topology: model-parallel group", topo["model"], f["tp"])
        _same(errors, "Paddle topology: pipeline group", topo["pipe"], f["pp"])
        want_dp, want_sh = (1, f["dp"] * f["cp"]) if f["zero"] else (f["dp"] * f["cp"], 1)
        _same(errors, "Paddle topology: data-parallel group", topo["data"], want_dp)
        _same(errors, "Paddle topology: sharding group", topo["sharding"], want_sh)
        if f["cp"] > 1 or hasattr(hcg, "get_context_parallel_world_size"):
            cp = hcg.get_context_parallel_world_size() if hasattr(hcg, "get_context_parallel_world_size") else 1
            _same(errors, "Paddle topology: context-parallel group", cp, f["cp"])
        if f["ep"] > 1:
            _same(errors, "Paddle topology: expert-parallel group", hcg.get_expert_parallel_world_size(), f["ep"])
        notes.append(f"Paddle {type(hcg).__name__}: " + ", ".join(f"{k} {v}" for k, v in topo.items()))
        if pipe:
            pc = fleet.fleet._user_defined_strategy.pipeline_configs
            _same(errors, "fleet pipeline_configs.accumulate_steps", pc["accumulate_steps"], f["m"])
            _same(errors, "fleet pipeline_configs.micro_batch_size", pc["micro_batch_size"], f["mb"])
    elif f["world"] > 1:
        notes.append("plain data parallel (no hybrid topology): paddle.DataParallel over "
                     f"{dist.get_world_size()} ranks")
    # precision (FinetuningArguments.compute_type decides bf16/fp16)
    prec = f["precision"] if f["precision"] != "fp8" else "bf16"
    _same(errors, "bf16", bool(ta.bf16), prec == "bf16")
    _same(errors, "fp16", bool(ta.fp16), prec == "fp16")
    if prec in ("bf16", "fp16"):
        _same(errors, "fp16_opt_level", ta.fp16_opt_level, "O2")
    # recompute: the only combination the Llama / pipeline layers honour (llama/modeling.py, nn/pp_model.py)
    rc = (ta.recompute_granularity, ta.recompute_method, ta.recompute_num_layers)
    if f["recompute"] == "full":
        _same(errors, "recompute (granularity, method, layers)", rc, ("full", "uniform", 1))
    elif f["recompute"] == "selective":
        errors.append(f"plan recomputes selectively; PaddleFormers' Llama/pipeline layers run only full recompute "
                      f"(exported {rc})")
    else:
        _same(errors, "recompute_granularity", ta.recompute_granularity, None)
    # the model shape
    mdl = f["model"]
    want = {"hidden_size": mdl["hidden"], "num_hidden_layers": mdl["layers"], "num_attention_heads": mdl["heads"],
            "num_key_value_heads": mdl.get("kv_heads") or mdl["heads"],
            "head_dim": mdl.get("head_dim") or mdl["hidden"] // mdl["heads"], "vocab_size": mdl["vocab"],
            "tie_word_embeddings": bool(mdl.get("tie_embeddings", False))}
    moe = mdl.get("moe")
    if moe:
        first, freq = moe.get("first_dense_layers", 0), moe.get("layer_freq", 1)
        want.update({"num_experts": moe["experts"], "num_experts_per_tok": moe["top_k"],
                     "moe_intermediate_size": moe["expert_ffn_hidden"],
                     "mlp_only_layers": [i for i in range(mdl["layers"])
                                         if not (i >= first and (i - first) % freq == 0)]})
    else:
        want["intermediate_size"] = mdl["ffn_hidden"]
    # build fields the plan's model records (issue 17), as PaddleFormers' config parsed them
    if mdl.get("norm_eps") is not None:
        want["rms_norm_eps"] = mdl["norm_eps"]
    for k, v in want.items():
        _same(errors, f"config.json {k}", getattr(cfg, k, None), v)
    if mdl.get("rope_theta") is not None:   # an attribute, or inside rope_parameters (transformers >= 5 form)
        params = getattr(cfg, "rope_parameters", None)
        theta = getattr(cfg, "rope_theta", None)
        if theta is None and isinstance(params, dict):
            theta = params.get("rope_theta")
        _same(errors, "config.json rope_theta", theta, mdl["rope_theta"])
    if mdl.get("activation", "swiglu") != "swiglu":
        errors.append(f"plan's model has a {mdl['activation']} MLP; config.json's {cfg.architectures} is SwiGLU "
                      f"({cfg.hidden_act}-gated)")
    if cfg.max_position_embeddings < f["seq"]:
        errors.append(f"config.json max_position_embeddings {cfg.max_position_embeddings} < seq_len {f['seq']}")
    if f["tp"] > 1:
        for k in ("num_attention_heads", "num_key_value_heads", "vocab_size"):
            if getattr(cfg, k) % f["tp"]:
                errors.append(f"config.json {k}={getattr(cfg, k)} not divisible by tp={f['tp']}")
    # pipeline split: pp_layers.py:SegmentLayers.do_segment ("layer:" method: equal parts of pp·vpp)
    segs = getattr(cfg, "_segments", None)
    if f["pp"] > 1 and segs:
        # Paddle's own segmentation of [embedding, decoder layers 1..L, norm, lm_head] into pp·vpp chunks;
        # chunk k runs on stage k % pp
        L = mdl["layers"]
        per_stage = [0] * f["pp"]
        for k, (a, b) in enumerate(zip(segs, segs[1:], strict=False)):
            per_stage[k % f["pp"]] += len([i for i in range(a, b) if 1 <= i <= L])
        _same(errors, "Paddle's pipeline segmentation: decoder layers per stage", per_stage, f["counts"])
        _same(errors, "Paddle's pipeline segmentation: chunks", len(segs) - 1, f["pp"] * f["vpp"])
    elif f["pp"] > 1:
        seg = getattr(model_args, "pp_seg_method", "layer:DecoderLayer|EmptyLayer")
        parts = f["pp"] * f["vpp"]
        if seg.startswith("layer:"):
            if mdl["layers"] % parts:
                errors.append(f"{mdl['layers']} layers do not split into pp·vpp={parts} equal parts")
            elif len(set(f["counts"])) > 1:
                errors.append(f"plan splits layers {f['counts']}; Paddle splits them equally")
        else:
            import ast
            bounds = ast.literal_eval(seg) + [mdl["layers"] + 3]   # [embedding, layers..., norm, lm_head]
            got = [b - a for a, b in zip(bounds, bounds[1:], strict=False)]
            got[0] -= 1
            got[-1] -= 2
            _same(errors, "pp_seg_method layers per stage", got, f["counts"])
    # launch.sh / hostfile: the entry point and the device count they start
    import importlib.util
    launcher = Path(importlib.util.find_spec("paddleformers.cli.launcher").origin)
    sh = (d / "launch.sh").read_text()
    if "-m paddle.distributed.launch --ips" not in sh or f'"$ENTRY" train "$HERE/{ARGS_FILE}"' not in sh:
        errors.append("launch.sh does not run paddle.distributed.launch on paddleformers/cli/launcher.py train ARGS")
    if "paddleformers.cli.launcher" not in sh or not launcher.is_file():
        errors.append(f"launch.sh entry: paddleformers.cli.launcher ({launcher}) not found")
    devs = sh.split("--devices ", 1)[1].split()[0].split(",") if "--devices " in sh else []
    hosts = [ln for ln in (d / "hostfile").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    _same(errors, "launch.sh --devices x hostfile nodes", len(devs) * len(hosts), f["world"])
    # trainer-time rules (need a model to trigger; re-stated with their source)
    if f["vpp"] > 1 and f["m"] < 2 * f["pp"]:
        errors.append(f"paddle/distributed/fleet/model.py:distributed_model runs interleaved 1F1B only with "
                      f"accumulate_steps >= 2·pp = {2 * f['pp']}; m = {f['m']} gives "
                      + ("forward-then-backward" if f["m"] >= f["pp"] else "a ValueError"))
    if f["zero"] == 3 and f["tp"] > 1:
        errors.append("paddleformers/trainer/trainer.py:Trainer._wrap_model: 'Only support tensor parallel + "
                      "sharding stage1/stage2 hybrid parallel now'")
    return errors, notes


def child(d: Path, out: Path) -> int:
    result: dict = {"dir": str(d)}
    try:
        errors, notes = check_dir(d)
        result.update(errors=errors, notes=notes)
    except BaseException as e:   # PaddleFormers / Paddle refused the arguments: that is the finding
        msg = " ".join(str(e).split()) or type(e).__name__
        result.update(errors=[f"PaddleFormers/Paddle refused it: {type(e).__name__}: {msg[:400]}"], notes=[])
    out.write_text(json.dumps(result))
    return 0


# ------------------------------------------------------------------------------------------------ parent
def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "--child":
        return child(Path(argv[1]), Path(argv[2]))
    if not argv:
        print(__doc__.split("\n\n")[0])
        print("usage: check_paddle.py DIR [DIR...]")
        return 2
    passed = failed = 0
    for a in argv:
        d = Path(a).resolve()
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "result.json"
            proc = subprocess.run([sys.executable, __file__, "--child", str(d), str(out)], cwd=tmp,
                                  capture_output=True, text=True, timeout=600)
            if out.exists():
                r = json.loads(out.read_text())
            else:
                tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
                r = {"errors": [f"checker crashed (exit {proc.returncode}): {tail}"], "notes": []}
        if r["errors"]:
            failed += 1
            print(f"FAIL {a}: " + "; ".join(r["errors"]))
        else:
            passed += 1
            print(f"ok {a}")
        for n in r["notes"]:
            print(f"  note: {n}")
        sys.stdout.flush()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
