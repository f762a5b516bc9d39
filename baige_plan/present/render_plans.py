"""Rich rendering for plan, explain and diff (stdout tables), and the search progress line (stderr)."""

from __future__ import annotations

import threading
import time

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text


def _console(stderr: bool = False) -> Console:
    """The progress line's console (stderr): the terminal's own width, so a long status never wraps into
    lines the live display cannot take back. Markup off: names from user files print as written."""
    return Console(stderr=stderr, markup=False, emoji=False)


def print_tables(tables: list) -> None:
    """Tables on stdout, no cell cut at any width (present/render.py print_tables)."""
    from baige_plan.present.render import print_tables as show

    show(tables)


def _s(x: float) -> str:
    return f"{x:.4g} s" if x >= 0.01 or x == 0 else f"{x * 1e3:.3g} ms"


def _knob(k: str, v) -> str:
    return ("on" if v else "off") if k == "sequence_parallel" else str(v)


def _strat_cells(s: dict, equivalent: dict | None = None) -> list[str]:
    """The strategy's cells; a knob with equivalent values (search/ranking.py dedupe) shows them all: none|selective."""
    eq = equivalent or {}

    def c(k: str) -> str:
        # each value once, in member order (two knobs equivalent together list their members' values twice)
        cell = "|".join(dict.fromkeys(_knob(k, v) for v in eq[k])) if k in eq else _knob(k, s[k])
        if k == "ep":   # Megatron-core's EP all-to-all overlap rides on the ep cell: 8+ov (on), 8(+ov) (either)
            cell += "(+ov)" if "moe_a2a_overlap" in eq else "+ov" if s.get("moe_a2a_overlap") else ""
        if k == "dp":   # Megatron's tp-pp-dp rank order rides on the dp cell: 8^ (on), 8(^) (either)
            cell += "(^)" if "tp_pp_dp_mapping" in eq else "^" if s.get("tp_pp_dp_mapping") else ""
        if k == "zero" and s.get("fsdp_shard"):   # hybrid sharding rides on the zero cell: 3h8 (sharded over 8)
            cell += f"h{s['fsdp_shard']}"
        return cell

    return [c(k) for k in ("tp", "pp", "dp", "cp", "ep", "zero", "micro_batch", "vpp", "recompute",
                           "sequence_parallel")]


_STRAT_HEAD = ["tp", "pp", "dp", "cp", "ep", "zero", "mb", "vpp", "recompute", "sp"]


def _band(p: dict) -> str:
    b = p.get("step_time_band_s")
    return f"{b[0]:.3g}-{b[1]:.3g}" if b else "-"


def ranking_tables(plans: list[dict], title: str, idle: list[dict] | None = None,
                   notes: list[str] | None = None) -> tuple[Table, Table]:
    """(the ranking table, its narrow layout): print_tables shows the first that fits the width unwrapped. The
    narrow layout has the strategy in one wrapped cell (cp, ep, vpp only when a plan uses them)."""
    return ranking_table(plans, title, idle, notes), _ranking_narrow(plans, title, idle, notes)


def _caption(idle: list[dict] | None, notes: list[str] | None) -> str | None:
    cap = "\n".join([f"idle devices: {x['group']} {x['devices']}: {x['why']}" for x in idle or []] + (notes or []))
    return cap or None


def _mark(i: int, p: dict) -> str:
    g = p.get("tie_group") or 0
    return f"{i + 1}" + ("" if not p.get("tie") else "~" if g == 1 else f"~{g}")


