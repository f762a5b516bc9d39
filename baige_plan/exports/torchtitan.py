"""torchtitan: plan -> launch files (export). Its execution semantics, the RuntimeSpec the cost model and the
search read, are in baige_plan/specs/runtimes/torchtitan.py."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from functools import lru_cache

from baige_plan.errors import SpecError
from baige_plan.exports._common import (
    DATA_VAR,
    ITERS_VAR,
    MOCK_VAR,
    TOKENIZER_VAR,
    Export,
    ExportFile,
    VersionCheck,
    common_caveats,
    data_lines,
    hostfile_file,
    plan_info,
    slurm_file,
    version_check_lines,
)
from baige_plan.exports.torchtitan_build import FAMILY_BUILD, build_differences
from baige_plan.specs.runtimes.torchtitan import (
    MAX_ACTIVE_STAGES,
    RUNTIME,
    TORCH_VERSION,
    VERSION,
    _get,
)

V02 = "0.2.2"          # --runtime-version 0.2: torchtitan 0.2.2 for torch 2.11 / 2.12 stacks (0.3.0 needs torch 2.14)
EXPORT_VERSIONS = (VERSION, V02)   # exports/files.py --runtime-version: newest first
ARGS_FILE = "torchtitan_args.txt"
CONFIG_MODULE = "baige_torchtitan_config"      # generated config_registry module (when one is needed)
CONFIG_FUNCTION = "baige_plan"


@dataclass(frozen=True)
class Flavor:
    """A torchtitan 0.3.0 model: MODULE's model_registry(FLAVOR), with the shape the planner sees."""

    module: str                 # torchtitan.models.<module>
    flavor: str                 # model_registry key
    config: str | None          # config_registry function that builds exactly this model, bf16, eager
    base: str                   # config_registry function a generated module starts from
    hf_assets: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_hidden: int | None      # None: every layer is MoE
    vocab: int
    tie_embeddings: bool = False
    experts: int = 0
    top_k: int = 0
    expert_ffn_hidden: int = 0
    why_generated: str = ""


# Shapes read from torchtitan 0.3.0 (models/llama3/__init__.py llama3_configs, models/qwen3/__init__.py
# qwen3_configs); tests/integration/check_torchtitan.py compares every exported one with the installed
# model_registry. llama3_405b() is not used: it hard-wires the float8 converter (torchao, SM89+) and
# torch.compile with async TP.
FLAVORS = (
    Flavor("llama3", "8B", "llama3_8b", "llama3_8b", "./assets/hf/Llama-3.1-8B", 32, 4096, 32, 8, 128, 14336, 128256),
    Flavor("llama3", "70B", "llama3_70b", "llama3_70b", "./assets/hf/Llama-3.1-70B", 80, 8192, 64, 8, 128, 28672,
           128256),
    Flavor("llama3", "405B", None, "llama3_70b", "./assets/hf/Llama-3.1-405B", 126, 16384, 128, 8, 128, 53248,
           128256, why_generated="torchtitan's llama3_405b() hard-wires the float8 converter and torch.compile "
           "with async TP"),
    Flavor("qwen3", "0.6B", "qwen3_0_6b", "qwen3_0_6b", "./assets/hf/Qwen3-0.6B", 28, 1024, 16, 8, 128, 3072, 151936,
           tie_embeddings=True),
    Flavor("qwen3", "1.7B", "qwen3_1_7b", "qwen3_1_7b", "./assets/hf/Qwen3-1.7B", 28, 2048, 16, 8, 128, 6144, 151936,
           tie_embeddings=True),
    Flavor("qwen3", "14B", "qwen3_14b", "qwen3_14b", "./assets/hf/Qwen3-14B", 40, 5120, 40, 8, 128, 17408, 151936),
    Flavor("qwen3", "32B", "qwen3_32b", "qwen3_32b", "./assets/hf/Qwen3-32B", 64, 5120, 64, 8, 128, 25600, 151936),
    Flavor("qwen3", "30B-A3B", "qwen3_30b_a3b", "qwen3_30b_a3b", "./assets/hf/Qwen3-30B-A3B", 48, 2048, 32, 4, 128,
           None, 151936, experts=128, top_k=8, expert_ffn_hidden=768),
    Flavor("qwen3", "235B-A22B", None, "qwen3_30b_a3b", "./assets/hf/Qwen3-235B-A22B", 94, 4096, 64, 4, 128, None,
           151936, experts=128, top_k=8, expert_ffn_hidden=1536,
           why_generated="torchtitan 0.3.0 registers the 235B-A22B flavor but has no config_registry function "
           "for it"),
)


def _hsdp_degrees(s: dict, dp: int, cp: int) -> tuple[int, int]:
    """(data_parallel_replicate_degree, data_parallel_shard_degree) of a sharded plan: FSDP2 shards over
    dp_shard x cp (parallel_dims.py), so a hybrid plan's shard group of fsdp_shard dp·cp ranks is dp_shard =
    fsdp_shard / cp, replicated dp / dp_shard times (StrategySpec.fsdp_shard; 0 = full shard over dp)."""
    sh = int(s.get("fsdp_shard") or 0)
    if not sh:
        return 1, dp
    return dp * cp // sh, sh // cp


def _shape(model) -> dict:
    """The planner's model (a plan's inputs.model dict or a ModelSpec) in Flavor's terms."""
    heads = _get(model, "heads")
    moe = _get(model, "moe")
    d = {"layers": _get(model, "layers"), "hidden": _get(model, "hidden"), "heads": heads,
         "kv_heads": _get(model, "kv_heads") or heads,
         "head_dim": _get(model, "head_dim") or _get(model, "hidden") // heads, "vocab": _get(model, "vocab"),
         "tie_embeddings": bool(_get(model, "tie_embeddings", False)), "activation": _get(model, "activation", "swiglu")}
    if moe:
        d.update(experts=_get(moe, "experts"), top_k=_get(moe, "top_k"), expert_ffn_hidden=_get(moe, "expert_ffn_hidden"),
                 shared_experts=_get(moe, "shared_experts", 0) or 0, layer_freq=_get(moe, "layer_freq", 1) or 1,
                 first_dense_layers=_get(moe, "first_dense_layers", 0) or 0)
        if d["layer_freq"] > 1 or d["first_dense_layers"] > 0:   # the dense layers' MLP width
            d["ffn_hidden"] = _get(model, "ffn_hidden")
    else:
        d["ffn_hidden"] = _get(model, "ffn_hidden")
    return d


def _matches(f: Flavor, d: dict) -> bool:
    same = (d["layers"], d["hidden"], d["heads"], d["kv_heads"], d["head_dim"], d["vocab"], d["tie_embeddings"]) == (
        f.layers, f.hidden, f.heads, f.kv_heads, f.head_dim, f.vocab, f.tie_embeddings) and d["activation"] == "swiglu"
    if f.experts:
        return same and "experts" in d and "ffn_hidden" not in d and (d["experts"], d["top_k"], d["expert_ffn_hidden"], d["shared_experts"],
                                            d["layer_freq"], d["first_dense_layers"]) == (
            f.experts, f.top_k, f.expert_ffn_hidden, 0, 1, 0)
    return same and "experts" not in d and d["ffn_hidden"] == f.ffn_hidden


def flavor_for(model) -> Flavor | None:
    """The torchtitan 0.3.0 model with the plan model's shape (name-independent), or None."""
    return _flavor_for(tuple(sorted(_shape(model).items())))


