"""Rich rendering of estimates for humans (stdout tables). Only this module imports rich tables."""

from __future__ import annotations

import os
import shutil
import sys

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from baige_plan.cost.estimate import Estimate


def _fmt_s(x: float) -> str:
    return f"{x:.3g} s" if x >= 0.01 or x == 0 else f"{x * 1e3:.3g} ms"


def estimate_tables(e: Estimate, title: str, band: tuple[float, float] | None = None,
                    band_class: str = "") -> list[Table]:
    """`band`: the estimate's step_time_band_s, from the held-out residuals of `band_class` (io/bands.py)."""
    s = e.strategy
    head = Table(title=title, show_header=False, title_justify="left")
    head.add_column("k", style="bold")
    head.add_column("v")
    hsdp = f" (hybrid: sharded over {s.fsdp_shard}, {s.dp * s.cp // s.fsdp_shard} replicas)" if s.fsdp_shard else ""
    strat = (f"tp {s.tp}  pp {s.pp}  dp {s.dp}  cp {s.cp}  ep {s.ep}  etp {s.etp}  zero {s.zero}{hsdp}  "
             f"mb {s.micro_batch}  vpp {s.vpp}  recompute {s.recompute}  sp {'on' if s.sequence_parallel else 'off'}  "
             f"attn {s.attention}")
    moe = [x for x, on in ((f"dispatcher {s.moe_dispatcher}", bool(s.moe_dispatcher)),
                           ("EP all-to-all overlap", s.moe_a2a_overlap), ("fused grouped MLP", s.moe_fused_mlp)) if on]
    if moe:
        strat += "  " + ", ".join(moe)
    head.add_row("strategy", strat)
    split = split_text(s, e)
    if split:
        head.add_row("pipeline split", split)
    head.add_row("fits", Text("yes", style="green") if e.fits else Text("NO", style="red"))
    head.add_row("step time", _fmt_s(e.step_time_s))
    if band is not None:
        head.add_row("step time band", f"{_fmt_s(band[0])} to {_fmt_s(band[1])} (q10-q90 of held-out {band_class} runs)")
    head.add_row("throughput", f"{e.tokens_per_s:,.0f} tokens/s ({e.tokens_per_s_per_device:,.1f} per device)")
    head.add_row("MFU / HFU", f"{e.mfu:.1%} / {e.hfu:.1%}  ({e.model_tflops_per_device:.1f} model TFLOP/s per device)")
    head.add_row("peak memory", f"{e.peak_memory_gib:.1f} GiB of {e.capacity_gib:.1f} GiB")
    margin = e.memory_margin_gib
    head.add_row("memory margin", Text.assemble((f"{margin:+.1f} GiB", "green" if margin >= 0 else "red"),
                                                f" against the {e.memory_limit_gib:.1f} GiB allowed (--max-memory-frac "
                                                f"{e.memory_frac:g} x {e.capacity_gib:.1f} GiB)"))
    head.add_row("micro-batches", f"{e.micro_batches} per replica per step")
    head.add_row("bottleneck", e.bottleneck)
    br = Table(title="step time breakdown (critical stage)", title_justify="left")
    br.add_column("part")
    br.add_column("seconds", justify="right")
    br.add_column("share", justify="right")
    for k, v in e.breakdown_s.items():
        br.add_row(k, f"{v:.4g}", f"{v / e.step_time_s:.1%}" if e.step_time_s else "-")
    mem = Table(title="memory per device (peak stage)", title_justify="left")
    mem.add_column("kind")
    mem.add_column("GiB", justify="right")
    for k, v in e.memory_gib.items():
        mem.add_row(k, f"{v:.2f}")
    mem.add_row(Text("total", style="bold"), Text(f"{e.peak_memory_gib:.2f}", style="bold"))
    return [head, br, mem]


def chunk_text(chunks: tuple[int, ...] | list[int]) -> str:
    """A stage's layers per model chunk, run-length: (1, 2, 2, 2) -> '1+2x3'."""
    runs: list[list[int]] = []
    for c in chunks:
        if runs and runs[-1][0] == c:
            runs[-1][1] += 1
        else:
            runs.append([c, 1])
    return "+".join(str(c) if n == 1 else f"{c}x{n}" for c, n in runs)


