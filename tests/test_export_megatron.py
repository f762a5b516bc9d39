"""Megatron export (baige_plan/exports/megatron.py): argument content against hand-derived values.

No Megatron here (project venv): tests/integration/check_megatron.py feeds the same files to Megatron's
own parser. Plan documents are built by hand in the plan-file form (only the fields the export reads).
"""

import shlex
import subprocess

import pytest
from _plan_docs import LLAMA3_70B, LLAMA3_405B, QWEN3
from _plan_docs import plan_doc as _plan_doc
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.exports import megatron
from baige_plan.exports.files import export_plan
from baige_plan.specs.model import ModelSpec, MoESpec
from baige_plan.specs.strategy import StrategySpec

GPT3_175B = dict(name="gpt3-175b", layers=96, hidden=12288, heads=96, kv_heads=96, ffn_hidden=49152, vocab=51200,
                 seq_len=2048, activation="gelu", tie_embeddings=True, dropout=0.1)


def plan_doc(model, **kw):
    """A Megatron plan document on Hopper (tests/_plan_docs.py)."""
    return _plan_doc(model, "megatron", chip={"architecture": "Hopper"}, **kw)


def files(doc):
    ex = megatron.export(doc)
    return {f.name: f.text for f in ex.files}, ex.caveats


def args_of(doc) -> dict:
    """megatron_args.txt as {flag: value or None}, checking every line is shell-parsable."""
    text = files(doc)[0]["megatron_args.txt"]
    out = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        words = shlex.split(line)
        assert words[0].startswith("--") and len(words) <= 2, line
        assert words[0] not in out, f"{words[0]} given twice"
        out[words[0]] = words[1] if len(words) == 2 else None
    return out


def test_files_and_version():
    f, _ = files(plan_doc(LLAMA3_70B, tp=8, dp=2, m=4, nodes=2))
    assert list(f) == ["megatron_args.txt", "launch.sh", "hostfile", "slurm.sbatch"]
    assert megatron.RUNTIME.version == megatron.VERSION == "0.19.2"
    assert "megatron-core==0.19.2" in f["megatron_args.txt"].splitlines()[1]
    assert "megatron-core==0.19.2" in f["launch.sh"]
    assert megatron.RUNTIME.package == "megatron-core"


def test_dense_gqa_shape_and_batch():
    # llama3-70b on 16x8: tp 2, pp 8, cp 4, dp 2, 256 micro-batches of 1 -> global batch 2*256*1 = 512
    doc = plan_doc(LLAMA3_70B, tp=2, pp=8, cp=4, dp=2, m=256, vpp=2, nodes=16)
    a = args_of(doc)
    assert a["--num-layers"] == "80" and a["--hidden-size"] == "8192" and a["--ffn-hidden-size"] == "28672"
    assert a["--num-attention-heads"] == "64"
    assert "--group-query-attention" in a and a["--num-query-groups"] == "8"
    assert "--kv-channels" not in a                       # 64 x 128 = 8192 = hidden
    assert a["--seq-length"] == "8192" and int(a["--max-position-embeddings"]) >= 8192
    for flag in ("--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights"):
        assert flag in a
    assert a["--normalization"] == "RMSNorm" and a["--position-embedding-type"] == "rope"
    # data, tokenizer and run length come from launch.sh's variables (tests/test_export_launch.py)
    for flag in ("--mock-data", "--tokenizer-type", "--vocab-size", "--data-path", "--train-iters"):
        assert flag not in a
    assert a["--attention-dropout"] == a["--hidden-dropout"] == "0.0"
    assert (a["--tensor-model-parallel-size"], a["--pipeline-model-parallel-size"], a["--context-parallel-size"]) \
        == ("2", "8", "4")
    assert "--sequence-parallel" in a
    assert a["--num-virtual-stages-per-pipeline-rank"] == "2"
    assert a["--micro-batch-size"] == "1" and a["--global-batch-size"] == str(2 * 256 * 1) == "512"
    assert "--use-distributed-optimizer" in a and "--overlap-grad-reduce" in a and "--overlap-param-gather" in a
    assert "--bf16" in a and "--fp8-format" not in a
    assert "--num-experts" not in a and "--expert-model-parallel-size" not in a
    for flag in ("--lr", "--min-lr", "--lr-decay-style"):
        assert flag in a
    assert "--decoder-first-pipeline-num-layers" not in a    # even split


