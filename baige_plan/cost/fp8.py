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
scaling, which a run states with `fp8_recipe: delayed`, and which the runs loader takes for an unstated recipe of a
NeMo container whose Transformer Engine predates the chip's default: io/runs.py _fp8_recipe).

fp4 jobs run NVFP4 (TE NVFP4BlockScaling, Megatron-core `--fp4-format e2m1 --fp4-recipe nvfp4`, Blackwell): every
linear that fp8 would quantise runs its three GEMMs (fprop, dgrad, wgrad) on E2M1 data with one E4M3 scale per 16
elements and an fp32 scale per tensor. NVFP4Quantizer::quantize_impl (transformer_engine/pytorch/csrc/quantizer.cpp
@ d0067d0) first computes the tensor's amax in a pass of its own (nvte_compute_amax_with_config; with the random
Hadamard transform, nvte_hadamard_transform_amax, also one read), then one kernel writes the row-wise and the
column-wise copy (nvte_quantize_v2, or the fused RHT cast):
  nvfp4    2 B (amax) + 2 B (read) + 2 x (0.5 B + 1/16 B of scales) = 5.125 B
Stochastic rounding and 2D (16 x 16) weight blocks change the arithmetic inside the kernel, not its bytes.
"""

from __future__ import annotations

from dataclasses import replace

from baige_plan.cost.flops import SIXTEEN_BIT_KIND, Gemm
from baige_plan.specs import runtimes
from baige_plan.specs.chip import ChipSpec
from baige_plan.specs.job import QUANTIZED_PRECISIONS

FP8_RECIPES = ("delayed", "current", "mxfp8")
QUANTIZE_BYTES = {"delayed": 4.0, "current": 6.0, "mxfp8": 2.0 + 1.0 + 1.0 + 2.0 / 32,
                  "nvfp4": 2.0 + 2.0 + 2 * (0.5 + 1.0 / 16)}
# bytes per element of one quantised copy (data + its block scales): what a linear saves of its input for the weight
# gradient, and each of the two cached copies of a weight (row-wise + column-wise)
QUANTIZED_COPY_BYTES = {"fp8": 1.0, "fp4": 0.5 + 1.0 / 16}
MXFP8_CHIPS = ("b200", "gb200", "b300", "gb300")   # block-scaled fp8 in the tensor cores (Blackwell)


def fp8_recipe(s, chip: ChipSpec) -> str:
    """The strategy's fp8 recipe, or the chip's default."""
    if getattr(s, "fp8_recipe", ""):
        return s.fp8_recipe
    return "mxfp8" if chip.id in MXFP8_CHIPS else "current"


def quant_recipe(s, chip: ChipSpec, dtype: str) -> str:
    """The quantisation recipe of a job whose GEMMs run in `dtype`: nvfp4 for fp4, the fp8 recipe for fp8,
    "" for unquantised precisions."""
    return "nvfp4" if dtype == "fp4" else fp8_recipe(s, chip) if dtype == "fp8" else ""


def fp8_quantize_bytes(recipe: str) -> float:
    """HBM bytes per quantised element (module docstring)."""
    return QUANTIZE_BYTES[recipe]


def keep_16bit(gemms: list[Gemm], s, chip: ChipSpec, dtype: str) -> list[Gemm]:
    """`gemms` of an fp8 or fp4 job (`dtype` "fp8" / "fp4") with those the runtime's conversion leaves in 16-bit
    (RuntimeSpec.fp8_16bit_gemms: Megatron's output layer and router, which TE's NVFP4 recipe leaves alike) marked
    SIXTEEN_BIT_KIND: they run at the 16-bit rate and quantise nothing. Other precisions: unchanged."""
    if dtype not in QUANTIZED_PRECISIONS:
        return gemms
    names = runtimes.get(s.runtime).fp8_16bit_gemms
    if dtype == "fp8" and getattr(s, "fp8_output_proj", False) and fp8_recipe(s, chip) == "mxfp8":   # Megatron-core: an MXFP8 output layer
        names = tuple(n for n in names if n != "logits")
    if not names:
        return gemms
    return [replace(g, kind=SIXTEEN_BIT_KIND) if g.name in names and g.kind == "linear" else g for g in gemms]
