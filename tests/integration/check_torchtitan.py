#!/usr/bin/env python3
"""Integration check: torchtitan's own ConfigManager accepts baige-plan's torchtitan export unchanged,
what it parsed is the plan, and the parallelism torchtitan builds from it before touching a GPU
(mesh, model split, pipeline schedule, TP/FSDP/EP wrapping) is the plan's.

Usage (runtime venv, see requirements-torchtitan.txt; not the project venv):
    .venv-it/torchtitan/bin/python tests/integration/check_torchtitan.py [-v] [-j N] DIR [DIR...]
    .venv-it/torchtitan/bin/python tests/integration/check_torchtitan.py --make-plans OUT [--baige-plan EXE]
Each DIR holds plan.yaml (or plan.json) and the files of `baige-plan export DIR/plan.yaml --to torchtitan
--out-dir DIR`: torchtitan_args.txt, launch.sh, hostfile (and baige_torchtitan_config.py when the model or
fp8 needs a config_registry function). --make-plans first writes the standard set (CASES: planner-made
plans for FSDP, DDP (+PP), TP, 1F1B, interleaved, CP, MoE with EP / EP+TP / experts over TP, uneven PP,
fp8, full recompute) into OUT/NAME with the project's CLI (default EXE: the repository's .venv/bin/baige-plan),
then checks OUT/*. torchtitan is imported once; each DIR is checked in a forked child (-j N at a time,
default: the CPU count).

For each DIR (torchtitan 0.3.0 on torch 2.14, CPU only):
1. launch.sh is run by bash with a stand-in `torchrun` first on PATH that records its argv and
   environment: the torchrun world (nnodes x nproc-per-node) must be the plan's tp*pp*dp*cp, the module
   `-m torchtitan.train`, and what follows it torchtitan.train's argv.
2. That argv goes, unchanged, through what torchtitan/train.py main() runs first:
   ConfigManager().parse_args(argv) (config_registry function, tyro flags, Trainer.Config.__post_init__:
   pipeline micro-batch divisibility, CUDA-graph rules for PP/EP, ...), with the PYTHONPATH launch.sh set.
3. The parsed config must agree with the plan: model shape (layers, hidden, heads, KV heads, head dim,
   FFN or experts/top-k/expert FFN, vocab, tied embeddings; float8 Linear layers for fp8), batch
   (local/global batch, seq_len), degrees (replicate/shard from zero 0/3, tp, SP, pp, cp, ep), schedule
   and micro-batch size, mixed precision, activation checkpointing, no torch.compile.
4. The trainer's pre-GPU steps (trainer.py Trainer.__init__ / init_distributed), with torchtitan's own
   dry-run backend (comm.mode = "fake_backend", NGPU = world, rank 0): distributed.utils.init_distributed,
   ParallelDims.from_config + build_mesh (degree product = world, EP folding), and, mirrored from
   Trainer.__init__ (inline code there, said so in the message): the seq_len divisibility for SP/CP, the
   global-batch divisibility, gradient-accumulation steps (= m without PP, 1 with PP) and pipeline
   micro-batches (= m with PP). Then model_config.update_from_config and build on the meta device, and
   - pp > 1: the stage split for every PP rank from torchtitan's functions (pipeline_parallel.py
     _get_pipeline_metadata / _generate_llm_fqn_per_model_part or module_fqns_per_model_part,
     _get_pp_rank_to_stage_indices_mapping) must be the plan's (per-rank layers; interleaved: virtual
     stage v holds layers [v*c, (v+1)*c)), then model_spec.pipelining_fn for rank 0 (split, TP/AC/FSDP
     per stage, _build_pipeline_schedule: 1F1B needs m >= pp, Interleaved1F1B's rounds) on meta;
   - pp == 1: model_spec.parallelize_fn (TP/SP, CP, AC, FSDP2/HSDP, EP) on meta.
   Stand-ins, because there is no GPU: the mesh device type is "cpu" (parallel_dims.device_type) and, for
   fp8, float8's SM89 gate (components/quantization/float8.py has_cuda_capability) answers yes.
Prints `ok DIR` or `FAIL DIR: reason` per DIR, then `N passed, M failed`; exit 1 if any failed.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

from _checklib import CheckFailure, capture_launch, launcher_options, load_plan, need, parse_cli
from _checklib import make_plans as make_plans_with

VERSION = "0.3.0"
CONFIG_MODULE = "baige_torchtitan_config"
ROOT = Path(__file__).resolve().parents[2]


def expected(plan: dict) -> dict:
    """What the plan says, read from the plan file alone (not from the export)."""
    s = dict(plan["strategy"])
    p0 = plan["pipelines"][0]
    s.update(p0.get("strategy") or {})
    stages = p0["stages"]
    e = {"tp": stages[0]["tp"], "pp": len(stages), "dp": p0["replicas"], "cp": s.get("cp", 1), "ep": s.get("ep", 1),
         "etp": s.get("etp", 1), "zero": s["zero"], "mb": s["micro_batch"], "m": p0["micro_batches"],
         "vpp": s.get("vpp", 1), "recompute": s.get("recompute", "none"), "sp": bool(s.get("sequence_parallel")),
         "counts": [st["layers"][1] - st["layers"][0] for st in stages],
         "starts": [st["layers"][0] for st in stages], "seq": plan["inputs"]["job"]["seq_len"],
         "precision": plan["inputs"]["job"].get("precision", "bf16"), "model": plan["inputs"]["model"],
         "shapes": len(plan["pipelines"]), "groups": sorted({st.get("group", "") for st in stages}),
         "stage_tps": sorted({st["tp"] for st in stages}), "fsdp_shard": int(s.get("fsdp_shard") or 0)}
    e["sp"] = e["sp"] and e["tp"] > 1
    e["world"] = e["tp"] * e["pp"] * e["dp"] * e["cp"]
    e["gb"] = e["dp"] * e["m"] * e["mb"]
    return e


def split_torchrun(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    need("-m" in argv, f"launch.sh does not run a module: {argv[:12]}")
    idx = argv.index("-m")
    need(argv[idx + 1] == "torchtitan.train", f"launch.sh runs -m {argv[idx + 1]}, not torchtitan.train")
    return launcher_options(argv, idx), argv[idx + 2:]


class Titan:
    """The pip-installed torchtitan code the check calls (imported once: the import takes seconds)."""

    def __init__(self):
        warnings.filterwarnings("ignore")
        logging.disable(logging.WARNING)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            import torch
            import torchtitan
            import torchtitan.distributed.parallel_dims as parallel_dims_mod
            from torchtitan.config import ConfigManager
            from torchtitan.distributed import ParallelDims
            from torchtitan.distributed import pipeline_parallel as ppm
            from torchtitan.distributed import utils as dist_utils
        self.torch, self.ConfigManager, self.ParallelDims = torch, ConfigManager, ParallelDims
        self.dist_utils, self.ppm = dist_utils, ppm
        self.version = torchtitan.__version__
        # no GPU: meshes on CPU (FSDP2 derives its device from the mesh; parameters stay on meta)
        parallel_dims_mod.device_type = "cpu"
        self.float8_gate_patched = False
        # warm the lazy imports (model registries, experiments, pipelining, FSDP, float8) once here, so
        # that the forked per-DIR checks do not each pay for them
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            import torch.distributed.fsdp  # noqa: F401
            import torch.distributed.pipelining  # noqa: F401
            import torchtitan.components.quantization.float8  # noqa: F401
            import torchtitan.models.qwen3.config_registry  # noqa: F401
            cfg = ConfigManager().parse_args(["--module", "llama3", "--config", "llama3_debugmodel"])
            with torch.device("meta"):
                cfg.model_spec.model.build()

    def patch_float8_gate(self):
        """float8's SM89 gate is a GPU query; answered yes (see the module docstring)."""
        if not self.float8_gate_patched:
            import torchtitan.components.quantization.float8 as f8
            f8.has_cuda_capability = lambda *a, **k: True
            self.float8_gate_patched = True

    def parse(self, argv: list[str], env: dict[str, str]):
        for k in [k for k in sys.modules if k == CONFIG_MODULE or k.startswith(CONFIG_MODULE + ".")]:
            del sys.modules[k]
        saved_path = list(sys.path)
        sys.path[:0] = [p for p in env.get("PYTHONPATH", "").split(":") if p]
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                try:
                    return self.ConfigManager().parse_args(list(argv))
                except SystemExit as e:   # tyro: unknown or malformed argument
                    text = " ".join(" ".join(ln.strip(" │╭╮╰╯─") for ln in out.getvalue().splitlines()).split())
                    text = " ".join(re.sub(r"-{5,}", " ", text.split(" For full helptext")[0]).split())
                    at = min((text.find(w) for w in ("Unrecognized", "Error", "error") if w in text), default=0)
                    raise CheckFailure(f"ConfigManager exited ({e.code}): {text[at:at + 400]}") from None
                except Exception as e:
                    where = traceback.extract_tb(e.__traceback__)[-1]
                    raise CheckFailure(f"ConfigManager rejected the arguments ({type(e).__name__} at "
                                       f"{Path(where.filename).name}:{where.lineno} {where.name}): "
                                       f"{str(e).strip()[:400]}") from None
        finally:
            sys.path[:] = saved_path