def test_global_batch_is_dp_times_micro_batches_times_micro_batch():
    a = args_of(plan_doc(LLAMA3_70B, tp=8, pp=2, dp=3, m=12, micro_batch=2, nodes=6))
    assert a["--global-batch-size"] == str(3 * 12 * 2)
    assert a["--micro-batch-size"] == "2"


def test_gpt3_style_tied_gelu_mha():
    a = args_of(plan_doc(GPT3_175B, tp=8, pp=8, dp=2, m=384, micro_batch=2, vpp=2, nodes=16, seq=2048))
    assert "--swiglu" not in a and "--untie-embeddings-and-output-weights" not in a
    assert "--group-query-attention" not in a and "--num-query-groups" not in a
    assert "--disable-bias-linear" not in a
    assert a["--normalization"] == "LayerNorm" and a["--position-embedding-type"] == "learned_absolute"
    assert a["--max-position-embeddings"] == "2048"
    assert a["--attention-dropout"] == a["--hidden-dropout"] == "0.1"
    assert a["--global-batch-size"] == str(2 * 384 * 2)


def test_uneven_split_llama3_405b_pp8():
    # 126 layers on pp 8: 15 + 6 x 16 + 15
    doc = plan_doc(LLAMA3_405B, tp=8, pp=8, cp=4, dp=2, m=1024, counts=[15] + [16] * 6 + [15], nodes=64,
                   first_stage_layers=15, last_stage_layers=15)
    a = args_of(doc)
    assert a["--decoder-first-pipeline-num-layers"] == "15"
    assert a["--decoder-last-pipeline-num-layers"] == "15"
    assert "--pipeline-model-parallel-layout" not in a
    assert "--num-virtual-stages-per-pipeline-rank" not in a
    assert files(doc)[1] == ()


def test_uneven_last_only_and_pp2():
    a = args_of(plan_doc(LLAMA3_405B, tp=8, pp=8, dp=2, m=16, counts=[16] * 7 + [14], nodes=16))
    assert "--decoder-first-pipeline-num-layers" not in a and a["--decoder-last-pipeline-num-layers"] == "14"
    a = args_of(plan_doc(dict(LLAMA3_70B, layers=32), tp=8, pp=2, dp=1, m=8, counts=[14, 18], nodes=2))
    assert (a["--decoder-first-pipeline-num-layers"], a["--decoder-last-pipeline-num-layers"]) == ("14", "18")


def test_uneven_with_vpp_divisible_keeps_flags():
    # 126 = 14 + 7 x 16: first 14 and middle 16 are divisible by vpp 2 (transformer_config.py "Uneven PP")
    a = args_of(plan_doc(LLAMA3_405B, tp=8, pp=8, dp=2, m=16, vpp=2, counts=[14] + [16] * 7, nodes=16))
    assert a["--num-virtual-stages-per-pipeline-rank"] == "2"
    assert a["--decoder-first-pipeline-num-layers"] == "14"
    assert "--decoder-last-pipeline-num-layers" not in a


def test_uneven_with_vpp_not_divisible_uses_layout_with_caveat():
    # 126 = 13 + 6 x 16 + 17 with vpp 2: 13 and 17 are odd, and no embedding/loss accounting builds it
    doc = plan_doc(LLAMA3_405B, tp=8, pp=8, dp=2, m=16, vpp=2, counts=[13] + [16] * 6 + [17], nodes=16)
    a = args_of(doc)
    assert "--num-virtual-stages-per-pipeline-rank" not in a      # validate_args: one of the two
    assert "--decoder-first-pipeline-num-layers" not in a
    assert "--account-for-embedding-in-pipeline-split" not in a
    layout = a["--pipeline-model-parallel-layout"]
    stages = layout.split("|")
    assert len(stages) == 16 and stages[0] == "Et*7" and stages[8] == "t*6" and stages[-1] == "t*8L"
    caveats = files(doc)[1]
    assert any("no first/last or embedding/loss accounting rule" in c for c in caveats)
    assert "# cannot express: layer split" in files(doc)[0]["megatron_args.txt"]


