"""Rank placement for heterogeneous plans: every used device gets one rank.

Within each group (cluster order), device blocks are handed out to (shape j, stage i, replica r)
in that order, tp x cp consecutive devices per block (tp innermost), blocks with the largest tp first so that every
block starts at a multiple of its tp and (tp dividing the node size) stays inside one node.
Ranks are numbered over the used devices, group by group, device by device.

Worked example: groups gpu (2 nodes x 8) and npu (1 node x 8); one shape with 2 replicas of
[stage 0 on gpu tp 8, stage 1 on npu tp 4]:
    ranks  0-7 : gpu node 0 devices 0-7, stage 0, replica 0, tp_rank 0-7
    ranks  8-15: gpu node 1 devices 0-7, stage 0, replica 1
    ranks 16-19: npu node 0 devices 0-3, stage 1, replica 0, tp_rank 0-3
    ranks 20-23: npu node 0 devices 4-7, stage 1, replica 1
Only the stage 0 -> 1 activations cross the gpu-npu bridge.
"""

from __future__ import annotations

from baige_plan.search.placement import Slot
from baige_plan.specs.pipeline import PipelinesSpec
from baige_plan.specs.topology import ClusterSpec


def hetero_placement(p: PipelinesSpec, cluster: ClusterSpec) -> list[Slot]:
    """Pure: the slots of every rank of plan `p` (see the module docstring)."""
    blocks: dict[str, list[tuple[int, int, int, int, int]]] = {g.name: [] for g in cluster.groups}
    for j, sh in enumerate(p.shapes):
        cp = p.knob(sh, "cp")
        for i, st in enumerate(sh.stages):
            for r in range(sh.replicas):
                blocks[st.group].append((st.tp * cp, st.tp, j, i, r))
    slots: list[tuple[str, int, int, int, int, int, int]] = []   # (group, device, j, i, r, tp_rank, cp_rank)
    for g in cluster.groups:
        dev = 0
        for size, tp, j, i, r in sorted(blocks[g.name], key=lambda b: (-b[0], -b[1], b[2], b[3], b[4])):
            for t in range(size):
                slots.append((g.name, dev + t, j, i, r, t % tp, t // tp))
            dev += size
        if dev > g.devices:
            raise ValueError(f"group {g.name!r}: plan needs {dev} devices, it has {g.devices}")
    out = []
    for rank, (gname, d, j, i, r, t, c) in enumerate(slots):
        dpn = cluster.group(gname).devices_per_node
        out.append(Slot(rank=rank, group=gname, node=d // dpn, device=d % dpn, pipeline=j, replica=r,
                        stage=i, tp_rank=t, cp_rank=c))
    return out
