#!/usr/bin/env python3
"""Integration check: Megatron's own argument parser accepts baige-plan's Megatron export unchanged,
and what it parsed is the plan.

Usage (runtime venv, see requirements-megatron.txt; not the project venv):
    .venv-it/megatron/bin/python tests/integration/check_megatron.py [-v] DIR [DIR...]
    .venv-it/megatron/bin/python tests/integration/check_megatron.py --make-plans OUT [--baige-plan EXE]
Each DIR holds plan.yaml (or plan.json) and the files of `baige-plan export DIR/plan.yaml --to megatron
--out-dir DIR`: megatron_args.txt, launch.sh, hostfile. --make-plans first writes the standard set
(CASES: planner-made plans for every dimension, EDITS: hand-edited ones) into OUT/NAME with the
project's CLI (default EXE: the repository's .venv/bin/baige-plan), then checks OUT/*.

For each DIR:
1. launch.sh is run by bash with a stand-in `torchrun` first on PATH that records its argv and
   environment: the arguments pretrain_gpt.py would get (they must equal megatron_args.txt split with
   shlex), the torchrun world (nnodes x nproc-per-node = the plan's devices) and the variables
   launch.sh exports (CUDA_DEVICE_MAX_CONNECTIONS).
2. Those arguments and variables, with WORLD_SIZE = the plan's device count and RANK = 0, go through
   what pretrain_gpt.py's __main__ runs (Megatron-LM core_r0.19.0): megatron.training.arguments.
   parse_and_validate_args(args_defaults={'tokenizer_type': 'GPT2BPETokenizer'}) (parse_args,
   validate_args, set_global_variables: micro-batch calculator, tokenizer, vocab padding), then
   argument_utils.gpt_config_from_args (TransformerConfig.__post_init__: uneven-PP/vpp, MoE and
   recompute rules) and pretrain_cfg_container_from_args (optimizer, DDP, scheduler configs).
   CPU only, no torch.distributed. Stubbed because they read a GPU: training/utils get_device_arch_version
   (validate_args asks whether the GPU is older than Blackwell before demanding
   CUDA_DEVICE_MAX_CONNECTIONS=1; answered from the plan's chip: Ampere 8, Hopper 9, Blackwell 10)
   and torch.cuda.get_device_capability (validate_args' --moe-grouped-gemm check; same answer); and
   Transformer Engine, a CUDA build that does not import without a GPU driver: megatron.core.utils'
   TE version cache is set to TE_VERSION and rope_utils.fused_apply_rotary_pos_emb to a placeholder,
   so TransformerConfig's TE gates (fused RoPE, MoE/FP8 grouped GEMM) see that TE.
3. The parsed arguments must agree with the plan: tp, pp, cp, dp = world/(tp·pp·cp), ep, etp, SP,
   vpp, micro/global batch and micro-batches per step (Megatron's calculator), layers per pipeline
   rank and virtual stage (megatron.core.transformer.transformer_block.get_num_layers_to_build),
   model shape (layers, hidden, heads, query groups, kv channels, ffn, swiglu, tied embeddings,
   experts, top-k, expert ffn, shared experts, MoE layer pattern, padded vocab), precision, ZeRO
   stage (distributed optimizer, overlap flags), recompute; the plan's rank placement must be
   Megatron's (parallel_state.RankGenerator, order tp-cp-ep-dp-pp) and the expert grid must build.
   Two runtime rules that only fire on GPUs are mirrored (said so in the message): the interleaved
   schedule's micro-batch grouping (core/pipeline_parallel/schedules.py) and MoE with tp > 1 needing
   SP (core/transformer/moe/moe_layer.py MoELayer.forward).
Prints `ok DIR` or `FAIL DIR: reason` per DIR, then `N passed, M failed`; exit 1 if any failed.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shlex
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import yaml
from _checklib import (
    CheckFailure,
    capture_launch,
    cli,
    launcher_options,
    load_plan,
    need,
    parse_cli,
    run_serial,
)
from _checklib import make_plans as make_plans_with

ARCH = (("blackwell", 10), ("hopper", 9), ("ampere", 8), ("ada", 8), ("volta", 7))


# The Transformer Engine version the launch environment is assumed to have (megatron-core 0.19.2
# gates features on TE >= 1.4 .. 2.14; the export needs TE for RoPE fusion, CP, FP8, grouped GEMM).
TE_VERSION = "2.14.0"


def _te_placeholder(*args, **kwargs):
    raise RuntimeError("Transformer Engine placeholder: never called by the argument check")


def arg_lines(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            out += shlex.split(line)
    return out


def split_torchrun(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    idx = next((k for k, a in enumerate(argv) if a.endswith("pretrain_gpt.py")), None)
    need(idx is not None, f"launch.sh does not run pretrain_gpt.py: {argv[:12]}")
    return launcher_options(argv, idx), argv[idx + 1:]


def chip_arch(plan: dict) -> int:
    groups = plan["inputs"]["cluster"].get("groups", [])
    text = " ".join(str(g.get("chip", {}).get(k, "")) for g in groups for k in ("architecture", "name", "id")).lower()
    for name, v in ARCH:
        if name in text:
            return v
    return 9


class Megatron:
    """The pip-installed Megatron code the check calls (imported once: the import takes seconds)."""

    def __init__(self):
        warnings.filterwarnings("ignore")
        logging.disable(logging.WARNING)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            import megatron.training.arguments as arguments
            import torch
            from megatron.core import parallel_state
            from megatron.core.num_microbatches_calculator import get_num_microbatches
            from megatron.core.transformer.transformer_block import get_num_layers_to_build
            from megatron.training import argument_utils, global_vars
        self.torch, self.arguments, self.argument_utils = torch, arguments, argument_utils
        self.global_vars, self.parallel_state = global_vars, parallel_state
        self.get_num_microbatches, self.get_num_layers_to_build = get_num_microbatches, get_num_layers_to_build
        from importlib.metadata import version
        self.version = version("megatron-core")
        self.arch = 9
        # GPU stand-ins (see the module docstring): the GPU reads on this path ...
        arguments.get_device_arch_version = lambda: self.arch
        torch.cuda.get_device_capability = lambda *a, **k: (self.arch, 0)
        # ... and Transformer Engine, a CUDA build that cannot be imported without a GPU driver: its
        # version cache is set to TE_VERSION and its fused RoPE kernel is a placeholder, so the
        # TE gates of TransformerConfig.__post_init__ run as with that TE installed.
        import megatron.core.utils as core_utils
        from megatron.core.models.common.embeddings import rope_utils
        from packaging.version import Version
        core_utils._te_version = Version(TE_VERSION)
        if rope_utils.fused_apply_rotary_pos_emb is None:
            rope_utils.fused_apply_rotary_pos_emb = _te_placeholder

    def parse(self, argv: list[str], env: dict[str, str]):
        saved_argv, saved_env = sys.argv, dict(os.environ)
        for k in ("CUDA_DEVICE_MAX_CONNECTIONS", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
            os.environ.pop(k, None)
        os.environ.update(env)
        sys.argv = ["pretrain_gpt.py", *argv]
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                try:
                    args = self.arguments.parse_and_validate_args(
                        args_defaults={"tokenizer_type": "GPT2BPETokenizer"})
                    model_cfg = self.argument_utils.gpt_config_from_args(args)
                    container = self.argument_utils.pretrain_cfg_container_from_args(args, model_cfg)
                    m = self.get_num_microbatches()
                except SystemExit as e:   # argparse: unknown or malformed argument
                    lines = [ln for ln in out.getvalue().splitlines() if "error" in ln.lower()]
                    raise CheckFailure(f"Megatron's parser exited ({e.code}): "
                                       f"{lines[-1] if lines else out.getvalue()[-300:]}") from None
                except (AssertionError, ValueError, RuntimeError, TypeError, KeyError) as e:
                    where = traceback.extract_tb(e.__traceback__)[-1]
                    raise CheckFailure(f"Megatron rejected the arguments ({type(e).__name__} at "
                                       f"{Path(where.filename).name}:{where.lineno} {where.name}): "
                                       f"{str(e).strip() or where.line}") from None
        finally:
            sys.argv = saved_argv
            os.environ.clear()
            os.environ.update(saved_env)
            self.global_vars.unset_global_variables()
        return args, model_cfg, container, m


def plan_layers(plan: dict) -> list[int]:
    return [st["layers"][1] - st["layers"][0] for st in plan["pipelines"][0]["stages"]]


def moe_pattern(moe: dict, layers: int) -> list[int]:
    k, f = moe.get("first_dense_layers", 0) or 0, moe.get("layer_freq", 1) or 1
    return [1 if i >= k and (i - k) % f == 0 else 0 for i in range(layers)]


def check_dir(meg: Megatron, d: Path) -> list[str]:
    """Returns notes (informational); raises CheckFailure."""
    plan = load_plan(d)
    for f in ("megatron_args.txt", "launch.sh", "hostfile"):
        need((d / f).exists(), f"{f} missing (run: baige-plan export {d}/plan.yaml --to megatron --out-dir {d})")
    s = dict(plan["strategy"])
    p0 = plan["pipelines"][0]
    s.update(p0.get("strategy") or {})
    model, job = plan["inputs"]["model"], plan["inputs"]["job"]
    groups = plan["inputs"]["cluster"]["groups"]
    world = sum(g["nodes"] * g["devices_per_node"] for g in groups)
    counts = plan_layers(plan)
    tp, pp, cp = p0["stages"][0]["tp"], len(counts), s.get("cp", 1)
    dp, m_plan, mb = p0["replicas"], p0["micro_batches"], s["micro_batch"]
    ep, etp, vpp, zero = s.get("ep", 1), s.get("etp", 1), s.get("vpp", 1), s.get("zero", 0)
    notes = [ln.split(":", 1)[1].strip()[:120] for ln in (d / "megatron_args.txt").read_text().splitlines()
             if ln.startswith("# cannot express:")]

    with tempfile.TemporaryDirectory() as t:
        # mock data (BAIGE_MOCK_DATA=1: the documented variable), and this venv's python for launch.sh's version
        # check (megatron-core and torch of requirements-megatron.txt are inside its supported range)
        launch = capture_launch(d, Path(t), "torchrun", {"MEGATRON_LM": "/megatron-lm", "BAIGE_MOCK_DATA": "1",
                                                         "PYTHON": sys.executable})
    launch_env = launch.changed
    trun, margs = split_torchrun(launch.argv)
    txt = arg_lines((d / "megatron_args.txt").read_text())
    # launch.sh appends the data arguments to megatron_args.txt's (exports/megatron.py _launch_sh)
    data = ["--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", str(model["vocab"]), "--train-iters", "100"]
    if margs != txt + data:
        want = txt + data
        k = next((k for k, (a, b) in enumerate(zip(margs, want, strict=False)) if a != b), min(len(margs), len(want)))
        raise CheckFailure(f"launch.sh passes other arguments than megatron_args.txt + the mock-data arguments: at "
                           f"{k}, {margs[k:k + 2]} instead of {want[k:k + 2]}")
    need(int(trun["nnodes"]) * int(trun["nproc-per-node"]) == world,
         f"torchrun world {trun['nnodes']}x{trun['nproc-per-node']} != plan devices {world}")
    hosts = [ln.split()[0] for ln in (d / "hostfile").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    need(len(hosts) == int(trun["nnodes"]), f"hostfile has {len(hosts)} hosts, launch.sh NNODES={trun['nnodes']}")

    meg.arch = chip_arch(plan)
    env = dict(launch_env, WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0")
    args, model_cfg, container, m = meg.parse(margs, env)
    tc = model_cfg.transformer

    def eq(name, got, want):
        need(got == want, f"{name}: Megatron parsed {got!r}, plan has {want!r}")

    eq("tensor_model_parallel_size", args.tensor_model_parallel_size, tp)
    eq("pipeline_model_parallel_size", args.pipeline_model_parallel_size, pp)
    eq("context_parallel_size", args.context_parallel_size, cp)
    eq("data_parallel_size", args.data_parallel_size, dp)
    eq("world/(tp*pp*cp)", world // (tp * pp * cp), dp)
    eq("sequence_parallel", bool(args.sequence_parallel), bool(s.get("sequence_parallel")) and tp > 1)
    eq("virtual pipeline stages", args.virtual_pipeline_model_parallel_size or 1, vpp)
    eq("micro_batch_size", args.micro_batch_size, mb)
    eq("global_batch_size", args.global_batch_size, dp * m_plan * mb)
    eq("micro-batches per step (Megatron's calculator)", m, m_plan)
    eq("seq_length", args.seq_length, job["seq_len"])
    eq("num_layers", args.num_layers, model["layers"])
    eq("hidden_size", args.hidden_size, model["hidden"])
    eq("num_attention_heads", args.num_attention_heads, model["heads"])
    kv = model.get("kv_heads") or model["heads"]
    eq("query groups", tc.num_query_groups or tc.num_attention_heads, kv)
    mla = model.get("mla")
    if mla:     # MLA's head widths are its own fields (kv_channels is not read by MLASelfAttention)
        eq("multi_latent_attention", bool(tc.multi_latent_attention), True)
        eq("q_lora_rank", tc.q_lora_rank, mla.get("q_lora_rank"))
        eq("kv_lora_rank", tc.kv_lora_rank, mla["kv_lora_rank"])
        eq("qk_head_dim", tc.qk_head_dim, mla["qk_head_dim"])
        eq("qk_pos_emb_head_dim", tc.qk_pos_emb_head_dim, mla["qk_rope_head_dim"])
        eq("v_head_dim", tc.v_head_dim, mla["v_head_dim"])
    else:
        eq("kv_channels", args.kv_channels, model.get("head_dim") or model["hidden"] // model["heads"])
    eq("mtp_num_layers", tc.mtp_num_layers or 0, model.get("mtp_layers", 0))
    if model.get("sliding_window"):
        eq("window_size", tuple(tc.window_size), (model["sliding_window"], 0))
        eq("window_attn_skip_freq", tc.window_attn_skip_freq, model.get("full_attention_every"))
    eq("ffn_hidden_size", args.ffn_hidden_size, model["ffn_hidden"])
    eq("swiglu", bool(args.swiglu), model.get("activation", "swiglu") == "swiglu")
    eq("tied embeddings", not args.untie_embeddings_and_output_weights, bool(model.get("tie_embeddings", False)))
    eq("hidden_dropout", args.hidden_dropout, model.get("dropout", 0.0) or 0.0)
    # the build fields the plan's model records (issue 17): what Megatron parsed into its config
    if model.get("rope_theta") is not None:
        eq("rotary_base", args.rotary_base, round(model["rope_theta"]))
    if model.get("norm_eps") is not None:
        eq("layernorm_epsilon", tc.layernorm_epsilon, model["norm_eps"])
    if model.get("norm") is not None:
        eq("normalization", tc.normalization, {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}[model["norm"]])
    if model.get("qk_norm") is not None:
        eq("qk_layernorm", bool(tc.qk_layernorm), model["qk_norm"])
    if model.get("linear_bias") is not None:
        eq("add_bias_linear", bool(tc.add_bias_linear), model["linear_bias"])
    if model.get("qkv_bias") is not None and not model.get("linear_bias"):
        eq("add_qkv_bias", bool(tc.add_qkv_bias), model["qkv_bias"])
    sc = model.get("rope_scaling") or {}
    if sc.get("rope_type") == "llama3":
        eq("use_rope_scaling", bool(args.use_rope_scaling), True)
        eq("rope_scaling_factor", args.rope_scaling_factor, sc["factor"])
    elif model.get("rope_theta") is not None and not sc:
        eq("use_rope_scaling", bool(args.use_rope_scaling), False)
    mult = args.make_vocab_size_divisible_by * tp
    need(args.padded_vocab_size >= model["vocab"] and args.padded_vocab_size - model["vocab"] < mult,
         f"padded vocab {args.padded_vocab_size} is not the plan's vocab {model['vocab']} padded to {mult}")
    if args.padded_vocab_size != model["vocab"]:
        notes.append(f"vocab {model['vocab']} padded to {args.padded_vocab_size}")

    moe = model.get("moe")
    if moe:
        eq("num_experts", args.num_experts, moe["experts"])
        eq("moe_router_topk", args.moe_router_topk, moe["top_k"])
        eq("moe_ffn_hidden_size", args.moe_ffn_hidden_size, moe["expert_ffn_hidden"])
        shared = (moe.get("shared_experts") or 0) * moe["expert_ffn_hidden"]
        eq("moe_shared_expert_intermediate_size", args.moe_shared_expert_intermediate_size or 0, shared)
        if model.get("activation") == "gelu":   # mlp.py: no bias-GELU fusion with the router's per-token scale
            eq("bias_activation_fusion (GELU experts)", bool(tc.bias_activation_fusion), False)
        if moe.get("norm_topk_prob") is not None:   # pre-softmax: top-k of the full softmax, not renormalised
            eq("moe_router_pre_softmax", bool(tc.moe_router_pre_softmax), not moe["norm_topk_prob"])
        f = tc.moe_layer_freq
        got = [1 if i % f == 0 else 0 for i in range(tc.num_layers)] if isinstance(f, int) else list(f)
        eq("MoE layer pattern", got, moe_pattern(moe, model["layers"]))
        eq("expert_model_parallel_size", args.expert_model_parallel_size, ep)
        eq("expert_tensor_parallel_size", args.expert_tensor_parallel_size, etp)
        need(not (tp > 1 and not args.sequence_parallel),
             "MoE with tp > 1 needs --sequence-parallel (mirrors core/transformer/moe/moe_layer.py MoELayer.forward)")
    else:
        need(args.num_experts is None, f"dense model but Megatron parsed num_experts={args.num_experts}")

    prec = job.get("precision", "bf16")
    eq("bf16", bool(args.bf16), prec in ("bf16", "fp8", "fp4"))
    eq("fp16", bool(args.fp16), prec == "fp16")
    eq("fp8", args.fp8 is not None, prec == "fp8")
    # NVFP4 (cost/fp8.py): TransformerConfig.fp4 'e2m1' (--fp4-format) with fp4_recipe 'nvfp4' (--fp4-recipe)
    eq("fp4", args.fp4, "e2m1" if prec == "fp4" else None)
    if prec == "fp4":
        eq("fp4_recipe", str(getattr(args.fp4_recipe, "value", args.fp4_recipe)), "nvfp4")
    eq("use_distributed_optimizer", bool(args.use_distributed_optimizer), zero >= 1)
    # ZeRO-3 is Megatron-FSDP full sharding (specs/runtimes/megatron.py), which overlaps its gathers and
    # reduce-scatters itself (megatron_fsdp.py); ZeRO-2 is not planned and is exported as ZeRO-1
    eq("use_megatron_fsdp", bool(args.use_megatron_fsdp), zero >= 3)
    if zero >= 3:
        eq("data_parallel_sharding_strategy", args.data_parallel_sharding_strategy, "optim_grads_params")
        eq("DDP config use_megatron_fsdp", container.ddp.use_megatron_fsdp, True)
        eq("DDP config data_parallel_sharding_strategy", container.ddp.data_parallel_sharding_strategy,
           "optim_grads_params")
        eq("ckpt_format", args.ckpt_format, "fsdp_dtensor")
        need(bool(args.init_model_with_meta_device), "ZeRO-3 without --init-model-with-meta-device: every rank "
             "would materialise its whole model before sharding it")
    overlap = s.get("overlap_grad_reduce", True) or zero >= 3
    eq("overlap_grad_reduce", bool(args.overlap_grad_reduce), overlap)
    eq("overlap_param_gather", bool(args.overlap_param_gather), zero >= 1 and overlap)
    eq("DDP config overlap_grad_reduce", container.ddp.overlap_grad_reduce, overlap)
    eq("DDP config use_distributed_optimizer", container.ddp.use_distributed_optimizer, zero >= 1)
    rec = s.get("recompute", "none")
    eq("recompute_granularity", args.recompute_granularity, None if rec == "none" else rec)
    if rec == "full":
        eq("recompute (method, layers)", (args.recompute_method, args.recompute_num_layers), ("uniform", 1))
    eq("distribute_saved_activations", bool(args.distribute_saved_activations),
       bool(s.get("distribute_saved_activations")))
    eq("TransformerConfig distribute_saved_activations", bool(tc.distribute_saved_activations),
       bool(s.get("distribute_saved_activations")))
    if rec == "selective":
        eq("recompute_modules", tc.recompute_modules, ["core_attn"])
    eq("CUDA_DEVICE_MAX_CONNECTIONS from launch.sh", launch_env.get("CUDA_DEVICE_MAX_CONNECTIONS"),
       "1" if (tp > 1 or cp > 1) and zero < 3 else None)

    # layers per pipeline rank (and per virtual stage), as Megatron builds them
    v = args.virtual_pipeline_model_parallel_size or 1
    got = []
    for r in range(pp):
        if tc.pipeline_model_parallel_layout is not None:
            per = [sum(1 for t in tc.pipeline_model_parallel_layout.layout[r][c] if t.name == "decoder")
                   for c in range(v)]
        else:
            per = [meg.get_num_layers_to_build(tc, vp_stage=c if v > 1 else None, pp_rank=r) for c in range(v)]
        got.append(sum(per))
    eq("layers per pipeline stage", got, counts)
    if v > 1:   # mirrors forward_backward_pipelining_with_interleaving's check (schedules.py)
        g = tc.microbatch_group_size_per_vp_stage
        need(pp <= g <= m and (m % g == 0 or m % g >= pp),
             f"interleaved schedule: micro-batch group {g} must lie in [pp={pp}, M={m}] with M % group 0 or >= pp "
             "(mirrors core/pipeline_parallel/schedules.py)")

    # rank placement: the plan's (stage, replica, cp_rank, tp_rank) per rank is Megatron's
    order = "tp-cp-ep-pp-dp" if args.use_tp_pp_dp_mapping else "tp-cp-ep-dp-pp"
    gen = meg.parallel_state.RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order=order)
    coord: dict[int, dict[str, int]] = {}
    for tok in ("tp", "cp", "dp", "pp"):
        for group in gen.get_ranks(tok):
            for idx, r in enumerate(group):
                coord.setdefault(r, {})[tok] = idx
    if plan.get("placement"):
        for pl in plan["placement"]:
            if pl.get("pipeline", 0) != 0:
                continue
            want = {"tp": pl.get("tp_rank", 0), "cp": pl.get("cp_rank", 0), "dp": pl["replica"], "pp": pl["stage"]}
            eq(f"rank {pl['rank']} (tp, cp, dp, pp) coordinates", coord[pl["rank"]], want)
    if moe:
        edp, rem = divmod(tp * cp * dp, etp * ep)
        need(rem == 0, f"expert grid: tp*cp*dp = {tp * cp * dp} is not divisible by etp*ep = {etp * ep}")
        egen = meg.parallel_state.RankGenerator(tp=etp, ep=ep, dp=edp, pp=pp, cp=1, order="tp-ep-dp-pp")
        eq("expert groups", len(egen.get_ranks("ep")), world // ep)
    return notes


# name, model, cluster, then plan options (always with --runtime megatron)
CASES = (
    ("gpt3-175b-tp8-pp8-vpp2", "gpt3-175b", "h100-sxm5-80g:16x8", "--global-batch", "1536", "--seq-len", "2048",
     "--tp", "8", "--pp", "8", "--vpp", "2"),
    ("gpt3-175b-full-recompute", "gpt3-175b", "h100-sxm5-80g:16x8", "--global-batch", "1536", "--seq-len", "2048",
     "--recompute", "full"),
    ("llama3-70b-gqa", "llama3-70b", "h100-sxm5-80g:16x8", "--global-batch", "512", "--seq-len", "8192"),
    ("llama3-405b-pp8-uneven", "llama3-405b", "h100-sxm5-80g:64x8", "--global-batch", "2048", "--seq-len", "8192",
     "--pp", "8"),
    ("mixtral-8x7b-ep8", "mixtral-8x7b", "h100-sxm5-80g:8x8", "--global-batch", "256", "--seq-len", "4096",
     "--ep", "8"),
    ("qwen3-235b-a22b-moe", "qwen3-235b-a22b", "h100-sxm5-80g:32x8", "--global-batch", "1024", "--seq-len", "4096"),
    ("llama3-8b-cp4", "llama3-8b", "h100-sxm5-80g:4x8", "--global-batch", "64", "--seq-len", "32768", "--cp", "4"),
    ("llama3-8b-fp8", "llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "128", "--seq-len", "8192",
     "--precision", "fp8"),
    ("llama3-8b-fp4", "llama3-8b", "b200:2x8", "--global-batch", "128", "--seq-len", "8192",
     "--precision", "fp4"),
    ("llama3-8b-zero0", "llama3-8b", "h100-sxm5-80g:1x8", "--global-batch", "64", "--seq-len", "8192", "--zero", "0"),
    # ZeRO-3 = Megatron-FSDP: alone, and with TP + SP (FSDP only warns there) and with EP
    ("llama3-8b-megatron-fsdp", "llama3-8b", "h100-sxm5-80g:1x8", "--global-batch", "64", "--seq-len", "8192",
     "--zero", "3", "--tp", "1", "--pp", "1"),
    ("llama3-70b-megatron-fsdp-tp2", "llama3-70b", "h100-sxm5-80g:4x8", "--global-batch", "128", "--seq-len",
     "4096", "--zero", "3", "--tp", "2"),
    ("mixtral-8x7b-megatron-fsdp-ep8", "mixtral-8x7b", "h100-sxm5-80g:2x8", "--global-batch", "128", "--seq-len",
     "4096", "--zero", "3", "--ep", "8"),
    ("llama2-7b-fp16-a100", "llama2-7b", "a100-sxm4-80g:2x8", "--global-batch", "128", "--seq-len", "4096",
     "--precision", "fp16"),
    ("llama3-8b-megatron-fsdp", "llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "128", "--seq-len", "4096",
     "--tp", "1", "--pp", "1", "--cp", "1", "--zero", "3"),
    # Megatron-Bridge recipes (src/megatron/bridge/perf_recipes/{qwen/h100/qwen3_moe.py,llama/h100/llama31.py}):
    # 94 and 126 layers on pp 8 with vpp 4 and 8, embedding and loss counted as pipeline layers
    ("qwen3-235b-a22b-bridge-recipe", "qwen3-235b-a22b", "h100-sxm5-80g:32x8", "--global-batch", "8192",
     "--seq-len", "4096", "--tp", "2", "--pp", "8", "--cp", "1", "--vpp", "4", "--ep", "32", "--etp", "1",
     "--micro-batch", "1", "--recompute", "none", "--account-for-embedding", "--account-for-loss",
     "--max-memory-frac", "1"),
    ("llama3-405b-bridge-recipe-fullrec", "llama3-405b", "h100-sxm5-80g:64x8", "--global-batch", "768",
     "--seq-len", "8192", "--tp", "8", "--pp", "8", "--cp", "2", "--vpp", "8", "--micro-batch", "1",
     "--recompute", "full", "--account-for-embedding", "--account-for-loss", "--max-memory-frac", "1"),
)
# name, base case, stage layer counts (None: keep), strategy changes: plans the planner does not make
EDITS = (
    # first/last counts with interleaving: 14 and 16 per middle stage are divisible by vpp 2
    ("llama3-405b-uneven-vpp2-edited", "llama3-405b-pp8-uneven", [14] + [16] * 7,
     {"vpp": 2, "first_stage_layers": 14, "last_stage_layers": None, "account_for_embedding": None,
      "account_for_loss": None}),
    ("gpt3-175b-freeform-split-edited", "gpt3-175b-tp8-pp8-vpp2", [10, 12, 12, 14, 12, 12, 12, 12], {"vpp": 1}),
    ("llama3-70b-zero3-edited", "llama3-70b-gqa", None, {"zero": 3}),
    # hybrid sharding (StrategySpec.fsdp_shard): dp 16 in shard groups of 8 -> --num-distributed-optimizer-instances 2
    ("llama3-8b-megatron-hsdp-edited", "llama3-8b-megatron-fsdp", None, {"fsdp_shard": 8}),
    # full recompute keeping 1/tp of each checkpointed input (StrategySpec.distribute_saved_activations): no SP
    ("gpt3-175b-distributed-saved-edited", "gpt3-175b-tp8-pp8-vpp2", None,
     {"recompute": "full", "sequence_parallel": False, "distribute_saved_activations": True}),
    # the 405B recipe as published (recompute none), whatever the memory model says of it
    ("llama3-405b-bridge-recipe-edited", "llama3-405b-bridge-recipe-fullrec", None, {"recompute": "none"}),
)


def make_plans(out: Path, exe: str) -> tuple[list[Path], int]:
    """Plan and export every case into out/NAME, then the hand edits of EDITS; a case the CLI cannot make
    is reported as a failure."""
    made, failed = make_plans_with(out, exe, "megatron", CASES)
    for name, base, counts, change in EDITS:
        src, d = out / base, out / name
        if src not in made:
            failed.append(f"FAIL {d}: base plan {base} was not made")
            continue
        doc = yaml.safe_load((src / "plan.yaml").read_text())
        if counts:
            start = 0
            for st, c in zip(doc["pipelines"][0]["stages"], counts, strict=True):
                st["layers"] = [start, start + c]
                start += c
        doc["strategy"].update(change)
        d.mkdir(parents=True, exist_ok=True)
        (d / "plan.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        try:
            cli(exe, "export", str(d / "plan.yaml"), "--to", "megatron", "--out-dir", str(d))
            made.append(d)
        except CheckFailure as e:
            failed.append(f"FAIL {d}: {e}")
    for line in failed:
        print(line, flush=True)
    return made, len(failed)


def main(argv: list[str]) -> int:
    opts, dirs, verbose = parse_cli(argv)
    exe = opts.get("--baige-plan", str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "baige-plan"))
    out = Path(opts["--make-plans"]) if "--make-plans" in opts else None
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
    meg = Megatron()
    t1 = time.time()
    print(f"# megatron-core {meg.version}, torch {meg.torch.__version__}: imported in {t1 - t0:.1f} s", flush=True)
    passed, bad = run_serial(dirs, lambda d: check_dir(meg, d), verbose)
    failed += bad
    print(f"# checked {len(dirs)} in {time.time() - t1:.1f} s", flush=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
