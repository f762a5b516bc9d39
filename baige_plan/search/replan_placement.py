"""Rank-keeping placement of a re-plan candidate (search/replan.py): ranks onto surviving nodes by the most
bytes already held (a max-weight assignment), the parameter movement that is left, and node texts."""

from __future__ import annotations

import re

import numpy as np
from scipy.optimize import linear_sum_assignment

from baige_plan.search.placement import Slot
from baige_plan.search.replan_candidates import (
    Candidate,
    Move,
)
from baige_plan.search.replan_holdings import (
    Axis,
    Store,
    _footprint,
    _overlap,
    _overlap_pairs,
    _pack,
    _volume,
    holdings,
)
from baige_plan.search.replan_world import (
    World,
)

MAX_ASSIGN = 4_000_000     # node pairs of the max-weight assignment (2,000 x 2,000); beyond it the natural order


# -- placement and bytes -------------------------------------------------------------------------------------------
def settle(model, ax: Axis, w: World, old: Store, c: Candidate, optimise: bool = True) -> Candidate:
    """Choose the physical node of each new node index (max-weight assignment, or the natural order) and
    count the bytes that move."""
    slots = c.placement()
    new = holdings(ax, c.layout(model), slots)
    c.slots = slots
    c.node_map, c.spare, c.moves = {}, [], []
    c.params_bytes = c.optimizer_bytes = 0.0
    c.ranks, c.ranks_kept = len(slots), 0
    roles = _roles(model, c, slots)
    for g in c.cluster.groups:
        avail = w.avail[g.name]
        dpn = g.devices_per_node
        A_p, A_o = _pack(new, [(g.name, i) for i in range(g.nodes)], dpn)
        old_keys = [_old_key(n) for n in avail]
        B_p, B_o = _pack(old, old_keys, dpn)
        if optimise and g.nodes * len(avail) > MAX_ASSIGN:
            optimise_here = False       # a 10^5-node group: an n x n matrix would not fit; old nodes first
        else:
            optimise_here = optimise
        if optimise_here:
            # pairs sharing no part of the parameter axis keep nothing: computed only where the footprints meet
            # (optimizer pieces lie inside the parameter pieces of their device)
            hi = float(max(A_p[..., 1].max(initial=0.0), B_p[..., 1].max(initial=0.0)))
            mask = _footprint(A_p, 0.0, hi) @ _footprint(B_p, 0.0, hi).T.astype(np.float64) > 0.5 \
                if A_p.size and B_p.size else np.zeros((A_p.shape[0], B_p.shape[0]), bool)
            kept = _overlap(A_p, B_p, mask) * ax.w_bytes + _overlap(A_o, B_o, mask) * ax.k_bytes
            i, j = np.indices(kept.shape)
            # weights in GB; ties to the natural order (a node stays at its position when nothing is gained)
            cost = -kept / 1e9 + 1e-7 * np.abs(i - j)
            rows, cols = linear_sum_assignment(cost)
            col = dict(zip(rows.tolist(), cols.tolist(), strict=True))
            pick = [col[i] for i in range(g.nodes)]
        else:
            pick = list(range(g.nodes))
        c.node_map[g.name] = [avail[k] for k in pick]
        picked = set(pick)
        c.spare += [n for k, n in enumerate(avail) if k not in picked]
        Bp, Bo = B_p[pick], B_o[pick]
        need_p, need_o = _volume(A_p) * ax.w_bytes, _volume(A_o) * ax.k_bytes
        mv_p = np.clip(need_p - _overlap_pairs(A_p, Bp) * ax.w_bytes, 0, None)
        mv_o = np.clip(need_o - _overlap_pairs(A_o, Bo) * ax.k_bytes, 0, None)
        mv_p[mv_p <= 1e-9 * np.maximum(need_p, 1.0)] = 0.0
        mv_o[mv_o <= 1e-9 * np.maximum(need_o, 1.0)] = 0.0
        c.params_bytes += float(mv_p.sum())
        c.optimizer_bytes += float(mv_o.sum())
        c.ranks_kept += int(((need_p > 0) & (mv_p == 0)).sum())
        for i in range(g.nodes):
            p_b, o_b = float(mv_p[i].sum()), float(mv_o[i].sum())
            if p_b > 0 or o_b > 0:
                c.moves.append(Move([c.node_map[g.name][i]], roles.get((g.name, i), "idle"), p_b, o_b))
    c.spare += [n for grp, ns in w.avail.items() if grp not in c.node_map for n in ns]
    c.moves = _merge_moves(c.moves)
    return c


def _old_key(name: str) -> tuple[str, int]:
    """(group, node index in the old plan) of a physical node; added nodes have indices the old plan never
    used, so they hold nothing."""
    grp, _, idx = name.rpartition(":")
    return grp, int(idx)


def _roles(model, c: Candidate, slots: list[Slot]) -> dict[tuple[str, int], str]:
    lay = c.layout(model)
    seen: dict[tuple[str, int], set[tuple[int, int]]] = {}
    for s in slots:
        seen.setdefault((s.group, s.node), set()).add((s.pipeline, s.stage))
    out = {}
    for key, st in seen.items():
        parts = []
        for j, i in sorted(st):
            st = lay[j].stages[i]
            a, b = st.layers
            parts.append((f"pipeline {j} " if len(lay) > 1 else "") + f"stage {i} layers [{a}, {b})"
                         + (f" in {len(st.chunks)} interleaved chunks" if len(st.chunks) > 1 else ""))
        out[key] = "; ".join(parts)
    return out


def _merge_moves(moves: list[Move]) -> list[Move]:
    """One entry per new role (stage and layers), its nodes in index order, the bytes summed; roles in pipeline
    order."""
    by: dict[str, Move] = {}
    for mv in moves:
        m = by.setdefault(mv.role, Move([], mv.role, 0.0, 0.0))
        m.nodes += mv.nodes
        m.params_bytes += mv.params_bytes
        m.optimizer_bytes += mv.optimizer_bytes
    for m in by.values():
        m.nodes.sort(key=lambda n: (n.rpartition(":")[0], int(n.rpartition(":")[2])))

    def order(role: str) -> tuple:
        return tuple(int(x) for x in re.findall(r"\d+", role)[:3])
    return [by[r] for r in sorted(by, key=order)]


def nodes_text(names: list[str]) -> str:
    """`gpu:0,8,12-15 npu:3`: nodes per group, runs of consecutive indices as ranges."""
    groups: dict[str, list[int]] = {}
    for n in names:
        g, _, i = n.rpartition(":")
        groups.setdefault(g, []).append(int(i))
    parts = []
    for g, idx in groups.items():
        idx = sorted(set(idx))
        runs, start = [], idx[0]
        for a, b in zip(idx, idx[1:] + [None], strict=True):
            if b is None or b != a + 1:
                runs.append(f"{start}" if start == a else f"{start}-{a}")
                start = b
        parts.append(f"{g}:" + ",".join(runs))
    return " ".join(parts)


def node_range(nodes: list[str]) -> str:
    if len(nodes) == 1:
        return nodes[0]
    grp = nodes[0].rpartition(":")[0]
    return f"{grp}:{nodes[0].rpartition(':')[2]}-{nodes[-1].rpartition(':')[2]}"
