"""Built-in model files, the Hugging Face config.json mapping, and bad model inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from baige_plan.errors import InputError
from baige_plan.io.hf_config import load_hf_config
from baige_plan.io.models import load_model_file
from baige_plan.specs.model import ModelSpec

ROOT = Path(__file__).resolve().parents[1]
MODELS = sorted((ROOT / "models").glob("*.yaml"))
HF = ROOT / "tests" / "data" / "hf"


def params(m: ModelSpec) -> float:
    """Weights by hand: embeddings, attention, MLP / experts + router. Norms and biases ignored."""
    h = m.hidden
    n = m.vocab * h * (1 if m.tie_embeddings else 2)
    attn = h * m.q_dim + 2 * h * m.kv_dim + m.q_dim * h
    if m.mla is not None:   # DeepSeek-V2 paper Sec 2.1.2: W^DQ, W^UQ (+ W^QR), W^DKV, W^KR, W^UK, W^UV, W^O
        a = m.mla
        qk = a.qk_head_dim + a.qk_rope_head_dim
        attn = (h * a.q_lora_rank + a.q_lora_rank * m.heads * qk + h * (a.kv_lora_rank + a.qk_rope_head_dim)
                + a.kv_lora_rank * m.heads * (a.qk_head_dim + a.v_head_dim) + m.heads * a.v_head_dim * h)
    dense_mlp = (3 if m.activation == "swiglu" else 2) * h * m.ffn_hidden
    for i in range(m.layers):
        n += attn
        if m.is_moe_layer(i):
            e = m.moe
            n += (e.experts + e.shared_experts) * 3 * h * e.expert_ffn_hidden + h * e.experts
        else:
            n += dense_mlp
    return n


# -- built-in model files ----------------------------------------------------------------------

REQUIRED_MODELS = {
    "gpt3-175b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b",
    "mistral-7b", "mixtral-8x7b", "qwen3-235b-a22b", "bloom-176b", "ernie3-titan-260b",
    "gpt-22b", "gpt-530b", "gpt-1t",
}


def test_required_models_present():
    names = {p.stem for p in MODELS}
    assert REQUIRED_MODELS <= names, f"missing: {sorted(REQUIRED_MODELS - names)}"


@pytest.mark.parametrize("path", MODELS, ids=[p.stem for p in MODELS])
def test_model_file_loads_with_source(path):
    m = load_model_file(path)
    assert m.name == path.stem
    assert isinstance(m.source, str) and len(m.source) > 10
    raw = yaml.safe_load(path.read_text())
    assert raw["schema"] == "baige-plan/model/v1"


@pytest.mark.parametrize("path", MODELS, ids=[p.stem for p in MODELS])
def test_params_b_matches_shape(path):
    """Each file's own params_b agrees with its shape (catches typos in layers/hidden/ffn)."""
    raw = yaml.safe_load(path.read_text())
    assert "params_b" in raw, "every built-in model states its size"
    got = params(load_model_file(path)) / 1e9
    assert got == pytest.approx(raw["params_b"], rel=0.02)


@pytest.mark.parametrize("name, published_b", [
    ("llama3-8b", 8.03),        # Meta model card: 8.03B
    ("llama3-70b", 70.6),       # 70.55B
    ("llama3-405b", 405.0),
    ("llama2-7b", 6.74),
    ("llama2-70b", 69.0),
    ("mixtral-8x7b", 46.7),     # Mixtral paper: 46.7B total
    ("gpt3-175b", 174.6),       # Narayanan 2021: 174.6B (GPT-3 175B)
    ("gpt-530b", 529.6),        # Narayanan 2021 Table 1
    ("gpt-1t", 1008.0),
    ("bloom-176b", 176.2),      # BLOOM paper: 176,247M
    ("qwen3-235b-a22b", 235.0),
])
def test_published_sizes(name, published_b):
    m = load_model_file(ROOT / "models" / f"{name}.yaml")
    assert params(m) / 1e9 == pytest.approx(published_b, rel=0.02)


def test_active_params_moe():
    """Mixtral: 12.9B active (2 of 8 experts); Qwen3-235B-A22B: 22B active."""
    for name, active_b in (("mixtral-8x7b", 12.9), ("qwen3-235b-a22b", 22.0)):
        m = load_model_file(ROOT / "models" / f"{name}.yaml")
        e = m.moe
        inactive = m.moe_layer_count * (e.experts - e.top_k) * 3 * m.hidden * e.expert_ffn_hidden
        assert (params(m) - inactive) / 1e9 == pytest.approx(active_b, rel=0.03), name


