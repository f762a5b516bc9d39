"""DeepSpeed export (exports/deepspeed.py) against hand-derived values; DeepSpeed itself is not installed here
(tests/integration/check_deepspeed.py feeds the same files to it).

Cases, pinned so the numbers follow by hand:
  llama3-8b on 2 x 8 H100, global batch 64, tp 1 pp 1 ZeRO-2 micro-batch 2: DeepSpeed dp = 16 / (1 x 1) = 16,
      gas = 64 / (2 x 16) = 2.
  gpt-22b on 4 x 8 A100, global batch 256, tp 2 pp 4 ZeRO-1 micro-batch 1: dp = 32 / (2 x 4) = 4,
      gas = 256 / (1 x 4) = 64.
  llama3-8b, global batch 32, seq 16384, tp 2 cp 2 micro-batch 1 (a Megatron plan): plan dp = 16 / (2 x 2) = 4,
      8 micro-batches; DeepSpeed has no ring CP, so dp = 16 / 2 = 8 and gas = 32 / (1 x 8) = 4.
"""

from __future__ import annotations

import json
import shlex

import pytest
import yaml
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.errors import SpecError
from baige_plan.exports import deepspeed as ds
from baige_plan.io.catalog import Catalog
from baige_plan.specs.runtime import GradSync
from baige_plan.specs.strategy import StrategySpec

runner = CliRunner()
LLAMA = ["llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "64", "--seq-len", "4096"]
GPT22 = ["gpt-22b", "a100-sxm4-80g:4x8", "--global-batch", "256", "--seq-len", "2048"]


def _plan(tmp_path_factory, name: str, args: list[str]) -> dict:
    out = tmp_path_factory.mktemp(name) / "plan.yaml"
    r = runner.invoke(app, ["plan", *args, "--out", str(out), "--format", "json"])
    assert r.exit_code == 0, r.output
    return yaml.safe_load(out.read_text())


@pytest.fixture(scope="module")
def pp1_zero2(tmp_path_factory):
    return _plan(tmp_path_factory, "z2", [*LLAMA, "--runtime", "deepspeed", "--tp", "1", "--pp", "1", "--zero", "2",
                                          "--micro-batch", "2"])


@pytest.fixture(scope="module")
def pp4_zero1(tmp_path_factory):
    return _plan(tmp_path_factory, "z1", [*GPT22, "--runtime", "deepspeed", "--tp", "2", "--pp", "4", "--zero", "1",
                                          "--micro-batch", "1", "--recompute", "none"])


def _files(doc: dict) -> dict[str, str]:
    return {f.name: f.text for f in ds.export(doc).files}


def _flags(args_txt: str) -> dict[str, str | None]:
    toks = shlex.split(args_txt, comments=True)
    return {t: (toks[k + 1] if k + 1 < len(toks) and not toks[k + 1].startswith("--") else None)
            for k, t in enumerate(toks) if t.startswith("--")}


def test_pp1_zero2_config_args_launch(pp1_zero2):
    files = _files(pp1_zero2)
    assert list(files)[:4] == ["ds_config.json", "megatron_deepspeed_args.txt", "launch.sh", "hostfile"]
    cfg = json.loads(files["ds_config.json"])
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) == \
        (64, 2, 2)
    assert cfg["train_batch_size"] == 2 * 2 * 16                      # micro x gas x dp
    assert cfg["zero_optimization"] == {"stage": 2, "overlap_comm": True, "contiguous_gradients": True,
                                        "reduce_scatter": True}
    assert cfg["bf16"] == {"enabled": True} and "fp16" not in cfg
    assert "pipeline" not in cfg and "data_types" not in cfg
    f = _flags(files["megatron_deepspeed_args.txt"])
    assert f["--tensor-model-parallel-size"] == "1" and f["--pipeline-model-parallel-size"] == "1"
    assert "--no-pipeline-parallel" in f
    assert (f["--micro-batch-size"], f["--global-batch-size"], f["--zero-stage"]) == ("2", "64", "2")
    assert (f["--num-layers"], f["--hidden-size"], f["--num-attention-heads"], f["--ffn-hidden-size"]) == \
        ("32", "4096", "32", "14336")
    assert f["--num-key-value-heads"] == "8"                           # GQA: 32 query heads, 8 KV heads
    assert {"--swiglu", "--use-rotary-position-embeddings", "--untie-embeddings-and-output-weights", "--bf16",
            "--deepspeed"} <= set(f)
    assert f["--normalization"] == "rmsnorm" and f["--deepspeed_config"] == "ds_config.json"
    assert "--fp16" not in f and "--checkpoint-activations" not in f
    assert "HOSTS=(--hostfile hostfile)" in files["launch.sh"]
    assert 'deepspeed "${HOSTS[@]}" --num_nodes 2 --num_gpus 8' in files["launch.sh"]
    hosts = [x for x in files["hostfile"].splitlines() if x and not x.startswith("#")]
    assert len(hosts) == 2 and all(x.endswith(" slots=8") for x in hosts)