def test_uneven_interleaved_counts_use_the_accounting_flags():
    # 126 layers, pp 8: 15 + 6 x 16 + 15 is Megatron's --account-for-embedding/loss-in-pipeline-split rule
    # ((126 + 2) / 8 = 16 per stage, one fewer on the first and last): with vpp 8 (Megatron-Bridge's
    # Llama 3.1 405B H100 recipe) first/last 15 cannot interleave (15 % 8), the accounting flags can
    for account in ({"account_for_embedding": True, "account_for_loss": True}, {}):
        doc = plan_doc(LLAMA3_405B, tp=8, pp=8, cp=2, dp=4, m=192, vpp=8, counts=[15] + [16] * 6 + [15],
                       nodes=64, **account)
        a = args_of(doc)
        assert a["--num-virtual-stages-per-pipeline-rank"] == "8"
        assert "--account-for-embedding-in-pipeline-split" in a and "--account-for-loss-in-pipeline-split" in a
        for flag in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
                     "--pipeline-model-parallel-layout"):
            assert flag not in a
        assert files(doc)[1] == ()
    # the plan's flags win where first/last would also build the counts (vpp 1)
    doc = plan_doc(LLAMA3_405B, tp=8, pp=8, dp=2, m=16, counts=[15] + [16] * 6 + [15], nodes=16,
                   account_for_embedding=True, account_for_loss=True)
    a = args_of(doc)
    assert "--account-for-loss-in-pipeline-split" in a and "--decoder-first-pipeline-num-layers" not in a
    # embedding only: 127 + 1 = 128 = 8 x 16, the first stage one fewer (first=15 cannot interleave with vpp 4)
    a = args_of(plan_doc(dict(LLAMA3_405B, layers=127), tp=8, pp=8, dp=2, m=16, vpp=4, counts=[15] + [16] * 7,
                         nodes=16))
    assert "--account-for-embedding-in-pipeline-split" in a and "--account-for-loss-in-pipeline-split" not in a


def test_free_form_split_is_a_layout_not_a_caveat():
    doc = plan_doc(GPT3_175B, tp=8, pp=8, dp=2, m=16, counts=[10, 12, 12, 14, 12, 12, 12, 12], nodes=16)
    a = args_of(doc)
    assert a["--pipeline-model-parallel-layout"] == "Et*10|t*12|t*12|t*14|t*12|t*12|t*12|t*12L"
    assert files(doc)[1] == ()


def _decoders(stage: str) -> int:
    """Decoder layers in one layout stage ('Et*8', 't', 't*7L')."""
    core = stage.strip("EL")
    return 0 if not core else int(core[2:]) if core.startswith("t*") else core.count("t")


def test_pipeline_layout_counts():
    lay = megatron.pipeline_layout([3, 2, 1], 2)
    stages = lay.split("|")
    assert stages == ["Et*2", "t", "t", "t", "t", "L"]
    # decoder layers per rank (chunk v of rank p is entry v*pp + p): the plan's counts
    assert [_decoders(stages[p]) + _decoders(stages[3 + p]) for p in range(3)] == [3, 2, 1]
    stages = megatron.pipeline_layout([15] + [16] * 6 + [15], 2).split("|")
    assert [_decoders(stages[p]) + _decoders(stages[8 + p]) for p in range(8)] == [15] + [16] * 6 + [15]
    assert megatron.pipeline_layout([4, 4], 1) == "Et*4|t*4L"


