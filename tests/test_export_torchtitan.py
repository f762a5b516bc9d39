"""torchtitan export (baige_plan/exports/torchtitan.py): arguments against hand-derived values, and the
runtime's declared space.

No torchtitan here (project venv): tests/integration/check_torchtitan.py feeds the same files to
torchtitan 0.3.0's own ConfigManager and dry-run mesh/pipeline builders. Plan documents are built by hand
in the plan-file form (only the fields the export reads).
"""

import subprocess

import pytest
from _plan_docs import LLAMA3_8B, LLAMA3_405B, QWEN3
from _plan_docs import plan_doc as _plan_doc
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.errors import SpecError
from baige_plan.exports import torchtitan
from baige_plan.exports.files import export_plan
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec, MoESpec
from baige_plan.specs.strategy import StrategySpec

LLAMA2_7B = dict(LLAMA3_8B, name="llama2-7b", kv_heads=32, ffn_hidden=11008, vocab=32000)
MIXTRAL = dict(name="mixtral-8x7b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=32000,
               activation="swiglu", moe=dict(experts=8, top_k=2, expert_ffn_hidden=14336))


def plan_doc(model, *, zero=3, **kw):
    """A torchtitan plan document, FSDP (zero 3) unless said (tests/_plan_docs.py)."""
    return _plan_doc(model, "torchtitan", zero=zero, **kw)


def files(doc):
    ex = torchtitan.export(doc)
    return {f.name: f.text for f in ex.files}, ex.caveats


def argv_of(doc) -> list[str]:
    """What launch.sh hands torchtitan.train: every non-comment line word-split, flags first, then the
    activation-checkpoint subcommand (which must be last: tyro rejects parent flags after it)."""
    flags, subs = [], []
    for line in files(doc)[0][torchtitan.ARGS_FILE].splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        (flags if words[0].startswith("-") else subs).append(words)
    assert len(subs) == 1 and subs[0][0].startswith("activation-checkpoint:")
    return [w for ws in flags for w in ws] + subs[0]


def args_of(doc) -> dict:
    """The flags as {flag: value, or the list of values for multi-token flags, or None}."""
    out = {}
    for line in files(doc)[0][torchtitan.ARGS_FILE].splitlines():
        words = line.split()
        if not words or words[0].startswith("#") or not words[0].startswith("--"):
            continue
        assert words[0] not in out, f"{words[0]} given twice"
        out[words[0]] = None if len(words) == 1 else words[1] if len(words) == 2 else words[1:]
    return out


def ac_of(doc) -> str:
    return argv_of(doc)[-1]


def test_files_and_version():
    f, _ = files(plan_doc(LLAMA3_8B, dp=16, nodes=2))
    assert list(f) == [torchtitan.ARGS_FILE, "launch.sh", "hostfile", "slurm.sbatch"]
    assert torchtitan.RUNTIME.version == torchtitan.VERSION == "0.3.0"
    assert torchtitan.RUNTIME.package == "torchtitan"
    assert "torchtitan==0.3.0" in f[torchtitan.ARGS_FILE].splitlines()[1]
    assert "torch==2.14.1" in f[torchtitan.ARGS_FILE].splitlines()[1]
    assert "torchtitan==0.3.0" in f["launch.sh"]


@pytest.mark.parametrize("pp,m,mb,dp,seq", [(1, 8, 2, 8, 8192), (4, 32, 1, 4, 4096), (2, 16, 4, 2, 16384)])
def test_batch_and_tokens_per_step(pp, m, mb, dp, seq):
    """tokens per step = global_batch x seq_len; without PP one micro-batch per forward (m accumulation
    steps), with PP the local batch is the step's m micro-batches, split by the schedule."""
    a = args_of(plan_doc(LLAMA3_8B, pp=pp, dp=dp, m=m, micro_batch=mb, seq=seq, per_node=pp * dp, tp=1))
    gb = dp * m * mb
    assert int(a["--training.global_batch_size"]) * int(a["--training.seq_len"]) == gb * seq
    local = int(a["--training.local_batch_size"])
    assert local == (mb * m if pp > 1 else mb)
    accumulation = gb // (local * dp)                              # trainer.py Trainer.__init__
    micro = local // int(a["--parallelism.pipeline_parallel_microbatch_size"]) if pp > 1 else 1
    assert (accumulation, micro) == ((1, m) if pp > 1 else (m, 1))


