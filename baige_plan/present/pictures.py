"""Pictures of a plan (`baige-plan explain PLAN --svg FILE / --png FILE`) and of a backtest
(`baige-plan backtest RUNS --plot FILE`).

A plan picture has three panels, drawn from the plan's own estimate (the numbers `explain` prints):

1. Pipeline schedule: one row per stage (per pipeline shape on mixed clusters, up to MAX_SHAPES), the
   plan's 1F1B schedule -- Megatron's interleaved 1F1B when vpp > 1 -- simulated op by op from the
   estimated forward and backward time per micro-batch of each stage: forward and backward bars, the
   pipeline p2p share of each (red where the stage's neighbour is across a bridge), and the idle time
   (bubble) behind them. Every micro-batch is simulated (up to MAX_SIM_OPS ops); when there are many,
   the axis is broken: warm-up and the first steady-state cycles on the left, the last ones and the
   cool-down on the right, and the elided steady state is named with its micro-batches and seconds.
   The simulated pipeline time is printed beside the estimate's closed form (m·t_max + bubble, what the
   step time uses): equal for equal stages; with unequal stages the closed form is an approximation
   (a few % either way when stage times differ a lot, tests/test_pictures.py).
   TP/CP/EP communication is inside the compute bars; each row says its per-micro-batch times.
2. Placement: nodes x devices, one cell per device coloured by pipeline stage, TP groups outlined,
   devices the plan leaves idle in grey; rows are grouped by chip group (mixed clusters show every
   group). Up to MAX_NODE_ROWS nodes, one row per node (one cell per device); on larger clusters runs of
   alike nodes (same stage, TP and CP rank on every device) share a row ("nodes 0-19 (x20)"), and if
   that still leaves more than MAX_NODE_ROWS rows, each group keeps its first and last rows (shared in
   proportion to its rows) and one row names how many nodes are elided.
3. Memory per device by stage: stacked weights, grads, optimizer states, activations and other
   (framework reserve) against the stage's chip capacity (and the plan's max_memory_frac, if < 1).

Elements carry ids (SVG `id`, matplotlib gid) so tests and tools can count them: `device-...` per
used device, `idle-...` per idle device, `tpgroup-...` per TP outline, `memory-<shape>-<stage>` per
memory bar label; `run-<i>` per backtest point.

Library: matplotlib (the optional extra `plot`, pinned in pyproject.toml). Chosen over hand-written
SVG because it also writes PNG for free (Agg, no browser or converter), handles text layout, broken
axes, log scales, legends and colour maps that hand-written SVG would have to reimplement (and test),
is the most widely packaged and maintained plotting library in Python (wheels for every platform,
no system libraries needed), and can be made deterministic: a fixed `svg.hashsalt`, no date in the
metadata, text kept as text (`svg.fonttype: none`, so the numbers are searchable and no font glyphs
are embedded) and matplotlib's bundled DejaVu Sans for layout -- the same inputs give byte-identical
files with the same matplotlib version. Planning never imports it: only these commands do, and
without the extra they exit 2 naming the extra and the install command.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

from baige_plan.errors import InputError

EXTRA = "plot"
INSTALL = "pip install 'baige-plan[plot]'"
MAX_SHAPES = 4            # pipeline shapes drawn in the schedule panel
MAX_NODE_ROWS = 64        # node rows drawn in the placement panel
MAX_SIM_OPS = 1_000_000   # forward/backward ops simulated per shape; beyond, the steady state is extrapolated
STEADY_CYCLES = 2         # steady-state forward/backward pairs shown on each side of a broken axis
FULL_DRAW = 24            # micro-batches x model chunks up to which every op is drawn on one time axis

FWD_COLOR, BWD_COLOR, P2P_COLOR, BRIDGE_COLOR, IDLE_COLOR = "#4C72B0", "#DD8452", "#404040", "#C44E52", "#E6E6E6"
MEM_KINDS = (("weights", "#4C72B0"), ("grads", "#55A868"), ("optimizer", "#8172B3"),
             ("activations", "#DD8452"), ("other", "#999999"))
FORMATS = ("svg", "png")


# -- the schedule (pure: no matplotlib) --------------------------------------------------------
@dataclass(frozen=True)
class Op:
    stage: int
    kind: str          # "F" | "B"
    micro_batch: int
    chunk: int         # model chunk (interleaved schedule), 0 otherwise
    start: float
    end: float


def stage_order(pp: int, stage: int, m: int, vpp: int = 1) -> list[tuple[str, int, int]]:
    """The (kind, micro-batch, chunk) order one stage runs: Megatron-core's 1F1B (warm-up of pp-stage-1
    forwards, then one forward one backward, then the cool-down backwards), or with vpp > 1 its interleaved
    1F1B (micro-batches in groups of pp, warm-up (pp-stage-1)·2 + (vpp-1)·pp chunk forwards)."""
    if vpp == 1:
        w = min(pp - stage - 1, m)
        ops = [("F", j, 0) for j in range(w)]
        for j in range(m - w):
            ops += [("F", w + j, 0), ("B", j, 0)]
        return ops + [("B", j, 0) for j in range(m - w, m)]
    total, group = m * vpp, pp * vpp

    def fwd(k: int) -> tuple[str, int, int]:
        return "F", (k // group) * pp + k % pp, (k % group) // pp

    def bwd(k: int) -> tuple[str, int, int]:
        return "B", (k // group) * pp + k % pp, vpp - 1 - (k % group) // pp

    w = total if m == pp else min(total, (pp - stage - 1) * 2 + (vpp - 1) * pp)
    ops = [fwd(k) for k in range(w)]
    for k in range(total - w):
        ops += [fwd(w + k), bwd(k)]
    return ops + [bwd(k) for k in range(total - w, total)]


def simulate_schedule(fwd_s: list[float], bwd_s: list[float], m: int, vpp: int = 1) -> tuple[list[Op], float]:
    """Run the schedule: each op starts when its stage is free and its input has arrived (the forward of
    the same micro-batch and chunk on the previous stage -- or the previous chunk on the last stage --,
    the backward on the next stage likewise). A chunk takes fwd_s[i]/vpp (bwd_s[i]/vpp); the stage's p2p
    time is inside those, as in the estimate. Returns (ops in start order per stage, pipeline time)."""
    pp = len(fwd_s)
    orders = [stage_order(pp, i, m, vpp) for i in range(pp)]
    ptr, free, end = [0] * pp, [0.0] * pp, {}
    ops: list[Op] = []
    left = sum(len(o) for o in orders)
    while left:
        progress = False
        for i in range(pp):
            order = orders[i]
            while ptr[i] < len(order):
                kind, j, c = order[ptr[i]]
                if kind == "F":
                    dep = ("F", i - 1, j, c) if i > 0 else (("F", pp - 1, j, c - 1) if c > 0 else None)
                else:
                    dep = ("B", i + 1, j, c) if i < pp - 1 else (("B", 0, j, c + 1) if c < vpp - 1 else None)
                if dep is not None and dep not in end:
                    break
                t0 = max(free[i], end[dep]) if dep is not None else free[i]
                t1 = t0 + (fwd_s[i] if kind == "F" else bwd_s[i]) / vpp
                end[(kind, i, j, c)] = free[i] = t1
                ops.append(Op(i, kind, j, c, t0, t1))
                ptr[i] += 1
                left -= 1
                progress = True
        if not progress:     # cannot happen for the orders above; a guard against an endless loop
            raise RuntimeError("pipeline schedule deadlocked")
    return ops, max(free) if free else 0.0


# -- what a plan picture shows (pure) ----------------------------------------------------------
@dataclass
class StageRow:
    label: str
    group: str
    tp: int
    fwd_s: float
    bwd_s: float
    pp_s: float
    tp_s: float
    cp_s: float
    ep_s: float
    bridge: bool               # a neighbour stage is across a bridge
    memory: dict[str, float]   # weights, grads, optimizer, activations, other (GiB)
    capacity_gib: float


@dataclass
class Shape:
    index: int
    replicas: int
    micro_batches: int
    vpp: int
    pipeline_s: float          # the estimate's closed form
    stages: list[StageRow]
    bridges: list[tuple[int, str]] = field(default_factory=list)   # (stage i -> i+1 crosses, bridge kind)


def _stage_row(c, label: str, group: str, tp: int, bridge: bool, cap: float) -> StageRow:
    mem = {"weights": c.weights_gib, "grads": c.grads_gib, "optimizer": c.optimizer_gib,
           "activations": c.activations_gib, "other": c.other_gib}
    return StageRow(label, group, tp, c.fwd_s, c.bwd_s, c.pp_s, c.tp_s, c.cp_s, c.ep_s, bridge, mem, cap)


def plan_shapes(doc: dict, e, cluster) -> list[Shape]:
    """The pipeline shapes of a plan with each stage's estimated times and memory (the estimate `e` of
    the plan as written: `io.plans.estimate_plan`)."""
    s = e.strategy
    if not e.shapes:     # homogeneous: one shape, the estimate's stages
        g = cluster.groups[0]
        cap = g.chip.need("memory_gib")
        rows = [_stage_row(c, f"stage {c.index}", g.name, s.tp, False, cap) for c in e.stages]
        pipe = e.micro_batches * max(r.fwd_s + r.bwd_s for r in rows) + e.breakdown_s.get("pp_bubble", 0.0)
        return [Shape(0, s.dp, e.micro_batches, s.vpp, pipe, rows)]
    out = []
    plan_vpp = int((doc.get("strategy") or {}).get("vpp", 1) or 1)
    for k, ((replicas, m, costs, pipe), p) in enumerate(zip(e.shapes, doc["pipelines"], strict=True)):
        vpp = int((p.get("strategy") or {}).get("vpp", plan_vpp) or 1)
        st = p["stages"]
        fam = [cluster.group(x["group"]).family for x in st]
        bridges = []
        for i in range(len(st) - 1):
            if fam[i] != fam[i + 1]:
                br = cluster.bridge(st[i]["group"], st[i + 1]["group"])
                bridges.append((i, br.kind if br is not None else "bridge"))
        crossing = {i for i, _ in bridges} | {i + 1 for i, _ in bridges}
        rows = [_stage_row(c, f"stage {i}", x["group"], int(x["tp"]), i in crossing,
                           cluster.group(x["group"]).chip.need("memory_gib"))
                for i, (c, x) in enumerate(zip(costs, st, strict=True))]
        out.append(Shape(k, replicas, m, vpp, pipe, rows, bridges))
    return out


# -- formatting --------------------------------------------------------------------------------
def fmt_s(x: float) -> str:
    """Seconds as `explain` prints them (present/render_plans.py)."""
    return f"{x:.4g} s" if x >= 0.01 or x == 0 else f"{x * 1e3:.3g} ms"


def fmt_s3(x: float) -> str:
    return f"{x:.3g} s" if x >= 0.01 or x == 0 else f"{x * 1e3:.3g} ms"


def fmt_gib(x: float) -> str:
    return f"{x:.1f}"


# -- matplotlib --------------------------------------------------------------------------------
def _mpl(option: str):
    """matplotlib, or an InputError naming the missing extra and its install command (exit 2)."""
    try:
        import matplotlib
        import matplotlib.ticker
        import matplotlib.transforms
        from matplotlib.figure import Figure
    except ImportError:
        raise InputError(option, "", f"needs the optional '{EXTRA}' extra (matplotlib), not installed: "
                         f"{INSTALL}") from None
    return matplotlib, Figure


RC = {"svg.hashsalt": "baige-plan", "svg.fonttype": "none", "svg.image_inline": True,
      "font.family": "DejaVu Sans", "font.size": 8, "axes.titlesize": 9, "axes.titleweight": "bold",
      "axes.unicode_minus": False, "hatch.linewidth": 0.6, "path.simplify": False}


def _format_of(path: Path, option: str, allowed: tuple[str, ...] = FORMATS) -> str:
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in allowed:
        raise InputError(option, "", f"{str(path)!r}: the file name must end in "
                         + " or ".join("." + a for a in allowed))
    return suffix


def _save(fig, fmt: str) -> str | bytes:
    buf = io.BytesIO()
    if fmt == "svg":
        fig.savefig(buf, format="svg", metadata={"Date": None})
        return buf.getvalue().decode("utf-8")
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    return buf.getvalue()


def _write(path: Path, data: str | bytes) -> None:
    from baige_plan.io.outfile import write_atomic
    write_atomic(path, data)


def _stage_colors(matplotlib, n: int) -> list:
    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20" if n <= 20 else "viridis"]
    if n <= 20:
        return [cmap(i % cmap.N) for i in range(n)]
    return [cmap(i / max(1, n - 1)) for i in range(n)]


# -- panel 1: schedule -------------------------------------------------------------------------
def _windows(ops: list[Op], pp: int, m: int, vpp: int, total: float) -> list[tuple[float, float]]:
    """One window [0, total], or two: warm-up + STEADY_CYCLES steady cycles on stage 0, and the last
    STEADY_CYCLES cycles of the last stage + the cool-down."""
    per = [[o for o in ops if o.stage == i] for i in range(pp)]      # each stage's ops, in its order
    order0, order_l = stage_order(pp, 0, m, vpp), stage_order(pp, pp - 1, m, vpp)
    warm0 = next((k for k, x in enumerate(order0) if x[0] == "B"), len(order0))
    cool_l = len(order_l) - 1 - max((k for k, x in enumerate(order_l) if x[0] == "F"), default=-1)
    a = warm0 + 2 * STEADY_CYCLES * vpp - 1
    b = len(order_l) - cool_l - 2 * STEADY_CYCLES * vpp
    if m * vpp <= FULL_DRAW or a >= len(per[0]) or b <= 0:
        return [(0.0, total)]
    left_end, right_start = per[0][a].end, per[-1][b].start
    if right_start - left_end <= 0.3 * total:
        return [(0.0, total)]
    return [(0.0, left_end), (right_start, total)]


def _draw_schedule(fig, spec, shape: Shape, matplotlib, first: bool, hetero: bool) -> None:
    rows = shape.stages
    pp, m, vpp = len(rows), shape.micro_batches, shape.vpp
    fwd, bwd = [r.fwd_s for r in rows], [r.bwd_s for r in rows]
    m_sim = m
    if 2 * m * vpp * pp > MAX_SIM_OPS:      # too many to simulate: simulate fewer, extrapolate the steady state
        m_sim = max(pp, (MAX_SIM_OPS // (2 * vpp * pp)) // pp * pp)
    ops, sim_total = simulate_schedule(fwd, bwd, m_sim, vpp)
    t_max = max(f + b for f, b in zip(fwd, bwd, strict=True))
    windows = _windows(ops, pp, m_sim, vpp, sim_total)
    shift = (m - m_sim) * t_max            # extrapolated steady state (0 when every micro-batch is simulated)
    total = sim_total + shift
    if shift:
        if len(windows) == 1:
            windows = [(0.0, sim_total / 2), (sim_total / 2, sim_total)]
    lens = [w1 - w0 for w0, w1 in windows]
    ratios = [max(x, 0.3 * sum(lens)) for x in lens]
    sub = spec.subgridspec(1, len(windows), width_ratios=ratios, wspace=0.04)
    axes = [fig.add_subplot(sub[0, k]) for k in range(len(windows))]
    label_every = len(windows) == 1 and m * vpp <= 64
    for k, (ax, (w0, w1)) in enumerate(zip(axes, windows, strict=True)):
        off = shift if (k == len(windows) - 1 and len(windows) > 1) else 0.0
        ax.set_xlim(w0 + off, w1 + off)
        ax.set_ylim(pp - 0.5, -0.5)
        for i in range(pp):
            ax.broken_barh([(off, sim_total)], (i - 0.4, 0.8), facecolors=IDLE_COLOR, edgecolor="none", zorder=1)
        sel = [o for o in ops if o.end > w0 and o.start < w1]
        for i, r in enumerate(rows):
            p2p = r.pp_s / 2 / vpp
            for kind, color in (("F", FWD_COLOR), ("B", BWD_COLOR)):
                bars = [(o.start + off, o.end - o.start) for o in sel if o.stage == i and o.kind == kind]
                if not bars:
                    continue
                ax.broken_barh(bars, (i - 0.4, 0.8), facecolors=color, edgecolor="white", linewidth=0.3, zorder=2)
                if p2p > 0:
                    ax.broken_barh([(x0 + w - p2p, p2p) for x0, w in bars], (i - 0.4, 0.8),
                                   facecolors=BRIDGE_COLOR if r.bridge else P2P_COLOR, edgecolor="none", zorder=3)
            if label_every:
                span = w1 - w0
                for o in sel:
                    if o.stage == i and (o.end - o.start) / span > 0.012:
                        ax.text((o.start + o.end) / 2, i, str(o.micro_batch) + (f".{o.chunk}" if vpp > 1 else ""),
                                ha="center", va="center", fontsize=6, color="white", zorder=4)
        for bi, kind in shape.bridges:
            ax.axhline(bi + 0.5, color=BRIDGE_COLOR, linestyle="--", linewidth=0.8, zorder=5)
            if k == 0:
                ax.text(w0, bi + 0.5, f" bridge ({kind}) ", color=BRIDGE_COLOR, fontsize=6, va="center",
                        ha="left", zorder=6, bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
        ax.set_yticks(range(pp))
        if k == 0:
            ax.set_yticklabels([f"{r.label} · {r.group} tp{r.tp}" for r in rows])
        else:
            ax.tick_params(left=False, labelleft=False)
            ax.spines["left"].set_visible(False)
        if k < len(windows) - 1:
            ax.spines["right"].set_visible(False)
        ax.set_xlabel("seconds" if k == 0 else "")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(5 if len(windows) > 1 else 10))
    if len(windows) > 1:
        gap = windows[1][0] + shift - windows[0][1]
        hidden = {o.micro_batch for o in ops if o.stage == 0 and o.kind == "F" and o.start >= windows[0][1]
                  and o.start < windows[1][0]}
        n_hidden = len(hidden) + (m - m_sim)
        d = 0.012
        for ax, xs in ((axes[0], (1 - d, 1 + d)), (axes[1], (-d * 2, d * 2))):
            kw = {"transform": ax.transAxes, "color": "black", "clip_on": False, "linewidth": 0.8}
            ax.plot(xs, (-0.02, 0.02), **kw)
            ax.plot(xs, (0.98, 1.02), **kw)
        axes[1].set_xlabel(f"axis broken: {n_hidden} more micro-batches of steady state "
                           f"({fmt_s(gap)}{', extrapolated' if shift else ''}) elided")
    last = axes[-1]
    for i, r in enumerate(rows):
        parts = [f"F {fmt_s3(r.fwd_s)}", f"B {fmt_s3(r.bwd_s)}"]
        parts += [f"{n} {fmt_s3(v)}" for n, v in (("tp", r.tp_s), ("cp", r.cp_s), ("ep", r.ep_s), ("p2p", r.pp_s))
                  if v > 0]
        last.text(1.01, i, " · ".join(parts), transform=matplotlib.transforms.blended_transform_factory(
            last.transAxes, last.transData), va="center", ha="left", fontsize=6.5)
    kind = "interleaved 1F1B" if vpp > 1 else "1F1B"
    head = f"shape {shape.index}: " if hetero else ""
    axes[0].set_title(
        f"{'pipeline schedule -- ' if first else ''}{head}{kind}{f' (vpp {vpp})' if vpp > 1 else ''}, "
        f"{m} micro-batches per replica x {shape.replicas} replicas, per-stage times per micro-batch at right\n"
        f"pipeline {fmt_s(total)} as simulated; the estimate's {fmt_s(shape.pipeline_s)} = m x slowest stage "
        "+ bubble", loc="left", fontsize=8)


def _schedule_legend(fig, spec, bridges: bool) -> None:
    from matplotlib.patches import Patch

    ax = fig.add_subplot(spec)
    ax.axis("off")
    handles = [Patch(facecolor=FWD_COLOR, label="forward"), Patch(facecolor=BWD_COLOR, label="backward"),
               Patch(facecolor=P2P_COLOR, label="pipeline p2p (the end of each bar)"),
               Patch(facecolor=IDLE_COLOR, label="idle (bubble)")]
    if bridges:
        handles.insert(3, Patch(facecolor=BRIDGE_COLOR, label="p2p of a stage next to a bridge"))
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(0.0, 0.5), ncol=len(handles), frameon=False,
              fontsize=7)


# -- panel 2: placement ------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeRow:
    group: str
    first: int | None      # first node of the row; None: a row naming elided nodes
    count: int             # nodes the row stands for (alike nodes merged), or nodes elided


def _node_rows(cluster, place: list[dict], max_rows: int = MAX_NODE_ROWS) -> tuple[list[NodeRow], int, int]:
    """The placement panel's rows: every node when there are at most `max_rows`; else runs of consecutive
    alike nodes (same stage, TP and CP rank on every device) merged into one row, and if still too many,
    each group's first and last rows kept (rows shared in proportion) and the rest named in one row.
    Returns (rows, nodes merged away, nodes elided)."""
    total = sum(g.nodes for g in cluster.groups)
    if total <= max_rows:
        return [NodeRow(g.name, n, 1) for g in cluster.groups for n in range(g.nodes)], 0, 0
    sig: dict[tuple[str, int], list] = {}
    for p in place:
        sig.setdefault((p["group"], p["node"]), []).append((p["device"], p["pipeline"], p["stage"], p["tp_rank"],
                                                             p["cp_rank"]))
    runs: dict[str, list[NodeRow]] = {}
    for g in cluster.groups:
        out: list[NodeRow] = []
        for n in range(g.nodes):
            key = sorted(sig.get((g.name, n), []))
            if out and out[-1].first is not None and sorted(sig.get((g.name, out[-1].first), [])) == key:
                out[-1] = NodeRow(g.name, out[-1].first, out[-1].count + 1)
            else:
                out.append(NodeRow(g.name, n, 1))
        runs[g.name] = out
    merged = total - sum(len(r) for r in runs.values())
    n_rows = sum(len(r) for r in runs.values())
    if n_rows <= max_rows:
        return [r for g in cluster.groups for r in runs[g.name]], merged, 0
    budget = max_rows - len(cluster.groups)          # one elision row per group at most
    share = {g.name: max(2, budget * len(runs[g.name]) // n_rows) for g in cluster.groups}
    while sum(share.values()) > budget and max(share.values()) > 1:   # many groups: trim the largest shares
        big = max(share, key=lambda n: (share[n], n))
        share[big] -= 1
    rows: list[NodeRow] = []
    elided = 0
    for g in cluster.groups:
        rs, k = runs[g.name], share[g.name]
        if k >= len(rs):
            rows += rs
            continue
        head, tail = (k + 1) // 2, k - (k + 1) // 2
        gone = sum(r.count for r in rs[head:len(rs) - tail])
        rows += [*rs[:head], NodeRow(g.name, None, gone), *rs[len(rs) - tail:]]
        elided += gone
    return rows, merged, elided


def _draw_placement(fig, spec, doc: dict, cluster, matplotlib) -> None:
    from matplotlib.patches import Patch, Rectangle

    ax = fig.add_subplot(spec)
    place = doc.get("placement") or []
    rows, merged, elided = _node_rows(cluster, place)
    cols = max(g.devices_per_node for g in cluster.groups)
    where = {(p["group"], p["node"], p["device"]): p for p in place}
    n_stages = max([p["stage"] for p in place] + [0]) + 1
    colors = _stage_colors(matplotlib, n_stages)
    shapes = len({p["pipeline"] for p in place}) > 1
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    labels = []
    tp_cells: dict[tuple, list[tuple[int, int]]] = {}
    used = idle = 0
    for y, row in enumerate(rows):
        gname, node = row.group, row.first
        g = cluster.group(gname)
        if node is None:
            labels.append(f"{gname}: {row.count} nodes")
            ax.text((cols - 1) / 2, y, f"... {row.count} nodes of {gname} elided ...",
                    ha="center", va="center", fontsize=7, style="italic")
            continue
        labels.append(f"{gname} node {node}" if row.count == 1 else
                      f"{gname} nodes {node}-{node + row.count - 1} (x{row.count})")
        for d in range(g.devices_per_node):
            p = where.get((gname, node, d))
            if p is None:
                r = Rectangle((d - 0.45, y - 0.42), 0.9, 0.84, facecolor="#F2F2F2", edgecolor="#BBBBBB",
                              hatch="//", linewidth=0.4)
                r.set_gid(f"idle-{gname}-{node}-{d}")
                ax.add_patch(r)
                idle += 1
                continue
            r = Rectangle((d - 0.45, y - 0.42), 0.9, 0.84, facecolor=colors[p["stage"]], edgecolor="none")
            r.set_gid(f"device-{gname}-{node}-{d}")
            ax.add_patch(r)
            used += 1
            if cols <= 32 and len(rows) <= 64:
                ax.text(d, y, f"{p['pipeline']}.{p['stage']}" if shapes else str(p["stage"]), ha="center",
                        va="center", fontsize=5.5 if cols > 8 else 6.5, color="white")
            tp_cells.setdefault((p["pipeline"], p["replica"], p["stage"], p["cp_rank"], gname, node), []).append((y, d))
    for (pipe, rep, stage, cp, gname, node), cells in sorted(tp_cells.items()):
        if len(cells) < 2:
            continue
        ds = sorted(d for _, d in cells)
        y = cells[0][0]
        # one outline per contiguous run of devices (a TP group is contiguous inside a node)
        runs, startd = [], ds[0]
        for a, b in zip(ds, ds[1:] + [None], strict=True):
            if b != a + 1:
                runs.append((startd, a))
                startd = b
        for k, (d0, d1) in enumerate(runs):
            r = Rectangle((d0 - 0.5, y - 0.48), d1 - d0 + 1, 0.96, fill=False, edgecolor="black", linewidth=1.0)
            r.set_gid(f"tpgroup-{gname}-{node}-p{pipe}-r{rep}-s{stage}-c{cp}" + (f"-{k}" if k else ""))
            ax.add_patch(r)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=6 if len(rows) > 24 else 7)
    ax.set_xticks(range(cols))
    ax.set_xticklabels([str(d) for d in range(cols)], fontsize=6.5)
    ax.set_xlabel("device in node")
    ax.tick_params(length=0)
    for sp in ax.spines.values():
        sp.set_visible(False)
    devices = sum(g.devices for g in cluster.groups)
    nodes = sum(g.nodes for g in cluster.groups)
    title = (f"placement -- {len(place)} of {devices} devices used, coloured by pipeline stage"
             f"{' (cell: shape.stage)' if shapes else ''}, TP groups outlined")
    if merged or elided:
        title += (f"\n{nodes} nodes in {len(rows)} rows: runs of alike nodes (same stages and ranks) merged"
                  + (f", {elided} nodes elided" if elided else ""))
    ax.set_title(title, loc="left")
    handles = [Patch(facecolor=colors[s], label=f"stage {s}") for s in range(min(n_stages, 16))]
    if n_stages > 16:
        handles.append(Patch(facecolor="white", label=f"... {n_stages - 16} more"))
    if idle:
        handles.append(Patch(facecolor="#F2F2F2", edgecolor="#BBBBBB", hatch="//", label="idle"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False, fontsize=7)


# -- panel 3: memory ---------------------------------------------------------------------------
def _draw_memory(fig, spec, shapes: list[Shape], frac: float, matplotlib, hetero: bool) -> None:
    from matplotlib.patches import Patch

    ax = fig.add_subplot(spec)
    bars = [(sh, r) for sh in shapes for r in sh.stages]
    xs = list(range(len(bars)))
    bottom = [0.0] * len(bars)
    for kind, color in MEM_KINDS:
        vals = [r.memory[kind] for _, r in bars]
        ax.bar(xs, vals, bottom=bottom, color=color, width=0.7, edgecolor="white", linewidth=0.3)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    top = max([*bottom, *(r.capacity_gib for _, r in bars)])
    for x, ((sh, r), tot) in enumerate(zip(bars, bottom, strict=True)):
        t = ax.text(x, tot + top * 0.01, fmt_gib(tot), ha="center", va="bottom", fontsize=7)
        t.set_gid(f"memory-{sh.index}-{r.label.split()[-1]}")
        ax.hlines(r.capacity_gib, x - 0.45, x + 0.45, color="black", linewidth=1.4)
        if frac < 1:
            ax.hlines(r.capacity_gib * frac, x - 0.45, x + 0.45, color="black", linewidth=0.8, linestyle=":")
    # one capacity label per run of bars on the same capacity
    k = 0
    while k < len(bars):
        cap = bars[k][1].capacity_gib
        j = k
        while j + 1 < len(bars) and bars[j + 1][1].capacity_gib == cap:
            j += 1
        ax.text((k + j) / 2, cap + top * 0.01, f"capacity {cap:g} GiB ({bars[k][1].group})", ha="center",
                va="bottom", fontsize=7)
        k = j + 1
    ax.set_ylim(0, top * 1.12)
    ax.set_xlim(-0.6, len(bars) - 0.4)
    ax.set_xticks(xs)
    lab = [(f"{sh.index}·{r.label.split()[-1]}\n{r.group}" if hetero else f"{r.label.split()[-1]}\n{r.group}")
           for sh, r in bars]
    ax.set_xticklabels(lab, fontsize=6 if len(bars) > 16 else 7, rotation=90 if len(bars) > 24 else 0)
    ax.set_xlabel("shape·stage" if hetero else "stage")
    ax.set_ylabel("GiB per device")
    peak = max(bars, key=lambda b: sum(b[1].memory.values()) / b[1].capacity_gib)[1]
    ax.set_title(f"memory per device by stage -- peak {fmt_gib(sum(peak.memory.values()))} GiB of "
                 f"{peak.capacity_gib:g} GiB ({peak.group}, {peak.label})"
                 + (f"; dotted: {frac:.0%} allowed" if frac < 1 else ""), loc="left")
    handles = [Patch(facecolor=c, label=k) for k, c in MEM_KINDS]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False, fontsize=7)


# -- the plan picture --------------------------------------------------------------------------
def render_plan(doc: dict, e, cluster, title: str, fmt: str, option: str = "--svg") -> str | bytes:
    """The plan picture as SVG text or PNG bytes."""
    matplotlib, Figure = _mpl(option)

    shapes = plan_shapes(doc, e, cluster)
    hetero = bool(e.shapes) and (len(shapes) > 1 or cluster.is_heterogeneous)
    drawn = shapes[:MAX_SHAPES]
    frac = float((doc.get("search") or {}).get("max_memory_frac", 1.0))
    rows, _, _ = _node_rows(cluster, doc.get("placement") or [])
    # the page, top to bottom, in inches: (panel or None for a gap, height)
    layout: list[tuple[str | None, float]] = [(None, 0.6)]
    for k, sh in enumerate(drawn):
        layout += [(None, 0.5), (f"schedule{k}", 0.4 + 0.28 * len(sh.stages)), (None, 0.45)]
    layout += [("legend", 0.3), (None, 0.4), ("placement", 0.3 + 0.2 * len(rows)), (None, 0.5),
               (None, 0.35), ("memory", 2.6), (None, 0.75)]
    if len(shapes) > len(drawn):
        layout.insert(len(drawn) * 3 + 1, ("more", 0.25))
    height = sum(h for _, h in layout)
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(13, height))
        gs = fig.add_gridspec(len(layout), 1, height_ratios=[h for _, h in layout], hspace=0.0,
                              left=0.15, right=0.76, top=1.0, bottom=0.0)
        at = {name: gs[k] for k, (name, _) in enumerate(layout) if name is not None}
        for k, sh in enumerate(drawn):
            _draw_schedule(fig, at[f"schedule{k}"], sh, matplotlib, k == 0, hetero)
        _schedule_legend(fig, at["legend"], any(r.bridge for sh in drawn for r in sh.stages))
        if "more" in at:
            fig.add_subplot(at["more"]).axis("off")
            fig.axes[-1].text(0, 0.5, f"({len(shapes) - len(drawn)} more pipeline shapes not drawn)", fontsize=7)
        _draw_placement(fig, at["placement"], doc, cluster, matplotlib)
        _draw_memory(fig, at["memory"], shapes, frac, matplotlib, hetero)
        fig.suptitle(f"{title}\nstep {fmt_s(e.step_time_s)}   MFU {e.mfu:.1%}   {e.tokens_per_s:,.0f} tokens/s   "
                     f"peak memory {e.peak_memory_gib:.1f} GiB of {e.capacity_gib:g} GiB   "
                     f"bubble {fmt_s(e.breakdown_s.get('pp_bubble', 0.0))}   bottleneck: {e.bottleneck}",
                     x=0.02, ha="left", y=1 - 0.1 / height, va="top", fontsize=9)
        return _save(fig, fmt)


def write_plan_pictures(doc: dict, e, cluster, title: str, svg: Path | None = None, png: Path | None = None) -> None:
    """`explain --svg FILE` / `--png FILE`: each file written atomically (io/outfile.py). InputError
    (exit 2) without matplotlib, on a wrong extension or an unwritable target."""
    for path, fmt, option in ((svg, "svg", "--svg"), (png, "png", "--png")):
        if path is None:
            continue
        _mpl(option)
        if Path(path).suffix.lower() != "." + fmt:
            raise InputError(option, "", f"{str(path)!r}: the file name must end in .{fmt}")
        from baige_plan.io.outfile import check_target
        check_target(path)
        _write(Path(path), render_plan(doc, e, cluster, title, fmt, option))


# -- backtest ----------------------------------------------------------------------------------
def render_backtest(doc: dict, title: str, fmt: str, option: str = "--plot") -> str | bytes:
    """Predicted vs measured step time, log-log, y = x and a ±10 % band, every point labelled with its number
    and a key beside (number, error, measured -> predicted, run id): ids next to the points would overlap."""
    matplotlib, Figure = _mpl(option)

    pts = [(i, r) for i, r in enumerate(doc["rows"]) if r.get("measured_step_time_s") and r.get("predicted_step_time_s")]
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(13, 8))
        ax = fig.add_axes((0.06, 0.08, 0.56, 0.82))
        if pts:
            vals = [r["measured_step_time_s"] for _, r in pts] + [r["predicted_step_time_s"] for _, r in pts]
            lo, hi = min(vals) / 1.3, max(vals) * 1.3
        else:
            lo, hi = 0.1, 10.0
        xs = [lo * (hi / lo) ** (k / 50) for k in range(51)]
        ax.fill_between(xs, [x * 0.9 for x in xs], [x * 1.1 for x in xs], color="#DDE8F5", label="±10 %", zorder=1)
        ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8, label="y = x (predicted = measured)", zorder=2)
        inside = 0
        key = []
        for n, (i, r) in enumerate(pts, start=1):
            meas, pred = r["measured_step_time_s"], r["predicted_step_time_s"]
            err = r["step_time_error"] if r.get("step_time_error") is not None else pred / meas - 1
            ok = abs(err) <= 0.10
            inside += ok
            (pt,) = ax.plot([meas], [pred], "o", markersize=4.5, zorder=3, color="#4C72B0" if ok else "#C44E52")
            pt.set_gid(f"run-{i}")
            ax.annotate(str(n), (meas, pred), xytext=(4, 3), textcoords="offset points", fontsize=6.5, zorder=4)
            key.append(f"{n:>3}  {err:+7.1%}  {meas:.4g} s -> {pred:.4g} s  {r['id']}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_aspect("equal", adjustable="box")
        label = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(label)
            axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("measured step time (s)")
        ax.set_ylabel("predicted step time (s)")
        ax.grid(True, which="both", linewidth=0.3, color="#CCCCCC")
        s = doc.get("summary") or {}
        sub = f"{len(pts)} runs with a measured step time: {inside} within ±10 %, {len(pts) - inside} outside (red)"
        if "median_abs_step_time_error" in s:
            sub += (f"\nmedian |error| {s['median_abs_step_time_error']:.1%}, max {s['max_abs_step_time_error']:.1%}, "
                    f"mean signed {s['mean_signed_step_time_error']:+.1%}")
        ax.set_title(f"{title}\n{sub}", loc="left", fontsize=8)
        ax.legend(loc="upper left", frameon=False, fontsize=7)
        if key:
            size = 6.5 if len(key) <= 60 else max(3.5, 6.5 * 60 / len(key))
            fig.text(0.64, 0.9, "  #    error  measured -> predicted  run\n" + "\n".join(key), va="top", ha="left",
                     fontsize=size, family="DejaVu Sans Mono")
        return _save(fig, fmt)


def write_backtest_plot(doc: dict, path: Path, title: str) -> None:
    """`backtest --plot FILE` (.svg or .png), written atomically. InputError (exit 2) without matplotlib,
    on another extension or an unwritable target."""
    _mpl("--plot")
    fmt = _format_of(path, "--plot")
    from baige_plan.io.outfile import check_target
    check_target(path)
    _write(Path(path), render_backtest(doc, title, fmt))