def model_shape(mc) -> dict:
    """The shape of a torchtitan Decoder config, in the plan's terms (MoE: which layers are MoE, the shared
    experts' total width, the dense layers' width)."""
    layers = list(mc.layers.values()) if isinstance(mc.layers, dict) else list(mc.layers)
    att = layers[0].attention
    heads = att.n_heads
    d = {"layers": len(layers), "hidden": mc.dim, "heads": heads, "kv_heads": att.n_kv_heads or heads,
         "head_dim": att.head_dim or mc.dim // heads, "vocab": mc.vocab_size,
         "tie_embeddings": bool(getattr(mc, "enable_weight_tying", False))}
    moe = [getattr(layer, "moe", None) for layer in layers]
    dense = sorted({layer.feed_forward.w1.out_features for layer in layers if getattr(layer, "moe", None) is None})
    if any(x is not None for x in moe):
        x = next(y for y in moe if y is not None)
        d.update(experts=x.num_experts, top_k=x.router.top_k,
                 expert_ffn_hidden=x.routed_experts.inner_experts.hidden_dim,
                 shared_width=0 if x.shared_experts is None else x.shared_experts.w1.out_features,
                 moe_layers=[k for k, y in enumerate(moe) if y is not None])
    if dense:
        d["ffn_hidden"] = dense if len(dense) > 1 else dense[0]
    return d


