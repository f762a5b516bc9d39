"""Rank placement: rank -> (group, node, device, pipeline, replica, stage, tp_rank, cp_rank).

Megatron-core's `RankGenerator` order "tp-cp-dp-pp": tp varies fastest, then cp, then dp, then pp,
so a TP group is tp consecutive ranks, packed inside one node whenever tp divides the devices per
node; CP neighbours come next, DP replicas after, and pipeline stages are the outermost (their
low-volume p2p traffic is the one that crosses nodes first). Ranks fill each group's nodes in
order, device by device; pipeline shapes (heterogeneous plans) are laid out one after another.

    local    = rank - first rank of its pipeline shape
    tp_rank  = local % tp
    cp_rank  = (local // tp) % cp
    replica  = (local // (tp*cp)) % dp
    stage    = local // (tp*cp*dp)
    node     = rank // devices_per_node,  device = rank % devices_per_node

Worked example: tp=2, cp=1, dp=2, pp=2 on 2 nodes x 4 devices (8 ranks):
    rank 0: node 0 dev 0, stage 0, replica 0, tp_rank 0     rank 4: node 1 dev 0, stage 1, replica 0, tp_rank 0
    rank 1: node 0 dev 1, stage 0, replica 0, tp_rank 1     rank 5: node 1 dev 1, stage 1, replica 0, tp_rank 1
    rank 2: node 0 dev 2, stage 0, replica 1, tp_rank 0     rank 6: node 1 dev 2, stage 1, replica 1, tp_rank 0
    rank 3: node 0 dev 3, stage 0, replica 1, tp_rank 1     rank 7: node 1 dev 3, stage 1, replica 1, tp_rank 1
TP pairs {0,1} {2,3} {4,5} {6,7} share a node; DP pairs {0,2} {1,3} stay in node 0; the pipeline
p2p (rank 0 -> 4) crosses to node 1.

With Megatron's --use-tp-pp-dp-mapping (StrategySpec.tp_pp_dp_mapping: order "tp-cp-ep-pp-dp") stages come before
replicas:
    stage    = (local // (tp*cp)) % pp
    replica  = local // (tp*cp*pp)
so in the example above ranks 0-1 are stage 0 and 2-3 stage 1 of replica 0 (pipeline p2p rank 0 -> 2 inside node 0),
and the DP pairs {0,4} {1,5} cross to node 1.

A plan on part of its cluster (search/partial.py: fewer nodes, `--exclude`) passes `nodes`, the usable node
indices in order: the k-th node the formula fills is nodes[k] (ranks 0-7 on nodes [0, 1, 2, 4] go to node 0,
ranks 24-31 to node 4), so excluded nodes host no rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Slot:
    rank: int
    group: str
    node: int
    device: int
    pipeline: int
    replica: int
    stage: int
    tp_rank: int
    cp_rank: int

    def as_dict(self) -> dict:
        return {"rank": self.rank, "group": self.group, "node": self.node, "device": self.device,
                "pipeline": self.pipeline, "replica": self.replica, "stage": self.stage,
                "tp_rank": self.tp_rank, "cp_rank": self.cp_rank}


def place(rank: int, tp: int, cp: int, dp: int, pp: int, group: str, devices_per_node: int,
          pipeline: int = 0, first_rank: int = 0, group_first_rank: int = 0, tp_pp_dp: bool = False) -> Slot:
    """Where `rank` goes, for one pipeline shape (tp, cp, dp, pp) starting at `first_rank` on a group whose
    first device has global rank `group_first_rank`; `tp_pp_dp`: Megatron's tp-cp-ep-pp-dp order. Pure: no state,
    no I/O."""
    local = rank - first_rank
    if not 0 <= local < tp * cp * dp * pp:
        raise ValueError(f"rank {rank} is outside this shape's ranks [{first_rank}, {first_rank + tp * cp * dp * pp})")
    in_group = rank - group_first_rank
    if tp_pp_dp:
        replica, stage = local // (tp * cp * pp), (local // (tp * cp)) % pp
    else:
        replica, stage = (local // (tp * cp)) % dp, local // (tp * cp * dp)
    return Slot(rank=rank, group=group, node=in_group // devices_per_node, device=in_group % devices_per_node,
                pipeline=pipeline, replica=replica, stage=stage, tp_rank=local % tp, cp_rank=(local // tp) % cp)


def placement(tp: int, cp: int, dp: int, pp: int, group: str, devices_per_node: int,
              nodes: Sequence[int] | None = None, tp_pp_dp: bool = False) -> list[Slot]:
    """Every rank of a homogeneous plan, rank order; `nodes`: the usable node indices (default 0, 1, ...);
    `tp_pp_dp`: Megatron's tp-cp-ep-pp-dp order (StrategySpec.tp_pp_dp_mapping)."""
    slots = [place(r, tp, cp, dp, pp, group, devices_per_node, tp_pp_dp=tp_pp_dp) for r in range(tp * cp * dp * pp)]
    if nodes is None:
        return slots
    need = -(-len(slots) // devices_per_node)
    if len(nodes) < need or len(set(nodes)) != len(nodes):
        raise ValueError(f"the plan needs {need} distinct nodes, {len(set(nodes))} given")
    return [replace(s, node=nodes[s.node]) for s in slots]