def test_degrees_fsdp_and_ddp():
    a = args_of(plan_doc(LLAMA3_8B, tp=2, dp=8, zero=3, nodes=2))
    assert (a["--parallelism.data_parallel_replicate_degree"], a["--parallelism.data_parallel_shard_degree"]) == ("1", "8")
    assert a["--parallelism.tensor_parallel_degree"] == "2" and "--parallelism.enable_sequence_parallel" in a
    a = args_of(plan_doc(LLAMA3_8B, tp=4, dp=4, zero=0, nodes=2, sp=False))
    assert (a["--parallelism.data_parallel_replicate_degree"], a["--parallelism.data_parallel_shard_degree"]) == ("4", "1")
    assert "--parallelism.no_enable_sequence_parallel" in a and "--parallelism.enable_sequence_parallel" not in a
    for k in ("pipeline_parallel_degree", "context_parallel_degree", "expert_parallel_degree"):
        assert a[f"--parallelism.{k}"] == "1"
    assert a["--module"] == "llama3" and a["--config"] == "llama3_8b"
    assert "--compile.no_enable" in a and "--compile.no_enable_async_tensor_parallel" in a
    assert "--training.disable_cuda_graphs" in a               # costed eager: no CUDA graphs, even without PP/EP
    assert "--profiler.no_enable_profiling" in a               # llama3_8b() profiles every 100 steps


def test_names_0_3_0_does_not_have_are_not_exported():
    text = files(plan_doc(QWEN3, dp=256, ep=128, nodes=32, seq=4096))[0][torchtitan.ARGS_FILE]
    for gone in ("expert_tensor_parallel_degree", "num_tokens_per", "max_context_length", "num_pp_microbatches",
                 "activation_checkpoint.mode", "[training]"):
        assert gone not in text


def test_world_product_equals_devices():
    for kw in (dict(tp=2, pp=4, dp=2), dict(tp=1, pp=1, dp=16), dict(tp=2, cp=2, dp=4)):
        doc = plan_doc(LLAMA3_8B, nodes=2, **kw)
        a = args_of(doc)
        world = 1
        for k in ("data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
                  "pipeline_parallel_degree", "context_parallel_degree"):
            world *= int(a[f"--parallelism.{k}"])
        assert world == 16
        launch = files(doc)[0]["launch.sh"]
        assert "NNODES=2" in launch and "NPROC_PER_NODE=8" in launch and "-m torchtitan.train" in launch


def test_1f1b_even_split_uses_layers_per_stage():
    a = args_of(plan_doc(LLAMA3_8B, tp=2, pp=4, dp=2, m=32, nodes=2))
    assert a["--parallelism.pipeline_parallel_schedule"] == "1F1B"
    assert a["--parallelism.pipeline_parallel_layers_per_stage"] == "8"          # 32 layers / 4 stages
    # torchtitan's defaults (1) would treat embedding and output as a layer each: 34/4 -> uneven
    assert a["--parallelism.pipeline_parallel_first_stage_less_layers"] == "0"
    assert a["--parallelism.pipeline_parallel_last_stage_less_layers"] == "0"
    assert "--training.disable_cuda_graphs" in a                   # Trainer.Config._validate_cuda_graphs


def test_interleaved_schedule_and_virtual_stages():
    a = args_of(plan_doc(LLAMA3_8B, tp=2, pp=4, dp=2, m=32, vpp=2, nodes=2))
    assert a["--parallelism.pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert a["--parallelism.pipeline_parallel_layers_per_stage"] == "4"          # 32 / (4 x 2)
    assert a["--parallelism.pipeline_parallel_microbatch_size"] == "1"
    assert a["--training.local_batch_size"] == "32"


def test_uneven_split_is_exported_stage_by_stage():
    counts = [15, 16, 16, 16, 16, 16, 16, 15]
    a = args_of(plan_doc(LLAMA3_405B, tp=4, pp=8, dp=16, m=128, counts=counts, nodes=64))
    parts = [p.split(",") for p in a["--parallelism.module_fqns_per_model_part"]]
    assert [sum(n.startswith("layers.") for n in p) for p in parts] == counts
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "lm_head"]
    assert parts[1][0] == "layers.15" and parts[-1][0] == "layers.111"
    assert "--parallelism.pipeline_parallel_layers_per_stage" not in a


def test_405b_gets_a_config_module_without_float8():
    f, _ = files(plan_doc(LLAMA3_405B, tp=8, pp=1, dp=64, nodes=64))
    a = args_of(plan_doc(LLAMA3_405B, tp=8, pp=1, dp=64, nodes=64))
    assert (a["--module"], a["--config"]) == (torchtitan.CONFIG_MODULE, torchtitan.CONFIG_FUNCTION)
    mod = f[f"{torchtitan.CONFIG_MODULE}.py"]
    assert 'model_registry("405B")' in mod and "Float8" not in mod
    compile(mod, "baige_torchtitan_config.py", "exec")
    assert 'export PYTHONPATH="$HERE' in f["launch.sh"]


