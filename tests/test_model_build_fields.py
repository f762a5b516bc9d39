"""Issue 17, Deliver 1: the model records what a runtime needs to build the same model (rotary base and
scaling, norm and epsilon, qk-norm, biases, router), read from Hugging Face config.json and the catalog, and
every export writes it in the runtime's own terms or says what it builds otherwise.

Independent references: the Hugging Face config.json files themselves (tests/data/hf/*/config.json are
copies; the inline dicts below are the published values, each with its URL), not values derived from the code.
"""

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from _plan_docs import plan_doc
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.errors import InputError
from baige_plan.exports import deepspeed, flagscale, megatron, paddle, torchtitan
from baige_plan.exports._build import megatron_model_args
from baige_plan.io.hf_config import hf_config_to_model, load_hf_config
from baige_plan.io.models import load_model_file, model_from_dict, model_to_dict

ROOT = Path(__file__).resolve().parents[1]
HF = ROOT / "tests" / "data" / "hf"

# https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json
LLAMA3_70B_HF = {"model_type": "llama", "attention_bias": False, "hidden_act": "silu", "hidden_size": 8192,
                 "intermediate_size": 28672, "max_position_embeddings": 8192, "num_attention_heads": 64,
                 "num_hidden_layers": 80, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": None,
                 "rope_theta": 500000.0, "tie_word_embeddings": False, "vocab_size": 128256}