def test_moe_qwen3():
    doc = plan_doc(QWEN3, tp=2, pp=2, dp=64, ep=128, etp=1, m=16, vpp=47, nodes=32, seq=4096)
    a = args_of(doc)
    assert a["--num-experts"] == "128" and a["--moe-router-topk"] == "8" and a["--moe-ffn-hidden-size"] == "1536"
    assert a["--moe-layer-freq"] == "1"
    assert a["--moe-token-dispatcher-type"] == "alltoall" and "--moe-grouped-gemm" in a
    assert "--moe-shared-expert-intermediate-size" not in a
    assert a["--expert-model-parallel-size"] == "128" and a["--expert-tensor-parallel-size"] == "1"
    assert a["--kv-channels"] == "128"                          # 64 heads x 128 != hidden 4096
    assert a["--num-query-groups"] == "4"


def test_moe_flex_dispatcher_exported():
    """A plan costed with the flex dispatcher (DeepEP) launches it: Megatron's --moe-token-dispatcher-type flex with
    TransformerConfig.moe_flex_dispatcher_backend deepep."""
    doc = plan_doc(QWEN3, tp=2, pp=2, dp=64, ep=128, etp=1, m=16, vpp=47, nodes=32, seq=4096,
                   moe_dispatcher="flex")
    a = args_of(doc)
    assert a["--moe-token-dispatcher-type"] == "flex" and a["--moe-flex-dispatcher-backend"] == "deepep"


def test_moe_etp_always_passed():
    # Megatron defaults --expert-tensor-parallel-size to tp: etp 1 with tp 4 must be said explicitly
    a = args_of(plan_doc(dict(QWEN3, layers=32), tp=4, pp=1, dp=2, ep=1, etp=1, m=4))
    assert a["--expert-model-parallel-size"] == "1" and a["--expert-tensor-parallel-size"] == "1"


def test_moe_shared_experts_and_dense_prefix():
    moe = dict(experts=64, top_k=6, expert_ffn_hidden=1408, shared_experts=2, layer_freq=1, first_dense_layers=1)
    a = args_of(plan_doc(dict(QWEN3, layers=28, moe=moe), tp=1, pp=1, dp=8, ep=8, m=4))
    assert a["--moe-shared-expert-intermediate-size"] == str(2 * 1408)
    assert a["--moe-layer-freq"] == "[0]*1+[1]*27"


@pytest.mark.parametrize("k,f,layers", [(0, 1, 10), (0, 2, 10), (1, 1, 28), (3, 2, 20), (3, 4, 22), (2, 3, 10)])
def test_moe_layer_freq_matches_plan_semantics(k, f, layers):
    expr = megatron.moe_layer_freq({"first_dense_layers": k, "layer_freq": f}, layers)
    if isinstance(expr, int):
        got = [1 if i % expr == 0 else 0 for i in range(layers)]   # Megatron's integer meaning
    else:
        assert set(expr) <= set("0123456789,[]()+*")               # arguments.py _eval_pattern's alphabet
        got = eval(expr)
    assert got == [1 if i >= k and (i - k) % f == 0 else 0 for i in range(layers)]


def test_cp_and_tp_need_cuda_device_max_connections():
    f, _ = files(plan_doc(LLAMA3_70B, tp=2, dp=4, m=4))
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in f["launch.sh"]
    f, _ = files(plan_doc(LLAMA3_70B, tp=1, cp=2, dp=4, m=4))
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in f["launch.sh"]
    f, _ = files(plan_doc(LLAMA3_70B, tp=1, cp=1, dp=8, m=4))
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in f["launch.sh"]


def test_launch_sh_world_and_env_defaults():
    f, _ = files(plan_doc(LLAMA3_70B, tp=8, pp=4, dp=2, m=8, nodes=8, per_node=8))
    sh = f["launch.sh"]
    assert "NNODES=8\n" in sh and "NPROC_PER_NODE=8\n" in sh
    assert 'NODE_RANK="${NODE_RANK:-0}"' in sh and "MASTER_ADDR=" in sh and "MASTER_PORT=" in sh
    assert "torchrun" in sh and "pretrain_gpt.py" in sh and "megatron_args.txt" in sh
    hosts = [ln for ln in f["hostfile"].splitlines() if not ln.startswith("#")]
    assert len(hosts) == 8 and hosts[0] == "h100-sxm5-80g-node0000 slots=8"