def split_text(s, e: Estimate) -> str:
    """Per-stage layer counts of an uneven split (empty for an even one): '15 | 16 x6 | 15 layers per
    stage; first/last 15/15', with each stage's chunks when vpp > 1."""
    uneven = s.first_stage_layers or s.last_stage_layers or s.account_for_embedding or s.account_for_loss or \
        getattr(s, "pipeline_layout", None)
    if not e.stages or not uneven:
        return ""
    from baige_plan.specs.strategy import chunk_layers
    n = sum(st.layers[1] - st.layers[0] for st in e.stages)
    try:
        chunks = chunk_layers(s, n)
    except Exception:   # a hand-edited split the rule does not build: show the stage ranges only
        chunks = tuple((st.layers[1] - st.layers[0],) for st in e.stages)
    cells = [str(sum(c)) + (f" ({chunk_text(c)})" if s.vpp > 1 else "") for c in chunks]
    runs: list[list] = []
    for c in cells:
        if runs and runs[-1][0] == c:
            runs[-1][1] += 1
        else:
            runs.append([c, 1])
    how = []
    if getattr(s, "pipeline_layout", None):
        how.append("explicit layout")
    if s.first_stage_layers or s.last_stage_layers:
        how.append(f"first/last {s.first_stage_layers or '-'}/{s.last_stage_layers or '-'}")
    if s.account_for_embedding or s.account_for_loss:
        how.append("embedding and loss counted as layers" if s.account_for_embedding and s.account_for_loss else
                   "embedding counted as a layer" if s.account_for_embedding else "loss counted as a layer")
    text = " | ".join(c if k == 1 else f"{c} x{k}" for c, k in runs) + " layers per stage"
    if s.vpp > 1:
        text += " (per chunk)"
    return text + (f"; {', '.join(how)}" if how else "")


# -- printing tables on stdout: never a cut cell, at any width (issue 19) --------------------------------------

def out_width(prefer: int = 100) -> int:
    """The width stdout tables are laid out for: COLUMNS when set, else the terminal's width when stdout is a
    terminal, else `prefer` (piped output: the same bytes whatever terminal the command was started from)."""
    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit() and int(cols) >= 20:
        return int(cols)
    try:
        if sys.stdout.isatty():
            return max(20, shutil.get_terminal_size((prefer, 24)).columns)
    except (AttributeError, ValueError, OSError):
        pass
    return prefer


_MEASURE = Console(width=100_000, markup=False, emoji=False, color_system=None)


def _cell_range(cell) -> tuple[int, int]:
    """(longest word, whole cell) in columns: the narrowest a cell wraps to without cutting, and its width."""
    m = Measurement.get(_MEASURE, _MEASURE.options, cell)
    return m.minimum, m.maximum


WRAP_FROM = 16     # a cell narrower than this (a number, a short label) is never wrapped; headers and text are


def _columns(t: Table) -> list[tuple[int, int]]:
    """Per column (the narrowest it may be, its natural width), cell content only (no padding): headers wrap
    at spaces, short cells keep their line, longer text wraps at spaces; a no_wrap column keeps its width."""
    out = []
    for c in t.columns:
        heads = ([c.header] if t.show_header else []) + ([c.footer] if t.show_footer else [])
        ranges = [(*_cell_range(x), True) for x in heads if x not in (None, "")]
        ranges += [(*_cell_range(x), False) for x in c.cells if x not in (None, "")]
        if not ranges:
            out.append((1, 1))
            continue
        hi = max(r[1] for r in ranges)
        lo = max(r[0] if r[2] or r[1] >= WRAP_FROM else r[1] for r in ranges)
        out.append((hi, hi) if c.no_wrap else (lo, hi))
    return out


def _frame(t: Table) -> int:
    """Columns a table takes beyond its cells: borders, separators, padding (as rich lays it out)."""
    n = len(t.columns)
    extra = (2 if t.box and t.show_edge else 0) + (n - 1 if t.box else 0)
    _, right, _, left = t.padding
    for i in range(n):
        lft, rgt = left, right
        if not t.pad_edge:
            lft = 0 if i == 0 else lft
            rgt = 0 if i == n - 1 else rgt
        extra += lft + rgt
    return extra


def _squeeze(t: Table, width: int) -> bool:
    """Fix the columns' widths so `t` fits `width` with every cell wrapped at spaces, none cut: the widest
    columns give way first, none below its longest word (rich's own collapse may cut a word). False when
    even the longest words do not fit."""
    cols = _columns(t)
    room = width - _frame(t)
    if sum(hi for _, hi in cols) <= room:
        return True                                     # natural widths fit: rich wraps nothing
    if sum(lo for lo, _ in cols) > room:
        return False
    w = [hi for _, hi in cols]
    while sum(w) > room:
        i = max((j for j in range(len(w)) if w[j] > cols[j][0]), key=lambda j: (w[j], -j))
        w[i] -= 1
    for c, x in zip(t.columns, w, strict=True):
        c.width = x
    return True