DIFFERENCE = re.compile(r"^# cannot express: model difference: (\w+): planned (\S+), built (\S+) \(")


def differences(args_text: str) -> dict[str, str]:
    """The export's machine-checkable model differences (exports/torchtitan.py Difference.text): field -> built."""
    return {m.group(1): m.group(3) for m in map(DIFFERENCE.match, args_text.splitlines()) if m}


def plan_shape(model: dict, built: dict[str, str]) -> dict:
    """What the export must build: the plan's model with the declared differences (`built`) applied."""
    model = dict(model, **{k: int(v) for k, v in built.items() if k in ("ffn_hidden",)})
    heads = model["heads"]
    d = {"layers": model["layers"], "hidden": model["hidden"], "heads": heads,
         "kv_heads": model.get("kv_heads") or heads, "head_dim": model.get("head_dim") or model["hidden"] // heads,
         "vocab": model["vocab"], "tie_embeddings": bool(model.get("tie_embeddings", False))}
    moe = model.get("moe")
    if moe:
        ef = int(built.get("expert_ffn_hidden", moe["expert_ffn_hidden"]))
        k, f = moe.get("first_dense_layers", 0) or 0, moe.get("layer_freq", 1) or 1
        pattern = [i for i in range(model["layers"]) if i >= k and (i - k) % f == 0]
        d.update(experts=moe["experts"], top_k=moe["top_k"], expert_ffn_hidden=ef,
                 shared_width=(moe.get("shared_experts", 0) or 0) * ef, moe_layers=pattern)
        if len(pattern) < model["layers"]:
            d["ffn_hidden"] = model["ffn_hidden"]
    else:
        d["ffn_hidden"] = model["ffn_hidden"]
    return d


