"""Whole-cluster use when the global batch does not split over the replicas (issue 18).

`--batch-tolerance PCT` lets `plan` run a global batch B' near the asked B, |B' - B| <= B * PCT / 100, that splits
over a replica count r using whole groups: candidates are B' = r * round(B / r) for r dividing a group's device
count (a replica count that leaves no device of that group idle); those that split over the most such counts
first, then the nearest, then the larger. Plans are
compared by tokens/s (step times of different batches are not comparable); the plan states the batch it runs and
the batch asked. Worked example: 80 A100 + 240 V100 (Sailor's 320-GPU step), B = 1024: r = 20 gives
B' = 20 * round(51.2) = 1020 (-0.39%), r = 5 gives 1025 (+0.10%), r = 40 and 80 give 1040 (+1.56%).

Uneven micro-batch counts per replica are the other way to use every device; Megatron-LM and FlagScale run one
micro-batch count for all data-parallel replicas of a pipeline (num_microbatches = global batch / (micro-batch x
dp), megatron/core/num_microbatches_calculator.py), so the heterogeneous plans only split the batch unevenly
between pipeline *shapes* (PipelineShape.micro_batches), never between replicas of one shape.
"""

from __future__ import annotations

from baige_plan.search.space import divisors
from baige_plan.specs.topology import ClusterSpec


def candidate_batches(batch: int, cluster: ClusterSpec, pct: float, limit: int = 3) -> list[int]:
    """Up to `limit` global batches other than `batch`, within pct percent of it, that split over replica counts
    using whole groups; nearest first, ties to the larger."""
    if pct <= 0:
        return []
    tol = batch * pct / 100.0
    rs = sorted({r for g in cluster.groups for r in divisors(g.devices)})
    found: set[int] = set()
    for r in (r for r in rs if r <= batch):
        for q in {round(batch / r), batch // r, -(-batch // r)}:
            b2 = r * q
            if b2 > 0 and b2 != batch and abs(b2 - batch) <= tol + 1e-9:
                found.add(b2)
    # the batches that split over the most whole-group replica counts first, then the nearest, then the larger
    return sorted(found, key=lambda b: (-sum(1 for r in rs if b % r == 0), abs(b - batch), -b))[:limit]
