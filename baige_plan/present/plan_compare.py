"""Compare two plan documents (for `diff` and `check`): strategy, pipeline stages, estimate, inputs, placement.

Inputs "that matter" for `check`: the model's architecture (not its name, source, notes or build fields), the
job (batch, sequence length, precision) and the cluster's shape (groups' chips, nodes, devices per
node, bandwidth overrides, bridges). A changed chip *calibration* (numbers inside the embedded chip
document) is reported but is not by itself a regression: its effect shows in the step time.
"""

from __future__ import annotations

from typing import Any

from baige_plan.specs.model import BUILD_FIELDS

_MODEL_IGNORE = {"name", "source", "notes", "schema"}
# build fields (position, rotary, norm, biases, router: specs/model.py) do not enter the cost model: a change is
# reported, not a regression (a catalog model that starts recording them keeps passing its baseline)
_MOE_BUILD = ("norm_topk_prob", "shared_expert_gate")


def _strip(d: dict, keys) -> dict:
    return {k: v for k, v in d.items() if k not in keys}


def _only(d: dict) -> dict:
    return {k: d[k] for k in _MOE_BUILD if k in d}


_EST_KEYS = ("fits", "step_time_s", "tokens_per_s", "mfu", "hfu", "peak_memory_gib", "micro_batches")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return "-" if v is None else str(v)


def _change(a: Any, b: Any) -> str:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and a:
        return f"{(b / a - 1):+.2%}"
    return "changed"


def _cluster_shape(c: dict) -> dict:
    groups = []
    for g in c.get("groups", []):
        chip = g.get("chip")
        cid = chip.get("id") if isinstance(chip, dict) else chip
        groups.append({"name": g.get("name"), "chip": cid, "nodes": g.get("nodes"),
                       "devices_per_node": g.get("devices_per_node"), "scaleup_GBps": g.get("scaleup_GBps"),
                       "scaleout_Gbps": g.get("scaleout_Gbps")})
    return {"groups": groups, "bridges": c.get("bridges")}


def _chips(c: dict) -> dict:
    return {g.get("name"): g.get("chip") for g in c.get("groups", [])}


def input_changes(a: dict, b: dict) -> tuple[list[str], list[str]]:
    """(changes that matter, other changes) between the inputs of two plans."""
    ia, ib = a.get("inputs", {}), b.get("inputs", {})
    matter, other = [], []
    ma, mb = ia.get("model", {}), ib.get("model", {})
    for k in sorted(set(ma) | set(mb)):
        if ma.get(k) != mb.get(k):
            if k == "moe" and isinstance(ma.get(k), dict) and isinstance(mb.get(k), dict) and \
                    _strip(ma[k], _MOE_BUILD) == _strip(mb[k], _MOE_BUILD):
                other.append(f"model.moe router fields: {_fmt(_only(ma[k]))} -> {_fmt(_only(mb[k]))}")
                continue
            noted = k in _MODEL_IGNORE or k in BUILD_FIELDS
            (other if noted else matter).append(f"model.{k}: {_fmt(ma.get(k))} -> {_fmt(mb.get(k))}")
    ja, jb = ia.get("job", {}), ib.get("job", {})
    for k in sorted(set(ja) | set(jb)):
        if ja.get(k) != jb.get(k):
            matter.append(f"job.{k}: {_fmt(ja.get(k))} -> {_fmt(jb.get(k))}")
    ca, cb = ia.get("cluster", {}), ib.get("cluster", {})
    sa, sb = _cluster_shape(ca), _cluster_shape(cb)
    if sa != sb:
        for i, (ga, gb) in enumerate(zip(sa["groups"], sb["groups"], strict=False)):
            for k in ga:
                if ga[k] != gb[k]:
                    matter.append(f"cluster.groups[{i}].{k}: {_fmt(ga[k])} -> {_fmt(gb[k])}")
        if len(sa["groups"]) != len(sb["groups"]):
            matter.append(f"cluster groups: {len(sa['groups'])} -> {len(sb['groups'])}")
        if sa["bridges"] != sb["bridges"]:
            matter.append("cluster.bridges changed")
    for name, chip in _chips(cb).items():
        old = _chips(ca).get(name)
        if old is not None and old != chip and isinstance(chip, dict) and isinstance(old, dict) \
                and old.get("id") == chip.get("id"):
            other.append(f"chip {chip.get('id')} calibration/catalog data changed")
    return matter, other


