"""`--fp32-matmul [GROUP=]fp32|tf32` (repeatable) on `plan`: the engine an fp32/tf32 job's matrix products run
in on a group (issue 18; cost/estimate.py engine_precision). Without it each group follows the runtime's stack
(RuntimeSpec.fp32_matmul: TF32 for Megatron/FlagScale in NGC containers) on chips that have TF32; chips without
TF32 (V100) run IEEE fp32 whatever is asked. Stored on the plan's cluster copy (topology `fp32_matmul`)."""

from __future__ import annotations

from dataclasses import replace

import typer

from baige_plan.errors import InputError
from baige_plan.specs.topology import ClusterSpec

MatmulOpt = typer.Option(None, "--fp32-matmul", metavar="[GROUP=]fp32|tf32",
                         help="Matmul engine of an fp32/tf32 job on a group: fp32 (IEEE, NVIDIA_TF32_OVERRIDE=0) or "
                         "tf32 (TF32 tensor cores where the chip has them); without GROUP= every group; repeatable "
                         "[default: the runtime's stack: TF32 for megatron/flagscale, IEEE elsewhere; V100 always "
                         "IEEE].")


def apply_fp32_matmul(cluster: ClusterSpec, values: list[str] | None) -> ClusterSpec:
    """The cluster with each group's `fp32_matmul` set from `--fp32-matmul` values (InputError on an unknown group
    or engine)."""
    if not values:
        return cluster
    names = [g.name for g in cluster.groups]
    want: dict[str, str] = {}
    for v in values:
        group, _, eng = v.rpartition("=")
        eng = eng.strip().lower()
        if eng not in ("fp32", "tf32"):
            raise InputError("--fp32-matmul", v, "the engine must be fp32 (IEEE) or tf32")
        if group and group not in names:
            raise InputError("--fp32-matmul", v, f"no group {group!r} (groups: {', '.join(names)})")
        for n in ([group] if group else names):
            want[n] = eng
    return replace(cluster, groups=tuple(replace(g, fp32_matmul=want.get(g.name, g.fp32_matmul))
                                         for g in cluster.groups))