def test_fp8_uses_the_float8_converter_and_bf16_params():
    doc = plan_doc(LLAMA3_8B, dp=16, nodes=2, precision="fp8")
    f, cav = files(doc)
    mod = f[f"{torchtitan.CONFIG_MODULE}.py"]
    assert 'Float8LinearConverter.Config(filter_fqns=["lm_head"]' in mod and 'model_registry(\n        "8B",' in mod
    compile(mod, "baige_torchtitan_config.py", "exec")
    assert args_of(doc)["--training.mixed_precision_param"] == "bfloat16"
    assert any("torchao" in c for c in cav)


def test_fp32_and_bf16_params():
    assert args_of(plan_doc(LLAMA3_8B, dp=8, precision="fp32"))["--training.mixed_precision_param"] == "float32"
    assert args_of(plan_doc(LLAMA3_8B, dp=8))["--training.mixed_precision_param"] == "bfloat16"


def test_fp16_is_refused_not_exported_as_bf16():
    with pytest.raises(SpecError, match="fp16"):
        torchtitan.export(plan_doc(LLAMA3_8B, dp=8, precision="fp16"))
    assert "fp16" not in torchtitan.RUNTIME.precisions


def test_recompute_modes():
    assert ac_of(plan_doc(LLAMA3_8B, dp=8, recompute="full")) == "activation-checkpoint:full"
    assert ac_of(plan_doc(LLAMA3_8B, dp=8, recompute="none")) == "activation-checkpoint:none"
    # "selective" on torchtitan is its op-level SAC (SelectiveAC), which the plan was costed for
    _, cav = files(plan_doc(LLAMA3_8B, dp=8, recompute="selective"))
    assert ac_of(plan_doc(LLAMA3_8B, dp=8, recompute="selective")) == "activation-checkpoint:selective"
    assert cav == ()


def test_moe_maps_to_qwen3_235b_with_ep():
    doc = plan_doc(QWEN3, dp=256, ep=128, nodes=32, seq=4096, micro_batch=4, m=1)
    f, cav = files(doc)
    a = args_of(doc)
    assert a["--parallelism.expert_parallel_degree"] == "128" and a["--parallelism.data_parallel_shard_degree"] == "256"
    assert 'model_registry("235B-A22B")' in f[f"{torchtitan.CONFIG_MODULE}.py"]
    assert "qwen3_30b_a3b()" in f[f"{torchtitan.CONFIG_MODULE}.py"]
    assert "--training.disable_cuda_graphs" in a                    # EP's token dispatch syncs with the host
    assert cav == ()


def test_models_torchtitan_does_not_ship_are_built_by_a_config_module():
    # Llama 2 7B (MHA, vocab 32000): torchtitan's llama3 family code with the planned dimensions
    doc = plan_doc(LLAMA2_7B, dp=8)
    f, cav = files(doc)
    a = args_of(doc)
    assert (a["--module"], a["--config"]) == (torchtitan.CONFIG_MODULE, torchtitan.CONFIG_FUNCTION)
    mod = f[f"{torchtitan.CONFIG_MODULE}.py"]
    compile(mod, "baige_torchtitan_config.py", "exec")
    for want in ("FLAVOR = 'baige_llama2_7b'", "llama3_configs[FLAVOR] = _planned", "model_registry(FLAVOR)",
                 "dim, vocab_size, n_layers = 4096, 32000, 32", "n_heads=32, n_kv_heads=32, head_dim=None",
                 "hidden_dim=11008", "enable_weight_tying=False", "config = llama3_8b()",
                 "ComplexRoPE.Config(dim=128, max_seq_len=131072"):
        assert want in mod, want
    assert cav == ()                                   # nothing the llama3 family cannot build
    assert 'export PYTHONPATH="$HERE' in f["launch.sh"]
    # Mixtral 8x7B (8 experts top-2, vocab 32000): the qwen3 family's MoE blocks
    f, cav = files(plan_doc(MIXTRAL, dp=8, ep=8))
    mod = f[f"{torchtitan.CONFIG_MODULE}.py"]
    compile(mod, "baige_torchtitan_config.py", "exec")
    for want in ("qwen3_configs[FLAVOR] = _planned", "num_experts=8", "top_k=2", "hidden_dim=14336, num_experts=8",
                 "shared_experts=None", "FIRST_DENSE_LAYERS, MOE_LAYER_FREQ = 0, 1", "config = qwen3_30b_a3b()"):
        assert want in mod, want
    assert "feed_forward=" not in mod                  # every layer MoE: no dense branch
    assert cav == ()