def _plain(x) -> str:
    return " ".join((x.plain if isinstance(x, Text) else str(x if x is not None else "")).split())


def _records(t: Table, width: int) -> list[Text]:
    """The narrow layout of last resort: one record per row, its first cell as the heading, then `header value`
    pairs packed into indented lines (a pair wider than the line folds, never cut)."""
    heads = [_plain(c.header) for c in t.columns]
    cols = [list(c.cells) for c in t.columns]
    lines: list[Text] = []
    for r in range(max((len(c) for c in cols), default=0)):
        cells = [_plain(c[r]) if r < len(c) else "" for c in cols]
        first = cells[0] if heads[0] in ("", "#") or not t.show_header else f"{heads[0]} {cells[0]}"
        lines.append(Text(("#" if heads[0] == "#" else "") + first, style="bold"))
        pairs = [(f"{h} {v}" if h and t.show_header else v) for h, v in zip(heads[1:], cells[1:], strict=True)
                 if v not in ("",)]
        line = ""
        for p in pairs:
            if line and cell_len(line) + 2 + cell_len(p) > width - 2:
                lines.append(Text("  " + line))
                line = ""
            line = f"{line}  {p}" if line else p
        if line:
            lines.append(Text("  " + line))
    return lines


def fit(t: Table, width: int) -> list:
    """What to print for table `t` at `width` columns, no cell cut: the table as designed (cells wrapped at
    spaces where needed), else without its box, else without padding, else one record per row."""
    if _squeeze(t, width):
        return [t]
    t.box, t.show_edge, t.pad_edge, t.padding = box.SIMPLE_HEAD, False, False, (0, 1)
    if _squeeze(t, width):
        return [t]
    t.padding = (0, 0)                      # SIMPLE_HEAD still puts one space between columns
    if _squeeze(t, width):
        return [t]
    return _records(t, width)


def natural_fits(t: Table, width: int) -> bool:
    return sum(hi for _, hi in _columns(t)) + _frame(t) <= width


class Stdout:
    """stdout for people: tables laid out for out_width(prefer) with no cell cut (fit), other renderables and
    strings wrapped at the same width. Markup off: names from user files print as written ("[/x]" is no markup)."""

    def __init__(self, prefer: int = 100):
        self.width = out_width(prefer)
        self.console = Console(width=self.width, markup=False, emoji=False)

    def print(self, x="") -> None:
        """A Table, or a tuple of tables showing the same thing, widest first (the first whose cells fit
        unwrapped is printed, else the last one fitted); anything else as rich prints it. A table's title and
        caption print as lines of their own, wrapped at the width, not the table's."""
        if not isinstance(x, (Table, tuple, list)):
            self.console.print(_clean(x))
            return
        alts = [_clean_table(a) for a in (list(x) if isinstance(x, (tuple, list)) else [x])]
        t = next((a for a in alts if natural_fits(a, self.width)), alts[-1])
        title, caption = t.title, t.caption
        t.title = t.caption = None
        if title:
            self.console.print(title if isinstance(title, Text) else Text(str(title), style="italic"))
        for r in fit(t, self.width):
            self.console.print(r)
        if caption:
            self.console.print(caption if isinstance(caption, Text) else Text(str(caption)))


def _clean(x):
    """A string or Text with user input in it, control characters escaped (baige_plan/safe_text.py)."""
    from baige_plan.safe_text import printable
    if isinstance(x, str):
        return printable(x)
    if isinstance(x, Text) and not x.plain.isprintable() and printable(x.plain) != x.plain:
        return Text(printable(x.plain), style=x.style, justify=x.justify, no_wrap=x.no_wrap)
    return x


def _clean_table(t):
    if isinstance(t, Table):
        for col in t.columns:
            col._cells = [_clean(c) for c in col._cells]
            col.header = _clean(col.header)
        t.title, t.caption = _clean(t.title), _clean(t.caption)
    return t


def print_tables(tables: list, prefer: int = 100) -> None:
    """Print tables (or tuples of alternative layouts) on stdout, no cell cut at any width (Stdout)."""
    out = Stdout(prefer)
    for t in tables:
        out.print(t)


def print_text(*lines, prefer: int = 100) -> None:
    """Lines of text on stdout beside print_tables' tables, wrapped at the same width (no markup)."""
    out = Stdout(prefer)
    for x in lines:
        out.print(x)