def test_specific_shapes():
    q = load_model_file(ROOT / "models" / "qwen3-235b-a22b.yaml")
    assert (q.layers, q.hidden, q.heads, q.kv_heads, q.head_dim, q.q_dim) == (94, 4096, 64, 4, 128, 8192)
    assert (q.moe.experts, q.moe.top_k, q.moe.expert_ffn_hidden, q.moe_layer_count) == (128, 8, 1536, 94)
    l405 = load_model_file(ROOT / "models" / "llama3-405b.yaml")
    assert (l405.layers, l405.hidden, l405.heads, l405.kv_heads, l405.ffn_hidden) == (126, 16384, 128, 8, 53248)
    g = load_model_file(ROOT / "models" / "gpt3-175b.yaml")
    assert g.activation == "gelu" and g.head_dim == 128


# -- Hugging Face config.json ------------------------------------------------------------------

HF_EXPECTED = {
    # dir: (name, layers, hidden, heads, kv_heads, head_dim, ffn, vocab, seq, activation, tie); the fixtures carry no
    # _name_or_path, so the name is model_type + the published size (issue 19: never the folder): Llama 3 8B 8.03 B,
    # Mixtral 8x7B 46.7 B, Qwen3-235B-A22B 235 B, GPT-2 124 M, GPT-NeoX-20B 20.6 B parameters
    "llama3-8b": ("llama-8.03b", 32, 4096, 32, 8, 128, 14336, 128256, 8192, "swiglu", False),
    "mixtral-8x7b": ("mixtral-46.7b", 32, 4096, 32, 8, 128, 14336, 32000, 32768, "swiglu", False),
    "qwen3-235b-a22b": ("qwen3_moe-235b", 94, 4096, 64, 4, 128, 12288, 151936, 8192, "swiglu", False),
    "gpt2": ("gpt2-124m", 12, 768, 12, 12, 64, 3072, 50257, 1024, "gelu", True),
    "gpt-neox-20b": ("gpt_neox-20.6b", 44, 6144, 64, 64, 96, 24576, 50432, 2048, "gelu", False),
    "opt-1.3b": ("facebook/opt-1.3b", 24, 2048, 32, 32, 64, 8192, 50272, 2048, "gelu", True),
    "bloom-560m": ("bigscience/bloom-560m", 24, 1024, 16, 16, 64, 4096, 250880, 2048, "gelu", True),
}


@pytest.mark.parametrize("folder", sorted(HF_EXPECTED))
def test_hf_fixture_fields(folder):
    m = load_hf_config(HF / folder / "config.json")
    got = (m.name, m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden, m.vocab,
           m.seq_len, m.activation, m.tie_embeddings)
    assert got == HF_EXPECTED[folder]


def test_hf_moe_fields():
    mx = load_hf_config(HF / "mixtral-8x7b" / "config.json")
    assert (mx.moe.experts, mx.moe.top_k, mx.moe.expert_ffn_hidden, mx.moe.shared_experts) == (8, 2, 14336, 0)
    q = load_hf_config(HF / "qwen3-235b-a22b" / "config.json")
    assert (q.moe.experts, q.moe.top_k, q.moe.expert_ffn_hidden, q.moe.layer_freq,
            q.moe.first_dense_layers) == (128, 8, 1536, 1, 0)
    assert q.q_dim == 8192
    assert load_hf_config(HF / "llama3-8b" / "config.json").moe is None


def test_hf_matches_builtin_yaml():
    """The HF fixtures and the built-in files describe the same weights."""
    for folder, name in (("llama3-8b", "llama3-8b"), ("mixtral-8x7b", "mixtral-8x7b"),
                         ("qwen3-235b-a22b", "qwen3-235b-a22b")):
        a = load_hf_config(HF / folder / "config.json")
        b = load_model_file(ROOT / "models" / f"{name}.yaml")
        assert params(a) == params(b), name


