"""Chip files (`chips/*.yaml`, schema baige-plan/chip/v1) -> ChipSpec.

Every number in a chip file is a *sourced value*::

    bf16: {value: 312, sources: [GKW], estimated: false, note: "...", conditions: "..."}

`sources` must name keys of the file's top-level `sources:` map (citations). `value: null`
means no public figure exists (unknown); `estimated: true` marks a derived number.
The full format is documented in docs/CATALOG.md.
"""

from __future__ import annotations

import datetime
import math
import re
from pathlib import Path
from typing import Any

from baige_plan.errors import InputError, SpecError
from baige_plan.io.yamlio import check_keys, expect_schema, get_typed, kind_of, read_document
from baige_plan.specs.chip import ATTENTION_KERNELS, DTYPES, SCALEUP_KINDS, ChipSpec, EfficiencyCurve
from baige_plan.specs.link import LINK_OPS, METRICS, BandwidthCurve, LinkCurves

SCHEMA = "baige-plan/chip/v1"
_SOURCED_KEYS = {"value"}
_SOURCED_OPT = {"sources", "estimated", "note", "conditions", "unit"}


def _sourced(d: dict, key: str, src: str, path: str, cites: dict, required: bool = True) -> float | None:
    full = f"{path}.{key}"
    if key not in d:
        if required:
            raise InputError(src, full, "required key is missing (use value: null with a note when unknown)")
        return None
    item = check_keys(d[key], src, full, {"value"}, _SOURCED_OPT | {"sources"})
    v = item["value"]
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
        raise InputError(src, f"{full}.value", f"expected a number or null, got {v!r}")
    _check_sources(item, src, full, cites, need=True)
    if "estimated" in item and not isinstance(item["estimated"], bool):
        raise InputError(src, f"{full}.estimated", "must be true or false")
    return None if v is None else float(v)


def _check_sources(item: dict, src: str, path: str, cites: dict, need: bool) -> None:
    s = item.get("sources")
    if s is None:
        if need:
            raise InputError(src, f"{path}.sources", "every number needs its sources (keys of the top-level 'sources')")
        return
    if not isinstance(s, list) or not s:
        raise InputError(src, f"{path}.sources", "must be a non-empty list of source keys")
    for i, key in enumerate(s):
        if not isinstance(key, str):
            raise InputError(src, f"{path}.sources[{i}]", f"expected a source key (a string), got {kind_of(key)}")
        if key not in cites:
            raise InputError(src, f"{path}.sources", f"unknown source {key!r} (define it under top-level 'sources')")


def _pairs(pts: Any, src: str, path: str, what: str) -> list[tuple[float, float]]:
    """A non-empty list of numeric pairs (curve points), each named in the error by its index."""
    if not isinstance(pts, list) or not pts:
        raise InputError(src, path, f"must be a non-empty list of {what}")
    out = []
    for i, p in enumerate(pts):
        if (not isinstance(p, list) or len(p) != 2
                or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in p)):
            raise InputError(src, f"{path}[{i}]", f"expected {what}, got {p!r}")
        out.append((float(p[0]), float(p[1])))
    return out


def _curve(d: Any, src: str, path: str, cites: dict) -> EfficiencyCurve:
    item = check_keys(d, src, path, {"points", "sources"}, {"estimated", "note", "conditions"})
    _check_sources(item, src, path, cites, need=True)
    out = _pairs(item["points"], src, f"{path}.points", "[gemm_flops, efficiency]")
    try:
        return EfficiencyCurve(tuple(out))
    except SpecError as e:
        raise InputError(src, f"{path}.{e.field}", e.reason) from None


def _attention_kernels(d: Any, src: str, cites: dict) -> dict:
    """``measured.attention_kernels``: {KERNEL: {fwd: CURVE, bwd: CURVE}}, each CURVE as a GEMM curve with
    points [sequence length, fraction of the 16-bit peak] (specs/chip.py ATTENTION_KERNELS)."""
    if d is None:
        return {}
    d = check_keys(d, src, "measured.attention_kernels", set(), set(ATTENTION_KERNELS))
    out = {}
    for k, v in d.items():
        kd = check_keys(v, src, f"measured.attention_kernels.{k}", {"fwd", "bwd"}, set())
        out[k] = (_curve(kd["fwd"], src, f"measured.attention_kernels.{k}.fwd", cites),
                  _curve(kd["bwd"], src, f"measured.attention_kernels.{k}.bwd", cites))
    return out


_CURVE_REQ = {"op", "n", "points", "sources"}
_CURVE_OPT = {"per_node", "metric", "estimated", "note", "conditions"}
LINK_DOMAINS = ("scaleup", "nic")