def test_model_match_is_by_shape_not_name():
    assert torchtitan.flavor_for(dict(LLAMA3_8B, name="my-8b")).flavor == "8B"
    assert torchtitan.flavor_for(dict(LLAMA3_8B, vocab=32000)) is None
    assert torchtitan.flavor_for(QWEN3).flavor == "235B-A22B"
    assert torchtitan.flavor_for(ModelSpec("x", 32, 4096, 32, 14336, 128256, kv_heads=8)).flavor == "8B"


def test_zero3_cp_folds_the_shard_over_cp():
    a = args_of(plan_doc(LLAMA3_8B, tp=2, cp=2, dp=4, nodes=2, seq=16384))
    assert a["--parallelism.context_parallel_degree"] == "2" and a["--parallelism.data_parallel_shard_degree"] == "4"
    _, cav = files(plan_doc(LLAMA3_8B, tp=2, cp=2, dp=4, zero=0, nodes=2, seq=16384))
    assert any("FSDP-shards the parameters over the cp=2" in c for c in cav)


def test_hostfile_and_launch_script(tmp_path):
    f, _ = files(plan_doc(LLAMA3_8B, dp=16, nodes=2))
    hosts = [ln for ln in f["hostfile"].splitlines() if ln and not ln.startswith("#")]
    assert hosts == ["h100-sxm5-80g-node0000", "h100-sxm5-80g-node0001"]
    for name, text in f.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "torchrun").write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$CAP"\n')
    (tmp_path / "torchrun").chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "CAP": str(tmp_path / "argv"), "BAIGE_DATA_PATH": "/data/c4",
           "BAIGE_TOKENIZER": "/tok", "BAIGE_SKIP_VERSION_CHECK": "1"}
    r = subprocess.run(["bash", str(tmp_path / "launch.sh"), "--training.steps", "5"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    k = argv.index("-m")
    assert argv[:k][argv[:k].index("--rdzv-endpoint") + 1] == "h100-sxm5-80g-node0000:29500"
    assert argv[k + 1] == "torchtitan.train"
    doc_argv = argv_of(plan_doc(LLAMA3_8B, dp=16, nodes=2))
    # the data flags, then extra flags go after the exported ones and before the subcommand
    data = ["--dataloader.dataset", "c4_test", "--dataloader.dataset_path", "/data/c4", "--hf_assets_path", "/tok",
            "--training.steps", "100", "--dump_folder", str(tmp_path / "outputs")]
    assert argv[k + 2:] == doc_argv[:-1] + data + ["--training.steps", "5", doc_argv[-1]]


def test_cli_writes_every_file(tmp_path):
    runner = CliRunner()
    plan = tmp_path / "plan.yaml"
    r = runner.invoke(app, ["plan", "llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--seq-len", "8192",
                            "--runtime", "torchtitan", "--pp", "4", "--vpp", "2", "--out", str(plan)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["export", str(plan), "--to", "torchtitan", "--out-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "torchtitan==0.3.0" in r.stdout and "Interleaved1F1B" in r.stdout
    assert (tmp_path / "launch.sh").stat().st_mode & 0o111
    assert export_plan({**__import__("yaml").safe_load(plan.read_text())}, "torchtitan").files[0].name == \
        torchtitan.ARGS_FILE


# the declared space (RUNTIME) against what torchtitan 0.3.0 / torch 2.14 run


def test_runtime_declaration():
    rt = torchtitan.RUNTIME
    assert rt.zero_stages == (0, 2, 3) and rt.zero_stages_with_pp == (0, 3) and rt.fsdp_zero2
    assert rt.sequence_parallel == "optional" and rt.uneven_split and rt.interleaved
    assert rt.recompute == ("none", "selective", "full") and rt.precisions == ("bf16", "fp8", "fp32")
    assert rt.memory.selective == "op_sac"
    assert rt.zero3_gather(1) == "micro_batch" and rt.zero3_gather(4) == "step"
    g1, g4 = rt.grad_sync(0, 1), rt.grad_sync(0, 4)
    assert (g1.grads, g1.overlap, g1.params) == ("micro_batch", "backward", "none")
    assert (g4.grads, g4.overlap, g4.params) == ("step", "none", "none")


MOE = ModelSpec("qwen3-235b-a22b", 94, 4096, 64, 12288, 151936, kv_heads=4, head_dim=128,
                moe=MoESpec(experts=128, top_k=8, expert_ffn_hidden=1536))
DENSE = ModelSpec("llama3-8b", 32, 4096, 32, 14336, 128256, kv_heads=8)
JOB = JobSpec(global_batch=64, seq_len=8192)


@pytest.mark.parametrize("kw,model,job,why", [
    (dict(dp=4, cp=2, tp=2, zero=0), None, None, "ZeRO-0 with cp > 1"),
    (dict(dp=8, ep=4, etp=2, tp=2, zero=3), None, None, "no expert tensor parallelism"),
    (dict(dp=8, tp=2, etp=1, zero=3), MOE, None, "etp must equal"),
    (dict(dp=2, tp=2, ep=8, zero=0), None, None, "does not divide"),
    (dict(dp=2, tp=4, ep=2, zero=0), None, None, "ep = cp*tp"),
    (dict(dp=2, pp=8, zero=3), None, JobSpec(global_batch=8, seq_len=8192), "Schedule1F1B"),
    (dict(dp=4, tp=2, pp=2, vpp=4, zero=3), DENSE, None, "re-gathered"),
    (dict(dp=8, tp=2, zero=3, sequence_parallel=True), None, JobSpec(global_batch=64, seq_len=4097), "seq_len"),
    (dict(dp=4, pp=2, zero=3), ModelSpec("gpt", 24, 2048, 16, 8192, 50304, tie_embeddings=True), None, "tied"),
])
def test_refusals(kw, model, job, why):
    s = StrategySpec(**{"recompute": "none", **kw})
    assert why in (torchtitan.RUNTIME.refusal(s, model, job) or "")


def test_what_it_runs_is_not_refused():
    for kw, model in ((dict(dp=4, tp=2, pp=2, vpp=2, zero=3), DENSE), (dict(dp=256, ep=128, zero=3), MOE),
                      (dict(dp=8, tp=2, etp=2, zero=3), MOE), (dict(dp=2, tp=4, ep=4, zero=0), MOE),
                      (dict(dp=4, cp=2, tp=2, zero=3), DENSE), (dict(dp=8, pp=2, zero=0), DENSE),
                      (dict(dp=4, tp=2, pp=2, vpp=4, zero=0), DENSE), (dict(dp=4, tp=2, pp=2, vpp=2, zero=3), DENSE)):
        s = StrategySpec(recompute="none", **kw)
        assert torchtitan.RUNTIME.refusal(s, model, JobSpec(global_batch=1024, seq_len=8192)) is None, kw


def test_any_decoder_shape_runs():
    # shapes torchtitan does not ship: GELU (GPT), MHA with another vocab, MoE with a dense prefix
    for model in (ModelSpec("gpt", 24, 2048, 16, 8192, 50304, activation="gelu"),
                  ModelSpec("llama2-7b", 32, 4096, 32, 11008, 32000),
                  ModelSpec("moe", 8, 1024, 16, 4096, 32000, moe=MoESpec(experts=8, top_k=2, expert_ffn_hidden=1024,
                                                                         shared_experts=1, first_dense_layers=1))):
        for rec in ("none", "selective", "full"):
            s = StrategySpec(dp=8, zero=3, recompute=rec)
            assert torchtitan.RUNTIME.refusal(s, model, JobSpec(global_batch=64, seq_len=4096)) is None, (model, rec)


def test_plan_for_a_model_torchtitan_does_not_ship():
    r = CliRunner().invoke(app, ["plan", "llama2-7b", "h100-sxm5-80g:1x8", "--global-batch", "64",
                                 "--seq-len", "4096", "--runtime", "torchtitan"])
    assert r.exit_code == 0, r.output


def test_hsdp_degrees():
    # HSDP (StrategySpec.fsdp_shard): FSDP2 shards over dp_shard x cp, so 8 dp·cp ranks with cp 2 are dp_shard 4, and
    # dp 16 x cp 2 = 32 ranks make 32 / 8 = 4 replicas
    a = args_of(plan_doc(LLAMA3_8B, dp=16, cp=2, nodes=4, fsdp_shard=8))
    assert (a["--parallelism.data_parallel_replicate_degree"], a["--parallelism.data_parallel_shard_degree"]) == ("4", "4")
    a = args_of(plan_doc(LLAMA3_8B, dp=16, nodes=2))
    assert (a["--parallelism.data_parallel_replicate_degree"], a["--parallelism.data_parallel_shard_degree"]) == ("1", "16")