def test_launch_sh_runs_and_passes_the_arguments(tmp_path):
    """bash runs launch.sh with a stand-in torchrun: it gets exactly megatron_args.txt's arguments."""
    doc = plan_doc(LLAMA3_405B, tp=8, pp=8, dp=2, m=16, vpp=2, counts=[13] + [16] * 6 + [17], nodes=16)
    f, _ = files(doc)
    for name, text in f.items():
        (tmp_path / name).write_text(text)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "torchrun").write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$CUDA_DEVICE_MAX_CONNECTIONS" "$@"\n')
    (bindir / "torchrun").chmod(0o755)
    r = subprocess.run(["bash", str(tmp_path / "launch.sh"), "--extra"], capture_output=True, text=True,
                       env={"PATH": f"{bindir}:/usr/bin:/bin", "MEGATRON_LM": "/m", "BAIGE_MOCK_DATA": "1",
                            "BAIGE_SKIP_VERSION_CHECK": "1"}, timeout=30)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "1"
    i = out.index("/m/pretrain_gpt.py")
    torchrun = out[1:i]
    assert torchrun[torchrun.index("--nnodes") + 1] == "16" and torchrun[torchrun.index("--nproc-per-node") + 1] == "8"
    assert torchrun[torchrun.index("--master-addr") + 1] == "h100-sxm5-80g-node0000"   # hostfile's first host
    expected = [w for ln in f["megatron_args.txt"].splitlines() if not ln.startswith("#") for w in shlex.split(ln)]
    assert out[i + 1:] == expected + ["--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "128256",
                                      "--train-iters", "100", "--extra"]
    assert "--pipeline-model-parallel-layout" in expected   # the quoted value survived


def test_zero_mapping():
    a = args_of(plan_doc(LLAMA3_70B, tp=8, dp=2, m=4, zero=0, nodes=2))
    assert "--use-distributed-optimizer" not in a and "--overlap-param-gather" not in a
    assert "--overlap-grad-reduce" in a                        # DDP bucket overlap for ZeRO-0 too
    # zero 2: Megatron-FSDP optim_grads is not planned; exported as ZeRO-1 with a caveat
    doc = plan_doc(LLAMA3_70B, tp=8, dp=2, m=4, zero=2, nodes=2)
    a = args_of(doc)
    assert "--use-distributed-optimizer" in a and "--use-megatron-fsdp" not in a
    caveats = files(doc)[1]
    assert any("zero=2" in c and "FSDP" in c for c in caveats)
    assert "# cannot express: zero=2" in files(doc)[0]["megatron_args.txt"]
    # zero 3: Megatron-FSDP full sharding (specs/runtimes/megatron.py docstring), as costed: no caveat
    doc = plan_doc(LLAMA3_70B, tp=8, dp=2, m=4, zero=3, nodes=2)
    a = args_of(doc)
    assert a["--data-parallel-sharding-strategy"] == "optim_grads_params" and a["--ckpt-format"] == "fsdp_dtensor"
    for flag in ("--use-megatron-fsdp", "--use-distributed-optimizer", "--init-model-with-meta-device",
                 "--overlap-grad-reduce", "--overlap-param-gather"):
        assert flag in a, flag
    assert not any("zero=" in c for c in files(doc)[1])


def test_no_overlap_grad_reduce_drops_param_gather():
    a = args_of(plan_doc(LLAMA3_70B, tp=8, dp=2, m=4, zero=1, nodes=2, overlap_grad_reduce=False))
    assert "--overlap-grad-reduce" not in a and "--overlap-param-gather" not in a
    assert "--use-distributed-optimizer" in a