def _ranking_narrow(plans: list[dict], title: str, idle: list[dict] | None, notes: list[str] | None) -> Table:
    t = Table(title=title, title_justify="left", caption=_caption(idle, notes), caption_justify="left",
              box=box.SIMPLE_HEAD, padding=0, show_edge=False)
    used = {k for k in ("cp", "ep", "vpp") if any(p["strategy"][k] != 1 or k in (p.get("equivalent") or {})
                                                  for p in plans)}
    for h in ("#", "strategy", "step time", "band s", "MFU", "tokens/s/dev", "peak GiB"):
        t.add_column(h, justify="left" if h == "strategy" else "right", no_wrap=h not in ("strategy",))
    for i, p in enumerate(plans):
        cells = _strat_cells(p["strategy"], p.get("equivalent"))
        strat = " ".join(f"{h} {c}" for h, c in zip(_STRAT_HEAD, cells, strict=True)
                         if h not in ("cp", "ep", "vpp") or h in used)
        t.add_row(_mark(i, p), strat, _s(p["step_time_s"]), _band(p), f"{p['mfu']:.1%}",
                  f"{p['tokens_per_s_per_device']:,.0f}", f"{p['peak_memory_gib']:.1f}")
    return t


def ranking_table(plans: list[dict], title: str, idle: list[dict] | None = None,
                  notes: list[str] | None = None) -> Table:
    """The plans in the order shown; `idle` ({group, devices, why}: devices the plans leave unused,
    search/partial.py) goes under the table, one "idle devices" line each, then `notes` (the tie rule, the
    published recipe). Ties (search/ranking.py) are marked "~" after the number ("~2": the second tie group);
    equivalent knobs are joined by "|"."""
    # one space between columns (no padding): the table fits 100 columns; ep only when a plan uses it
    t = Table(title=title, title_justify="left", caption=_caption(idle, notes), caption_justify="left",
              box=box.SIMPLE_HEAD, padding=0)
    ep = any(p["strategy"]["ep"] != 1 for p in plans)   # the EP overlap (+ov) needs ep > 1
    keep = [h != "ep" or ep for h in _STRAT_HEAD]
    for h in ["#", *(h for h, k in zip(_STRAT_HEAD, keep, strict=True) if k), "step time", "band s", "MFU",
              "tokens/s/dev", "peak GiB"]:
        t.add_column(h, justify="right" if h != "recompute" else "left")
    for i, p in enumerate(plans):
        cells = [c for c, k in zip(_strat_cells(p["strategy"], p.get("equivalent")), keep, strict=True) if k]
        t.add_row(_mark(i, p), *cells, _s(p["step_time_s"]), _band(p), f"{p['mfu']:.1%}",
                  f"{p['tokens_per_s_per_device']:,.0f}", f"{p['peak_memory_gib']:.1f}")
    return t


def layout_text(s: dict) -> str:
    """A strategy in a line: tp 4 pp 8 dp 16 vpp 6 mb 1 zero 1 recompute none (cp, ep, vpp when > 1)."""
    parts = [f"tp {s['tp']}", f"pp {s['pp']}", f"dp {s['dp']}"]
    parts += [f"{k} {s[k]}" for k in ("cp", "ep", "vpp") if s.get(k, 1) != 1]
    zero = f"{s['zero']} (hybrid, sharded over {s['fsdp_shard']})" if s.get("fsdp_shard") else s["zero"]
    tail = [f"mb {s['micro_batch']}", f"zero {zero}", f"recompute {s['recompute']}"]
    return " ".join(parts + tail + ([f"dispatcher {s['moe_dispatcher']}"] if s.get("moe_dispatcher") else [])
                    + (["EP all-to-all overlap"] if s.get("moe_a2a_overlap") else [])
                    + (["rank order tp-pp-dp"] if s.get("tp_pp_dp_mapping") else []))