# https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
LLAMA31_8B_HF = {"model_type": "llama", "attention_bias": False, "mlp_bias": False, "hidden_act": "silu",
                 "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072,
                 "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
                 "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                 "rope_theta": 500000.0, "tie_word_embeddings": False, "vocab_size": 128256}
# https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json
QWEN3_8B_HF = {"model_type": "qwen3", "attention_bias": False, "head_dim": 128, "hidden_act": "silu",
               "hidden_size": 4096, "intermediate_size": 12288, "max_position_embeddings": 40960,
               "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
               "rope_scaling": None, "rope_theta": 1000000, "tie_word_embeddings": False, "vocab_size": 151936}
# https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
QWEN3_30B_A3B_HF = {"model_type": "qwen3_moe", "attention_bias": False, "decoder_sparse_step": 1, "head_dim": 128,
                    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
                    "max_position_embeddings": 40960, "mlp_only_layers": [], "moe_intermediate_size": 768,
                    "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
                    "num_hidden_layers": 48, "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_scaling": None,
                    "rope_theta": 1000000.0, "tie_word_embeddings": False, "vocab_size": 151936}


def _model(name: str):
    if name == "llama3-8b":
        return load_hf_config(HF / "llama3-8b" / "config.json")
    if name == "qwen3-235b-a22b":
        return load_hf_config(HF / "qwen3-235b-a22b" / "config.json")
    cfg = {"llama3-70b": LLAMA3_70B_HF, "llama3.1-8b": LLAMA31_8B_HF, "qwen3-8b": QWEN3_8B_HF,
           "qwen3-30b-a3b": QWEN3_30B_A3B_HF}[name]
    return hf_config_to_model(dict(cfg), f"{name}/config.json", name=name)


def _megatron_args(model_dict: dict, **kw) -> tuple[dict, tuple[str, ...], str]:
    ex = megatron.export(plan_doc(model_dict, "megatron", chip={"architecture": "Hopper"}, **kw))
    text = ex.files[0].text
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            words = shlex.split(line)
            out[words[0]] = words[1] if len(words) == 2 else None
    return out, ex.caveats, text


# -- read from config.json, against the published values ------------------------------------------------------
@pytest.mark.parametrize("name, theta, eps, qk", [
    ("llama3-8b", 500000.0, 1e-05, False), ("llama3-70b", 500000.0, 1e-05, False),
    ("qwen3-8b", 1000000.0, 1e-06, True), ("qwen3-30b-a3b", 1000000.0, 1e-06, True),
    ("qwen3-235b-a22b", 1000000.0, 1e-06, True)])
def test_hf_config_build_fields(name, theta, eps, qk):
    m = _model(name)
    assert (m.position_embedding, m.rope_theta, m.rope_scaling) == ("rope", theta, None)
    assert (m.norm, m.norm_eps, m.qk_norm) == ("rmsnorm", eps, qk)
    assert (m.qkv_bias, m.linear_bias) == (False, False)     # attention_bias false in every one
    if m.moe is not None:
        assert m.moe.norm_topk_prob is True and m.moe.shared_expert_gate is False


def test_llama31_rope_scaling_is_read():
    s = _model("llama3.1-8b").rope_scaling
    assert (s.rope_type, s.factor, s.low_freq_factor, s.high_freq_factor, s.original_max_position_embeddings) == (
        "llama3", 8.0, 1.0, 4.0, 8192)


def test_qwen2_qkv_bias_and_mixtral_router():
    # modeling_qwen2: q/k/v projections with bias, o_proj and MLP without
    q2 = hf_config_to_model({"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64,
                             "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}, "q2.json")
    assert (q2.qkv_bias, q2.linear_bias, q2.qk_norm, q2.rope_theta) == (True, False, False, None)  # no key: unset
    mix = load_hf_config(HF / "mixtral-8x7b" / "config.json")
    assert (mix.rope_theta, mix.norm_eps, mix.moe.norm_topk_prob) == (1000000.0, 1e-05, True)


@pytest.mark.parametrize("catalog, config", [("llama3-8b", "llama3-8b"), ("qwen3-235b-a22b", "qwen3-235b-a22b"),
                                             ("mixtral-8x7b", "mixtral-8x7b")])
def test_catalog_matches_its_config_json(catalog, config):
    cat = load_model_file(ROOT / "models" / f"{catalog}.yaml")
    hf = load_hf_config(HF / config / "config.json")
    for f in ("position_embedding", "rope_theta", "rope_scaling", "norm", "norm_eps", "qk_norm", "qkv_bias",
              "linear_bias"):
        assert getattr(cat, f) == getattr(hf, f), f
    if hf.moe is not None:
        assert cat.moe.norm_topk_prob == hf.moe.norm_topk_prob


def test_catalog_llama3_70b_and_405b():
    m70 = load_model_file(ROOT / "models" / "llama3-70b.yaml")
    assert (m70.rope_theta, m70.norm_eps, m70.rope_scaling) == (500000.0, 1e-05, None)   # Meta-Llama-3-70B
    s = load_model_file(ROOT / "models" / "llama3-405b.yaml").rope_scaling                 # Llama 3.1
    assert (s.rope_type, s.factor) == ("llama3", 8.0)


# -- the plan file records them; models that record none are unchanged ----------------------------------------
def test_plan_model_round_trip_and_untouched_without_fields():
    m = _model("qwen3-30b-a3b")
    d = model_to_dict(m)
    assert d["rope_theta"] == 1000000.0 and d["norm_eps"] == 1e-06 and d["qk_norm"] is True
    assert d["moe"]["norm_topk_prob"] is True
    assert model_from_dict(d, "plan.yaml", check_schema=False) == m
    gpt3 = load_model_file(ROOT / "models" / "gpt3-175b.yaml")    # records none: the pre-issue-17 keys only
    assert list(model_to_dict(gpt3)) == ["schema", "name", "layers", "hidden", "heads", "kv_heads", "head_dim",
                                         "ffn_hidden", "vocab", "seq_len", "activation", "tie_embeddings",
                                         "dropout", "source"]


def test_bad_build_fields_are_input_errors(tmp_path):
    base = (ROOT / "models" / "llama3-8b.yaml").read_text()
    p = tmp_path / "m.yaml"
    p.write_text(base.replace("norm_eps: 1.0e-5", "norm_eps: 1e-5"))   # YAML 1.1 reads 1e-5 as text
    with pytest.raises(InputError, match="norm_eps.*1.0e-5"):
        load_model_file(p)
    p.write_text(base.replace("norm: rmsnorm", "norm: batchnorm"))
    with pytest.raises(InputError, match="norm: must be one of rmsnorm, layernorm"):
        load_model_file(p)
    r = CliRunner().invoke(app, ["validate", str(p)])
    assert r.exit_code == 2 and "norm" in r.output and "m.yaml" in r.output


# -- Megatron: the acceptance check --------------------------------------------------------------------------
@pytest.mark.parametrize("name, theta, eps, qk", [
    ("llama3-8b", "500000", "1e-05", False), ("llama3-70b", "500000", "1e-05", False),
    ("qwen3-8b", "1000000", "1e-06", True), ("qwen3-30b-a3b", "1000000", "1e-06", True),
    ("qwen3-235b-a22b", "1000000", "1e-06", True)])
def test_megatron_export_carries_the_config(name, theta, eps, qk):
    a, caveats, _ = _megatron_args(model_to_dict(_model(name)))
    assert a["--rotary-base"] == theta and a["--norm-epsilon"] == eps
    assert ("--qk-layernorm" in a) is qk
    assert a["--normalization"] == "RMSNorm" and a["--position-embedding-type"] == "rope"
    assert "--disable-bias-linear" in a and "--add-qkv-bias" not in a
    assert "--use-rope-scaling" not in a and "--moe-router-pre-softmax" not in a
    assert not [c for c in caveats if "rope" in c or "norm" in c]


def test_megatron_rope_scaling_qkv_bias_and_router():
    a, _, _ = _megatron_args(model_to_dict(_model("llama3.1-8b")))
    assert a["--use-rope-scaling"] is None and a["--rope-scaling-factor"] == "8"
    q2 = dict(model_to_dict(_model("qwen3-8b")), qkv_bias=True, qk_norm=False)
    a, _, _ = _megatron_args(q2)
    assert "--disable-bias-linear" in a and "--add-qkv-bias" in a and "--qk-layernorm" not in a
    moe = model_to_dict(_model("qwen3-30b-a3b"))
    moe["moe"] = dict(moe["moe"], norm_topk_prob=False, shared_experts=1, shared_expert_gate=True)
    a, _, _ = _megatron_args(moe, ep=8, dp=8)
    assert "--moe-router-pre-softmax" in a and "--moe-shared-expert-gate" in a


def test_megatron_cannot_build_alibi_or_yarn_says_so():
    bloom = model_to_dict(load_model_file(ROOT / "models" / "bloom-176b.yaml"))
    args, caveats, note = megatron_model_args(bloom)
    assert ("--position-embedding-type", "learned_absolute") in args
    assert any("alibi" in c for c in caveats)
    yarn = dict(model_to_dict(_model("qwen3-8b")), rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                                 "original_max_position_embeddings": 32768})
    _, caveats, text = _megatron_args(yarn)
    assert any(c.startswith("rope_scaling yarn") for c in caveats)
    assert "# cannot express: rope_scaling yarn" in text


def test_models_without_fields_export_as_before():
    gpt3 = model_to_dict(load_model_file(ROOT / "models" / "gpt3-175b.yaml"))
    args, caveats, note = megatron_model_args(gpt3)
    assert args == [("--normalization", "LayerNorm"), ("--position-embedding-type", "learned_absolute")]
    assert note.startswith("model style: gelu") and caveats == []


# -- the other runtimes --------------------------------------------------------------------------------------
def test_flagscale_config_keys():
    d = model_to_dict(_model("qwen3-235b-a22b"))
    a = flagscale._model_args(d, {"seq_len": 4096}, caveats := [])
    assert (a["rotary_base"], a["norm_epsilon"], a["qk_layernorm"], a["normalization"]) == (
        1000000, 1e-06, True, "RMSNorm")
    d["moe"] = dict(d["moe"], shared_experts=1, shared_expert_gate=True)
    flagscale._model_args(d, {"seq_len": 4096}, caveats)
    assert any("moe-shared-expert-gate" in c for c in caveats)   # its bundled Megatron-LM has no such flag


def test_deepspeed_args_and_what_it_cannot_build():
    d = model_to_dict(_model("qwen3-8b"))
    a, caveats, _ = deepspeed.megatron_deepspeed_args(plan_doc(d, "deepspeed", zero=1))
    a = dict(a)
    assert a["--rotary-position-embeddings-theta"] == 1000000 and a["--layernorm-epsilon"] == 1e-06
    assert any(c.startswith("qk_norm") for c in caveats)         # Megatron-DeepSpeed has no q/k norm


def test_paddle_config_json():
    cfg, caveats = paddle.model_config(model_to_dict(_model("qwen3-30b-a3b")), 4096)
    assert (cfg["rope_theta"], cfg["rms_norm_eps"], cfg["norm_topk_prob"]) == (1000000.0, 1e-06, True)
    cfg, caveats = paddle.model_config(model_to_dict(_model("qwen3-8b")), 4096)
    assert any(c.startswith("qk_norm true") for c in caveats)   # the Llama class has no q/k norm


def test_torchtitan_prints_what_its_family_builds_otherwise():
    # Meta-Llama-3-8B has no rope scaling; torchtitan's llama3 8B flavor (Llama 3.1) scales
    diffs = {x.field: x for x in torchtitan.model_differences(model_to_dict(_model("llama3-8b")))}
    assert diffs["rope_scaling"].planned == "none" and diffs["rope_scaling"].built.startswith("llama3(factor=8")
    assert "rope_theta" not in diffs and "norm_eps" not in diffs
    # Qwen3-8B's shape is no shipped flavor: the generated llama3-family module has no qk-norm, theta 500000
    diffs = {x.field: x for x in torchtitan.model_differences(model_to_dict(_model("qwen3-8b")))}
    assert (diffs["rope_theta"].planned, diffs["rope_theta"].built) == ("1000000", "500000")
    assert (diffs["qk_norm"].planned, diffs["qk_norm"].built) == ("true", "false")
    assert diffs["norm_eps"].built == "1e-05"
    # the generated qwen3 family builds Qwen3 MoE as planned
    assert torchtitan.model_differences(model_to_dict(_model("qwen3-30b-a3b"))) == ()


def test_cli_plan_and_export_carry_the_fields(tmp_path):
    cfg, plan = tmp_path / "config.json", tmp_path / "p.yaml"
    cfg.write_text(json.dumps(QWEN3_30B_A3B_HF))
    r = CliRunner().invoke(app, ["plan", str(cfg), "h100-sxm5-80g:2x8", "--global-batch", "64", "--seq-len", "4096",
                                 "--tp", "1", "--pp", "1", "--out", str(plan)])
    assert r.exit_code == 0, r.output
    assert "qk_norm: true" in plan.read_text() and "rope_theta: 1000000.0" in plan.read_text()
    r = CliRunner().invoke(app, ["export", str(plan), "--to", "megatron"])
    assert r.exit_code == 0, r.output
    assert "--rotary-base 1000000" in r.stdout and "--norm-epsilon 1e-06" in r.stdout
    assert "\n--qk-layernorm\n" in r.stdout


# -- every flag the build helpers emit exists in the pinned Megatron parser (when its venv is here) ----------
_MEGATRON_PY = ROOT / ".venv-it" / "megatron" / "bin" / "python"
FLAGS = ["--rotary-base", "--use-rope-scaling", "--rope-scaling-factor", "--rotary-seq-len-interpolation-factor",
         "--norm-epsilon", "--normalization", "--position-embedding-type", "--qk-layernorm", "--disable-bias-linear",
         "--add-qkv-bias", "--moe-router-pre-softmax", "--moe-shared-expert-gate", "--swiglu", "--no-bias-gelu-fusion"]


@pytest.mark.slow   # imports megatron-core and torch (~15 s)
@pytest.mark.skipif(not _MEGATRON_PY.exists(), reason="no .venv-it/megatron (tests/integration/requirements-megatron.txt)")
def test_flags_exist_in_pinned_megatron_core():
    code = ("import argparse, sys\nfrom megatron.training.arguments import add_megatron_arguments\n"
            "p = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))\n"
            "have = {o for a in p._actions for o in a.option_strings}\n"
            "print(' '.join(f for f in sys.argv[1:] if f not in have))\n")
    out = subprocess.run([str(_MEGATRON_PY), "-c", code, *FLAGS], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", f"not in megatron-core {megatron.VERSION}: {out.stdout}"


def test_emitted_flags_are_in_the_checked_list():
    seen = set()
    for name in ("llama3.1-8b", "qwen3-8b", "qwen3-30b-a3b"):
        seen |= {k for k, _ in megatron_model_args(model_to_dict(_model(name)))[0]}
    seen |= {"--moe-router-pre-softmax", "--moe-shared-expert-gate", "--add-qkv-bias"}
    assert seen <= set(FLAGS), seen - set(FLAGS)


def test_check_notes_newly_recorded_fields_without_failing():
    from baige_plan.present.plan_compare import input_changes
    old = model_to_dict(load_model_file(ROOT / "models" / "gpt3-175b.yaml"))
    new = dict(old, norm="layernorm", position_embedding="learned", qkv_bias=True, linear_bias=True)
    matter, noted = input_changes({"inputs": {"model": old}}, {"inputs": {"model": new}})
    assert matter == [] and len(noted) == 4
    matter, _ = input_changes({"inputs": {"model": old}}, {"inputs": {"model": dict(new, layers=95)}})
    assert matter == ["model.layers: 96 -> 95"]


def test_gelu_moe_turns_bias_gelu_fusion_off():
    # core/transformer/mlp.py: bias-GELU fusion raises with the router's per-token scale (issue 17, 4 H200s)
    gelu_moe = dict(name="gelu-moe", layers=8, hidden=1024, heads=16, kv_heads=16, ffn_hidden=4096, vocab=32000,
                    seq_len=2048, activation="gelu", tie_embeddings=False,
                    moe=dict(experts=8, top_k=2, expert_ffn_hidden=4096, shared_experts=0, layer_freq=1,
                             first_dense_layers=0))
    a, _, _ = _megatron_args(gelu_moe, ep=2, dp=4, m=4)
    assert "--no-bias-gelu-fusion" in a and "--disable-bias-linear" not in a
    a, _, _ = _megatron_args(dict(gelu_moe, linear_bias=False, qkv_bias=False), ep=2, dp=4, m=4)
    assert "--no-bias-gelu-fusion" not in a and "--disable-bias-linear" in a   # validate_args turns it off
    a, _, _ = _megatron_args(model_to_dict(_model("qwen3-30b-a3b")), ep=8, dp=8)
    assert "--no-bias-gelu-fusion" not in a                                     # SwiGLU experts fuse fine
    assert flagscale._model_args(gelu_moe, {"seq_len": 2048})["no_bias_gelu_fusion"] is True