def compare(a: dict, b: dict) -> dict:
    """Differences A -> B: {"strategy", "stages", "estimate", "inputs", "placement", "rows"} (rows: for
    tables; placement: None when the same, else placement_changes)."""
    rows: list[tuple[str, str, str, str]] = []
    strat = {}
    sa, sb = a.get("strategy", {}), b.get("strategy", {})
    for k in list(sa) + [k for k in sb if k not in sa]:
        if sa.get(k) != sb.get(k):
            strat[k] = {"a": sa.get(k), "b": sb.get(k)}
            rows.append((f"strategy.{k}", _fmt(sa.get(k)), _fmt(sb.get(k)), "changed"))
    stages = []
    pa, pb = a.get("pipelines", []), b.get("pipelines", [])
    for i in range(max(len(pa), len(pb))):
        xa = pa[i] if i < len(pa) else {}
        xb = pb[i] if i < len(pb) else {}
        for k in ("replicas", "micro_batches"):
            if xa.get(k) != xb.get(k):
                stages.append({"pipeline": i, "field": k, "a": xa.get(k), "b": xb.get(k)})
                rows.append((f"pipelines[{i}].{k}", _fmt(xa.get(k)), _fmt(xb.get(k)), _change(xa.get(k), xb.get(k))))
        la = [(s.get("layers"), s.get("tp"), s.get("group")) for s in xa.get("stages", [])]
        lb = [(s.get("layers"), s.get("tp"), s.get("group")) for s in xb.get("stages", [])]
        if la != lb:
            fa = " ".join(f"{x[0][0]}-{x[0][1]}/tp{x[1]}" for x in la)
            fb = " ".join(f"{x[0][0]}-{x[0][1]}/tp{x[1]}" for x in lb)
            stages.append({"pipeline": i, "field": "stages", "a": [list(x[0]) for x in la],
                           "b": [list(x[0]) for x in lb]})
            rows.append((f"pipelines[{i}].stages (layers/tp)", fa, fb, f"{len(la)} -> {len(lb)} stages"))
    est = {}
    ea, eb = a.get("estimate", {}), b.get("estimate", {})
    for k in _EST_KEYS:
        if ea.get(k) != eb.get(k):
            est[k] = {"a": ea.get(k), "b": eb.get(k)}
            rows.append((k, _fmt(ea.get(k)), _fmt(eb.get(k)), _change(ea.get(k), eb.get(k))))
    for k in sorted(set(ea.get("breakdown_s", {})) | set(eb.get("breakdown_s", {}))):
        va, vb = ea.get("breakdown_s", {}).get(k), eb.get("breakdown_s", {}).get(k)
        if va != vb:
            est[f"breakdown_s.{k}"] = {"a": va, "b": vb}
            rows.append((f"breakdown_s.{k}", _fmt(va), _fmt(vb), _change(va, vb)))
    matter, other = input_changes(a, b)
    for x in matter:
        rows.append(("inputs", x, "", "matters"))
    for x in other:
        rows.append(("inputs", x, "", "noted"))
    place = placement_changes(a.get("placement") or [], b.get("placement") or [])
    if place is not None:
        rows.append(("placement", f"{place['a_ranks']} ranks", f"{place['b_ranks']} ranks",
                     f"{place['moved']} placed differently"))
    return {"strategy": strat, "stages": stages, "estimate": est,
            "inputs": {"changed": matter, "noted": other}, "placement": place, "rows": rows}


def placement_changes(pa: list, pb: list) -> dict | None:
    """None when the two placements are the same; else {a_ranks, b_ranks, moved}: ranks of each, and the ranks
    (of those in both) whose device, role or coordinates differ, plus those only one plan has."""
    if pa == pb:
        return None
    ka = {p.get("rank"): p for p in pa if isinstance(p, dict)}
    kb = {p.get("rank"): p for p in pb if isinstance(p, dict)}
    moved = sum(1 for r in set(ka) | set(kb) if ka.get(r) != kb.get(r))
    return {"a_ranks": len(pa), "b_ranks": len(pb), "moved": moved}


def regressions(baseline: dict, now: dict, cmp: dict, tolerance: float) -> list[str]:
    """What makes `check` fail: slower beyond tolerance, no longer fits, inputs changed that matter."""
    out = []
    base_t = baseline.get("estimate", {}).get("step_time_s")
    t = now.get("step_time_s")
    if base_t and t is not None and t > base_t * (1 + tolerance):
        out.append(f"predicted step time {t:.6g} s is {t / base_t - 1:+.2%} vs the baseline's {base_t:.6g} s "
                   f"(tolerance {tolerance:.1%})")
    if not now.get("fits", False):
        out.append(f"the plan no longer fits: {now.get('bottleneck')}")
    for x in cmp["inputs"]["changed"]:
        out.append(f"inputs changed: {x}")
    return out
