"""torchtitan 0.2.2 exports as launched on real GPUs (issue 17, deliverable 4; benchmarks/real/run_torchtitan.sh).

Expected values come from torchtitan v0.2.2 itself, not from the export: JOB_CONFIG_0_2_2 is every
`section.field` of torchtitan/config/job_config.py JobConfig at the v0.2.2 tag (73a0e697, the PyPI wheel
torchtitan-0.2.2-py3-none-any.whl), transcribed for the sections the export writes; tyro turns them into
`--section.field` flags (config/manager.py). A one-node launch must rendezvous where torchrun can reach: the
hostfile's placeholder name (`h200-sxm-141g-node0000`) does not resolve, and the first unchanged launch on 2x H200
would have stopped there."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from baige_plan.exports import torchtitan
from baige_plan.exports.files import export_plan
from tests._plan_docs import LLAMA3_8B, plan_doc

JOB_CONFIG_0_2_2 = {
    "job": {"config_file", "custom_config_module", "description", "dump_folder", "print_config", "save_config_file"},
    "model": {"converters", "flavor", "hf_assets_path", "name", "print_after_conversion", "tokenizer_path"},
    "training": {"dataloader", "dataset", "dataset_path", "dtype", "enable_cpu_offload", "gc_debug", "gc_freq",
                 "global_batch_size", "local_batch_size", "max_norm", "mixed_precision_param",
                 "mixed_precision_reduce", "seq_len", "steps"},
    "parallelism": {"context_parallel_degree", "context_parallel_load_balancer", "context_parallel_rotate_method",
                    "data_parallel_replicate_degree", "data_parallel_shard_degree", "disable_loss_parallel",
                    "enable_async_tensor_parallel", "expert_parallel_comm_backend", "expert_parallel_degree",
                    "expert_tensor_parallel_degree", "fsdp_reshard_after_forward", "module_fqns_per_model_part",
                    "pipeline_parallel_degree", "pipeline_parallel_expert_parallel_overlap",
                    "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers",
                    "pipeline_parallel_layers_per_stage", "pipeline_parallel_microbatch_size",
                    "pipeline_parallel_schedule", "pipeline_parallel_schedule_csv", "tensor_parallel_degree"},
    "activation_checkpoint": {"debug", "determinism_check", "early_stop", "memory_budget", "mode",
                              "per_op_sac_force_recompute_mm_shapes_by_fqns", "preserve_rng_state",
                              "selective_ac_option", "visualize_memory_budget_pareto"},
    "metrics": {"disable_color_printing", "enable_tensorboard", "enable_wandb", "log_freq", "save_for_all_ranks",
                "save_tb_folder"},
    "experimental": {"custom_args_module", "custom_import"},
}
# Literal choices at v0.2.2 (job_config.py): Parallelism.fsdp_reshard_after_forward, ActivationCheckpoint.mode,
# Training.mixed_precision_param / mixed_precision_reduce ("bfloat16" | "float32"), Training.dtype
CHOICES_0_2_2 = {"parallelism.fsdp_reshard_after_forward": {"default", "always", "never"},
                 "activation_checkpoint.mode": {"selective", "full", "memory_budget", "none"},
                 "training.mixed_precision_param": {"bfloat16", "float32"},
                 "training.mixed_precision_reduce": {"float32"},
                 "training.dtype": {"bfloat16", "float32"}}
LLAMA2_7B = dict(LLAMA3_8B, name="llama2-7b", heads=32, kv_heads=32, ffn_hidden=11008, vocab=32000)


def _export(tmp: Path, **kw) -> dict[str, str]:
    kw.setdefault("nodes", 1)
    kw.setdefault("per_node", 2)
    model = kw.pop("model", LLAMA3_8B)
    ex = export_plan(plan_doc(model, "torchtitan", **kw), "torchtitan", runtime_version="0.2")
    tmp.mkdir(parents=True, exist_ok=True)
    for f in ex.files:
        (tmp / f.name).write_text(f.text)
    return {f.name: f.text for f in ex.files}


def _flags(files: dict[str, str]) -> list[tuple[str, str | None]]:
    out = []
    for ln in files[torchtitan.ARGS_FILE].splitlines():
        w = ln.split()
        if w and w[0].startswith("--"):
            out.append((w[0][2:], w[1] if len(w) > 1 else None))
    return out


@pytest.mark.parametrize("kw", [
    dict(tp=1, dp=2, zero=3, micro_batch=2),                                  # FSDP (the 2x H200 runs)
    dict(tp=1, dp=2, zero=2, micro_batch=2),                                  # reshard never
    dict(tp=1, dp=1, cp=2, zero=3, micro_batch=4),                            # CP (FSDP over cp)
    dict(tp=1, dp=2, zero=3, micro_batch=4, recompute="selective"),
    dict(tp=1, dp=2, zero=3, micro_batch=1, model=LLAMA2_7B),                 # generated flavor module
])
def test_every_exported_flag_is_a_torchtitan_0_2_2_field(tmp_path, kw):
    files = _export(tmp_path, **kw)
    flags = _flags(files)
    assert flags
    for name, value in flags:
        section, _, field = name.partition(".")
        assert field in JOB_CONFIG_0_2_2.get(section, set()), f"--{name} is not a torchtitan 0.2.2 JobConfig field"
        if name in CHOICES_0_2_2:
            assert value in CHOICES_0_2_2[name], f"--{name} {value}"
    # the data / run-length flags launch.sh adds are 0.2.2 fields too
    for name in ("training.dataset", "training.dataset_path", "model.hf_assets_path", "training.steps",
                 "job.dump_folder"):
        assert f"--{name} " in files["launch.sh"]
        section, _, field = name.partition(".")
        assert field in JOB_CONFIG_0_2_2[section]


def _torchrun_env(tmp: Path) -> dict[str, str]:
    bindir = tmp / "bin"
    bindir.mkdir()
    (bindir / "torchrun").write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$(dirname "$0")/argv"\n')
    (bindir / "torchrun").chmod(0o755)
    return {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"),
            "BAIGE_SKIP_VERSION_CHECK": "1", "BAIGE_DATA_PATH": "/d", "BAIGE_TOKENIZER": "/t",
            "BAIGE_TRAIN_ITERS": "8"}


def _endpoint(tmp: Path) -> str:
    argv = (tmp / "bin" / "argv").read_text().splitlines()
    return argv[argv.index("--rdzv-endpoint") + 1]


@pytest.mark.parametrize("version", ["0.2", None])
def test_one_node_launch_rendezvouses_at_localhost(tmp_path, version):
    doc = plan_doc(LLAMA3_8B, "torchtitan", tp=1, dp=2, zero=3, nodes=1, per_node=2)
    ex = export_plan(doc, "torchtitan", runtime_version=version)
    for f in ex.files:
        (tmp_path / f.name).write_text(f.text)
    assert "node0000" in (tmp_path / "hostfile").read_text()      # a placeholder no resolver knows
    env = _torchrun_env(tmp_path)
    r = subprocess.run(["bash", str(tmp_path / "launch.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert _endpoint(tmp_path) == "localhost:29500"
    r = subprocess.run(["bash", str(tmp_path / "launch.sh")], env={**env, "MASTER_ADDR": "10.0.0.7"},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and _endpoint(tmp_path) == "10.0.0.7:29500"


def test_several_nodes_rendezvous_at_the_first_host(tmp_path):
    files = _export(tmp_path, tp=2, dp=8, zero=3, nodes=2, per_node=8)
    first = next(ln.split()[0] for ln in files["hostfile"].splitlines() if ln.strip() and not ln.startswith("#"))
    r = subprocess.run(["bash", str(tmp_path / "launch.sh")], env=_torchrun_env(tmp_path), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert _endpoint(tmp_path) == f"{first}:29500"


@pytest.mark.parametrize("kw,why", [
    (dict(tp=1, dp=2, zero=0), "DDP) in bf16 through torch.autocast"),       # maybe_enable_amp: AMP, not fp32
    (dict(tp=1, dp=1, zero=0, per_node=1), "one device) in bf16 through torch.autocast"),
    (dict(tp=2, dp=1, zero=0), "would train in fp32"),                         # TP without FSDP: AMP disabled
])
def test_0_2_2_refusals_say_what_torchtitan_runs(tmp_path, kw, why):
    """torchtitan v0.2.2 distributed/utils.py maybe_enable_amp: FSDP -> fully_shard's policy; TP or PP without
    FSDP -> "Mixed precision training is disabled"; otherwise (DDP, one device) -> torch.autocast."""
    from baige_plan.errors import InputError
    with pytest.raises(InputError, match=why.replace("(", r"\(").replace(")", r"\)")):
        _export(tmp_path, **kw)


# torchtitan v0.2.2 models/qwen3/model/args.py Qwen3ModelArgs and models/moe/moe.py MoEArgs fields (the dataclasses at
# the tag), transcribed: the generated MoE module may pass no other keyword
QWEN3_MODEL_ARGS_0_2_2 = {"dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "head_dim", "hidden_dim", "norm_eps",
                          "rope_theta", "qk_norm", "max_seq_len", "depth_init", "attn_type", "attn_mask_type", "eos_id",
                          "enable_weight_tying", "moe_enabled", "moe_inter_dim", "moe_args"}
MOE_ARGS_0_2_2 = {"num_experts", "num_shared_experts", "score_func", "route_norm", "route_scale", "gate_bias",
                  "score_before_experts", "top_k", "num_expert_groups", "num_limited_groups", "use_grouped_mm",
                  "load_balance_coeff", "_debug_force_load_balance"}
# OLMoE-1B-7B (HF allenai/OLMoE-1B-7B-0924 config.json): a fine-grained MoE torchtitan does not ship
OLMOE = dict(name="olmoe-1b-7b", layers=16, hidden=2048, heads=16, kv_heads=16, head_dim=128, ffn_hidden=1024, vocab=50304,
             seq_len=4096, activation="swiglu", tie_embeddings=False, rope_theta=10000.0, norm="rmsnorm", norm_eps=1e-5,
             qk_norm=True, qkv_bias=False, linear_bias=False,
             moe=dict(experts=64, top_k=8, expert_ffn_hidden=1024, shared_experts=0, layer_freq=1, first_dense_layers=0,
                      norm_topk_prob=False, shared_expert_gate=False))


def _run_module(text: str) -> dict:
    """Execute a generated 0.2.2 module against stand-ins of torchtitan's qwen3 / moe modules that accept only the
    v0.2.2 dataclass fields; returns the qwen3_args registry it wrote into."""
    import sys
    import types

    class _Args:
        fields: set = set()

        def __init__(self, **kw):
            bad = set(kw) - self.fields
            assert not bad, f"{type(self).__name__} has no field {bad}"
            self.__dict__.update(kw)

    class MoEArgs(_Args):
        fields = MOE_ARGS_0_2_2

    class Qwen3ModelArgs(_Args):
        fields = QWEN3_MODEL_ARGS_0_2_2

    registry: dict = {}
    fake = {"torchtitan.models.moe": types.SimpleNamespace(MoEArgs=MoEArgs),
            "torchtitan.models.qwen3": types.SimpleNamespace(Qwen3ModelArgs=Qwen3ModelArgs, qwen3_args=registry)}
    saved = {k: sys.modules.get(k) for k in fake}
    sys.modules.update(fake)
    try:
        exec(compile(text, "baige_torchtitan_config.py", "exec"), {})
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return registry


@pytest.mark.parametrize("kw", [dict(tp=1, dp=4, zero=3, micro_batch=4, ep=4, per_node=4),
                                dict(tp=2, etp=2, dp=2, zero=3, micro_batch=1, per_node=4, recompute="full")])
def test_0_2_2_builds_an_moe_model_it_does_not_ship_as_a_qwen3_flavor(tmp_path, kw):
    """torchtitan 0.2.2 ships qwen3 MoE flavors only (30B-A3B, 235B-A22B); another MoE model is registered into
    qwen3_args with the planned shape and the fields 0.2.2 lets it set (RoPE theta, norm eps, q/k norm, top-k
    renormalisation), selected with --model.name qwen3."""
    files = _export(tmp_path, model=OLMOE, **kw)
    flags = dict(_flags(files))
    assert flags["model.name"] == "qwen3" and flags["model.flavor"] == "baige_olmoe_1b_7b"
    assert flags["experimental.custom_import"] == torchtitan.CONFIG_MODULE
    for name in flags:
        section, _, field = name.partition(".")
        assert field in JOB_CONFIG_0_2_2.get(section, set()), name
    args = _run_module(files[f"{torchtitan.CONFIG_MODULE}.py"])["baige_olmoe_1b_7b"]
    assert (args.dim, args.n_layers, args.n_heads, args.n_kv_heads, args.head_dim, args.vocab_size) == \
        (2048, 16, 16, 16, 128, 50304)
    assert args.moe_enabled and args.moe_inter_dim == 1024
    assert (args.rope_theta, args.norm_eps, args.qk_norm, args.enable_weight_tying) == (10000, 1e-5, True, False)
    m = args.moe_args
    assert (m.num_experts, m.top_k, m.num_shared_experts, m.route_norm, m.score_func) == (64, 8, 0, False, "softmax")
    assert "model difference" not in files[torchtitan.ARGS_FILE]      # nothing the 0.2.2 build changes


@pytest.mark.parametrize("change, kw, why", [
    (dict(first_dense_layers=1), dict(dp=4, zero=3), "every layer MoE"),
    ({}, dict(dp=2, pp=2, zero=3, m=4), "no pipelining_fn"),
])
def test_0_2_2_refuses_moe_builds_qwen3_cannot_run(tmp_path, change, kw, why):
    from baige_plan.errors import InputError
    model = dict(OLMOE, moe=dict(OLMOE["moe"], **change))
    with pytest.raises(InputError, match=why):
        _export(tmp_path, model=model, per_node=4, **kw)