@pytest.mark.parametrize("rec,flags", [
    ("none", {}),
    ("selective", {"--recompute-granularity": "selective"}),
    ("full", {"--recompute-granularity": "full", "--recompute-method": "uniform", "--recompute-num-layers": "1"}),
])
def test_recompute(rec, flags):
    a = args_of(plan_doc(LLAMA3_70B, tp=8, dp=2, m=4, recompute=rec, nodes=2))
    assert {k: a[k] for k in a if k.startswith("--recompute")} == flags


@pytest.mark.parametrize("prec,present,absent", [
    ("bf16", ["--bf16"], ["--fp16", "--fp8-format"]),
    ("fp16", ["--fp16"], ["--bf16", "--fp8-format"]),
    ("fp8", ["--bf16", "--fp8-format"], ["--fp16"]),
    ("fp32", [], ["--bf16", "--fp16", "--fp8-format", "--fp4-format"]),
    # NVFP4: bf16 plus Megatron-core's --fp4-format e2m1 --fp4-recipe nvfp4 (transformer_config.py core_v0.19.0);
    # arguments.py refuses --fp4-format together with --fp8-format
    ("fp4", ["--bf16", "--fp4-format", "--fp4-recipe"], ["--fp16", "--fp8-format", "--fp8-param-gather"]),
])
def test_precision(prec, present, absent):
    a = args_of(plan_doc(LLAMA3_70B, tp=8, dp=2, m=4, precision=prec, nodes=2))
    assert all(f in a for f in present) and not any(f in a for f in absent)
    if prec == "fp8":
        assert a["--fp8-format"] == "hybrid"
    if prec == "fp4":
        assert (a["--fp4-format"], a["--fp4-recipe"]) == ("e2m1", "nvfp4")


def test_sequence_parallel_only_with_tp():
    assert "--sequence-parallel" not in args_of(plan_doc(LLAMA3_70B, tp=1, dp=8, m=4, sp=True))
    assert "--sequence-parallel" not in args_of(plan_doc(LLAMA3_70B, tp=8, dp=1, m=4, sp=False))


def test_heterogeneous_plan_keeps_caveats():
    doc = plan_doc(LLAMA3_70B, tp=8, pp=2, dp=1, m=8, nodes=2)
    doc["pipelines"][0]["stages"][1]["tp"] = 4
    doc["pipelines"][0]["stages"][1]["group"] = "a100-sxm4-80g"
    doc["pipelines"].append(dict(doc["pipelines"][0]))
    _, caveats = files(doc)
    text = "\n".join(caveats)
    assert "2 pipeline shapes" in text and "per-stage tensor parallelism" in text and "different groups" in text
    assert "# cannot express: this plan has 2 pipeline shapes" in files(doc)[0]["megatron_args.txt"]


def test_export_plan_dispatch():
    ex = export_plan(plan_doc(LLAMA3_70B, tp=8, dp=1, m=4), "megatron")
    assert ex.files[0].name == "megatron_args.txt"


def test_runtime_refuses_moe_tp_without_sp():
    moe_model = ModelSpec(name="m", layers=4, hidden=512, heads=8, ffn_hidden=1024, vocab=1000,
                          moe=MoESpec(experts=8, top_k=2, expert_ffn_hidden=1024))
    dense = ModelSpec(name="d", layers=4, hidden=512, heads=8, ffn_hidden=1024, vocab=1000)
    no_sp = StrategySpec(tp=2, dp=4, ep=2, sequence_parallel=False)
    assert "sequence parallelism" in megatron.RUNTIME.refusal(no_sp, moe_model)
    assert megatron.RUNTIME.refusal(StrategySpec(tp=2, dp=4, ep=2, sequence_parallel=True), moe_model) is None
    assert megatron.RUNTIME.refusal(no_sp.__class__(tp=2, dp=4, sequence_parallel=False), dense) is None
    assert megatron.RUNTIME.refusal(StrategySpec(tp=1, dp=8, ep=8, sequence_parallel=False), moe_model) is None
    assert megatron.RUNTIME.refusal(StrategySpec(tp=8, dp=2, zero=3), dense) is None        # Megatron-FSDP
    assert megatron.RUNTIME.refusal(StrategySpec(tp=4, pp=2, dp=2, zero=3), dense) is not None
    assert megatron.RUNTIME.refusal(StrategySpec(tp=8, dp=2, zero=2), dense) is not None


