"""What to train: global batch, sequence length, precision."""

from __future__ import annotations

from dataclasses import dataclass

from baige_plan.errors import require
from baige_plan.limits import MAX_GLOBAL_BATCH, MAX_SEQ_LEN

PRECISIONS = ("bf16", "fp16", "fp8", "fp32", "tf32", "fp4")   # fp32: CUDA-core fp32; tf32: fp32 storage, TF32 matmuls;
# fp4: NVFP4 GEMMs (Transformer Engine NVFP4BlockScaling, Blackwell), bf16 elsewhere
# the precisions whose linears Transformer Engine quantises on the fly (fp8 recipes, NVFP4): bf16 weights, activations
# and attention, quantised GEMM inputs (cost/fp8.py)
QUANTIZED_PRECISIONS = ("fp8", "fp4")
# the precisions with 16-bit (bf16) weights and gradients: bf16 itself and the quantised ones
BF16_WEIGHT_PRECISIONS = ("bf16", *QUANTIZED_PRECISIONS)


@dataclass(frozen=True)
class JobSpec:
    global_batch: int
    seq_len: int
    precision: str = "bf16"

    def __post_init__(self) -> None:
        for k, hi in (("global_batch", MAX_GLOBAL_BATCH), ("seq_len", MAX_SEQ_LEN)):
            v = getattr(self, k)
            require(isinstance(v, int) and not isinstance(v, bool) and v > 0, k,
                    f"must be a positive integer, got {v!r}")
            require(v <= hi, k, f"{v:,} exceeds the limit of {hi:,}")
        require(self.precision in PRECISIONS, "precision",
                f"must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")

    @property
    def tokens(self) -> int:
        return self.global_batch * self.seq_len
