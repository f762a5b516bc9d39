"""megatron-local: plan -> launch files (export). Its execution semantics, the RuntimeSpec the cost model and the
search read, are in baige_plan/specs/runtimes/megatron_local.py."""

from __future__ import annotations

from baige_plan.exports import megatron as _mg
from baige_plan.exports._common import Export, ExportFile, arg_lines, plan_info
from baige_plan.specs.runtimes.megatron_local import (
    RUNTIME,
    VERSION,
)

# the switches a TE-less stack needs (issue 17: what made the exports train on torch 2.11 without TE)
LOCAL_SWITCHES: tuple[tuple[str, object], ...] = (
    ("--transformer-impl", "local"), ("--no-persist-layer-norm", None),
    ("--no-gradient-accumulation-fusion", None), ("--no-rope-fusion", None))
SPEC_MODULE = "baige_sdpa_spec"
SPEC_NAME = "layer_spec"

# Megatron layer spec for attention through torch SDPA (written beside the arguments; module docstring)
SDPA_SPEC = '''"""Megatron-core layer spec written by baige-plan (runtime megatron-local): the local (no Transformer
Engine) GPT layer of megatron/core/models/gpt/gpt_layer_specs.py get_gpt_layer_local_spec, with the attention
core computed by torch.nn.functional.scaled_dot_product_attention (flash backend) instead of Megatron's
unfused DotProductAttention. Used through `--spec baige_sdpa_spec layer_spec` with this folder on PYTHONPATH
(launch.sh); built when gpt_builders imports it, after Megatron has parsed its arguments."""

import dataclasses

import torch.nn.functional as F
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.training import get_args


class SdpaDotProductAttention(DotProductAttention):
    """DotProductAttention's contract ([s, b, heads, dim] in, [s, b, heads * dim] out), causal, one SDPA call."""

    def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                packed_seq_params=None, **kwargs):
        assert packed_seq_params is None and attention_bias is None, "SDPA core: no packed sequences or bias"
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        if k.size(1) != q.size(1):      # grouped-query attention: repeat the key/value heads, as Megatron's core does
            k = k.repeat_interleave(q.size(1) // k.size(1), dim=1)
            v = v.repeat_interleave(q.size(1) // v.size(1), dim=1)
        p = self.config.attention_dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True, scale=self.softmax_scale)
        return out.permute(2, 0, 1, 3).reshape(out.size(2), out.size(0), -1)


def _layer_spec():
    a = get_args()
    spec = get_gpt_layer_local_spec(num_experts=getattr(a, "num_experts", None),
                                    moe_grouped_gemm=getattr(a, "moe_grouped_gemm", False),
                                    qk_layernorm=getattr(a, "qk_layernorm", False),
                                    multi_latent_attention=getattr(a, "multi_latent_attention", False),
                                    normalization=getattr(a, "normalization", None),
                                    qk_l2_norm=getattr(a, "qk_l2_norm", False))
    attn = spec.submodules.self_attention
    attn = dataclasses.replace(attn, submodules=dataclasses.replace(attn.submodules,
                                                                    core_attention=SdpaDotProductAttention))
    return dataclasses.replace(spec, submodules=dataclasses.replace(spec.submodules, self_attention=attn))


layer_spec = _layer_spec()
'''


def local_args(doc: dict) -> tuple[list[tuple[str, object]], list[str], list[str]]:
    """megatron_args of the plan with the TE-less switches and the attention choice (module docstring); the
    'needs Transformer Engine' note of the TE export is replaced by what this one runs."""
    a, caveats, notes = _mg.megatron_args(doc)
    s = plan_info(doc)["s"]
    notes = [n for n in notes if not n.startswith("needs Transformer Engine")]
    a = [kv for kv in a if kv[0] not in ("--attention-backend", "--tp-comm-overlap", "--fp8-param-gather")]
    a += list(LOCAL_SWITCHES)
    if s.get("attention") == "standard":
        a += [("--attention-backend", "unfused"), ("--no-masked-softmax-fusion", None)]
        notes.append("no Transformer Engine: --transformer-impl local (Megatron's own layers, unfused attention "
                     "core with torch softmax: --no-masked-softmax-fusion), torch RMSNorm/LayerNorm, eager RoPE, "
                     "gradient accumulation outside the GEMM, torch AdamW when apex is absent")
    else:
        a.append(("--spec", f"{SPEC_MODULE} {SPEC_NAME}"))
        notes.append(f"no Transformer Engine: --transformer-impl local (Megatron's own layers) with attention through "
                     f"torch scaled_dot_product_attention ({SPEC_MODULE}.py beside this file, on PYTHONPATH from "
                     "launch.sh), torch RMSNorm/LayerNorm, eager RoPE, gradient accumulation outside the GEMM, torch "
                     "AdamW when apex is absent")
    return a, caveats, notes


def _spec_args(lines: list[str]) -> list[str]:
    """--spec takes two words (module, name; nargs='*'): arg_lines quotes a value as one word, so its line is
    written unquoted (both names are plain identifiers; launch.sh's eval splits them)."""
    return [f"--spec {SPEC_MODULE} {SPEC_NAME}" if ln.startswith("--spec ") else ln for ln in lines]


def _launch_sh(text: str, sdpa: bool) -> str:
    """The TE export's launch.sh (exports/megatron.py), naming this stack, with the export folder on PYTHONPATH
    for the SDPA layer spec."""
    text = text.replace(f"megatron-core=={VERSION};", f"megatron-core=={VERSION}, no Transformer Engine;", 1)
    if sdpa:
        anchor = 'ARGS_FILE="'
        line = ('# the SDPA attention layer spec (--spec baige_sdpa_spec layer_spec) lives beside this script\n'
                'export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"\n')
        k = text.find(anchor)
        text = text[:k] + line + text[k:] if k >= 0 else text + line
    return text


def export(doc: dict) -> Export:
    """The TE export's files (launch.sh, hostfile, SLURM, ...: exports/megatron.py export) with this stack's
    arguments in megatron_args.txt, launch.sh naming it, and the SDPA layer spec beside them."""
    i = plan_info(doc)
    args, caveats, notes = local_args(doc)
    sdpa = i["s"].get("attention") != "standard"
    lines = [f"# {i['title']}",
             f"# {RUNTIME.title}: megatron-core=={VERSION} (PyPI), pretrain_gpt.py arguments "
             f"(Megatron-LM {_mg.MEGATRON_LM_REF}); one argument per line, shell-quoted"]
    lines += [f"# {n}" for n in notes]
    lines += [f"# cannot express: {c}" for c in caveats]
    lines += _spec_args(arg_lines(args))
    files = []
    for f in _mg.export(doc).files:
        if f.name == "megatron_args.txt":
            f = ExportFile(f.name, "\n".join(lines) + "\n")
        elif f.name == "launch.sh":
            f = ExportFile(f.name, _launch_sh(f.text, sdpa))
        files.append(f)
    if sdpa:
        files.append(ExportFile(f"{SPEC_MODULE}.py", SDPA_SPEC))
    return Export(tuple(files), tuple(caveats))
