"""Paddle export (PaddleFormers 1.2 `paddleformers-cli train` arguments) and the Paddle RuntimeSpec, against
hand-derived values. No Paddle here: tests/integration/check_paddle.py runs PaddleFormers' own parser on
real exports."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from baige_plan.errors import SpecError
from baige_plan.exports import paddle
from baige_plan.specs.strategy import StrategySpec

LLAMA3_8B = {"name": "llama3-8b", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128,
             "ffn_hidden": 14336, "vocab": 128256, "seq_len": 8192, "activation": "swiglu", "tie_embeddings": False}
MIXTRAL = {"name": "mixtral-8x7b", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
           "vocab": 32000, "seq_len": 32768, "activation": "swiglu", "tie_embeddings": False,
           "moe": {"experts": 8, "top_k": 2, "expert_ffn_hidden": 14336, "shared_experts": 0, "layer_freq": 1,
                   "first_dense_layers": 0}}


def plan(model=LLAMA3_8B, nodes=2, tp=1, pp=1, dp=16, cp=1, ep=1, zero=1, mb=1, m=4, vpp=1, recompute="none",
         sp=False, precision="bf16", seq=8192, counts=None):
    """A plan document as `baige-plan plan --out` writes it (the fields the exporters read)."""
    L = model["layers"]
    counts = counts or [L // pp] * pp
    bounds = [0]
    for c in counts:
        bounds.append(bounds[-1] + c)
    stages = [{"index": k, "group": "h100", "layers": [bounds[k], bounds[k + 1]], "tp": tp} for k in range(pp)]
    return {"inputs": {"model": copy.deepcopy(model),
                       "cluster": {"name": f"h100:{nodes}x8", "groups": [{"name": "h100", "nodes": nodes,
                                                                           "devices_per_node": 8}]},
                       "job": {"global_batch": dp * m * mb, "seq_len": seq, "precision": precision}},
            "strategy": {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "etp": 1, "zero": zero,
                         "micro_batch": mb, "global_batch": dp * m * mb, "vpp": vpp, "recompute": recompute,
                         "sequence_parallel": sp, "attention": "flash", "runtime": "paddle"},
            "pipelines": [{"replicas": dp, "micro_batches": m, "stages": stages}],
            "estimate": {"step_time_s": 1.0, "mfu": 0.5}}


def files(doc):
    ex = paddle.export(doc)
    return {f.name: f.text for f in ex.files}, ex


def args_of(doc):
    return yaml.safe_load(paddle.export(doc).files[0].text)


# ------------------------------------------------------------------------------------------ the files
def test_files_and_pinned_versions():
    fs, ex = files(plan())
    assert list(fs) == ["paddleformers_args.yaml", "config.json", "launch.sh", "hostfile", "slurm.sbatch"]
    assert ex.files[0].name == "paddleformers_args.yaml"   # printed by `baige-plan export --to paddle`
    for name in ("paddleformers_args.yaml", "launch.sh"):
        assert "paddleformers==1.2.0" in fs[name] and "paddlepaddle==3.3.1" in fs[name]
    assert paddle.RUNTIME.version == "1.2.0" and paddle.PADDLE_VERSION == "3.3.1"


def test_yaml_reads_back_as_the_argument_dict():
    doc = plan(tp=2, pp=2, dp=4, zero=1, mb=2, m=8, recompute="full")
    want, _ = paddle.training_args(doc)
    assert args_of(doc) == want


def test_current_argument_names_only():
    a = args_of(plan(tp=2, pp=2, dp=4, vpp=2, m=8, zero=1, sp=True))
    for old in ("tensor_parallel_degree", "pipeline_parallel_degree", "sharding_parallel_degree", "sep_degree",
                "sep_parallel_size", "max_seq_length", "virtual_pp_degree", "schedule_mode", "cp_degree",
                "ep_degree", "moe_sharding_degree", "pipeline_parallel_config"):
        assert old not in a
    assert a["tensor_model_parallel_size"] == 2 and a["pipeline_model_parallel_size"] == 2
    assert a["virtual_pipeline_model_parallel_size"] == 2
    assert a["sequence_parallel"] is True


def test_entry_point_and_data_arguments():
    a = args_of(plan(seq=4096, m=4, mb=2, dp=16))
    assert a["stage"] == "PT" and a["fine_tuning"] == "full" and a["continue_training"] is False
    assert a["dataset_type"] == "pretrain" and len(a["input_dir"].split()) == 2 and a["max_steps"] > 0
    assert a["max_seq_len"] == 4096
    assert a["per_device_train_batch_size"] == 2 and a["gradient_accumulation_steps"] == 4
    assert a["output_dir"]


def test_launch_script_and_hostfile():
    fs, _ = files(plan(nodes=2))
    sh = fs["launch.sh"]
    assert sh.startswith("#!/usr/bin/env bash")
    assert '-m paddle.distributed.launch --ips "$IPS" --devices 0,1,2,3,4,5,6,7' in sh
    assert ('train "$HERE/paddleformers_args.yaml" model_name_or_path="$MODEL_DIR" input_dir="$DATA" '
            'max_steps="$BAIGE_TRAIN_ITERS" output_dir="$OUT/checkpoints" "$@"') in sh
    assert "paddleformers.cli.launcher" in sh
    hosts = [ln for ln in fs["hostfile"].splitlines() if ln and not ln.startswith("#")]
    assert hosts == ["h100-node0000", "h100-node0001"]


# -------------------------------------------------------------------------------------------- parallel
def test_data_parallel_without_sharding_turns_the_default_stage1_off():
    a = args_of(plan(dp=16, zero=0))
    assert a["sharding"] == "" and "sharding_parallel_size" not in a
    assert a["tensor_model_parallel_size"] == 1 and a["pipeline_model_parallel_size"] == 1
    assert "virtual_pipeline_model_parallel_size" not in a


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_sharding_stage_and_group(zero):
    a = args_of(plan(dp=16, zero=zero))
    assert a["sharding"] == f"stage{zero}" and a["sharding_parallel_size"] == 16


def test_tp_pp_with_stage1():
    a = args_of(plan(tp=2, pp=2, dp=4, zero=1, m=8))
    assert (a["tensor_model_parallel_size"], a["pipeline_model_parallel_size"]) == (2, 2)
    assert a["sharding"] == "stage1" and a["sharding_parallel_size"] == 4
    assert a["virtual_pipeline_model_parallel_size"] == 1 and a["gradient_accumulation_steps"] == 8


def test_moe_with_ep_and_cp():
    # 32 devices: tp 4 · pp 2 · cp 2 · dp 2; ep 8; sharding group = dp·cp = 4 (cp is carved out of it)
    doc = plan(model=MIXTRAL, nodes=4, tp=4, pp=2, dp=2, cp=2, ep=8, zero=1, m=32, seq=32768)
    a = args_of(doc)
    assert a["context_parallel_size"] == 2
    assert a["use_expert_parallel"] is True and a["expert_model_parallel_size"] == 8
    assert a["sharding"] == "stage1" and a["sharding_parallel_size"] == 4
    assert a["moe_token_dispatcher_type"] == "alltoall"


def test_uneven_split_as_layer_boundaries():
    # pipeline layer list: [embedding, 32 decoder layers, norm, lm_head]; stage starts 0, 1+9, +8, +8
    a = args_of(plan(tp=1, pp=4, dp=4, zero=1, m=8, counts=[9, 8, 8, 7]))
    assert a["pp_seg_method"] == "[0, 10, 18, 26]"
    assert "pp_seg_method" not in args_of(plan(tp=1, pp=4, dp=4, zero=1, m=8))


# ------------------------------------------------------------------------------- precision / recompute
def test_precisions():
    a = args_of(plan(precision="bf16"))
    assert (a["compute_type"], a["bf16"], a["fp16"], a["fp16_opt_level"], a["amp_master_grad"]) == \
        ("bf16", True, False, "O2", True)
    a = args_of(plan(precision="fp16"))
    assert (a["compute_type"], a["bf16"], a["fp16"], a["fp16_opt_level"]) == ("fp16", False, True, "O2")
    a = args_of(plan(precision="fp32"))
    assert (a["compute_type"], a["bf16"], a["fp16"], a["amp_master_grad"]) == ("float32", False, False, False)


def test_fp8_is_refused_not_exported_as_bf16():
    """Paddle's space has no fp8 for these model classes: the export refuses (exit 2), as for every plan the
    runtime refuses (issue 17), rather than writing a bf16 job."""
    with pytest.raises(SpecError, match="not fp8"):
        files(plan(precision="fp8"))


def test_recompute():
    a = args_of(plan(recompute="full"))
    assert (a["recompute_granularity"], a["recompute_method"], a["recompute_num_layers"]) == ("full", "uniform", 1)
    a = args_of(plan(recompute="none"))
    assert "recompute_granularity" not in a
    with pytest.raises(SpecError, match="not 'selective'"):    # only full recompute: refused, not dropped
        files(plan(recompute="selective"))


# ------------------------------------------------------------------------------------------ model config
def test_llama_gqa_config():
    cfg = json.loads(files(plan())[0]["config.json"])
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["head_dim"], cfg["intermediate_size"], cfg["vocab_size"]) == (4096, 32, 32, 8, 128, 14336, 128256)
    assert cfg["max_position_embeddings"] == 8192 and cfg["tie_word_embeddings"] is False


def test_moe_config():
    fs, ex = files(plan(model=MIXTRAL, nodes=4, dp=32, ep=8, zero=1, seq=4096))
    cfg = json.loads(fs["config.json"])
    assert cfg["architectures"] == ["Qwen3MoeForCausalLM"] and cfg["model_type"] == "qwen3_moe"
    assert (cfg["num_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"]) == (8, 2, 14336)
    assert cfg["head_dim"] == 128 and cfg["num_key_value_heads"] == 8 and cfg["mlp_only_layers"] == []
    assert cfg["max_position_embeddings"] == 32768   # the model's own context, longer than the job's
    assert any("paddlefleet" in c for c in ex.caveats)


def test_dense_layers_of_an_moe_model():
    m = copy.deepcopy(MIXTRAL)
    m["layers"] = 8
    m["moe"].update(first_dense_layers=1, layer_freq=2)     # MoE at 1, 3, 5, 7
    assert paddle.moe_layers(m) == [1, 3, 5, 7]
    cfg, _ = paddle.model_config(m, 4096)
    assert cfg["mlp_only_layers"] == [0, 2, 4, 6] and cfg["decoder_sparse_step"] == 1


def test_gelu_and_shared_experts_are_said():
    gpt = dict(LLAMA3_8B, activation="gelu")
    _, cav = paddle.model_config(gpt, 2048)
    assert any("activation 'gelu'" in c for c in cav)
    m = copy.deepcopy(MIXTRAL)
    m["moe"]["shared_experts"] = 2
    _, cav = paddle.model_config(m, 4096)
    assert any("shared expert" in c for c in cav)


# ------------------------------------------------------------------------------- what Paddle refuses
def refusal(job_gb=None, **kw):
    from types import SimpleNamespace
    job = SimpleNamespace(precision="bf16", global_batch=job_gb) if job_gb else None
    kw.setdefault("recompute", "none")
    return paddle.RUNTIME.refusal(StrategySpec(**kw), None, job)


def test_refusals_from_the_pinned_source():
    assert "with pipeline parallelism" in refusal(tp=2, pp=2, dp=4, zero=2)          # training_args.py
    assert refusal(tp=2, pp=2, dp=4, zero=1, recompute="full") is None
    assert "runs recompute" in refusal(dp=16, zero=1, recompute="selective")
    assert "expert tensor" in refusal(dp=16, ep=8, etp=2, zero=1)
    # EP needs sharding over dp, and ep a multiple of tp (sharding % moe_sharding: 2 % (4·2/2 = 4))
    assert "sharding" in refusal(dp=16, ep=8, zero=0)
    assert "multiple of tp" in refusal(tp=4, dp=2, ep=2, zero=1, recompute="none")
    assert refusal(tp=4, dp=2, ep=8, zero=1, recompute="none") is None
    # CP: only with ep > 1 and sharding
    assert "context parallelism" in refusal(dp=8, cp=2, zero=1)
    assert "zero >= 1" in refusal(dp=4, cp=2, ep=8, zero=0)
    assert refusal(tp=4, pp=2, dp=2, cp=2, ep=8, zero=1, recompute="none") is None
    # uneven first/last stages: pp_seg_method for the native (dense) classes only
    assert paddle.RUNTIME.uneven_split
    assert refusal(pp=3, dp=8, zero=1, first_stage_layers=11, last_stage_layers=10) is None
    from types import SimpleNamespace
    moe = SimpleNamespace(moe={"experts": 8})
    assert "uneven" in paddle.RUNTIME.refusal(StrategySpec(pp=3, dp=8, zero=1, recompute="none",
                                                           first_stage_layers=11, last_stage_layers=10), moe)
    # no non-gated (GPT-3 style) decoder class in PaddleFormers 1.2
    assert "gelu" in paddle.RUNTIME.refusal(StrategySpec(dp=16, zero=1, recompute="none"),
                                            SimpleNamespace(activation="gelu", moe=None))
    # stage 3 with TP (trainer.py _wrap_model)
    assert "stage3" in refusal(tp=2, dp=8, zero=3)
    # interleaved 1F1B needs m >= 2·pp: dp 2, mb 1 -> gb 32 gives m 16 >= 8, gb 8 gives m 4
    assert refusal(job_gb=32, tp=2, pp=4, vpp=2, dp=2, zero=1, recompute="none") is None
    assert "2·pp" in refusal(job_gb=8, tp=2, pp=4, vpp=2, dp=2, zero=1, recompute="none")


def test_refused_plans_are_not_exported():
    """A plan Paddle refuses is an error (exit 2 from `baige-plan export`), naming the rule."""
    with pytest.raises(SpecError, match="PaddleFormers 1.2.0 / Paddle 3.3.1 refuse this plan.*zero=2 with pp=2"):
        files(plan(tp=2, pp=2, dp=4, zero=2, m=8))
    from baige_plan.errors import InputError
    from baige_plan.exports.files import export_plan
    with pytest.raises(InputError, match="strategy.zero: paddle refuses this plan"):
        export_plan(plan(tp=2, pp=2, dp=4, zero=2, m=8), "paddle")


def test_grad_sync_semantics():
    g = paddle.RUNTIME.grad_sync
    assert (g(0, 1).grads, g(0, 1).overlap, g(0, 1).params) == ("step", "none", "none")
    assert (g(0, 4).grads, g(0, 4).overlap) == ("step", "none")
    assert (g(1, 1).grads, g(1, 1).overlap, g(1, 1).params) == ("step", "none", "after_step")
    assert (g(2, 1).grads, g(2, 1).overlap, g(2, 1).params) == ("micro_batch", "none", "after_step")
    assert paddle.RUNTIME.zero_stages_with_pp == (0, 1) and not paddle.RUNTIME.expert_tensor_parallel
    assert paddle.RUNTIME.zero3_gather(1) == "micro_batch"
