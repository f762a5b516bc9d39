"""fp8 training as Transformer Engine runs it: the quantisation traffic of its scaling recipes.

Every fp8 GEMM input is quantised in the forward (activations; weights once per step, cached across the step's
micro-batches) and every output gradient in the backward; the kernel writes the row-wise fp8 copy and the
column-wise (transposed) copy the other GEMM of the backward needs. Bytes moved per quantised element,
from the kernels TE launches (transformer_engine/pytorch/csrc/quantizer.cpp @ d0067d0; common/cast):
  delayed  (DelayedScaling: scale from the amax history; amax of this tensor recorded by the same kernel):
           read 16-bit 2 B + write fp8 1 B + fp8 transpose 1 B = 4 B
  current  (Float8CurrentScaling, "FP8-CS": Float8CurrentScalingQuantizer::quantize_impl computes the amax in a
           pass of its own, nvte_compute_amax_with_config, before nvte_quantize): 2 B + 4 B = 6 B
  mxfp8    (MXFP8BlockScaling, Blackwell: one E8M0 scale per 32 elements, row-wise and column-wise):
           2 B + 1 B + 1 B + 2/32 B of scales = 4.0625 B
The default recipe is the chip's: MXFP8 where the chip has block-scaled fp8 tensor cores (Blackwell), current
scaling elsewhere (Megatron-Bridge's FP8-CS preset on Hopper from 25.09; NeMo's earlier recipes used delayed
scaling, which a run states with `fp8_recipe: delayed`).
"""

from __future__ import annotations

from dataclasses import replace

from baige_plan.cost.flops import SIXTEEN_BIT_KIND, Gemm
from baige_plan.specs import runtimes
from baige_plan.specs.chip import ChipSpec

FP8_RECIPES = ("delayed", "current", "mxfp8")
QUANTIZE_BYTES = {"delayed": 4.0, "current": 6.0, "mxfp8": 2.0 + 1.0 + 1.0 + 2.0 / 32}
MXFP8_CHIPS = ("b200", "gb200", "b300", "gb300")   # block-scaled fp8 in the tensor cores (Blackwell)


def fp8_recipe(s, chip: ChipSpec) -> str:
    """The strategy's fp8 recipe, or the chip's default."""
    if getattr(s, "fp8_recipe", ""):
        return s.fp8_recipe
    return "mxfp8" if chip.id in MXFP8_CHIPS else "current"


def fp8_quantize_bytes(recipe: str) -> float:
    """HBM bytes per quantised element (module docstring)."""
    return QUANTIZE_BYTES[recipe]


def keep_16bit(gemms: list[Gemm], s, chip: ChipSpec, dtype: str) -> list[Gemm]:
    """`gemms` of an fp8 job (`dtype` "fp8") with those the runtime's fp8 conversion leaves in 16-bit
    (RuntimeSpec.fp8_16bit_gemms: Megatron's output layer and router) marked SIXTEEN_BIT_KIND: they run at the
    16-bit rate and quantise nothing. Other precisions: unchanged."""
    if dtype != "fp8":
        return gemms
    names = runtimes.get(s.runtime).fp8_16bit_gemms
    if getattr(s, "fp8_output_proj", False) and fp8_recipe(s, chip) == "mxfp8":   # Megatron-core: an MXFP8 output layer
        names = tuple(n for n in names if n != "logits")
    if not names:
        return gemms
    return [replace(g, kind=SIXTEEN_BIT_KIND) if g.name in names and g.kind == "linear" else g for g in gemms]