def test_pp4_zero1_pipeline(pp4_zero1):
    files = _files(pp4_zero1)
    cfg = json.loads(files["ds_config.json"])
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) == \
        (256, 1, 64)
    assert cfg["train_batch_size"] == 1 * 64 * 4
    assert cfg["pipeline"]["stages"] == 4 and cfg["pipeline"]["activation_checkpoint_interval"] == 0
    assert cfg["zero_optimization"]["stage"] == 1 and cfg["zero_optimization"]["overlap_comm"] is False
    assert cfg["data_types"] == {"grad_accum_dtype": "fp32"}          # Megatron-DeepSpeed's bf16 + ZeRO-1 recipe
    assert "activation_checkpointing" not in cfg
    f = _flags(files["megatron_deepspeed_args.txt"])
    assert f["--pipeline-model-parallel-size"] == "4" and f["--tensor-model-parallel-size"] == "2"
    assert "--no-pipeline-parallel" not in f
    assert (f["--global-batch-size"], f["--micro-batch-size"], f["--zero-stage"]) == ("256", "1", "1")
    assert "--swiglu" not in f and f["--normalization"] == "layernorm"   # gelu model
    assert "--num-key-value-heads" not in f
    assert "--num_nodes 4 --num_gpus 8" in files["launch.sh"]


def test_full_recompute_checkpoints_every_layer(pp4_zero1):
    doc = json.loads(json.dumps(pp4_zero1))
    doc["strategy"]["recompute"] = "full"
    files = _files(doc)
    cfg = json.loads(files["ds_config.json"])
    assert cfg["pipeline"]["activation_checkpoint_interval"] == 1
    assert cfg["activation_checkpointing"]["number_checkpoints"] == 48
    assert cfg["activation_checkpointing"]["partition_activations"] is False
    f = _flags(files["megatron_deepspeed_args.txt"])
    assert "--checkpoint-activations" in f and f["--checkpoint-num-layers"] == "1"
    assert "--deepspeed-activation-checkpointing" in f


def test_zero2_with_pipeline_is_exported_with_a_caveat(pp4_zero1):
    doc = json.loads(json.dumps(pp4_zero1))
    doc["strategy"]["zero"] = 2
    ex = ds.export(doc)
    assert json.loads(ex.files[0].text)["zero_optimization"]["stage"] == 2
    assert any("PipelineEngine asserts ZeRO stage < 2" in c for c in ex.caveats)
    assert any("PipelineEngine asserts" in c for c in json.loads(ex.files[0].text)["baige_plan"]["cannot_express"])


def test_fp16(tmp_path_factory):
    doc = _plan(tmp_path_factory, "fp16", ["llama2-7b", "a100-sxm4-80g:2x8", "--global-batch", "128", "--seq-len",
                                           "4096", "--precision", "fp16", "--runtime", "deepspeed", "--tp", "1",
                                           "--pp", "1", "--zero", "2", "--micro-batch", "2"])
    files = _files(doc)
    cfg = json.loads(files["ds_config.json"])
    assert cfg["fp16"]["enabled"] is True and cfg["fp16"]["loss_scale"] == 0 and "bf16" not in cfg
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) == \
        (128, 2, 4)                                                   # dp 16: 128 / (2 x 16) = 4
    f = _flags(files["megatron_deepspeed_args.txt"])
    assert "--fp16" in f and "--bf16" not in f


