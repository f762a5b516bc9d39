"""Megatron-core layer spec written by baige-plan (runtime megatron-local): the local (no Transformer
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