def check_dir(tt: Titan, d: Path) -> list[str]:
    notes = []
    plan = load_plan(d)
    e = expected(plan)
    need(e["shapes"] == 1, f"{e['shapes']} pipeline shapes: one torchtitan launch cannot run them")
    need(len(e["groups"]) == 1, f"stages on several chip groups {e['groups']}: torchtitan runs one per job")
    need(len(e["stage_tps"]) == 1, f"per-stage tp {e['stage_tps']}: torchtitan has one tensor_parallel_degree")
    for f in ("torchtitan_args.txt", "launch.sh", "hostfile"):
        need((d / f).exists(), f"no {f}")
    need(f"torchtitan=={VERSION}" in (d / "torchtitan_args.txt").read_text(),
         f"torchtitan_args.txt does not name torchtitan=={VERSION}")
    with tempfile.TemporaryDirectory() as tmp:
        # this venv's bin next: launch.sh asks python3 for torchtitan.__version__
        # the documented data variables (launch.sh refuses to start without them); its version check runs on
        # this venv's python3 (torchtitan and torch of requirements-torchtitan.txt are inside its range)
        launch = capture_launch(d, Path(tmp), "torchrun", {"BAIGE_DATA_PATH": "/data/c4", "BAIGE_TOKENIZER": "/tok"},
                                path_first=str(Path(sys.executable).parent), timeout=60)
    need("target torchtitan" not in launch.stderr, f"launch.sh: {launch.stderr.strip()[-200:]}")
    env = launch.changed
    opts, args = split_torchrun(launch.argv)
    nnodes, nproc = int(opts.get("nnodes", 1)), int(opts.get("nproc-per-node", 1))
    need(nnodes * nproc == e["world"], f"torchrun starts {nnodes} x {nproc} ranks, the plan has {e['world']}")
    if any(a == "--module" for a in args) and args[args.index("--module") + 1] == CONFIG_MODULE:
        need(str(d.resolve()) in [str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(":") if p],
             f"--module {CONFIG_MODULE} but launch.sh does not put {d} on PYTHONPATH")
    if e["precision"] == "fp8":
        tt.patch_float8_gate()

    # 2. parse exactly what launch.sh passes
    cfg = tt.parse(args, env)
    tr, par = cfg.training, cfg.parallelism

    def eq(what, got, want):
        need(got == want, f"{what}: torchtitan parsed {got!r}, the plan has {want!r}")

    # 3. parsed values against the plan
    need(cfg.model_spec is not None, "no model_spec")
    built = differences((d / "torchtitan_args.txt").read_text())
    eq("model shape (with the export's declared model differences)", model_shape(cfg.model_spec.model),
       plan_shape(e["model"], built))
    if built:
        notes.append("model differences " + ", ".join(f"{k} -> {v}" for k, v in sorted(built.items())))
    if e["model"].get("activation", "swiglu") != "swiglu":
        need(built.get("activation") == "swiglu", "a GELU plan exported without its 'activation' model difference")
    notes.append(f"model {cfg.model_spec.name} {cfg.model_spec.flavor}")
    if e["precision"] == "fp8":
        from torchtitan.components.quantization.float8 import Float8Linear
        from torchtitan.models.common.linear import Linear
        kinds = {fqn.split(".")[-1]: type(c).__name__ for fqn, c, _, _ in cfg.model_spec.model.traverse(Linear.Config)}
        n8 = sum(1 for _, c, _, _ in cfg.model_spec.model.traverse(Linear.Config) if isinstance(c, Float8Linear.Config))
        need(n8 > 0, f"fp8 plan but no Float8Linear layers in the model ({kinds})")
        notes.append(f"{n8} Float8Linear layers")
    eq("training.mixed_precision_param", tr.mixed_precision_param,
       "float32" if e["precision"] == "fp32" else "bfloat16")
    need(e["precision"] != "fp16", "fp16 plan: torchtitan has no fp16 training")
    eq("training.seq_len", tr.seq_len, e["seq"])
    eq("training.global_batch_size", tr.global_batch_size, e["gb"])
    eq("training.local_batch_size", tr.local_batch_size, e["mb"] * e["m"] if e["pp"] > 1 else e["mb"])
    need(e["zero"] in (0, 2, 3), f"zero={e['zero']}: torchtitan runs ZeRO-0 (replicate), ZeRO-2 (FSDP2 without "
         "resharding after forward) or ZeRO-3 (FSDP2) only")
    rep, shard = (e["dp"], 1) if e["zero"] == 0 else (1, e["dp"])
    if e["zero"] >= 2 and e["fsdp_shard"]:      # HSDP: FSDP2 shards over dp_shard x cp (parallel_dims.py)
        rep, shard = e["dp"] * e["cp"] // e["fsdp_shard"], e["fsdp_shard"] // e["cp"]
    eq("parallelism.data_parallel_replicate_degree", par.data_parallel_replicate_degree, rep)
    eq("parallelism.data_parallel_shard_degree", par.data_parallel_shard_degree, shard)
    eq("parallelism.tensor_parallel_degree", par.tensor_parallel_degree, e["tp"])
    if e["tp"] > 1:
        eq("parallelism.enable_sequence_parallel", par.enable_sequence_parallel, e["sp"])
    eq("parallelism.pipeline_parallel_degree", par.pipeline_parallel_degree, e["pp"])
    eq("parallelism.context_parallel_degree", par.context_parallel_degree, e["cp"])
    eq("parallelism.expert_parallel_degree", par.expert_parallel_degree, e["ep"])
    eq("parallelism.fsdp_reshard_after_forward", par.fsdp_reshard_after_forward,
       "never" if e["zero"] == 2 else "default")
    if e["pp"] > 1:
        eq("parallelism.pipeline_parallel_schedule", par.pipeline_parallel_schedule,
           "Interleaved1F1B" if e["vpp"] > 1 else "1F1B")
        eq("parallelism.pipeline_parallel_microbatch_size", par.pipeline_parallel_microbatch_size, e["mb"])
    ac = type(cfg.activation_checkpoint).__qualname__ if cfg.activation_checkpoint is not None else None
    eq("activation_checkpoint", ac, {"full": "FullAC.Config", "selective": "SelectiveAC.Config"}.get(e["recompute"]))
    need(not cfg.compile.enable, "torch.compile is on; the plan is costed eager")
    if e["model"].get("moe"):
        eq("expert tensor parallel (torchtitan: tp when ep == 1, else 1)", e["tp"] if e["ep"] == 1 else 1, e["etp"])

    # 4. the trainer's pre-GPU steps in torchtitan's dry-run mode
    torch, ppm = tt.torch, tt.ppm
    os.environ.update({"NGPU": str(e["world"]), "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(e["world"])})
    cfg.comm.mode = "fake_backend"
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            world = tt.dist_utils.init_distributed(cfg.comm, base_folder=tempfile.gettempdir())
            eq("world size", world, e["world"])
            try:
                pdims = tt.ParallelDims.from_config(par, world)
                pdims.build_mesh()
            except (AssertionError, ValueError, RuntimeError) as x:
                raise CheckFailure(f"ParallelDims/build_mesh rejected the degrees: {str(x).strip()[:300]}") from None
            tt.dist_utils.set_spmd_backend(par.spmd_backend)
            batch = pdims.dp_replicate * pdims.dp_shard
            eq("data-parallel (batch) degree", batch, e["dp"])
            if pdims.ep > 1:
                eq("efsdp (experts' FSDP degree)", pdims.dp_shard * pdims.cp * pdims.tp // pdims.ep,
                   e["dp"] * e["cp"] * e["tp"] // e["ep"] if e["zero"] == 3 else e["cp"] * e["tp"] // e["ep"])
            # mirrored from trainer.py Trainer.__init__ (inline there)
            div = (pdims.tp if par.enable_sequence_parallel else 1) * (2 * pdims.cp if pdims.cp > 1 else 1)
            need(tr.seq_len % div == 0, f"trainer.py Trainer.__init__ (mirrored): seq_len {tr.seq_len} is not "
                 f"divisible by {div} for SP/CP")
            gbs = tr.global_batch_size if tr.global_batch_size > 0 else tr.local_batch_size * batch
            need(gbs % (tr.local_batch_size * batch) == 0, f"trainer.py Trainer.__init__ (mirrored): global batch "
                 f"{gbs} is not a multiple of local batch {tr.local_batch_size} x dp {batch}")
            accum = gbs // (tr.local_batch_size * batch)
            n_mb = tr.local_batch_size // par.pipeline_parallel_microbatch_size if pdims.pp_enabled else 1
            eq("gradient accumulation steps (trainer.py, mirrored)", accum, 1 if e["pp"] > 1 else e["m"])
            eq("pipeline micro-batches per step (trainer.py, mirrored)", n_mb, e["m"] if e["pp"] > 1 else 1)

            ms = cfg.model_spec
            mc = ms.model
            try:
                mc.update_from_config(config=cfg)
                with torch.device("meta"):
                    model = mc.build()
            except Exception as x:
                raise CheckFailure(f"model build on meta: {type(x).__name__}: {str(x).strip()[:300]}") from None
            loss_fn = cfg.loss.build(compile_config=cfg.compile)
            kw = dict(parallel_dims=pdims, training=tr, parallelism=par, compile_config=cfg.compile,
                      ac_config=cfg.activation_checkpoint, dump_folder=tempfile.gettempdir())
            if pdims.pp_enabled:
                notes += check_split(ppm, pdims, par, mc, e)
                try:
                    sched, parts, first, last = ms.pipelining_fn(
                        model, device=torch.device("meta"), model_config=mc, parallelize_fn=ms.parallelize_fn,
                        loss_fn=loss_fn, **kw)
                except (AssertionError, ValueError, RuntimeError, NotImplementedError) as x:
                    where = traceback.extract_tb(x.__traceback__)[-1]
                    raise CheckFailure(f"pipelining_fn (rank 0) rejected the plan ({type(x).__name__} at "
                                       f"{Path(where.filename).name}:{where.lineno}): {str(x).strip()[:300]}") from None
                want = "ScheduleInterleaved1F1B" if e["vpp"] > 1 else "Schedule1F1B"
                eq("pipeline schedule class", type(sched).__name__, want)
                eq("schedule micro-batches", sched._n_microbatches, e["m"])
                eq("model chunks on PP rank 0", len(parts), e["vpp"])
                need(first, "PP rank 0 does not hold the first stage")
                notes.append(f"{want} m={e['m']}")
                order = getattr(sched, "pipeline_order_with_comms", None)
                if order is not None and e["zero"] == 3:   # how often FSDP gathers each local stage per step
                    acts = [a for a in order.get(0, []) if a is not None]
                    gathers = {}
                    for a in acts:
                        if str(a.computation_type).endswith("UNSHARD") and "RESHARD" not in str(a.computation_type):
                            gathers[a.stage_index] = gathers.get(a.stage_index, 0) + 1
                    notes.append(f"rank-0 stage all-gathers per step {gathers}")
            else:
                try:
                    ms.parallelize_fn(model, **kw)
                except (AssertionError, ValueError, RuntimeError, NotImplementedError) as x:
                    where = traceback.extract_tb(x.__traceback__)[-1]
                    raise CheckFailure(f"parallelize_fn rejected the plan ({type(x).__name__} at "
                                       f"{Path(where.filename).name}:{where.lineno}): {str(x).strip()[:300]}") from None
                notes.append(f"accumulation {accum}")
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    notes.append(f"mesh pp={pdims.pp} dp_rep={pdims.dp_replicate} dp_shard={pdims.dp_shard} cp={pdims.cp} "
                 f"tp={pdims.tp} ep={pdims.ep}")
    return notes


def check_split(ppm, pdims, par, mc, e) -> list[str]:
    """Every PP rank's layers, from torchtitan's split functions, against the plan's stages."""
    try:
        names = par.module_fqns_per_model_part
        if names is None:
            n_stages, n_layers, w_in, w_out = ppm._get_pipeline_metadata(pdims, par, mc)
            names = ppm._generate_llm_fqn_per_model_part(n_stages, n_layers, w_in, w_out)
    except ValueError as x:
        raise CheckFailure(f"pipeline split (pipeline_parallel.py) rejected the plan: {str(x).strip()[:300]}") from None
    pp, vpp = e["pp"], e["vpp"]
    eq_n = len(names)
    need(eq_n == pp * vpp, f"torchtitan splits the model into {eq_n} stages, the plan has pp*vpp = {pp * vpp}")
    need("tok_embeddings" in names[0], "the first stage has no tok_embeddings")
    need("lm_head" in names[-1] and "norm" in names[-1], "the last stage has no norm/lm_head")
    layers = [[int(n.split(".")[1]) for n in stage if n.startswith("layers.")] for stage in names]
    flat = [j for st in layers for j in st]
    need(flat == list(range(e["model"]["layers"])), "the stages do not hold every layer once, in order")
    for r in range(pp):
        idx = ppm._get_pp_rank_to_stage_indices_mapping(r, pp, par.pipeline_parallel_schedule, len(names))
        got = sorted(j for s in idx for j in layers[s])
        if vpp == 1:
            want = list(range(e["starts"][r], e["starts"][r] + e["counts"][r]))
            need(got == want, f"PP rank {r} holds layers {got[:1]}..{got[-1:]} ({len(got)}), the plan's stage {r} "
                 f"{e['starts'][r]}..{e['starts'][r] + e['counts'][r] - 1} ({e['counts'][r]})")
        else:
            c = e["model"]["layers"] // (pp * vpp)
            want = sorted(j for v in range(r, pp * vpp, pp) for j in range(v * c, (v + 1) * c))
            need(len(got) == e["counts"][r], f"PP rank {r} holds {len(got)} layers, the plan's stage {e['counts'][r]}")
            need(got == want, f"PP rank {r}'s virtual stages hold layers {got}, interleaving wants {want}")
    return [f"stages {[len(x) for x in layers]}"]


# name, model, cluster, then plan options (always with --runtime torchtitan)
CASES = (
    ("llama3-8b-fsdp", "llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--seq-len", "8192",
     "--zero", "3", "--tp", "1", "--pp", "1", "--cp", "1"),
    ("llama3-8b-ddp", "llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--seq-len", "8192",
     "--zero", "0"),
    ("llama3-8b-ddp-pp2", "llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--seq-len", "8192",
     "--zero", "0", "--pp", "2"),
    ("llama3-8b-tp4", "llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--seq-len", "8192",
     "--tp", "4", "--pp", "1", "--zero", "3"),
    ("llama3-8b-pp4-1f1b", "llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--seq-len", "8192",
     "--pp", "4", "--vpp", "1"),
    ("llama3-8b-pp4-vpp2", "llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--seq-len", "8192",
     "--pp", "4", "--vpp", "2"),
    ("llama3-8b-cp2", "llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "32", "--seq-len", "16384",
     "--cp", "2"),
    ("qwen3-235b-a22b-ep", "qwen3-235b-a22b", "h100-sxm5-80g:32x8", "--global-batch", "1024", "--seq-len", "4096"),
    ("qwen3-235b-a22b-tp2-ep64", "qwen3-235b-a22b", "h100-sxm5-80g:32x8", "--global-batch", "1024", "--seq-len",
     "4096", "--tp", "2", "--ep", "64"),
    ("qwen3-235b-a22b-tp4-etp4", "qwen3-235b-a22b", "h100-sxm5-80g:32x8", "--global-batch", "1024", "--seq-len",
     "4096", "--tp", "4", "--ep", "1"),
    ("llama3-405b-pp8-uneven", "llama3-405b", "h100-sxm5-80g:64x8", "--global-batch", "2048", "--seq-len", "8192",
     "--pp", "8", "--vpp", "1"),
    ("llama3-8b-fp8", "llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--seq-len", "8192",
     "--precision", "fp8"),
    ("llama3-70b-full-recompute", "llama3-70b", "h100-sxm5-80g:8x8", "--global-batch", "256", "--seq-len",
     "4096", "--recompute", "full"),
    # models torchtitan does not ship (a generated llama3/qwen3 flavor) and op-level SAC
    ("llama2-7b-sac", "llama2-7b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--seq-len", "4096",
     "--zero", "3", "--recompute", "selective"),
    ("mpt-7b-gelu", str(ROOT / "tests" / "data" / "mpt-7b.yaml"), "h100-sxm5-80g:2x8", "--global-batch", "64",
     "--seq-len", "2048"),
    ("moe-dense-prefix-ep4", str(ROOT / "tests" / "data" / "moe-dense-prefix.yaml"), "h100-sxm5-80g:1x8",
     "--global-batch", "64", "--seq-len", "4096", "--ep", "4", "--zero", "3"),
    ("mixtral-8x7b-pp2", "mixtral-8x7b", "h100-sxm5-80g:4x8", "--global-batch", "128", "--seq-len", "4096",
     "--pp", "2", "--ep", "8"),
)


def make_plans(out: Path, exe: str) -> tuple[list[Path], int]:
    """Plan and export every case into out/NAME; a case the CLI cannot make is reported as a failure."""
    made, failed = make_plans_with(out, exe, "torchtitan", CASES)
    for line in failed:
        print(line, flush=True)
    return made, len(failed)


def start_isolated(tt: Titan, d: Path) -> tuple[int, int]:
    """check_dir in a forked child: torchtitan is imported once, but every DIR gets a fresh process (the
    dry-run process group, device meshes and the spmd_types / DTensor mesh caches do not carry over from
    one DIR's world to the next). Returns (pid, read end of the pipe the child answers on)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:   # child
        os.close(rfd)
        t = time.time()
        try:
            res = {"ok": True, "text": "; ".join(check_dir(tt, d))}
        except CheckFailure as x:
            res = {"ok": False, "text": str(x)}
        except BaseException as x:   # a bug here or an unexpected torchtitan error: still one line per DIR
            where = traceback.extract_tb(x.__traceback__)[-1]
            res = {"ok": False, "text": f"{type(x).__name__} at {Path(where.filename).name}:{where.lineno}: {x}"}
        res["s"] = time.time() - t
        with os.fdopen(wfd, "w") as f:
            f.write(json.dumps(res))
        os._exit(0)
    os.close(wfd)
    return pid, rfd


def check_all(tt: Titan, dirs: list[Path], jobs: int) -> list[dict]:
    """Every DIR checked in its own child, up to `jobs` at a time; results in the order of `dirs`."""
    results: list[dict | None] = [None] * len(dirs)
    running: dict[int, tuple[int, int]] = {}
    todo = list(enumerate(dirs))
    while todo or running:
        while todo and len(running) < jobs:
            k, d = todo.pop(0)
            pid, rfd = start_isolated(tt, d)
            running[pid] = (k, rfd)
        pid, status = os.wait()
        if pid not in running:
            continue
        k, rfd = running.pop(pid)
        with os.fdopen(rfd) as f:
            data = f.read()
        results[k] = json.loads(data) if data else {"ok": False, "s": 0.0,
                                                      "text": f"the check process died (wait status {status})"}
    return results


def main(argv: list[str]) -> int:
    opts, dirs, verbose = parse_cli(argv, ("--make-plans", "--baige-plan", "-j"))
    exe = opts.get("--baige-plan", str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "baige-plan"))
    out = Path(opts["--make-plans"]) if "--make-plans" in opts else None
    jobs = max(1, int(opts["-j"])) if "-j" in opts else (os.cpu_count() or 1)
    if not dirs and out is None:
        print(__doc__.split("\n\n")[1])
        return 2
    failed = 0
    t0 = time.time()
    if out is not None:
        made, failed = make_plans(out, exe)
        dirs += made
        print(f"# made {len(made)} plans and exports in {time.time() - t0:.1f} s", flush=True)
    t0 = time.time()
    tt = Titan()
    t1 = time.time()
    print(f"# torchtitan {tt.version}, torch {tt.torch.__version__}: imported in {t1 - t0:.1f} s", flush=True)
    passed = 0
    for d, res in zip(dirs, check_all(tt, dirs, jobs), strict=True):
        if res["ok"]:
            extra = f"  ({res['text']}; {res['s']:.1f} s)" if verbose else ""
            print(f"ok {d}{extra}", flush=True)
            passed += 1
        else:
            print(f"FAIL {d}: {res['text']}", flush=True)
            failed += 1
    print(f"# checked {len(dirs)} in {time.time() - t1:.1f} s", flush=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