def test_hf_known_sizes():
    assert params(load_hf_config(HF / "gpt2" / "config.json")) / 1e6 == pytest.approx(124, rel=0.02)
    assert params(load_hf_config(HF / "gpt-neox-20b" / "config.json")) / 1e9 == pytest.approx(20.55, rel=0.02)
    assert params(load_hf_config(HF / "opt-1.3b" / "config.json")) / 1e9 == pytest.approx(1.3, rel=0.03)
    assert params(load_hf_config(HF / "bloom-560m" / "config.json")) / 1e6 == pytest.approx(559, rel=0.02)


def _write(tmp_path: Path, cfg: dict, folder: str = "m") -> Path:
    d = tmp_path / folder
    d.mkdir(exist_ok=True)
    p = d / "config.json"
    p.write_text(json.dumps(cfg))
    return p


def _llama(**over) -> dict:
    cfg = json.loads((HF / "llama3-8b" / "config.json").read_text())
    cfg.update(over)
    return cfg


def test_hf_long_context_capped(tmp_path):
    m = load_hf_config(_write(tmp_path, _llama(max_position_embeddings=131072)))
    assert m.seq_len == 8192
    m = load_hf_config(_write(tmp_path, _llama(max_position_embeddings=32768)))
    assert m.seq_len == 32768


def test_hf_name_from_name_or_path(tmp_path):
    assert load_hf_config(_write(tmp_path, _llama(_name_or_path="org/thing"))).name == "org/thing"
    assert load_hf_config(_write(tmp_path, _llama(_name_or_path="/root/ckpt/my-model/"))).name == "my-model"


def test_hf_name_from_type_and_size_never_the_folder(tmp_path):
    """issue 19: with no (_)name_or_path the name is model_type + size, not the folder it sits in. GPT-2 small:
    124.4 M parameters (124,439,808 with tied embeddings, the published count)."""
    d = tmp_path / "checkpoint-1234"
    d.mkdir()
    cfg = json.loads((HF / "gpt2" / "config.json").read_text())
    cfg.pop("_name_or_path", None)
    (d / "config.json").write_text(json.dumps(cfg))
    assert load_hf_config(d / "config.json").name == "gpt2-124m"
    cfg["name_or_path"] = "openai-community/gpt2"
    (d / "config.json").write_text(json.dumps(cfg))
    assert load_hf_config(d / "config.json").name == "openai-community/gpt2"


def test_hf_errors_name_the_json_key(tmp_path):
    """issue 19: an error names the config's own key (hidden_size), not the internal field (hidden)."""
    from baige_plan.errors import InputError
    with pytest.raises(InputError) as e:
        load_hf_config(_write(tmp_path, _llama(num_attention_heads=0)))
    assert "num_attention_heads" in str(e.value)


def test_hf_qwen2_moe_shared_expert(tmp_path):
    cfg = {"model_type": "qwen2_moe", "num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
           "num_key_value_heads": 16, "intermediate_size": 5632, "moe_intermediate_size": 1408,
           "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4,
           "decoder_sparse_step": 1, "vocab_size": 151936, "max_position_embeddings": 8192,
           "hidden_act": "silu", "tie_word_embeddings": False}
    m = load_hf_config(_write(tmp_path, cfg))
    assert m.moe.shared_experts == 4 and m.moe.experts == 60 and m.moe.top_k == 4


def test_hf_sparse_step_and_dense_prefix(tmp_path):
    base = json.loads((HF / "qwen3-235b-a22b" / "config.json").read_text())
    # transformers: layer i is MoE iff (i + 1) % step == 0 and i not in mlp_only_layers
    for step, only in ((2, []), (1, [0, 1, 2]), (2, [0, 1, 2]), (3, [0])):
        cfg = dict(base, decoder_sparse_step=step, mlp_only_layers=only, num_hidden_layers=12)
        m = load_hf_config(_write(tmp_path, cfg))
        want = [(i + 1) % step == 0 and i not in only for i in range(12)]
        assert [m.is_moe_layer(i) for i in range(12)] == want, (step, only)