def test_fp8_is_refused(tmp_path_factory, pp1_zero2):
    doc = json.loads(json.dumps(pp1_zero2))
    doc["inputs"]["job"]["precision"] = "fp8"
    with pytest.raises(SpecError, match="fp8"):
        ds.export(doc)
    p = tmp_path_factory.mktemp("fp8") / "plan.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    r = runner.invoke(app, ["export", str(p), "--to", "deepspeed"])
    assert r.exit_code == 2 and "fp8 is not a DeepSpeed precision" in r.stderr


def test_plan_refuses_what_the_export_cannot_write(tmp_path):
    """fp8 is costed for DeepSpeed (published Gaudi/MLPerf runs backtest with it) but no export writes it, so
    `plan --runtime deepspeed --precision fp8` exits 2 rather than promising a plan that cannot start."""
    out = tmp_path / "plan.yaml"
    r = runner.invoke(app, ["plan", *LLAMA, "--runtime", "deepspeed", "--precision", "fp8", "--out", str(out)])
    assert r.exit_code == 2 and "--precision" in r.stderr and "fp8" in r.stderr, r.output
    assert not out.exists()
    assert "fp8" in ds.RUNTIME.precisions and "fp8" not in ds.RUNTIME.export_precisions


def test_version_is_printed_in_every_file(pp4_zero1):
    assert ds.RUNTIME.version == ds.VERSION == "0.19.8"
    files = _files(pp4_zero1)
    assert json.loads(files["ds_config.json"])["baige_plan"]["deepspeed"] == "0.19.8"
    for name in ("megatron_deepspeed_args.txt", "launch.sh", "hostfile"):
        assert "deepspeed==0.19.8" in files[name], name
    assert ds.MEGATRON_DEEPSPEED_COMMIT[:8] in files["megatron_deepspeed_args.txt"]


def test_context_parallel_ranks_become_data_parallel(tmp_path_factory):
    doc = _plan(tmp_path_factory, "cp2", ["llama3-8b", "h100-sxm5-80g:2x8", "--global-batch", "32", "--seq-len",
                                          "16384", "--runtime", "megatron", "--tp", "2", "--pp", "1", "--cp", "2",
                                          "--micro-batch", "1"])
    assert doc["pipelines"][0]["replicas"] == 4 and doc["pipelines"][0]["micro_batches"] == 8
    ex = ds.export(doc)
    cfg = json.loads(ex.files[0].text)
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) == \
        (32, 1, 4)                                                    # 1 x 4 x dp 8
    assert any("no ring-attention context parallelism" in c for c in ex.caveats)


def test_sequence_parallel_sets_cuda_device_max_connections(pp4_zero1):
    assert pp4_zero1["strategy"]["sequence_parallel"] is True
    files = _files(pp4_zero1)
    assert "--sequence-parallel" in _flags(files["megatron_deepspeed_args.txt"])
    assert files[".deepspeed_env"] == "CUDA_DEVICE_MAX_CONNECTIONS=1\n"
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in files["launch.sh"]


def test_grad_sync_as_deepspeed_runs_it():
    gs = ds.RUNTIME.grad_sync
    assert gs(0, 1) == GradSync(grads="step", overlap="none", params="none")
    assert gs(1, 1) == gs(1, 4) == GradSync(grads="step", overlap="none", params="after_step")
    assert gs(2, 1) == GradSync(grads="micro_batch", overlap="backward", params="after_step")
    assert gs(3, 1) == GradSync(grads="micro_batch", overlap="backward", params="none")
    assert ds.RUNTIME.zero3_gather(1) == "micro_batch"


def test_space_moe():
    model = Catalog.create().model("mixtral-8x7b")
    rt = ds.RUNTIME
    assert rt.refusal(StrategySpec(tp=1, pp=2, dp=32, ep=8, zero=1, micro_batch=1), model) is None
    why = rt.refusal(StrategySpec(tp=1, pp=1, dp=64, ep=8, zero=3, micro_batch=1), model)
    assert why is not None and "ZeRO-3" in why
    assert rt.refusal(StrategySpec(tp=1, pp=4, dp=16, zero=2, micro_batch=1), model) is not None
