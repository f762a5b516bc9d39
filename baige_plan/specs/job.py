"""What to train: global batch, sequence length, precision."""

from __future__ import annotations

from dataclasses import dataclass

from baige_plan.errors import require
from baige_plan.limits import MAX_GLOBAL_BATCH, MAX_SEQ_LEN

PRECISIONS = ("bf16", "fp16", "fp8", "fp32", "tf32")   # fp32: CUDA-core fp32; tf32: fp32 storage, TF32 matmuls


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