@lru_cache(maxsize=64)
def _flavor_for(items: tuple) -> Flavor | None:
    d = dict(items)
    return next((f for f in FLAVORS if _matches(f, d)), None)


def _shape_text(d: dict) -> str:
    t = (f"{d['layers']} layers, hidden {d['hidden']}, {d['heads']} heads / {d['kv_heads']} KV heads of "
         f"{d['head_dim']}, vocab {d['vocab']}")
    if "experts" in d:
        return t + f", {d['experts']} experts top-{d['top_k']} of width {d['expert_ffn_hidden']}"
    return t + f", ffn {d['ffn_hidden']}"



# -- models torchtitan does not ship: what the generated config module builds ----------------------
SWIGLU_MULTIPLE = 256   # multiple_of of a SwiGLU width standing in for a GELU one (Llama's own default)


def swiglu_width(gelu_width: int) -> int:
    """The SwiGLU hidden width with a GELU MLP's parameters and FLOPs (3 matrices of W against 2 of F:
    W = 2F/3), by torchtitan's own rule (models/common/feed_forward.py compute_ffn_hidden_dim:
    int(2 * 4 * dim / 3), rounded up to multiple_of) with multiple_of = SWIGLU_MULTIPLE: MPT-7B's 16384
    -> 11008, GPT-3's 49152 -> 32768."""
    w = int(2 * gelu_width / 3)
    return -(-w // SWIGLU_MULTIPLE) * SWIGLU_MULTIPLE


@dataclass(frozen=True)
class Difference:
    """A field of the planned model that torchtitan 0.3.0's llama3/qwen3 families build otherwise.
    `text` is machine-checkable (tests/integration/check_torchtitan.py parses it): the field, the planned
    and the built value, each one word."""

    field: str
    planned: object
    built: object
    why: str

    @property
    def text(self) -> str:
        return f"model difference: {self.field}: planned {self.planned}, built {self.built} ({self.why})"


GELU_WHY = ("torchtitan 0.3.0's llama3/qwen3 FeedForward and GroupedExperts are SwiGLU only "
            "(models/common/feed_forward.py FeedForward.forward, moe.py GroupedExperts); neither are the "
            "conventions the planner pairs with GELU (LayerNorm, linear biases, learned or ALiBi positions): "
            "RMSNorm, no biases and RoPE are built; register your own block to train the planned model itself")
WIDTH_WHY = ("the SwiGLU width with the GELU MLP's parameters and FLOPs (2F/3 rounded up to "
             f"{SWIGLU_MULTIPLE}, feed_forward.py compute_ffn_hidden_dim's rule), so the plan's memory and step "
             "time still hold")


def model_differences(model, version: str = VERSION) -> tuple[Difference, ...]:
    """What the generated module builds differently from the planned model. Written into the export, not
    refused: the plan's parallelism, batch and launch are what a PyTorch FSDP2 run of the planned model
    needs, and a stand-in of the same parameter count and FLOPs keeps the plan's predictions valid, so
    the files are more useful than an exit (the integration check builds the stand-in and holds the
    export to these differences)."""
    d = _shape(model)
    out = []
    if d["activation"] != "swiglu":
        out.append(Difference("activation", d["activation"], "swiglu", GELU_WHY))
        if "ffn_hidden" in d:
            out.append(Difference("ffn_hidden", d["ffn_hidden"], swiglu_width(d["ffn_hidden"]), WIDTH_WHY))
        if "experts" in d:
            out.append(Difference("expert_ffn_hidden", d["expert_ffn_hidden"], swiglu_width(d["expert_ffn_hidden"]),
                                  WIDTH_WHY))
    drop = float(_get(model, "dropout", 0.0) or 0.0)
    if drop > 0:
        out.append(Difference("dropout", drop, 0.0, "torchtitan 0.3.0's models have no dropout: the step "
                              "skips the masks the plan costed"))
    # rotary base/scaling, norm epsilon, qk-norm, biases, router: what the family builds (exports/torchtitan_build.py)
    f = flavor_for(model)
    out += [Difference(*x) for x in build_differences(model, f.module if f is not None else _family(d), version)]
    return tuple(out)


def built_shape(model) -> dict:
    """The shape the generated module builds: the planned one with `model_differences` applied."""
    d = dict(_shape(model))
    for x in model_differences(model):
        if x.field in d:
            d[x.field] = x.built
    return d


def _differences_lines(diffs: tuple[Difference, ...]) -> list[str]:
    """A generated module's MODEL_DIFFERENCES assignment: field -> (planned, built)."""
    if not diffs:
        return ["MODEL_DIFFERENCES: dict = {}"]
    return ["MODEL_DIFFERENCES = {"] + [f"    {x.field!r}: ({x.planned!r}, {x.built!r})," for x in diffs] + ["}"]


def _stage_modules(counts: list[int]) -> list[list[str]]:
    out, first = [], 0
    for k, n in enumerate(counts):
        mods = [f"layers.{j}" for j in range(first, first + n)]
        if k == 0:
            mods.insert(0, "tok_embeddings")
        if k == len(counts) - 1:
            mods += ["norm", "lm_head"]
        out.append(mods)
        first += n
    return out


def _config_module(f: Flavor, fp8: bool, title: str) -> str:
    why = [f.why_generated] if f.why_generated else []
    if fp8:
        why.append("fp8 is a model converter (Float8LinearConverter), which only a config_registry function sets")
    imports = [f"from torchtitan.models.{f.module} import model_registry",
               f"from torchtitan.models.{f.module}.config_registry import {f.base}",
               "from torchtitan.models.common.config_utils import decoder_vocab_size"]
    if fp8:
        imports.insert(0, "from torchtitan.components.quantization import Float8LinearConverter")
        spec = ["    config.model_spec = model_registry(", f"        \"{f.flavor}\",",
                "        converters=[Float8LinearConverter.Config(filter_fqns=[\"lm_head\"], "
                "model_compile_enabled=False)],", "    )"]
    else:
        spec = [f"    config.model_spec = model_registry(\"{f.flavor}\")"]
    doc = (f"Generated by baige-plan for torchtitan=={VERSION}: the config_registry function torchtitan.train "
           f"loads with `--module {CONFIG_MODULE} --config {CONFIG_FUNCTION}` (launch.sh puts this folder on "
           "PYTHONPATH; ConfigManager imports the module and calls the function). It is torchtitan's own "
           f"{f.module}.config_registry.{f.base}() with model_registry(\"{f.flavor}\")"
           + (" and the float8 converter" if fp8 else "") + f"; every other setting comes from the flags in "
           f"{ARGS_FILE}. Why a module: " + "; ".join(why) + ".")
    return "\n".join([f'"""{title}', "", *textwrap.wrap(doc, 100), '"""', "", *imports, "", "",
                      f"def {CONFIG_FUNCTION}():", f"    config = {f.base}()", *spec,
                      "    loss = getattr(config.loss, \"loss_fn\", config.loss)",
                      "    loss.global_vocab_size = decoder_vocab_size(config.model_spec)",
                      f"    config.hf_assets_path = \"{f.hf_assets}\"", "    return config", ""])



# What the generated module builds for a model of another shape: torchtitan's own family code, with the
# planned dimensions. RoPE is each family's (the plan does not record positions); its table covers at
# least the job's seq_len (Decoder.Config.update_from_config checks seq_len against it).
FAMILY_BASE = {"llama3": "llama3_8b", "qwen3": "qwen3_30b_a3b"}   # config_registry function to start from
ROPE = {"llama3": ('ComplexRoPE.Config(dim={hd}, max_seq_len={n}, theta=500000, scaling="llama")', 131072),
        "qwen3": ("CosSinRoPE.Config(dim={hd}, max_seq_len={n}, theta=1000000.0)", 40960)}


def planned_flavor(model) -> str:
    """The model_registry key the generated module registers the planned model under."""
    return "baige_" + (re.sub(r"[^0-9A-Za-z]+", "_", str(_get(model, "name", "model"))).strip("_").lower() or "model")


def _family(d: dict) -> str:
    # MoE needs qwen3's MoE sharding (models/qwen3/sharding.py); llama3 builds dense blocks without qk-norm
    return "qwen3" if "experts" in d else "llama3"


def _llama3_builder(d: dict, rope: str) -> list[str]:
    hd = None if d["hidden"] % d["heads"] == 0 and d["head_dim"] == d["hidden"] // d["heads"] else d["head_dim"]
    emb = "_EMBEDDING_SKIP_INIT" if d["tie_embeddings"] else "_EMBEDDING_INIT"   # as llama3 1B/3B (tied) do
    return [
        "def _planned(attn_backend: str = \"flex\", tp_gemm_backend: str = \"default\") -> Llama3Model.Config:",
        "    \"\"\"torchtitan/models/llama3/__init__.py _8b() with the planned dimensions.\"\"\"",
        f"    dim, vocab_size, n_layers = {d['hidden']}, {d['vocab']}, {d['layers']}",
        f"    rope = {rope}",
        "    layers = [",
        "        Llama3TransformerBlock.Config(",
        "            attention_norm=RMSNorm.Config(normalized_shape=dim, param_init=_NORM_INIT),",
        "            ffn_norm=RMSNorm.Config(normalized_shape=dim, param_init=_NORM_INIT),",
        "            attention=make_gqa_config(",
        f"                dim=dim, n_heads={d['heads']}, n_kv_heads={d['kv_heads']}, head_dim={hd},",
        "                wqkv_param_init=_LINEAR_INIT, wo_param_init=_depth_init(layer_id),",
        "                inner_attention=get_attention_config(attn_backend), fuse_qkv=True, rope=rope,",
        "                tp_gemm_backend=tp_gemm_backend),",
        "            feed_forward=make_ffn_config(",
        f"                dim=dim, hidden_dim={d['ffn_hidden']}, w1_param_init=_LINEAR_INIT,",
        "                w2w3_param_init=_depth_init(layer_id), tp_gemm_backend=tp_gemm_backend),",
        "        )",
        "        for layer_id in range(n_layers)",
        "    ]",
        "    return Llama3Model.Config(",
        f"        dim=dim, vocab_size=vocab_size, enable_weight_tying={d['tie_embeddings']},",
        f"        tok_embeddings=Embedding.Config(num_embeddings=vocab_size, embedding_dim=dim, param_init={emb}),",
        "        norm=RMSNorm.Config(normalized_shape=dim, param_init=_NORM_INIT),",
        "        lm_head=Linear.Config(in_features=dim, out_features=vocab_size, param_init=_output_linear_init(dim)),",
        "        layers=layers,",
        "    )"]


def _qwen3_builder(d: dict, rope: str) -> list[str]:
    e, k, ef = d["experts"], d["top_k"], d["expert_ffn_hidden"]
    first, freq = d["first_dense_layers"], d["layer_freq"]
    shared = (f"make_ffn_config(dim=dim, hidden_dim={d['shared_experts'] * ef}, w1_param_init=_LINEAR_INIT, "
              "w2w3_param_init=output_init)") if d["shared_experts"] else "None"
    emb = "_EMBEDDING_SKIP_INIT" if d["tie_embeddings"] else "_EMBEDDING_INIT"
    dense = [
        "        if not (layer_id >= FIRST_DENSE_LAYERS and (layer_id - FIRST_DENSE_LAYERS) % MOE_LAYER_FREQ == 0):",
        "            return Qwen3TransformerBlock.Config(",
        "                attention_norm=_qwen3_norm(dim), ffn_norm=_qwen3_norm(dim), attention=attention,",
        f"                feed_forward=make_ffn_config(dim=dim, hidden_dim={d.get('ffn_hidden')}, "
        "w1_param_init=_LINEAR_INIT,",
        "                                             w2w3_param_init=_LINEAR_INIT))"] if "ffn_hidden" in d else []
    return [
        f"FIRST_DENSE_LAYERS, MOE_LAYER_FREQ = {first}, {freq}   # layer i is MoE when i >= first and (i - first) % freq == 0",
        "",
        "",
        "def _planned(attn_backend: str = \"flex\", moe_comm_backend: str = \"standard\") -> Qwen3Model.Config:",
        "    \"\"\"torchtitan/models/qwen3/__init__.py _build_qwen3_moe_layers with the planned dimensions, dense",
        "    layers where the plan has them (a block with feed_forward instead of moe).\"\"\"",
        f"    dim, vocab_size, n_layers, head_dim = {d['hidden']}, {d['vocab']}, {d['layers']}, {d['head_dim']}",
        f"    rope = {rope}",
        "    output_init = _residual_output_init(n_layers)",
        "",
        "    def block(layer_id: int) -> Qwen3TransformerBlock.Config:",
        "        attention = make_gqa_config(",
        f"            dim=dim, n_heads={d['heads']}, n_kv_heads={d['kv_heads']}, head_dim=head_dim,",
        "            wqkv_param_init=_LINEAR_INIT, wo_param_init=output_init,",
        "            inner_attention=get_attention_config(attn_backend), fuse_qkv=True, rope=rope,",
        "            qk_norm=_qwen3_norm(head_dim))",
        *dense,
        "        return Qwen3TransformerBlock.Config(",
        "            attention_norm=_qwen3_norm(dim), ffn_norm=_qwen3_norm(dim), attention=attention,",
        "            moe=make_moe_config(",
        f"                num_experts={e},",
        f"                router=make_router_config(dim=dim, num_experts={e}, gate_param_init=_LINEAR_INIT, top_k={k},",
        "                                          score_func=\"softmax\", route_norm=True),",
        "                routed_experts=make_routed_experts_config(",
        f"                    dim=dim, hidden_dim={ef}, num_experts={e}, top_k={k},",
        "                    param_init=_moe_experts_init(n_layers), comm_backend=moe_comm_backend),",
        f"                shared_experts={shared}))",
        "",
        "    return Qwen3Model.Config(",
        f"        vocab_size=vocab_size, dim=dim, norm=_qwen3_norm(dim), enable_weight_tying={d['tie_embeddings']},",
        f"        tok_embeddings=Embedding.Config(num_embeddings=vocab_size, embedding_dim=dim, param_init={emb}),",
        "        lm_head=Linear.Config(in_features=dim, out_features=vocab_size, param_init=_LINEAR_INIT),",
        "        layers=[block(layer_id) for layer_id in range(n_layers)],",
        "    )"]


FAMILY_IMPORTS = {
    "llama3": ["from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm",
               "from torchtitan.models.common.config_utils import get_attention_config, make_ffn_config, make_gqa_config",
               "from torchtitan.models.llama3 import (",
               "    _EMBEDDING_INIT,", "    _EMBEDDING_SKIP_INIT,", "    _LINEAR_INIT,", "    _NORM_INIT,",
               "    _depth_init,", "    _output_linear_init,", "    llama3_configs,", "    model_registry,", ")",
               "from torchtitan.models.llama3.model import Llama3Model, Llama3TransformerBlock"],
    "qwen3": ["from torchtitan.models.common import CosSinRoPE, Embedding, Linear",
              "from torchtitan.models.common.config_utils import (",
              "    get_attention_config,", "    make_ffn_config,", "    make_gqa_config,", "    make_moe_config,",
              "    make_routed_experts_config,", "    make_router_config,", ")",
              "from torchtitan.models.qwen3 import (",
              "    _EMBEDDING_INIT,", "    _EMBEDDING_SKIP_INIT,", "    _LINEAR_INIT,", "    _moe_experts_init,",
              "    _qwen3_norm,", "    _residual_output_init,", "    model_registry,", "    qwen3_configs,", ")",
              "from torchtitan.models.qwen3.model import Qwen3Model, Qwen3TransformerBlock"],
}


def _spec_lines(flavor: str, fp8: bool) -> list[str]:
    """`config.model_spec = model_registry(...)`, with the float8 converter for fp8 plans."""
    if not fp8:
        return [f"    config.model_spec = model_registry({flavor})"]
    return ["    config.model_spec = model_registry(", f"        {flavor},",
            "        converters=[Float8LinearConverter.Config(filter_fqns=[\"lm_head\"], "
            "model_compile_enabled=False)],", "    )"]


def _planned_module(model, fp8: bool, title: str, seq_len: int) -> str:
    """A config_registry module that builds the planned model in torchtitan's llama3 (dense) or qwen3 (MoE)
    family: it registers a flavor with the planned dimensions (family_configs[FLAVOR], which
    model_registry looks up) and returns the family's Trainer.Config with that model."""
    d = built_shape(model)
    fam = _family(d)
    text, floor = ROPE[fam]
    rope = text.format(hd=d["head_dim"], n=max(floor, seq_len))
    builder = _qwen3_builder(d, rope) if fam == "qwen3" else _llama3_builder(d, rope)
    diffs = model_differences(model)
    flavor = planned_flavor(model)
    doc = (f"Generated by baige-plan for torchtitan=={VERSION}: the config_registry function torchtitan.train loads "
           f"with `--module {CONFIG_MODULE} --config {CONFIG_FUNCTION}` (launch.sh puts this folder on PYTHONPATH). "
           f"torchtitan ships no model of {_get(model, 'name')}'s shape ({_shape_text(_shape(model))}): this module "
           f"builds it with torchtitan's own {fam} family code (blocks, inits, sharding, pipelining), registered as "
           f"flavor {flavor!r}, on {fam}.config_registry.{FAMILY_BASE[fam]}()'s training settings"
           + (" with the float8 converter" if fp8 else "") + f"; every other setting comes from the flags in "
           f"{ARGS_FILE}. What the plan does not record is the family's: RMSNorm, no linear biases, "
           + ("RoPE theta 1e6, q/k RMSNorm and a softmax router with renormalised top-k" if fam == "qwen3" else
              "RoPE theta 500000 with llama scaling") + ". hf_assets_path is a placeholder: put the model's "
           "tokenizer there (token ids below vocab_size).")
    if diffs:
        doc += " Built otherwise than planned (MODEL_DIFFERENCES; the reasons are in " + ARGS_FILE + "): " + \
            "; ".join(f"{x.field} {x.planned} -> {x.built}" for x in diffs) + "."
    imports = list(FAMILY_IMPORTS[fam])
    imports += [f"from torchtitan.models.{fam}.config_registry import {FAMILY_BASE[fam]}",
                "from torchtitan.models.common.config_utils import decoder_vocab_size"]
    if fp8:
        imports.insert(0, "from torchtitan.components.quantization import Float8LinearConverter")
    diff_lines = _differences_lines(diffs)
    return "\n".join([
        f'"""{title}', "", *textwrap.wrap(doc, 100), '"""', "", *imports, "", f"FLAVOR = {flavor!r}",
        "# what this module builds otherwise than the planned model: field -> (planned, built)", *diff_lines, "", "",
        *builder, "", "", f"{fam}_configs[FLAVOR] = _planned   # model_registry(FLAVOR) looks flavors up here", "", "",
        f"def {CONFIG_FUNCTION}():", f"    config = {FAMILY_BASE[fam]}()", *_spec_lines("FLAVOR", fp8),
        "    loss = getattr(config.loss, \"loss_fn\", config.loss)",
        "    loss.global_vocab_size = decoder_vocab_size(config.model_spec)",
        f"    config.hf_assets_path = \"./assets/hf/{_get(model, 'name')}\"", "    return config", ""])

def export(doc: dict) -> Export:
    i = plan_info(doc)
    if (i["opts"].runtime_version or VERSION) == V02:
        return _export_v02(i)
    s, job, model = i["s"], i["job"], i["model"]
    prec = job.get("precision", "bf16")
    if prec == "fp16":
        raise SpecError("inputs.job.precision",
                        f"torchtitan {VERSION} cannot train in fp16: training.mixed_precision_param is bfloat16 or "
                        "float32 and there is no loss scaling (torchtitan/config/configs.py TrainingConfig); "
                        "plan with --precision bf16")
    caveats = [c for c in common_caveats(i) if not c.startswith("free-form layer split")]
    tp, pp, dp, cp, ep = s["tp"], s["pp"], s["dp"], s["cp"], s.get("ep", 1)
    etp, zero, mb, vpp, m = s.get("etp", 1), s["zero"], s["micro_batch"], s.get("vpp", 1), i["m"]
    sp = bool(s.get("sequence_parallel")) and tp > 1
    world = tp * pp * dp * cp

    # model: a shipped flavor by its config_registry function, else a generated config module
    shape = _shape(model)
    f = flavor_for(model)
    files_extra = []
    if f is not None and f.config is not None and prec != "fp8":
        module, config = f.module, f.config
    else:
        module, config = CONFIG_MODULE, CONFIG_FUNCTION
        text = _config_module(f, prec == "fp8", i["title"]) if f is not None else \
            _planned_module(model, prec == "fp8", i["title"], job["seq_len"])
        files_extra.append(ExportFile(f"{CONFIG_MODULE}.py", text))
    caveats += [x.text for x in model_differences(model)]
    if prec == "fp8":
        caveats.append("fp8 = torchtitan's Float8LinearConverter (rowwise, lm_head kept bf16, set in "
                       f"{CONFIG_MODULE}.py): needs torchao and SM89+ GPUs; run eagerly (--compile.no_enable) as "
                       "costed, torchtitan recommends --compile.enable for float8"
                       + ("; routed experts stay bf16 (Float8GroupedExpertsConverter not set)" if "experts" in shape else ""))

    # data parallelism
    if zero == 0:
        rep, shard = dp, 1
    else:
        rep, shard = _hsdp_degrees(s, dp, cp)
        if zero == 1:
            caveats.append(f"torchtitan has no ZeRO-{zero}: exported as FSDP2 full shard (ZeRO-3) over dp={dp}, "
                           "which gathers parameters per micro-batch; the plan's DP traffic and memory do not hold")
    if cp > 1 and zero == 0:
        caveats.append(f"torchtitan FSDP-shards the parameters over the cp={cp} ranks even with "
                       "data_parallel_shard_degree 1 (HSDP: replicate dp, shard cp), not ZeRO-0 as planned")
    if "experts" in shape:
        if etp != (tp if ep == 1 else 1):
            caveats.append(f"torchtitan has no expert tensor-parallel degree: experts run with etp="
                           f"{tp if ep == 1 else 1} (tp when ep=1, else 1), not the plan's etp={etp}")
        if ep > 1 and (shard * cp * tp) % ep:
            caveats.append(f"ep={ep} does not divide data_parallel_shard x cp x tp = {shard * cp * tp}: "
                           "torchtitan's mesh cannot be built")
    elif ep > 1:
        caveats.append(f"ep={ep} on a dense model has no effect in torchtitan")

    # batch: without PP one micro-batch per forward/backward and m accumulation steps; with PP one
    # local batch of m micro-batches per step through the schedule
    local = mb * m if pp > 1 else mb
    args: list[tuple[str, object]] = [("--module", module), ("--config", config),
                                      ("--training.local_batch_size", local),
                                      ("--training.global_batch_size", i["gb"]),
                                      ("--training.seq_len", job["seq_len"]),
                                      ("--training.dtype", "float32"),
                                      ("--training.mixed_precision_param", "float32" if prec == "fp32" else "bfloat16"),
                                      ("--training.mixed_precision_reduce", "float32")]
    # costed eager (execution "eager"): 0.3.0 would capture forward+backward in a CUDA graph with pp == 1 and
    # ep == 1 (trainer.py wrap_with_cuda_graph), and pp > 1 or ep > 1 need it off anyway
    args.append(("--training.disable_cuda_graphs", None))
    args += [("--parallelism.data_parallel_replicate_degree", rep), ("--parallelism.data_parallel_shard_degree", shard),
             # zero 2 = SHARD_GRAD_OP: parameters stay gathered from forward to backward (RuntimeSpec.fsdp_zero2)
             ("--parallelism.fsdp_reshard_after_forward", "never" if zero == 2 else "default"),
             ("--parallelism.tensor_parallel_degree", tp),
             ("--parallelism.enable_sequence_parallel" if sp else "--parallelism.no_enable_sequence_parallel", None),
             ("--parallelism.context_parallel_degree", cp), ("--parallelism.expert_parallel_degree", ep),
             ("--parallelism.pipeline_parallel_degree", pp),
             ("--parallelism.pipeline_parallel_schedule", "Interleaved1F1B" if vpp > 1 else "1F1B"),
             ("--parallelism.pipeline_parallel_microbatch_size", mb)]
    if pp > 1:
        if shape["tie_embeddings"]:
            caveats.append(f"tied embeddings with pp={pp}: torchtitan's Decoder.Config.update_from_config raises "
                           "NotImplementedError (weight tying with pipeline parallelism)")
        counts = list(i["counts"])
        if vpp > 1:
            L = sum(counts)
            if len(set(counts)) > 1 or L % (pp * vpp):
                caveats.append(f"interleaving over an uneven split {counts} (vpp={vpp}) is not expressible: "
                               f"exported as {pp * vpp} virtual stages of {L // (pp * vpp)} layers")
            virtual = [L // (pp * vpp)] * (pp * vpp)
        else:
            virtual = counts
        if len(set(virtual)) == 1:
            args += [("--parallelism.pipeline_parallel_layers_per_stage", virtual[0]),
                     ("--parallelism.pipeline_parallel_first_stage_less_layers", 0),
                     ("--parallelism.pipeline_parallel_last_stage_less_layers", 0)]
        else:
            args.append(("--parallelism.module_fqns_per_model_part",
                         " ".join(",".join(mods) for mods in _stage_modules(virtual))))
        if zero >= 3 and vpp > MAX_ACTIVE_STAGES:
            caveats.append(f"with vpp={vpp} > {MAX_ACTIVE_STAGES} Interleaved1F1B reshards and re-gathers FSDP "
                           "stages within the step (torch pipelining keeps 3 stages unsharded): more all-gathers "
                           "than the plan's one per step")
        if vpp == 1 and m < pp:
            caveats.append(f"Schedule1F1B needs micro-batches ({m}) >= pp ({pp}): torch.distributed.pipelining "
                           "will refuse this schedule")
    args += [("--compile.no_enable", None), ("--compile.no_enable_async_tensor_parallel", None),
             # llama3/qwen3 config_registry functions profile every 100 steps (Profiler.Config enable_profiling)
             ("--profiler.no_enable_profiling", None)]

    # recompute: "selective" is torchtitan's op-level SAC (SelectiveAC), as costed (op_sac_recomputed)
    ac = s.get("recompute", "none")

    lines = [f"# {i['title']}",
             f"# {RUNTIME.title}: torchtitan=={VERSION} (torch=={TORCH_VERSION}) torchtitan.train arguments,",
             "# one per line; launch.sh passes the flags in order, then the activation-checkpoint subcommand",
             f"# world = tp {tp} x pp {pp} x dp {dp} x cp {cp} = {world} ranks; {m} micro-batches of {mb} per "
             f"replica per step",
             "# as costed: eager (--compile.no_enable), no CUDA graphs (--training.disable_cuda_graphs), bf16 "
             "mixed precision through FSDP2's MixedPrecisionPolicy (installed with every data-parallel layout in "
             "0.3.0); attention: 0.3.0 language models always mask per document (block_causal FlexAttention, "
             "models/common/config_utils.py get_attention_config), the plan costs causal attention over the "
             "whole sequence: an upper bound when documents are packed"]
    lines += [f"# cannot express: {c}" for c in caveats]
    lines += [k if v is None else f"{k} {v}" for k, v in args]
    lines.append(f"activation-checkpoint:{ac}")

    groups = i["cluster"].get("groups", [])
    g0 = next((g for g in groups if g["name"] == i["stage_groups"][0]), groups[0] if groups else None)
    nproc = g0["devices_per_node"] if g0 else world
    nnodes = max(1, -(-world // nproc))
    if world % nproc:
        caveats.append(f"world {world} is not a whole number of {nproc}-device nodes; launch.sh starts "
                       f"{nnodes} x {nproc} ranks")
    files = [ExportFile(ARGS_FILE, "\n".join(lines) + "\n"),
             ExportFile("launch.sh", _launch(i["title"], nnodes, nproc, bool(files_extra), i["opts"].mock_data)),
             hostfile_file(i, "one line per node (placeholder names: replace with yours); "
                           "launch.sh rendezvouses at the first one", fmt="plain"),
             slurm_file(i, nnodes=nnodes, gpus=nproc, runtime="torchtitan", data_kw=DATA_HELP),
             *files_extra]
    return Export(tuple(files), tuple(caveats))


# The data variables (exports/_common.py data_lines) in torchtitan's terms: a `datasets.load_dataset(PATH,
# split="train")` source with a "text" column, read through the c4_test loader (hf_datasets/text_datasets.py
# DATASETS: the "c4" entry would load PATH with name="en"); mock data is the c4 sample of a torchtitan checkout.
DATA_HELP = {"data": "a Hugging Face datasets folder or hub name with a text column (load_dataset(PATH, "
                     "split=train): torchtitan's dataset_path, read by its c4_test loader)",
             "tokenizer": "the model's Hugging Face tokenizer folder (tokenizer.json: torchtitan's hf_assets_path)",
             "mock": "the c4_test sample of a torchtitan checkout (TORCHTITAN_ROOT/tests/assets; tokenizer "
                     "default TORCHTITAN_ROOT/tests/assets/tokenizer)"}


def versions(version: str) -> tuple[tuple[VersionCheck, ...], tuple[tuple[str, str, str], ...]]:
    """The packages launch.sh accepts for an export written for torchtitan `version`, and the source probes that
    tell a checkout of main (which still reports 0.2.2 in assets/version.txt but renamed the batch flags:
    training.num_tokens_per_microbatch_per_dp_rank ...) from the release."""
    if version == V02:
        return ((VersionCheck("torchtitan", "0.2.0", "0.3", dists=("torchtitan",)),
                 VersionCheck("torch", "2.11", "2.13", dists=("torch",))),
                (("torchtitan/config/job_config.py", "local_batch_size",
                  "this torchtitan has no 0.2.x JobConfig with training.local_batch_size (a checkout of main or "
                  "0.3.x): export with --runtime-version 0.3.0 for a 0.3.x release"),))
    return ((VersionCheck("torchtitan", "0.3.0", "0.4", dists=("torchtitan",)),
             VersionCheck("torch", "2.14", dists=("torch",))),
            (("torchtitan/config/configs.py", "local_batch_size",
              "this torchtitan renamed training.local_batch_size / global_batch_size / seq_len and "
              "parallelism.pipeline_parallel_microbatch_size (main after 0.3.0); the export writes 0.3.0's names"),))


def _data_flags(version: str) -> list[str]:
    """Bash lines building DATA_FLAGS from the data variables, in the flag names of `version`."""
    ds, tok, dump = (("--training.dataset", "--model.hf_assets_path", "--job.dump_folder") if version == V02 else
                     ("--dataloader.dataset", "--hf_assets_path", "--dump_folder"))
    return [f'if [ "${MOCK_VAR}" = 1 ]; then',
            '  : "${TORCHTITAN_ROOT:?set TORCHTITAN_ROOT to a torchtitan checkout: mock data is its '
            'tests/assets/c4_test sample}"',
            f'  DATA_FLAGS=({ds} c4_test {ds}_path "$TORCHTITAN_ROOT/tests/assets/c4_test" '
            f'{tok} "${{{TOKENIZER_VAR}:-$TORCHTITAN_ROOT/tests/assets/tokenizer}}")',
            "else",
            f'  DATA_FLAGS=({ds} c4_test {ds}_path "${DATA_VAR}" {tok} "${TOKENIZER_VAR}")',
            "fi",
            "# logs, traces and checkpoints: BAIGE_OUTPUT_DIR (default: outputs/ beside this script)",
            f'DATA_FLAGS+=(--training.steps "${ITERS_VAR}" {dump} "${{BAIGE_OUTPUT_DIR:-$HERE/outputs}}")']


def _launch(title: str, nnodes: int, nproc: int, module: bool, mock: bool = False, version: str = VERSION) -> str:
    checks, probes = versions(version)
    torch_pin = TORCH_VERSION if version == VERSION else "2.11"
    how = (f"--module {CONFIG_MODULE}" if version == VERSION else f"--experimental.custom_import {CONFIG_MODULE}")
    return "\n".join([
        "#!/usr/bin/env bash",
        f"# {title}",
        f"# torchtitan=={version} (torch=={torch_pin}): run this same script on each of the {nnodes} node(s) with",
        "# NODE_RANK=0..NNODES-1; they rendezvous at MASTER_ADDR (default: "
        + ("localhost: one node)." if nnodes == 1 else "the first host in ./hostfile)."),
        "# Extra torchtitan flags given to this script go after the exported ones (tyro: the last one wins).",
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        f"NNODES={nnodes}",
        f"NPROC_PER_NODE={nproc}",
        'NODE_RANK="${NODE_RANK:-0}"',
        # one node: torchrun's c10d rendezvous at localhost (the hostfile's placeholder name does not resolve)
        'MASTER_ADDR="${MASTER_ADDR:-localhost}"' if nnodes == 1 else
        "MASTER_ADDR=\"${MASTER_ADDR:-$(awk '!/^#/ && NF {print $1; exit}' \"$HERE/hostfile\")}\"",
        'MASTER_PORT="${MASTER_PORT:-29500}"',
        *data_lines(**DATA_HELP, mock_default=mock),
        *version_check_lines(f"torchtitan=={version} on torch {checks[1].range[len('torch'):]}", checks, probes),
        "flags=(); subcommands=()",
        "while read -r -a words; do",
        '  [ "${#words[@]}" -eq 0 ] && continue',
        '  case "${words[0]}" in',
        '    "#"*) ;;',
        '    -*) flags+=("${words[@]}") ;;',
        '    *) subcommands+=("${words[@]}") ;;',
        "  esac",
        f'done < "$HERE/{ARGS_FILE}"',
        *_data_flags(version),
        *(['export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"   '
           f'# {CONFIG_MODULE}.py ({how})'] if module else []),
        'export PYTORCH_ALLOC_CONF="${PYTORCH_ALLOC_CONF:-expandable_segments:True}"',
        'exec torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" --node-rank "$NODE_RANK" \\',
        '  --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "${RDZV_ID:-baige-plan}" \\',
        '  -m torchtitan.train "${flags[@]}" "${DATA_FLAGS[@]}" "$@" "${subcommands[@]}"', ""])


# -- torchtitan 0.2.x (torch 2.11 / 2.12 stacks): JobConfig flags, no config_registry -------------------------
# Read at the v0.2.2 tag (73a0e697, 2026-02-20): torchtitan/config/job_config.py (JobConfig: job, model, training,
# parallelism, activation_checkpoint, experimental sections; tyro flags `--section.field value`, list[str] values
# comma-separated: config/manager.py register_tyro_rules), models/llama3/infra/parallelize.py parallelize_llama.


def refusal_v02(s: dict, prec: str, world: int) -> tuple[str, str] | None:
    """(field, reason) when torchtitan 0.2.x does not run the plan as costed. parallelize_llama (and qwen3's)
    applies FSDP2 -- and with it the MixedPrecisionPolicy -- only when parallel_dims.fsdp_enabled
    (dp_shard > 1 or cp > 1); replicated data parallelism alone is DDP, which raises "DDP has not supported
    > 1D parallelism" with any other dimension; without FSDP, TP or PP train in fp32, and DDP or one device
    in bf16 through torch.autocast (distributed/utils.py maybe_enable_amp), which the plan does not cost."""
    dp, cp, zero = s["dp"], s.get("cp", 1), s.get("zero", 0)
    shard = dp if zero >= 2 else 1
    if zero == 0 and dp > 1 and world != dp:
        return ("strategy.zero", f"torchtitan {V02} runs replicated data parallelism (zero=0, dp={dp}) as DDP, which "
                f"refuses any other parallelism (tp={s['tp']}, pp={s['pp']}, cp={cp}; models/llama3/infra/"
                "parallelize.py: \"DDP has not supported > 1D parallelism\"): plan with --zero 3, or export for "
                f"torchtitan {VERSION}")
    if shard == 1 and cp == 1 and prec in ("bf16", "fp8") and (s["tp"] > 1 or s["pp"] > 1):
        return ("inputs.job.precision", f"torchtitan {V02} sets {prec} mixed precision only through FSDP "
                f"(data_parallel_shard_degree > 1 or cp > 1); this plan (zero={zero}, dp={dp}, cp={cp}) would "
                "train in fp32, which it was not costed for: plan with --precision fp32, or --zero 3 with dp > 1, "
                f"or export for torchtitan {VERSION}")
    if shard == 1 and cp == 1 and prec in ("bf16", "fp8"):
        # DDP or one device: distributed/utils.py maybe_enable_amp wraps the step in torch.autocast
        return ("inputs.job.precision", f"torchtitan {V02} runs this plan (zero={zero}, dp={dp}, no tp, pp or cp: "
                f"{'DDP' if dp > 1 else 'one device'}) in {prec} through torch.autocast (distributed/utils.py "
                "maybe_enable_amp): fp32 weights cast per op and kept cast through the forward, not the FSDP "
                "MixedPrecisionPolicy (bf16 parameters) the plan was costed with: plan with --zero 3 with dp > 1, "
                f"or export for torchtitan {VERSION}")
    if s.get("ep", 1) > 1 and s.get("etp", 1) not in (1, s["tp"]):
        return ("strategy.etp", f"torchtitan {V02} runs expert tensor parallelism 1 or tp={s['tp']}, not "
                f"etp={s['etp']}")
    return None


def _v02_module(model, title: str) -> str:
    """An --experimental.custom_import module registering the planned dense model as a llama3 flavor of
    torchtitan 0.2.x (models/llama3/__init__.py llama3_args, looked up by train.py with --model.flavor)."""
    d = built_shape(model)
    base = int(2 * 4 * d["hidden"] / 3)     # models/llama3/model/model.py FeedForward: int(2 * 4 * dim / 3)
    diffs = model_differences(model)
    flavor = planned_flavor(model)
    doc = (f"Generated by baige-plan for torchtitan=={V02}: imported by torchtitan.train through "
           f"--experimental.custom_import {CONFIG_MODULE} (launch.sh puts this folder on PYTHONPATH); it registers "
           f"{_get(model, 'name')}'s shape ({_shape_text(_shape(model))}) as llama3 flavor {flavor!r}: RMSNorm, no "
           "linear biases, RoPE theta 500000 (what the plan does not record is Llama 3's). The SwiGLU width is "
           "exact: multiple_of = the width and ffn_dim_multiplier = width / int(8 * dim / 3).")
    if diffs:
        doc += " Built otherwise than planned: " + "; ".join(f"{x.field} {x.planned} -> {x.built}" for x in diffs) + "."
    diff_lines = _differences_lines(diffs)
    return "\n".join([
        f'"""{title}', "", *textwrap.wrap(doc, 100), '"""', "",
        "from torchtitan.models.llama3 import TransformerModelArgs, llama3_args", "", f"FLAVOR = {flavor!r}",
        "# what this module builds otherwise than the planned model: field -> (planned, built)", *diff_lines, "",
        "llama3_args[FLAVOR] = TransformerModelArgs(",
        f"    dim={d['hidden']}, n_layers={d['layers']}, n_heads={d['heads']}, n_kv_heads={d['kv_heads']},",
        f"    vocab_size={d['vocab']}, multiple_of={d['ffn_hidden']}, ffn_dim_multiplier={d['ffn_hidden']} / {base},",
        "    rope_theta=500000,", ")", ""])


def _v02_moe_refusal(d: dict, pp: int) -> str | None:
    """Why torchtitan 0.2.2's qwen3 family cannot build or run an MoE model as planned, or None."""
    if d["first_dense_layers"] or d["layer_freq"] > 1:
        return (f"dense layers between the MoE ones (first_dense_layers={d['first_dense_layers']}, layer_freq="
                f"{d['layer_freq']}): 0.2.x qwen3 makes every layer MoE when moe_enabled (models/qwen3/model/"
                "model.py TransformerBlock)")
    if pp > 1:
        return f"pp={pp}: 0.2.x qwen3's TrainSpec has no pipelining_fn (models/qwen3/__init__.py get_train_spec)"
    return None


# Qwen3ModelArgs / MoEArgs fields of torchtitan 0.2.2 that take the planned value (models/qwen3/model/args.py
# rope_theta, norm_eps, qk_norm; models/moe/moe.py MoEArgs.route_norm); the rest is the qwen3 family's build
V02_QWEN3_SET = ("rope_theta", "norm_eps", "qk_norm", "moe.norm_topk_prob")


def _v02_moe_differences(model) -> tuple[Difference, ...]:
    return tuple(x for x in model_differences(model, V02) if x.field not in V02_QWEN3_SET)


def _v02_moe_module(model, title: str) -> str:
    """An --experimental.custom_import module registering the planned MoE model as a qwen3 flavor of
    torchtitan 0.2.x (models/qwen3/__init__.py qwen3_args, looked up by train.py with --model.flavor), built
    as that file's own 30B-A3B flavor is (every layer MoE, softmax router, route_scale 1, scores applied
    after the experts, MoEArgs' other defaults: grouped mm, load_balance_coeff), with the planned RoPE theta,
    norm epsilon, q/k norm and top-k renormalisation where the plan records them (V02_QWEN3_SET)."""
    d = built_shape(model)
    diffs = _v02_moe_differences(model)
    flavor = planned_flavor(model)
    # the planned value where the plan records one, else the qwen3 family's build (torchtitan_build.FAMILY_BUILD)
    fam = FAMILY_BUILD["qwen3"]
    theta = _get(model, "rope_theta") or fam["rope_theta"]
    eps = _get(model, "norm_eps") or fam["norm_eps"]
    qk = _get(model, "qk_norm")
    qk = fam["qk_norm"] if qk is None else bool(qk)
    rn = _get(_get(model, "moe"), "norm_topk_prob")
    rn = fam["moe.norm_topk_prob"] if rn is None else bool(rn)
    doc = (f"Generated by baige-plan for torchtitan=={V02}: imported by torchtitan.train through "
           f"--experimental.custom_import {CONFIG_MODULE} (launch.sh puts this folder on PYTHONPATH); it registers "
           f"{_get(model, 'name')}'s shape ({_shape_text(_shape(model))}) as qwen3 flavor {flavor!r}, built as "
           "torchtitan's own 30B-A3B flavor (every layer MoE, softmax router, no linear biases) with the planned "
           f"RoPE theta {theta:g}, RMSNorm eps {eps:g}, q/k norm {qk} and top-k renormalisation {rn}.")
    if diffs:
        doc += " Built otherwise than planned: " + "; ".join(f"{x.field} {x.planned} -> {x.built}" for x in diffs) + "."
    diff_lines = _differences_lines(diffs)
    return "\n".join([
        f'"""{title}', "", *textwrap.wrap(doc, 100), '"""', "",
        "from torchtitan.models.moe import MoEArgs", "from torchtitan.models.qwen3 import Qwen3ModelArgs, qwen3_args", "",
        f"FLAVOR = {flavor!r}",
        "# what this module builds otherwise than the planned model: field -> (planned, built)", *diff_lines, "",
        "qwen3_args[FLAVOR] = Qwen3ModelArgs(",
        f"    vocab_size={d['vocab']}, head_dim={d['head_dim']}, dim={d['hidden']}, n_layers={d['layers']},",
        f"    n_heads={d['heads']}, n_kv_heads={d['kv_heads']}, qk_norm={qk}, hidden_dim={d['expert_ffn_hidden']},",
        f"    rope_theta={theta:g}, norm_eps={eps:g}, enable_weight_tying={d['tie_embeddings']},",
        f"    moe_enabled=True, moe_inter_dim={d['expert_ffn_hidden']},",
        "    moe_args=MoEArgs(",
        f"        num_experts={d['experts']}, num_shared_experts={d['shared_experts']}, top_k={d['top_k']},",
        f"        score_func=\"softmax\", route_norm={rn}, route_scale=1.0, score_before_experts=False,",
        "    ),", ")", ""])


def _export_v02(i: dict) -> Export:
    s, job, model = i["s"], i["job"], i["model"]
    prec = job.get("precision", "bf16")
    if prec == "fp16":
        raise SpecError("inputs.job.precision", f"torchtitan {V02} cannot train in fp16 (training.mixed_precision_param "
                        "is bfloat16 or float32, no loss scaling)")
    tp, pp, dp, cp, ep = s["tp"], s["pp"], s["dp"], s.get("cp", 1), s.get("ep", 1)
    etp, zero, mb, vpp, m = s.get("etp", 1), s.get("zero", 0), s["micro_batch"], s.get("vpp", 1), i["m"]
    world = tp * pp * dp * cp
    refused = refusal_v02(s, prec, world)
    if refused:
        raise SpecError(*refused)
    caveats = [c for c in common_caveats(i) if not c.startswith("free-form layer split")]
    shape = _shape(model)
    f = flavor_for(model)
    extra: list[ExportFile] = []
    if f is not None:
        margs = [("--model.name", f.module), ("--model.flavor", f.flavor)]
    else:
        why = None
        if "experts" in shape:
            why = _v02_moe_refusal(shape, pp)
        elif shape["tie_embeddings"]:
            why = "tied embeddings (0.2.x llama3 has no weight tying)"
        elif shape["head_dim"] * shape["heads"] != shape["hidden"]:
            why = f"head_dim {shape['head_dim']} != hidden / heads (0.2.x llama3 derives it)"
        if why:
            raise SpecError("inputs.model", f"torchtitan {V02} cannot build {model.get('name')}: {why}; export for "
                            f"torchtitan {VERSION} (--runtime-version {VERSION})")
        moe = "experts" in shape
        margs = [("--experimental.custom_import", CONFIG_MODULE), ("--model.name", "qwen3" if moe else "llama3"),
                 ("--model.flavor", planned_flavor(model))]
        extra.append(ExportFile(f"{CONFIG_MODULE}.py", (_v02_moe_module if moe else _v02_module)(model, i["title"])))
        caveats += [x.text for x in (_v02_moe_differences(model) if moe else model_differences(model, V02))]
    if prec == "fp8":
        margs += [("--model.converters", "quantize.linear.float8"),
                  ("--quantize.linear.float8.recipe_name", "rowwise"),
                  ("--quantize.linear.float8.filter_fqns", "output")]
        caveats.append("fp8 = torchtitan's quantize.linear.float8 converter (rowwise, output layer kept bf16): needs "
                       "torchao and SM89+ GPUs; run eagerly as costed")
    rep, shard = (dp, 1) if zero == 0 else _hsdp_degrees(s, dp, cp)
    if zero == 1:
        caveats.append(f"torchtitan has no ZeRO-1: exported as FSDP2 full shard (ZeRO-3) over dp={dp}")
    if tp > 1 and not s.get("sequence_parallel"):
        caveats.append(f"torchtitan {V02} always runs sequence parallelism with tp={tp}; the plan has it off")
    if "experts" not in shape and ep > 1:
        caveats.append(f"ep={ep} on a dense model has no effect in torchtitan")
    local = mb * m if pp > 1 else mb
    args: list[tuple[str, object]] = margs + [
        ("--training.local_batch_size", local), ("--training.global_batch_size", i["gb"]),
        ("--training.seq_len", job["seq_len"]), ("--training.dtype", "float32"),
        ("--training.mixed_precision_param", "float32" if prec == "fp32" else "bfloat16"),
        ("--training.mixed_precision_reduce", "float32"),
        ("--parallelism.data_parallel_replicate_degree", rep), ("--parallelism.data_parallel_shard_degree", shard),
        ("--parallelism.fsdp_reshard_after_forward", "never" if zero == 2 else "default"),
        ("--parallelism.tensor_parallel_degree", tp), ("--parallelism.context_parallel_degree", cp),
        ("--parallelism.expert_parallel_degree", ep),
        ("--parallelism.expert_tensor_parallel_degree", etp if ep > 1 else 1),
        ("--parallelism.pipeline_parallel_degree", pp),
        ("--parallelism.pipeline_parallel_schedule", "Interleaved1F1B" if vpp > 1 else "1F1B"),
        ("--parallelism.pipeline_parallel_microbatch_size", mb)]
    if pp > 1:
        counts = list(i["counts"])
        L = sum(counts)
        virtual = [L // (pp * vpp)] * (pp * vpp) if vpp > 1 else counts
        if vpp > 1 and (len(set(counts)) > 1 or L % (pp * vpp)):
            caveats.append(f"interleaving over an uneven split {counts} (vpp={vpp}) is not expressible: exported as "
                           f"{pp * vpp} virtual stages of {L // (pp * vpp)} layers")
        if len(set(virtual)) == 1:
            args += [("--parallelism.pipeline_parallel_layers_per_stage", virtual[0]),
                     ("--parallelism.pipeline_parallel_first_stage_less_layers", 0),
                     ("--parallelism.pipeline_parallel_last_stage_less_layers", 0)]
        else:
            parts = [[("output" if x == "lm_head" else x) for x in mods] for mods in _stage_modules(virtual)]
            args.append(("--parallelism.module_fqns_per_model_part", " ".join(",".join(p) for p in parts)))
        if vpp == 1 and m < pp:
            caveats.append(f"Schedule1F1B needs micro-batches ({m}) >= pp ({pp})")
    ac = s.get("recompute", "none")
    args.append(("--activation_checkpoint.mode", ac))
    if ac == "selective":
        args.append(("--activation_checkpoint.selective_ac_option", "op"))   # op-level SAC, as costed
    args.append(("--metrics.log_freq", 1))
    lines = [f"# {i['title']}",
             f"# {RUNTIME.title}: torchtitan=={V02} (torch 2.11 / 2.12 stacks) torchtitan.train arguments, one per "
             "line (JobConfig flags; launch.sh passes them in order)",
             f"# world = tp {tp} x pp {pp} x dp {dp} x cp {cp} = {world} ranks; {m} micro-batches of {mb} per "
             "replica per step; eager (no torch.compile), SDPA causal attention"]
    lines += [f"# cannot express: {c}" for c in caveats]
    lines += [k if v is None else f"{k} {v}" for k, v in args]
    groups = i["cluster"].get("groups", [])
    nproc = groups[0]["devices_per_node"] if groups else world
    nnodes = max(1, -(-world // nproc))
    files = [ExportFile(ARGS_FILE, "\n".join(lines) + "\n"),
             ExportFile("launch.sh", _launch(i["title"], nnodes, nproc, bool(extra), i["opts"].mock_data, V02)),
             hostfile_file(i, "one line per node (placeholder names: replace with yours); "
                           "launch.sh rendezvouses at the first one", fmt="plain"),
             slurm_file(i, nnodes=nnodes, gpus=nproc, runtime=f"torchtitan-{V02}", data_kw=DATA_HELP),
             *extra]
    return Export(tuple(files), tuple(caveats))