def link_curves_from_doc(d: Any, src: str, path: str, cites: dict) -> LinkCurves:
    """A list of measured curves (``measured.links.scaleup`` / ``.nic`` of a chip file; ``links`` of a
    topology group or bridge) -> LinkCurves. Each item::

        {op: all_reduce, n: 4, per_node: 4, metric: busbw, points: [[bytes, GBps], ...],
         sources: [KEY], estimated: false, note: ..., conditions: ...}

    `metric: algbw` points are converted to busbw (x the nccl-tests factor of op and n)."""
    if not isinstance(d, list) or not d:
        raise InputError(src, path, "must be a non-empty list of curves ({op, n, points, sources, ...})")
    curves = []
    for i, item in enumerate(d):
        full = f"{path}[{i}]"
        item = check_keys(item, src, full, _CURVE_REQ, _CURVE_OPT)
        _check_sources(item, src, full, cites, need=True)
        op = item["op"]
        if op not in LINK_OPS:
            raise InputError(src, f"{full}.op", f"must be one of {', '.join(LINK_OPS)}, got {op!r}")
        for k in ("n", "per_node"):
            v = item.get(k)
            if k in item and (isinstance(v, bool) or not isinstance(v, int)):
                raise InputError(src, f"{full}.{k}", f"expected an integer, got {v!r}")
        metric = item.get("metric", "busbw")
        if metric not in METRICS:
            raise InputError(src, f"{full}.metric", f"must be one of {', '.join(METRICS)}, got {metric!r}")
        if "estimated" in item and not isinstance(item["estimated"], bool):
            raise InputError(src, f"{full}.estimated", "must be true or false")
        out = _pairs(item["points"], src, f"{full}.points", "[bytes, GBps]")
        try:
            args = (item["n"], item.get("per_node"), item.get("estimated", False), tuple(item["sources"]))
            c = (BandwidthCurve.from_algbw(op, out, *args) if metric == "algbw"
                 else BandwidthCurve(op, tuple(out), *args))
        except SpecError as e:
            raise InputError(src, f"{full}.{e.field}", e.reason) from None
        curves.append(c)
    try:
        return LinkCurves(tuple(curves))
    except SpecError as e:
        raise InputError(src, f"{path}{e.field}", e.reason) from None


def link_domains_from_doc(d: Any, src: str, path: str, cites: dict) -> dict[str, LinkCurves]:
    """``measured.links: {scaleup: [...], nic: [...]}`` -> {domain: LinkCurves}."""
    d = check_keys(d, src, path, set(), set(LINK_DOMAINS))
    return {k: link_curves_from_doc(v, src, f"{path}.{k}", cites) for k, v in d.items()}