def recipe_line(pub: dict | None, top: dict, none_why: str = "") -> str:
    """The published recipe beside the top plan (io/recipes.py, `published_recipe` of `plan --format json`)."""
    if pub is None:
        return f"published recipe: none near{f' ({none_why})' if none_why else ''}"
    e = pub["estimate"]
    band = e.get("step_time_band_s")
    ratio = e["step_time_s"] / top["step_time_s"] - 1
    vs = "as fast as" if abs(ratio) < 5e-4 else f"{abs(ratio):.1%} {'slower' if ratio > 0 else 'faster'} than"
    fit = "" if e["fits"] else f", does not fit: {e['peak_memory_gib']:.1f} GiB per device"
    on = pub.get("measured_on") or {}
    measured = (f"{_s(pub['measured_step_time_s'])}" if pub.get("measured_step_time_s") else "step time not published")
    return (f"published recipe: {pub['source']} ({pub['id']}) {layout_text(pub['strategy'])} -> our estimate "
            f"{_s(e['step_time_s'])}" + (f" ({band[0]:.3g}-{band[1]:.3g} s)" if band else "")
            + f", {vs} the top plan{fit}; measured there: {measured} on {pub['measured_gpus']} GPUs"
            + (f" ({on.get('chip')}, {on.get('precision')}, seq {on.get('seq_len')}, global batch "
               f"{on.get('global_batch')})" if on else ""))


def explain_tables(plan: dict, stages: list[dict], title: str) -> list[Table]:
    """Per-stage breakdown, memory by kind vs capacity, runner-up comparison."""
    est = plan["estimate"]
    head = Table(title=title, show_header=False, title_justify="left")
    head.add_column("k", style="bold")
    head.add_column("v")
    s = plan["strategy"]
    head.add_row("strategy", "  ".join(f"{h} {c}" for h, c in zip(_STRAT_HEAD, _strat_cells(s), strict=True)))
    how = []
    if s.get("first_stage_layers") or s.get("last_stage_layers"):
        how.append(f"first/last stage layers {s.get('first_stage_layers') or '-'}/{s.get('last_stage_layers') or '-'}")
    if s.get("account_for_embedding"):
        how.append("embedding counted as a pipeline layer")
    if s.get("account_for_loss"):
        how.append("loss counted as a pipeline layer")
    if how:
        head.add_row("pipeline split", "; ".join(how) + " (Megatron's uneven split; layers per stage below)")
    head.add_row("step time", f"{_s(est['step_time_s'])}   MFU {est['mfu']:.1%}   {est['tokens_per_s']:,.0f} tokens/s")
    head.add_row("bottleneck", est["bottleneck"])
    for x in est.get("idle_devices") or []:   # plans on part of the cluster (search/partial.py)
        head.add_row("idle devices", f"{x['group']} {x['devices']}: {x['why']}")
    st = Table(title="per stage, per micro-batch (forward + backward)", title_justify="left")
    for h in ("stage", "layers", "time", "compute", "tp comm", "cp comm", "ep comm", "pp p2p", "memory GiB"):
        st.add_column(h, justify="right")
    for x in stages:
        n = x["layers"][1] - x["layers"][0]
        chunks = x.get("chunks") or ()
        if len(chunks) > 1:   # interleaved: the stage's layers per model chunk (specs/strategy.py chunk_layers)
            from baige_plan.present.render import chunk_text
            count = f"{n}: {chunk_text(chunks)}"
        else:
            count = str(n)
        st.add_row(str(x["index"]), f"{x['layers'][0]}-{x['layers'][1]} ({count})", _s(x["time_s"]), _s(x["compute_s"]),
                   _s(x["tp_s"]), _s(x["cp_s"]), _s(x["ep_s"]), _s(x["pp_s"]), f"{x['memory_gib']:.1f}")
    br = Table(title="step (critical stage x micro-batches, bubble, exposed DP, optimizer)", title_justify="left")
    br.add_column("part")
    br.add_column("seconds", justify="right")
    br.add_column("share", justify="right")
    for k, v in est["breakdown_s"].items():
        br.add_row(k, f"{v:.4g}", f"{v / est['step_time_s']:.1%}")
    mem = Table(title="memory per device, peak stage", title_justify="left")
    mem.add_column("kind")
    mem.add_column("GiB", justify="right")
    mem.add_column("of capacity", justify="right")
    cap = est.get("memory_capacity_gib") or 0.0
    for k, v in est["memory_gib"].items():
        mem.add_row(k, f"{v:.2f}", f"{v / cap:.1%}" if cap else "-")
    mem.add_row(Text("total", style="bold"), Text(f"{est['peak_memory_gib']:.2f}", style="bold"),
                f"{est['peak_memory_gib'] / cap:.1%} of {cap:g} GiB" if cap else "-")
    return [head, st, br, mem]


