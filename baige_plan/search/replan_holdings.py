"""What each rank of a plan holds (search/replan.py): the layout of a strategy or pipelines spec on the
parameter axis, each node's pieces, and the overlap of two holdings (the bytes a node already has)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from baige_plan.cost.memory import precision_state_bytes, weight_bytes
from baige_plan.cost.params import layer_params_split
from baige_plan.search.placement import Slot
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.pipeline import PipelinesSpec
from baige_plan.specs.strategy import StrategySpec, stage_layers

OVERLAP_BLOCK = 4_000_000   # elements per numpy block of the overlap computation (bounded memory)


# -- what each rank holds -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StageLayout:
    group: str
    tp: int
    layers: tuple[int, int]                  # as the plan writes it
    chunks: tuple[tuple[int, int], ...]      # layer ranges it actually runs


@dataclass(frozen=True)
class ShapeLayout:
    replicas: int
    cp: int
    ep: int
    etp: int
    zero: int
    stages: tuple[StageLayout, ...]


def layout_of_strategy(model: ModelSpec, s: StrategySpec, group: str) -> tuple[ShapeLayout, ...]:
    counts = stage_layers(s, model.layers)
    stages, start = [], 0
    for i, n in enumerate(counts):
        if s.vpp > 1:
            k = model.layers // (s.pp * s.vpp)
            chunks = tuple(((c * s.pp + i) * k, (c * s.pp + i + 1) * k) for c in range(s.vpp))
        else:
            chunks = ((start, start + n),)
        stages.append(StageLayout(group, s.tp, (start, start + n), chunks))
        start += n
    return (ShapeLayout(s.dp, s.cp, s.ep, s.etp, s.zero, tuple(stages)),)


def layout_of_pipelines(p: PipelinesSpec) -> tuple[ShapeLayout, ...]:
    out = []
    for sh in p.shapes:
        vpp = p.knob(sh, "vpp")
        stages = []
        for st in sh.stages:
            a, b = st.layers
            if vpp > 1 and (b - a) % vpp == 0:
                k = (b - a) // vpp
                chunks = tuple((a + c * k, a + (c + 1) * k) for c in range(vpp))
            else:
                chunks = ((a, b),)
            stages.append(StageLayout(st.group, st.tp, (a, b), chunks))
        out.append(ShapeLayout(sh.replicas, p.knob(sh, "cp"), p.knob(sh, "ep"), p.knob(sh, "etp"), p.knob(sh, "zero"),
                               tuple(stages)))
    return tuple(out)


class Axis:
    """The parameter axis: positions embedding, layer 0..L-1, output; dense and expert parameters on
    disjoint ranges (the expert range starts after the dense one)."""

    def __init__(self, model: ModelSpec, precision: str):
        vh = float(model.vocab * model.hidden)
        dense, expert = [vh], [0.0]
        for i in range(model.layers):
            d, e = layer_params_split(model, model.is_moe_layer(i))
            dense.append(float(d))
            expert.append(float(e))
        dense.append(vh)
        expert.append(0.0)
        self.cd = np.concatenate([[0.0], np.cumsum(dense)])
        self.ce = np.concatenate([[0.0], np.cumsum(expert)])
        self.off = 2.0 * self.cd[-1] + 1.0
        self.L = model.layers
        self.tie = model.tie_embeddings
        self.w_bytes = float(weight_bytes(precision))
        self.k_bytes = float(precision_state_bytes(precision)[2])

    def dense(self, a: int, b: int, one_stage: bool) -> tuple[float, float]:
        lo = 0.0 if a == 0 else float(self.cd[a + 1])
        if b < self.L:
            hi = float(self.cd[b + 1])
        else:
            hi = float(self.cd[self.L + 1] if (self.tie and one_stage) else self.cd[self.L + 2])
        return lo, hi

    def expert(self, a: int, b: int) -> tuple[float, float] | None:
        lo, hi = float(self.ce[a + 1]), float(self.ce[b + 1])
        return (self.off + lo, self.off + hi) if hi > lo else None


Piece = tuple[float, float, float, float]     # (x0, x1, f0, f1)


def rank_pieces(ax: Axis, sh: ShapeLayout, slot: Slot) -> tuple[list[Piece], list[Piece]]:
    """(parameter pieces, optimizer pieces) of one rank (module docstring)."""
    st = sh.stages[slot.stage]
    t, c, r = slot.tp_rank, slot.cp_rank, slot.replica
    D, d = sh.replicas * sh.cp, r * sh.cp + c
    E = max(1, sh.ep * sh.etp)
    local = t + st.tp * (c + sh.cp * r)
    q, De = local % E, max(1, st.tp * sh.cp * sh.replicas // E)
    de = min(local // E, De - 1)
    one = len(sh.stages) == 1
    params: list[Piece] = []
    opt: list[Piece] = []

    def add(x0: float, x1: float, f0: float, f1: float, n: int, k: int) -> None:
        w = (x1 - x0) / n
        sl = (x0 + k * w, x0 + (k + 1) * w, f0, f1)
        full = (x0, x1, f0, f1)
        params.append(sl if sh.zero >= 3 else full)
        opt.append(sl if sh.zero >= 1 else full)

    for a, b in st.chunks:
        x0, x1 = ax.dense(a, b, one)
        add(x0, x1, t / st.tp, (t + 1) / st.tp, D, d)
        ex = ax.expert(a, b)
        if ex is not None:
            add(ex[0], ex[1], q / E, (q + 1) / E, De, de)
    return params, opt


Store = dict[tuple[str, int, int], tuple[list[Piece], list[Piece]]]   # (group, node, device) -> pieces


def holdings(ax: Axis, shapes: tuple[ShapeLayout, ...], slots: list[Slot]) -> Store:
    out: Store = {}
    for s in slots:
        out[(s.group, s.node, s.device)] = rank_pieces(ax, shapes[s.pipeline], s)
    return out


def _pack(store: Store, keys: list[tuple[str, int] | None], dpn: int) -> tuple[np.ndarray, np.ndarray]:
    """Arrays (nodes, dpn, K, 4) of the parameter and optimizer pieces of the listed nodes (None: empty)."""
    k = 1
    for key in keys:
        if key is None:
            continue
        for dev in range(dpn):
            hp = store.get((key[0], key[1], dev))
            if hp:
                k = max(k, len(hp[0]), len(hp[1]))
    P = np.zeros((len(keys), dpn, k, 4))
    Q = np.zeros((len(keys), dpn, k, 4))
    for i, key in enumerate(keys):
        if key is None:
            continue
        for dev in range(dpn):
            hp = store.get((key[0], key[1], dev))
            if hp:
                if hp[0]:
                    P[i, dev, :len(hp[0])] = hp[0]
                if hp[1]:
                    Q[i, dev, :len(hp[1])] = hp[1]
    return P, Q


def _volume(A: np.ndarray) -> np.ndarray:
    """Per node and device: the measure of its pieces (nodes, dpn)."""
    return ((A[..., 1] - A[..., 0]) * (A[..., 3] - A[..., 2])).sum(axis=-1)


FOOTPRINT_BINS = 512      # bins of the parameter axis for the pair pre-filter of `_overlap`


def _footprint(A: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """(nodes, FOOTPRINT_BINS) bool: the bins of the parameter axis some piece of the node covers."""
    n = A.shape[0]
    x0 = A[..., 0].reshape(n, -1)
    x1 = A[..., 1].reshape(n, -1)
    live = x1 > x0
    scale = FOOTPRINT_BINS / max(hi - lo, 1e-30)
    b0 = np.clip(np.floor((x0 - lo) * scale).astype(np.int64), 0, FOOTPRINT_BINS - 1)
    b1 = np.clip(np.ceil((x1 - lo) * scale).astype(np.int64), 1, FOOTPRINT_BINS)
    marks = np.zeros((n, FOOTPRINT_BINS + 1))
    rows = np.repeat(np.arange(n), x0.shape[1]).reshape(n, -1)
    np.add.at(marks, (rows[live], b0[live]), 1.0)
    np.add.at(marks, (rows[live], b1[live]), -1.0)
    return np.cumsum(marks, axis=1)[:, :FOOTPRINT_BINS] > 0.5


def _overlap(A: np.ndarray, B: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """(n, m): measure of node i's pieces (A) inside node j's pieces (B), device by device; only the pairs
    where `mask` is true are computed (the others are 0)."""
    n, m = A.shape[0], B.shape[0]
    out = np.zeros((n, m))
    if n == 0 or m == 0:
        return out
    ii, jj = np.nonzero(mask) if mask is not None else np.indices((n, m)).reshape(2, -1)
    per = A.shape[1] * A.shape[2] * B.shape[2]
    step = max(1, OVERLAP_BLOCK // max(1, per))
    for k in range(0, len(ii), step):
        a = A[ii[k:k + step]][:, :, :, None, :]
        b = B[jj[k:k + step]][:, :, None, :, :]
        dx = np.minimum(a[..., 1], b[..., 1]) - np.maximum(a[..., 0], b[..., 0])
        df = np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 2], b[..., 2])
        out[ii[k:k + step], jj[k:k + step]] = (np.clip(dx, 0, None) * np.clip(df, 0, None)).sum(axis=(1, 2, 3))
    return out


def _overlap_pairs(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """(n, dpn): overlap of node i's pieces in A with node i's in B, per device."""
    a, b = A[:, :, :, None, :], B[:, :, None, :, :]
    dx = np.minimum(a[..., 1], b[..., 1]) - np.maximum(a[..., 0], b[..., 0])
    df = np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 2], b[..., 2])
    return (np.clip(dx, 0, None) * np.clip(df, 0, None)).sum(axis=(2, 3))