@pytest.mark.parametrize("cfg, field", [
    (_llama(model_type="t5"), "model_type"),
    (_llama(model_type="deepseek_v3"), "kv_lora_rank"),   # a DeepSeek config without its MLA keys
    ({k: v for k, v in _llama().items() if k != "model_type"}, "model_type"),
    ({k: v for k, v in _llama().items() if k != "num_hidden_layers"}, "num_hidden_layers"),
    ({k: v for k, v in _llama().items() if k != "intermediate_size"}, "intermediate_size"),
    ({k: v for k, v in _llama().items() if k != "vocab_size"}, "vocab_size"),
    (_llama(num_hidden_layers="32"), "num_hidden_layers"),
    (_llama(num_hidden_layers=-4), "num_hidden_layers"),
    (_llama(num_key_value_heads=5), "num_key_value_heads (kv_heads)"),   # the JSON key (issue 19)
    (_llama(hidden_act="relu"), "hidden_act"),
    (dict(json.loads((HF / "qwen3-235b-a22b" / "config.json").read_text()), mlp_only_layers=[3]),
     "mlp_only_layers"),
    (_llama(tie_word_embeddings="no"), "tie_word_embeddings"),
])
def test_hf_bad_inputs(tmp_path, cfg, field):
    p = _write(tmp_path, cfg)
    with pytest.raises(InputError) as ei:
        load_hf_config(p)
    assert ei.value.field == field
    assert ei.value.source == str(p)


def test_hf_mixtral_missing_expert_key(tmp_path):
    cfg = json.loads((HF / "mixtral-8x7b" / "config.json").read_text())
    del cfg["num_local_experts"]
    with pytest.raises(InputError) as ei:
        load_hf_config(_write(tmp_path, cfg))
    assert ei.value.field == "num_local_experts"


def test_hf_invalid_json(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"model_type": "llama",, }')
    with pytest.raises(InputError) as ei:
        load_hf_config(p)
    assert "invalid JSON" in ei.value.reason and ei.value.field.startswith("line")


def test_hf_not_an_object(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("[1, 2]")
    with pytest.raises(InputError):
        load_hf_config(p)


def test_hf_missing_file(tmp_path):
    with pytest.raises(InputError) as ei:
        load_hf_config(tmp_path / "nope" / "config.json")
    assert "not found" in ei.value.reason


def test_catalog_routes_config_json():
    from baige_plan.io.catalog import Catalog
    m = Catalog.create().model(str(HF / "mixtral-8x7b" / "config.json"))
    assert m.moe is not None and m.moe.experts == 8


# -- bad model YAML ----------------------------------------------------------------------------

GOOD = """schema: baige-plan/model/v1
name: tiny
layers: 4
hidden: 256
heads: 8
ffn_hidden: 1024
vocab: 1000
"""


def _yaml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "m.yaml"
    p.write_text(text)
    return p


def test_good_yaml_defaults(tmp_path):
    m = load_model_file(_yaml(tmp_path, GOOD))
    assert (m.kv_heads, m.head_dim, m.seq_len, m.activation, m.tie_embeddings) == (8, 32, 2048, "swiglu", False)


@pytest.mark.parametrize("text, field", [
    (GOOD + "colour: blue\n", "colour"),
    (GOOD.replace("layers: 4", "layers: -4"), "layers"),
    (GOOD.replace("layers: 4", "layers: 0"), "layers"),
    (GOOD.replace("layers: 4", "layers: four"), "layers"),
    (GOOD.replace("heads: 8", "heads: 7"), "heads"),
    (GOOD + "kv_heads: 3\n", "kv_heads"),
    (GOOD + "activation: relu\n", "activation"),
    (GOOD.replace("vocab: 1000\n", ""), "vocab"),
    (GOOD.replace("schema: baige-plan/model/v1", "schema: baige-plan/model/v2"), "schema"),
    (GOOD + "moe: {experts: 8, top_k: 9, expert_ffn_hidden: 128}\n", "moe.top_k"),
    (GOOD + "moe: {experts: 8, top_k: 2}\n", "moe.expert_ffn_hidden"),
    (GOOD + "moe: {experts: 8, top_k: 2, expert_ffn_hidden: 128, colour: red}\n", "moe.colour"),
    (GOOD + "moe: {experts: 8, top_k: 2, expert_ffn_hidden: 128, first_dense_layers: 4}\n", "moe.first_dense_layers"),
    (GOOD + "source: 12\n", "source"),
    (GOOD + "layers: 5\n", "line 8"),        # duplicate key
])
def test_bad_model_yaml(tmp_path, text, field):
    p = _yaml(tmp_path, text)
    with pytest.raises(InputError) as ei:
        load_model_file(p)
    assert ei.value.field == field, str(ei.value)
    assert ei.value.source == str(p)
