"""Rows for `baige-plan catalog` (the AI-efficiency matrix and the built-in inputs)."""

from __future__ import annotations

from baige_plan.cost.params import active_params, total_params
from baige_plan.io.catalog import Catalog
from baige_plan.io.yamlio import read_document


def _v(x, fmt="{:g}") -> str:
    return "unknown" if x is None else fmt.format(x)


def chip_rows(cat: Catalog) -> list[dict]:
    rows = []
    for cid in cat.names("chips"):
        c = cat.chip(cid)
        curve = c.gemm_efficiency.get("bf16") or c.gemm_efficiency.get("fp16")
        rows.append({"id": c.id, "family": c.family, "bf16_tflops": c.peak_tflops.get("bf16"),
                     "fp8_tflops": c.peak_tflops.get("fp8"), "memory_gib": c.memory_gib, "hbm_GBps": c.hbm_GBps,
                     "scaleup_GBps": c.scaleup_GBps, "scaleup_kind": c.scaleup_kind, "nic_Gbps": c.nic_Gbps,
                     "gemm_eff_max": curve.max_efficiency if curve else None,
                     "hbm_eff": c.hbm_efficiency, "scaleup_eff": c.scaleup_efficiency, "nic_eff": c.nic_efficiency,
                     "plannable": plannable(c)})
    return rows


PRECISIONS = ("bf16", "fp16", "fp8", "fp4", "tf32", "fp32")


def plannable(chip) -> str:
    """`yes: bf16 fp16 ...` (the precisions the cost model can estimate on this chip), or `no: FIELD unknown`
    naming the first figure the catalog lacks (issue 19: a listed chip is plannable or says why not). Judged by
    estimating a tiny model on one node of two devices, once per precision."""
    from baige_plan.cost.estimate import estimate
    from baige_plan.errors import SpecError
    from baige_plan.specs.job import JobSpec
    from baige_plan.specs.model import ModelSpec
    from baige_plan.specs.strategy import StrategySpec
    from baige_plan.specs.topology import ClusterSpec, GroupSpec

    tiny = ModelSpec(name="probe", layers=2, hidden=256, heads=4, ffn_hidden=1024, vocab=1024, seq_len=256)

    def probe(nodes: int, dpn: int, prec: str, s: StrategySpec) -> str | None:
        cl = ClusterSpec(name="probe", groups=(GroupSpec(name="g", chip=chip, nodes=nodes, devices_per_node=dpn),))
        try:
            estimate(tiny, cl, JobSpec(global_batch=4, seq_len=256, precision=prec), s)
            return None
        except SpecError as e:
            field = e.field.rsplit(chip.id + ".", 1)[-1]
            return f"{field} {e.reason.split(' (')[0].split(':')[0]}"
        except (ValueError, ArithmeticError) as e:      # a figure the checks let through: still not plannable
            return type(e).__name__

    ok, why = [], {}
    for prec in PRECISIONS:
        w = probe(1, 2, prec, StrategySpec(tp=2))
        if w is None:
            ok.append(prec)
        else:
            why[prec] = w
    if not ok:
        return "no: " + (why.get("bf16") or why.get("fp16") or next(iter(why.values()), "unknown"))
    multi = probe(2, 1, ok[0], StrategySpec(dp=2))
    return "yes: " + " ".join(ok) + (f"; one node only: {multi}" if multi else "")


def model_rows(cat: Catalog) -> list[dict]:
    rows = []
    for name in cat.names("models"):
        m = cat.model(name)
        rows.append({"name": name, "layers": m.layers, "hidden": m.hidden, "heads": m.heads, "kv_heads": m.kv_heads,
                     "ffn_hidden": m.ffn_hidden, "vocab": m.vocab, "seq_len": m.seq_len,
                     "moe": f"{m.moe.experts}e top{m.moe.top_k}" if m.moe else "-",
                     "params_b": total_params(m) / 1e9, "active_params_b": active_params(m) / 1e9})
    return rows


def topology_rows(cat: Catalog) -> list[dict]:
    rows = []
    for name in cat.names("topologies"):
        cl, _ = cat.cluster(name)
        rows.append({"name": name, "devices": cl.devices,
                     "groups": ", ".join(f"{g.name}={g.chip.id}:{g.nodes}x{g.devices_per_node}" for g in cl.groups),
                     "bridges": ", ".join(f"{'+'.join(b.groups)} {b.kind} {b.GBps_per_node:g} GB/s/node"
                                          for b in cl.bridges) or "-"})
    return rows


def detail(cat: Catalog, kind: str, name: str) -> dict:
    """The raw file of one entry (with its sources), as the user would read it."""
    path = cat.find(kind, name)
    if path is None:
        from baige_plan.errors import InputError
        from baige_plan.io.catalog import _short, did_you_mean
        raise InputError("catalog", kind, f"no entry {_short(name)}{did_you_mean(name, cat.names(kind))}")
    if kind == "chips":
        cat.chip(name)          # validates
    elif kind == "models":
        cat.model(name)
    else:
        cat.cluster(name)
    return read_document(path)