def runners_table(best: dict, runners: list[dict]) -> Table:
    t = Table(title="runners-up (why this plan won)", title_justify="left")
    for h in ("#", "differs from the plan", "step time", "vs plan", "peak GiB", "bottleneck"):
        t.add_column(h, justify="right" if h in ("#", "step time", "vs plan", "peak GiB") else "left")
    base = best["estimate"]["step_time_s"]
    for i, r in enumerate(runners):
        diff = ", ".join(f"{k} {best['strategy'].get(k)}->{v}" for k, v in r["strategy"].items()
                         if best["strategy"].get(k) != v and k != "global_batch") or "same strategy"
        t.add_row(str(i + 2), diff, _s(r["step_time_s"]), f"{(r['step_time_s'] / base - 1):+.2%}",
                  f"{r['peak_memory_gib']:.1f}", r["bottleneck"])
    return t


def diff_table(rows: list[tuple[str, str, str, str]], title: str) -> Table:
    t = Table(title=title, title_justify="left")
    for h in ("field", "A", "B", "change"):
        t.add_column(h, justify="left" if h == "field" else "right")
    for r in rows:
        t.add_row(*r)
    return t


class Progress:
    """A transient stderr status line for work that may take more than a second: nothing is shown before
    `after_s` seconds have passed (a timer thread starts the line then, so a single long step -- parsing
    a large file -- shows too), nothing at all when `enabled` is false (`--quiet`) or stderr is not a
    terminal (rich prints no live display there), and the line is removed when the work ends.

    `progress(done, total)` sets the text from `text` (a format string over done and total: the search's
    candidates); `progress.update(text)` sets any text. A context manager: `with Progress(...) as p:`."""

    SEARCH = "searching: {done:,} of {total:,} candidates by lower bound"

    def __init__(self, after_s: float = 1.0, text: str = SEARCH, enabled: bool = True):
        self.t0 = time.perf_counter()
        self.after_s = after_s
        self.fmt = text
        self.text = ""
        self.enabled = enabled
        self.status = None
        self.closed = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._terminal: bool | None = None     # stderr is a terminal (asked once, at the first update)

    def __call__(self, done: int, total: int) -> None:
        self.update(self.fmt.format(done=done, total=total))

    def update(self, text: str) -> None:
        if not self.enabled or self.closed:
            return
        if self._terminal is None:
            # off a terminal nothing is ever shown: no timer thread, no live display refreshing beside the work
            self._terminal = _console(stderr=True).is_terminal
            self.enabled = self._terminal
            if not self.enabled:
                return
        with self._lock:
            self.text = text
            if self.status is not None:
                self.status.update(text)
                return
            if time.perf_counter() - self.t0 >= self.after_s:
                self._show()
            elif self._timer is None:
                self._timer = threading.Timer(max(0.0, self.after_s - (time.perf_counter() - self.t0)), self._late)
                self._timer.daemon = True
                self._timer.start()

    def _late(self) -> None:
        with self._lock:
            if not self.closed and self.status is None:
                self._show()

    def _show(self) -> None:            # under the lock
        self.status = _console(stderr=True).status(self.text)
        self.status.start()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            if self._timer is not None:
                self._timer.cancel()
            if self.status is not None:
                self.status.stop()
                self.status = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def hetero_tables(plan: dict, title: str) -> list[Table]:
    """A heterogeneous plan: summary with the heterogeneous efficiency, one row per pipeline shape
    with its stages (group, tp, layers), and the traffic that crosses bridges."""
    est = plan["estimate"] if "estimate" in plan else plan
    head = Table(title=title, show_header=False, title_justify="left")
    head.add_column("k", style="bold")
    head.add_column("v")
    head.add_row("step time", f"{_s(est['step_time_s'])}   MFU {est['mfu']:.1%}   {est['tokens_per_s']:,.0f} tokens/s")
    sa = est.get("standalone_tokens_per_s", {})
    head.add_row("heterogeneous efficiency",
                 f"{est.get('heterogeneous_efficiency', 0):.1%} of the sum of each group alone ("
                 + ", ".join(f"{g} {v:,.0f} tokens/s" for g, v in sa.items()) + ")")
    head.add_row("devices used", ", ".join(f"{g} {n}" for g, n in est.get("devices_used", {}).items()))
    if est.get("matmul_precision"):
        head.add_row("matmul precision", ", ".join(f"{g} {d}" for g, d in est["matmul_precision"].items()))
    for x in est.get("idle_devices") or []:
        head.add_row("idle devices", f"{x['group']} {x['devices']}: {x['why']}")
    head.add_row("peak memory", f"{est['peak_memory_gib']:.1f} GiB of {est.get('memory_capacity_gib', 0):g} GiB")
    head.add_row("bottleneck", est["bottleneck"])
    sh = Table(title="pipeline shapes (stages: group tp [layers))", title_justify="left")
    for h in ("shape", "replicas", "micro-batches", "knobs", "stages", "time/micro-batch (max)"):
        sh.add_column(h, justify="left" if h in ("stages", "knobs") else "right")
    for i, p in enumerate(plan.get("pipelines", [])):
        stages = p["stages"]
        txt = " > ".join(f"{st['group']} tp{st['tp']} [{st['layers'][0]},{st['layers'][1]})" for st in stages)
        knobs = " ".join(f"{k} {v}" for k, v in (p.get("strategy") or {}).items()) or "plan-wide"
        worst = max(st.get("time_per_micro_batch_s", 0.0) for st in stages)
        sh.add_row(str(i), str(p["replicas"]), str(p["micro_batches"]), knobs, txt, _s(worst))
    tables = [head, sh]
    bt = est.get("bridge_traffic") or []
    br = Table(title="traffic across bridges", title_justify="left")
    for h in ("groups", "traffic", "seconds per step"):
        br.add_column(h, justify="right" if h == "seconds per step" else "left")
    for b in bt:
        br.add_row(" <-> ".join(b["groups"]), b["traffic"], f"{b['seconds_per_step']:.4g}")
    if not bt:
        br.add_row("-", "no traffic crosses a bridge", "0")
    tables.append(br)
    return tables


def hetero_ranking_table(plans: list[dict]) -> Table:
    """`plan --top K` on a cluster of several groups: one row per plan, fastest first (ties marked ~), each by its
    pipeline template (replicas x [group tp pp > ...]), step time and band, throughput, MFU and devices used."""
    t = Table(title=f"top {len(plans)} plans (ties: overlapping step-time bands, marked ~; the first is detailed "
                    "above)", title_justify="left")
    for h in ("#", "pipeline template", "step time", "band", "vs first", "tokens/s", "MFU", "devices used"):
        t.add_column(h, justify="left" if h in ("pipeline template", "devices used") else "right")
    base = plans[0]["step_time_s"]
    for i, p in enumerate(plans):
        used = ", ".join(f"{g} {n}" for g, n in (p.get("devices_used") or {}).items())
        t.add_row(_mark(i, p), p.get("template", "-"), _s(p["step_time_s"]), _band(p),
                  f"{p['step_time_s'] / base - 1:+.1%}", f"{p['tokens_per_s']:,.0f}", f"{p['mfu']:.1%}", used)
    return t