def test_cli_export_writes_all_files(tmp_path):
    """End to end through the CLI: plan llama3-405b with pp 8 (126 layers: uneven), export --out-dir."""
    runner = CliRunner()
    plan = tmp_path / "plan.yaml"
    r = runner.invoke(app, ["plan", "llama3-405b", "h100-sxm5-80g:64x8", "--global-batch", "2048", "--seq-len",
                            "8192", "--pp", "8", "--out", str(plan)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["export", str(plan), "--to", "megatron", "--out-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    for name in ("megatron_args.txt", "launch.sh", "hostfile"):
        assert (tmp_path / name).exists()
    import yaml
    doc = yaml.safe_load(plan.read_text())
    counts = [st["layers"][1] - st["layers"][0] for st in doc["pipelines"][0]["stages"]]
    assert len(counts) == 8 and sum(counts) == 126 and len(set(counts)) > 1
    a = args_of(doc)
    st = doc["strategy"]
    if st.get("account_for_embedding") or st.get("account_for_loss"):
        # the uneven split is Megatron's own when the embedding / loss count as layers: 126 + 2 over 8 stages of 16
        assert ("--account-for-embedding-in-pipeline-split" in a) == bool(st.get("account_for_embedding"))
        assert ("--account-for-loss-in-pipeline-split" in a) == bool(st.get("account_for_loss"))
        assert counts == [16 - bool(st.get("account_for_embedding"))] + [16] * 6 + [16 - bool(st.get("account_for_loss"))]
        assert "--decoder-first-pipeline-num-layers" not in a and "--decoder-last-pipeline-num-layers" not in a
    else:
        if counts[0] != counts[1]:
            assert a["--decoder-first-pipeline-num-layers"] == str(counts[0])
        if counts[-1] != counts[1]:
            assert a["--decoder-last-pipeline-num-layers"] == str(counts[-1])
    p0 = doc["pipelines"][0]
    assert a["--global-batch-size"] == str(p0["replicas"] * p0["micro_batches"] * doc["strategy"]["micro_batch"])
    assert (tmp_path / "launch.sh").stat().st_mode & 0o111


def test_moe_a2a_overlap_exported():
    """A plan costed with Megatron-core's EP all-to-all overlap launches it (TransformerConfig
    overlap_moe_expert_parallel_comm); one costed without does not."""
    on = args_of(plan_doc(QWEN3, tp=2, pp=2, dp=64, ep=128, etp=1, m=16, vpp=47, nodes=32, seq=4096,
                          moe_a2a_overlap=True))
    off = args_of(plan_doc(QWEN3, tp=2, pp=2, dp=64, ep=128, etp=1, m=16, vpp=47, nodes=32, seq=4096))
    assert "--overlap-moe-expert-parallel-comm" in on and "--overlap-moe-expert-parallel-comm" not in off


def test_hsdp_sets_the_number_of_distributed_optimizer_instances():
    # HSDP over dp 4 in shard groups of 2 (StrategySpec.fsdp_shard): Megatron-FSDP with 4 / 2 = 2 instances
    # (--num-distributed-optimizer-instances, training/arguments.py; mcore_fsdp_adapter.py enable_hsdp)
    a = args_of(plan_doc(LLAMA3_70B, tp=8, dp=4, m=4, zero=3, nodes=4, fsdp_shard=2))
    assert a["--num-distributed-optimizer-instances"] == "2" and "--use-megatron-fsdp" in a
    assert "--num-distributed-optimizer-instances" not in args_of(plan_doc(LLAMA3_70B, tp=8, dp=4, m=4, zero=3, nodes=4))
