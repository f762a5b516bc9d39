"""Rich rendering of estimates for humans (stdout tables). Only this module imports rich tables."""

from __future__ import annotations

from rich.console import Console
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
    strat = (f"tp {s.tp}  pp {s.pp}  dp {s.dp}  cp {s.cp}  ep {s.ep}  etp {s.etp}  zero {s.zero}  mb {s.micro_batch}  "
             f"vpp {s.vpp}  recompute {s.recompute}  sp {'on' if s.sequence_parallel else 'off'}  attn {s.attention}")
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
    uneven = s.first_stage_layers or s.last_stage_layers or s.account_for_embedding or s.account_for_loss
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
    if s.first_stage_layers or s.last_stage_layers:
        how.append(f"first/last {s.first_stage_layers or '-'}/{s.last_stage_layers or '-'}")
    if s.account_for_embedding or s.account_for_loss:
        how.append("embedding and loss counted as layers" if s.account_for_embedding and s.account_for_loss else
                   "embedding counted as a layer" if s.account_for_embedding else "loss counted as a layer")
    text = " | ".join(c if k == 1 else f"{c} x{k}" for c, k in runs) + " layers per stage"
    if s.vpp > 1:
        text += " (per chunk)"
    return text + (f"; {', '.join(how)}" if how else "")


def print_tables(tables: list[Table]) -> None:
    console = Console(width=max(Console().width, 100), markup=False)   # names from files are text, not markup
    for t in tables:
        console.print(t)
