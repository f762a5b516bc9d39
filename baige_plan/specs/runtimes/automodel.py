"""NVIDIA NeMo Automodel (PyTorch FSDP2 + EP/CP/TP on Hugging Face or its own model classes): the runtime of the
Automodel performance-summary runs. Not offered to `plan` (no export): the backtest costs its published runs as
they executed.

It executes as torchtitan does (FSDP2 fully_shard per block with prefetch, torch.distributed context parallel,
expert parallelism with grouped GEMMs), so it is torchtitan's RuntimeSpec with one difference in what it
allocates: the model is built in bf16 and its parameters are their own master (MemorySemantics master
"params16"), where torchtitan keeps fp32 parameters and gathers bf16 copies:
- NeMoAutoModelForCausalLM.from_config / from_pretrained: torch_dtype "auto" -> torch.bfloat16
  (nemo_automodel/_transformers/auto_model.py @ ad529835, `dtype_from_str(torch_dtype) if torch_dtype != "auto"
  else torch.bfloat16`); the benchmark recipes pass `torch_dtype: bf16` or nothing;
- FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16) by default
  (nemo_automodel/components/distributed/config.py FSDP2Config.__post_init__ @ ad529835): 2-byte gradients and
  reduce-scatters;
- optimizer states as the recipe's optimizer allocates them: torch.optim.Adam keeps m and v in the parameter
  dtype (4 B per parameter, the default here: examples/llm_benchmark/qwen/qwen3_moe_30b_te_deepep.yaml), Transformer
  Engine FusedAdam keeps fp32 m and v (8 B: the row states `optimizer_bytes_per_param: 8`,
  examples/llm_benchmark/llama3_3/custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml).
"""

from __future__ import annotations

from dataclasses import replace

from baige_plan.specs.runtimes import torchtitan

VERSION = "ad529835"   # NVIDIA-NeMo/Automodel commit of the benchmark recipes read (2026-04)

MEMORY = replace(
    torchtitan.MEMORY,
    master="params16",
    zero3_reduce_bytes=2,
    pipeline_grad_bytes=2,
    sources=("nemo_automodel/_transformers/auto_model.py @ ad529835: torch_dtype auto -> bfloat16",
             "nemo_automodel/components/distributed/config.py @ ad529835: MixedPrecisionPolicy(param_dtype=bf16, "
             "reduce_dtype=bf16)"),
)

RUNTIME = replace(
    torchtitan.RUNTIME,
    name="automodel",
    title="NeMo Automodel (FSDP2 with bf16 parameters; backtest only)",
    package="nemo_automodel",
    version=VERSION,
    memory=MEMORY,
    # context parallelism through torch's context_parallel with SDPA (the benchmark recipes set attn_implementation
    # sdpa "required for cp>1"): PyTorch's ring attention (cost/cp.py "torch_ring")
    cp_comm="torch_ring",
)