def chip_from_doc(doc: Any, src: str) -> ChipSpec:
    doc = expect_schema(doc, src, SCHEMA)
    top = check_keys(doc, src, "", {"schema", "id", "name", "vendor", "family", "sources", "peak_tflops",
                                    "memory", "scaleup", "scaleout", "measured"},
                     {"collective_library", "reference_id", "pcie", "host_link", "notes", "variant", "architecture",
                      "price"})
    cites = top["sources"]
    if not isinstance(cites, dict) or not cites:
        raise InputError(src, "sources", "must map source keys to citations")
    for k in ("id", "name", "vendor", "family"):
        get_typed(top, k, src, "", (str,))
    peaks_d = check_keys(top["peak_tflops"], src, "peak_tflops", set(), set(DTYPES))
    peaks = {k: _sourced(peaks_d, k, src, "peak_tflops", cites) for k in DTYPES if k in peaks_d}
    mem = check_keys(top["memory"], src, "memory", {"capacity_GB", "usable_gib", "hbm_GBps"}, {"type"})
    cap = _sourced(mem, "capacity_GB", src, "memory", cites)
    if cap is not None and not 0 < cap <= 1e6:      # informational beside usable_gib, but never a negative size
        raise InputError(src, "memory.capacity_GB.value", f"must be > 0 and at most 1e6 GB or null, got {cap:g}")
    usable = _sourced(mem, "usable_gib", src, "memory", cites)
    # vendors' HBM "GB" are GiB at most (A100 80GB: 81,920 MiB), so usable GiB never exceed the capacity's number
    if cap is not None and usable is not None and usable > cap:
        raise InputError(src, "memory.usable_gib.value", f"{usable:g} GiB exceeds memory.capacity_GB {cap:g}: a "
                         "device cannot use more memory than it has")
    su = check_keys(top["scaleup"], src, "scaleup", {"kind", "GBps_per_dir", "devices_per_node"},
                    {"tech", "p2p_GBps_per_dir", "domain_devices"})
    kind = get_typed(su, "kind", src, "scaleup", (str,))
    if kind not in SCALEUP_KINDS:
        raise InputError(src, "scaleup.kind", f"must be one of {', '.join(SCALEUP_KINDS)}, got {kind!r}")
    dpn = _sourced(su, "devices_per_node", src, "scaleup", cites)
    so = check_keys(top["scaleout"], src, "scaleout", {"nic_Gbps_per_device"})
    pcie = check_keys(top.get("pcie") or {}, src, "pcie", set(), {"GBps_per_dir", "gen"})
    host = check_keys(top.get("host_link") or {}, src, "host_link", set(), {"GBps_per_dir", "kind"})
    meas = check_keys(top["measured"], src, "measured", {"gemm_efficiency"},
                      {"hbm_efficiency", "eager_hbm_efficiency", "scaleup_efficiency", "nic_efficiency",
                       "scaleup_latency_us", "nic_latency_us", "observations", "flash_attention_efficiency", "links",
                       "attention_kernels"})
    curves_d = check_keys(meas["gemm_efficiency"] or {}, src, "measured.gemm_efficiency", set(), set(DTYPES))
    curves = {k: _curve(v, src, f"measured.gemm_efficiency.{k}", cites) for k, v in curves_d.items()}
    links = link_domains_from_doc(meas["links"], src, "measured.links", cites) if "links" in meas else {}
    kernels = _attention_kernels(meas.get("attention_kernels"), src, cites)
    su_bw = _sourced(su, "GBps_per_dir", src, "scaleup", cites)
    p2p = _sourced(su, "p2p_GBps_per_dir", src, "scaleup", cites, required=False)
    domain = _sourced(su, "domain_devices", src, "scaleup", cites, required=False)
    if domain is not None and (domain != int(domain) or domain < (dpn or 1)):
        raise InputError(src, "scaleup.domain_devices.value", f"must be a whole number of devices no smaller than "
                         f"devices_per_node ({dpn:g}), got {domain:g}")
    try:
        return ChipSpec(
            id=top["id"], name=top["name"], vendor=top["vendor"], family=top["family"],
            peak_tflops=peaks,
            memory_gib=usable,
            hbm_GBps=_sourced(mem, "hbm_GBps", src, "memory", cites),
            scaleup_GBps=su_bw,
            scaleup_p2p_GBps=p2p if p2p is not None else su_bw,
            scaleup_kind=kind,
            scaleup_domain_devices=int(domain) if domain is not None else None,
            devices_per_node=int(dpn) if dpn is not None else 8,
            nic_Gbps=_sourced(so, "nic_Gbps_per_device", src, "scaleout", cites),
            pcie_GBps=_sourced(pcie, "GBps_per_dir", src, "pcie", cites, required=False),
            host_link_GBps=_sourced(host, "GBps_per_dir", src, "host_link", cites, required=False),
            gemm_efficiency=curves,
            hbm_efficiency=_sourced(meas, "hbm_efficiency", src, "measured", cites, required=False),
            eager_hbm_efficiency=_sourced(meas, "eager_hbm_efficiency", src, "measured", cites, required=False),
            scaleup_efficiency=_sourced(meas, "scaleup_efficiency", src, "measured", cites, required=False),
            nic_efficiency=_sourced(meas, "nic_efficiency", src, "measured", cites, required=False),
            scaleup_latency_us=_sourced(meas, "scaleup_latency_us", src, "measured", cites, required=False),
            nic_latency_us=_sourced(meas, "nic_latency_us", src, "measured", cites, required=False),
            flash_efficiency=_sourced(meas, "flash_attention_efficiency", src, "measured", cites, required=False),
            attention_kernels=kernels,
            scaleup_curves=links.get("scaleup"),
            nic_curves=links.get("nic"),
            **_price(top.get("price"), src, cites),
        )
    except SpecError as e:
        raise InputError(src, e.field, e.reason) from None


_DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")


def _price(d: Any, src: str, cites: dict) -> dict:
    """The optional ``price:`` block -> ChipSpec price fields (issue 12)::

        price:
          sources: {AWS: "citation"}     # optional: keys usable here besides the top-level sources
          usd_per_device_hour: {value: 3.43, sources: [AWS], date: "2026-08-26", estimated: true,
                                note: "p4de.24xlarge on-demand us-east-1 $27.44705/h / 8 GPUs"}

    A list price per device-hour in USD with its sources and the date it was read (YYYY-MM or
    YYYY-MM-DD); ``value: null`` = no public price (unknown)."""
    if d is None:
        return {}
    d = check_keys(d, src, "price", {"usd_per_device_hour"}, {"sources"})
    local = d.get("sources") or {}
    if not isinstance(local, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in local.items()):
        raise InputError(src, "price.sources", "must map source keys to citation strings")
    cites = {**cites, **local}
    path = "price.usd_per_device_hour"
    item = check_keys(d["usd_per_device_hour"], src, path, {"value", "sources", "date"}, _SOURCED_OPT - {"sources"})
    v = item["value"]
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0):
        raise InputError(src, f"{path}.value", f"expected a number >= 0 (USD per device-hour) or null, got {v!r}")
    _check_sources(item, src, path, cites, need=True)
    if "estimated" in item and not isinstance(item["estimated"], bool):
        raise InputError(src, f"{path}.estimated", "must be true or false")
    date = item["date"]
    date = date.isoformat() if isinstance(date, datetime.date) else date
    if not isinstance(date, str) or not _DATE.match(date):
        raise InputError(src, f"{path}.date", f"expected the date the price was read, YYYY-MM or YYYY-MM-DD, got {date!r}")
    return {"price_usd_per_device_hour": None if v is None else float(v), "price_date": date}


def load_chip_file(path: str | Path) -> ChipSpec:
    return chip_from_doc(read_document(path), str(path))
