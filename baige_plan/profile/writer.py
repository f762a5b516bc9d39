"""Write a measured chip file (catalog format, schema baige-plan/chip/v1) from profile results.

What a profile cannot measure (peak TFLOP/s, HBM capacity and bandwidth, link rates, NIC) is
copied from a datasheet chip file (`--base`), with its sources. The profile replaces
`memory.usable_gib` (torch.cuda.mem_get_info total) and the `measured:` block, and adds a
`PROFILE` source whose citation is the provenance: device, driver, torch/CUDA/NCCL versions,
date and command. The loader rejects unknown keys, so provenance lives in `sources` and `notes`.

Output is deterministic (same inputs -> byte-identical file) and written atomically.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from baige_plan.errors import InputError
from baige_plan.io import outfile
from baige_plan.io.chips import chip_from_doc
from baige_plan.io.yamlio import check_keys, kind_of, read_document
from baige_plan.profile import fit as F

PROFILE_KEY = "PROFILE"
_TOP_ORDER = ("schema", "id", "name", "variant", "architecture", "vendor", "family", "collective_library",
              "reference_id", "sources", "notes", "peak_tflops", "memory", "scaleup", "scaleout", "pcie",
              "measured")


def resolve_base(base: str, catalog: list[str] | tuple[str, ...] = ()) -> tuple[Path, dict]:
    """A chip id (searched in the catalog) or a chip file path -> (path, raw document)."""
    p = Path(base)
    if not (p.suffix in (".yaml", ".yml", ".json") and p.is_file()):
        from baige_plan.io.catalog import Catalog

        found = Catalog.create(list(catalog)).find("chips", base)
        if found is None:
            from baige_plan.io.catalog import _short, did_you_mean
            cat = Catalog.create(list(catalog))
            raise InputError("--base", "", f"unknown chip {_short(base)}: neither a chip file nor a catalog chip id"
                             f"{did_you_mean(base, cat.names('chips'))}")
        p = found
    doc = read_document(p)
    chip_from_doc(doc, str(p))           # the base must itself be valid
    return p, doc


def provenance(raw: dict) -> str:
    d = raw.get("device", {})
    return (f"baige-plan profile on {d.get('count', 1)}x {d.get('name')}, driver {d.get('driver')}, "
            f"torch {d.get('torch')}, CUDA {d.get('cuda')}, NCCL {d.get('nccl')}, {raw.get('date')}, "
            f"command: {raw.get('command')}")


def _num(x: float, nd: int = 4) -> float | int:
    r = round(float(x), nd)
    return int(r) if r == int(r) and abs(r) >= 1 else r


def build_chip_doc(base_doc: dict, raw: dict, chip_id: str | None = None) -> dict:
    """The measured chip document: base datasheet figures + fitted measurements from `raw`."""
    doc = copy.deepcopy(base_doc)
    base_id = doc["id"]
    doc["id"] = chip_id or f"{base_id}-profiled"
    doc["name"] = f"{base_doc['name']} (profiled)"
    doc.pop("reference_id", None)
    dev = raw.get("device", {})
    src = [PROFILE_KEY]
    doc["sources"] = {**doc["sources"], PROFILE_KEY: provenance(raw)}
    peaks = {k: (v or {}).get("value") for k, v in doc["peak_tflops"].items()}

    measured: dict[str, Any] = {"gemm_efficiency": {}}
    notes = [f"Measured by `baige-plan profile` from {base_id} (datasheet peaks, capacities and link rates "
             f"kept with their sources); raw samples in the .raw.json next to this file."]
    for dtype in ("bf16", "fp16", "fp8"):
        rows = [s for s in raw.get("gemm", []) if s["dtype"] == dtype]
        if not rows or not peaks.get(dtype):
            continue
        pts = F.fit_gemm_curve([r["flops"] for r in rows], [r["tflops"] for r in rows], peaks[dtype])
        best = F.gemm_best(raw["gemm"], dtype)
        measured["gemm_efficiency"][dtype] = {
            "points": pts, "sources": src,
            "conditions": f"{len(rows)} GEMM shapes, torch {'_scaled_mm' if dtype == 'fp8' else 'mm'}, "
                          f"median of repeats after warm-up",
            "note": (f"best {best['tflops']:.1f} TFLOP/s at {best['m']}x{best['n']}x{best['k']} = "
                     f"{best['tflops'] / peaks[dtype]:.3f} of the {peaks[dtype]} peak; per-decade upper-envelope "
                     f"median, monotone"),
        }
    hbm_peak = doc["memory"]["hbm_GBps"]["value"]
    if raw.get("hbm") and hbm_peak:
        gbps, eff = F.hbm_fit(raw["hbm"], hbm_peak)
        big = max(raw["hbm"], key=lambda r: r["bytes"])
        measured["hbm_efficiency"] = {
            "value": eff, "sources": src,
            "conditions": f"device-to-device copy of {big['bytes'] / 2**30:.0f} GiB, bytes read + written",
            "note": f"{gbps:.0f} GB/s of {hbm_peak} GB/s"}
    runs = collective_runs(raw)
    coll = runs[-1] if runs else None           # the largest group size measured
    link = doc["scaleup"]["GBps_per_dir"]["value"]
    if coll and link:
        cf = F.collective_fit(coll)
        n = cf.world
        others = ", ".join(f"{op} {bw:.0f}" for op, bw in sorted(cf.busbw_large_GBps.items()))
        measured["scaleup_efficiency"] = {
            "value": cf.efficiency(link, "all_reduce"), "sources": src,
            "conditions": (f"NCCL all-reduce busbw {cf.busbw_large_GBps['all_reduce']:.1f} GB/s at "
                           f"{cf.large_bytes['all_reduce'] / 2**20:.0f} MiB on {n} GPUs of one node"),
            "note": f"busbw GB/s at the largest message: {others}; of {link} GB/s per direction"}
        measured["scaleup_latency_us"] = {
            "value": cf.step_latency_us, "sources": src,
            "conditions": f"smallest message ({min(cf.small_bytes.values())} B) time / ring steps, median over "
                          f"collectives, {n} GPUs",
            "note": ", ".join(f"{op} {v:.1f} us/step" for op, v in sorted(cf.latency_us.items()))}
        worlds = ", ".join(str(r["world"]) for r in runs)
        notes.append(f"Collectives measured on {worlds} GPUs of one node only: efficiencies of larger "
                     f"NVSwitch domains and of the NIC are not measured (NIC figures kept from {base_id}).")
    base_meas = base_doc.get("measured") or {}
    for k in ("nic_efficiency", "nic_latency_us"):
        if k in base_meas:
            measured[k] = copy.deepcopy(base_meas[k])
    for k in ("hbm_efficiency", "scaleup_efficiency", "scaleup_latency_us"):
        if k not in measured and k in base_meas:
            measured[k] = copy.deepcopy(base_meas[k])
    for dtype, curve in (base_meas.get("gemm_efficiency") or {}).items():
        measured["gemm_efficiency"].setdefault(dtype, copy.deepcopy(curve))
    if runs:
        measured["links"] = {"scaleup": link_curves_doc(runs, src)}
    doc["measured"] = measured
    if dev.get("mem_total_bytes"):
        doc["memory"]["usable_gib"] = {
            "value": round(dev["mem_total_bytes"] / 2**30, 2), "sources": src,
            "conditions": "torch.cuda.mem_get_info() total; CUDA context and allocator reserve are charged "
                          "by the cost model"}
    doc["notes"] = list(doc.get("notes") or []) + notes
    chip_from_doc(doc, f"profile result for {doc['id']}")   # never write an invalid file
    return {k: doc[k] for k in _TOP_ORDER if k in doc} | {k: v for k, v in doc.items() if k not in _TOP_ORDER}


def collective_runs(raw: dict) -> list[dict]:
    """The raw file's collective runs, smallest group first (`collectives` is one run as a mapping in
    older files, a list of runs, one per group size, since link curves)."""
    c = raw.get("collectives")
    if not c:
        return []
    runs = [c] if isinstance(c, dict) else list(c)
    return sorted(runs, key=lambda r: int(r["world"]))


#: measure.py op name -> link-curve op (specs/link.py)
CURVE_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
             "all_to_all": "all_to_all", "sendrecv": "p2p"}


def link_curves_doc(runs: list[dict], src: list[str]) -> list[dict]:
    """Bus-bandwidth curves (chip-file form, `measured.links.scaleup`) from collective runs: per run
    and op, [bytes, busbw GB/s] at every measured size (nccl-tests conventions, fit.busbw_GBps),
    busbw to 4 significant figures."""
    out = []
    for run in runs:
        n = int(run["world"])
        for op, cop in CURVE_OPS.items():
            rows = sorted((r for r in run["results"] if r["op"] == op), key=lambda r: r["bytes"])
            if not rows:
                continue
            pts = [[int(r["bytes"]), F._sig(F.busbw_GBps(op, r["bytes"], r["time_s"], n), 4)] for r in rows]
            what = "ring send/recv (each rank to the next), GB/s per rank" if op == "sendrecv" else "busbw"
            out.append({"op": cop, "n": n, "points": pts, "sources": src,
                        "conditions": f"{n} GPUs of one node, NCCL {run.get('dtype', 'float32')} buffers, {what}; "
                                      f"per size the max over ranks of the per-rank median (5 repeats)"})
    return out


# -- YAML text ----------------------------------------------------------------------------


def _flow(v: Any) -> str:
    text = yaml.safe_dump(v, default_flow_style=True, sort_keys=False, width=10**9, allow_unicode=True)
    if text.endswith("\n...\n"):          # a plain scalar gets an explicit document end
        text = text[: -len("\n...\n")]
    return text.strip()


def _is_leaf_map(v: Any) -> bool:
    return isinstance(v, dict) and ("value" in v or "points" in v)


def _emit(d: dict, indent: int, out: list[str]) -> None:
    pad = " " * indent
    for k, v in d.items():
        key = _flow(k) if not isinstance(k, str) else (k if _flow(k) == k else _flow(k))
        if _is_leaf_map(v) or not isinstance(v, (dict, list)) or (isinstance(v, list) and not v):
            out.append(f"{pad}{key}: {_flow(v)}")
        elif isinstance(v, dict):
            out.append(f"{pad}{key}:")
            _emit(v, indent + 2, out)
        else:
            out.append(f"{pad}{key}:")
            for item in v:
                out.append(f"{pad}  - {_flow(item)}")


def dump_chip_yaml(doc: dict, header: str = "") -> str:
    """Block style for structure, flow style for each sourced value and curve."""
    out = [f"# {line}" if line else "#" for line in header.splitlines()]
    _emit(doc, 0, out)
    text = "\n".join(out) + "\n"
    if yaml.safe_load(text) != json.loads(json.dumps(doc)):       # round-trip guard
        raise RuntimeError("internal error: chip YAML does not round-trip")
    return text


def write_atomic(path: str | Path, text: str) -> None:
    """Regular files only, atomic, fsync'ed, mode 0o666 & ~umask (baige_plan/io/outfile.py); creates the folder."""
    outfile.write_atomic(path, text, make_parents=True)


def raw_path_for(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.stem + ".raw.json")


# -- the raw file (schema baige-plan/profile-raw/v1), checked before fitting (profile --refit) ---------------

RAW_SCHEMA = F.RAW_SCHEMA
_RAW_TOP = {"schema", "date", "command", "quick", "device", "gemm", "hbm", "collectives"}
_GEMM_DTYPES = ("bf16", "fp16", "fp8", "fp32", "tf32")
_MAX_SAMPLES = 100_000          # rows of one list (a full profile has a few hundred)


def _pos_number(v: Any, src: str, field: str, *, integer: bool = False) -> float:
    """A finite number > 0 (an integer when `integer`), or an InputError naming the field."""
    ok = (not isinstance(v, bool) and isinstance(v, int if integer else (int, float))
          and math.isfinite(v) and v > 0)
    if not ok:
        raise InputError(src, field, f"expected {'an integer' if integer else 'a number'} > 0, got {kind_of(v)}")
    return float(v)


def _rate(num: float, den: float, src: str, field: str) -> None:
    """A measured rate (bytes or FLOPs over seconds) that is a finite, positive number."""
    with np.errstate(all="ignore"):
        r = num / den
    if not (math.isfinite(r) and r > 0):
        raise InputError(src, field, f"gives a rate of {r!r} per second (time_s too small?)")


def _rows(raw: dict, key: str, src: str, path: str, required: set[str], optional: set[str]) -> list[dict]:
    rows = raw[key]
    if not isinstance(rows, list):
        raise InputError(src, path, f"expected a list of samples, got {kind_of(rows)}")
    if len(rows) > _MAX_SAMPLES:
        raise InputError(src, path, f"{len(rows):,} samples is more than the limit of {_MAX_SAMPLES:,}")
    for i, r in enumerate(rows):
        check_keys(r, src, f"{path}[{i}]", required, optional)
    return rows


def check_raw(raw: Any, src: str) -> dict:
    """Every value the fit reads from a raw profile (measure.py's output), checked: the schema line; device
    provenance as plain values, memory a positive number; GEMM samples {dtype, m, n, k, flops, tflops[,
    time_s]}; HBM copies {bytes, moved_bytes, time_s[, GBps]}; collective runs {world >= 2, results: [{op,
    bytes, time_s}]} with an all-reduce in each run; every number finite and > 0. InputError naming the file,
    the field and the reason; the fit then never meets a value it cannot use."""
    if not isinstance(raw, dict):
        raise InputError(src, "", f"expected a mapping with 'schema: {RAW_SCHEMA}', got {kind_of(raw)}")
    if raw.get("schema") != RAW_SCHEMA:
        got = raw.get("schema")
        raise InputError(src, "schema", f"expected {RAW_SCHEMA!r}, got {got!r}" if got is not None
                         else f"missing; expected 'schema: {RAW_SCHEMA}'")
    check_keys(raw, src, "", {"schema"}, _RAW_TOP)
    for k in ("date", "command"):
        if raw.get(k) is not None and not isinstance(raw[k], str):
            raise InputError(src, k, f"expected a string, got {kind_of(raw[k])}")
    if raw.get("quick") is not None and not isinstance(raw["quick"], bool):
        raise InputError(src, "quick", f"expected true or false, got {kind_of(raw['quick'])}")
    dev = raw.get("device")
    if dev is not None:
        if not isinstance(dev, dict):
            raise InputError(src, "device", f"expected a mapping, got {kind_of(dev)}")
        for k in ("name", "driver", "torch", "cuda", "nccl", "count"):
            v = dev.get(k)
            if v is not None and (isinstance(v, (dict, list)) or (isinstance(v, str) and len(v) > 200)):
                raise InputError(src, f"device.{k}", f"expected a name or number, got {kind_of(v)}")
        if dev.get("mem_total_bytes") is not None:
            _pos_number(dev["mem_total_bytes"], src, "device.mem_total_bytes")
    if raw.get("gemm") is not None:
        for i, r in enumerate(_rows(raw, "gemm", src, "gemm", {"dtype", "m", "n", "k", "flops", "tflops"},
                                    {"time_s"})):
            w = f"gemm[{i}]"
            if r["dtype"] not in _GEMM_DTYPES:
                raise InputError(src, f"{w}.dtype", f"expected one of {', '.join(_GEMM_DTYPES)}, got {kind_of(r['dtype'])}")
            for k in ("m", "n", "k"):
                _pos_number(r[k], src, f"{w}.{k}", integer=True)
            _pos_number(r["flops"], src, f"{w}.flops")
            _pos_number(r["tflops"], src, f"{w}.tflops")
            if r.get("time_s") is not None:
                _pos_number(r["time_s"], src, f"{w}.time_s")
    if raw.get("hbm") is not None:
        for i, r in enumerate(_rows(raw, "hbm", src, "hbm", {"bytes", "moved_bytes", "time_s"}, {"GBps"})):
            w = f"hbm[{i}]"
            _pos_number(r["bytes"], src, f"{w}.bytes")
            _rate(_pos_number(r["moved_bytes"], src, f"{w}.moved_bytes"),
                  _pos_number(r["time_s"], src, f"{w}.time_s"), src, f"{w}.time_s")
            if r.get("GBps") is not None:
                _pos_number(r["GBps"], src, f"{w}.GBps")
    c = raw.get("collectives")
    if c is not None:
        runs = [c] if isinstance(c, dict) else c
        if not isinstance(runs, list):
            raise InputError(src, "collectives", f"expected a run or a list of runs, got {kind_of(c)}")
        if len(runs) > 64:
            raise InputError(src, "collectives", f"{len(runs)} runs is more than the limit of 64")
        for j, run in enumerate(runs):
            path = "collectives" if isinstance(c, dict) else f"collectives[{j}]"
            check_keys(run, src, path, {"world", "results"}, {"dtype", "backend"})
            w_ = run["world"]
            if isinstance(w_, bool) or not isinstance(w_, int) or not 2 <= w_ <= 1 << 20:
                raise InputError(src, f"{path}.world", f"expected the ranks of the run, an integer from 2 to "
                                 f"{1 << 20:,}, got {kind_of(w_)}")
            for k in ("dtype", "backend"):
                if run.get(k) is not None and not isinstance(run[k], str):
                    raise InputError(src, f"{path}.{k}", f"expected a string, got {kind_of(run[k])}")
            rows = _rows(run, "results", src, f"{path}.results", {"op", "bytes", "time_s"}, set())
            for i, r in enumerate(rows):
                wr = f"{path}.results[{i}]"
                if r["op"] not in F.COLLECTIVES:
                    raise InputError(src, f"{wr}.op", f"expected one of {', '.join(F.COLLECTIVES)}, got "
                                     f"{kind_of(r['op'])}")
                _rate(_pos_number(r["bytes"], src, f"{wr}.bytes"), _pos_number(r["time_s"], src, f"{wr}.time_s"),
                      src, f"{wr}.time_s")
            if not any(r["op"] == "all_reduce" for r in rows):
                raise InputError(src, f"{path}.results", "needs all_reduce samples (the scale-up efficiency is "
                                 "fitted on them)")
    return raw


def write_profile(out: str | Path, raw: dict, base: str, catalog: list[str] | tuple[str, ...] = (),
                  chip_id: str | None = None, write_raw: bool = True, src: str = "raw profile") -> dict:
    """Fit `raw` (checked first: check_raw; `src` names it in errors), write `out` (chip YAML) and, if asked,
    `<out stem>.raw.json`. Returns the chip doc."""
    check_raw(raw, src)
    base_path, base_doc = resolve_base(base, catalog)
    try:
        with np.errstate(all="raise"):       # a value the checks missed is bad input, never a warning
            doc = build_chip_doc(base_doc, raw, chip_id)
    except FloatingPointError as e:
        raise InputError(src, "", f"the measurements give no usable fit ({e})") from None
    header = (f"Measured chip file written by `baige-plan profile` (base: {base_doc['id']}).\n"
              f"Re-fit offline from the raw samples: python -m baige_plan.profile.measure --refit "
              f"{raw_path_for(out).name} --base {base_doc['id']}")
    if write_raw:
        write_atomic(raw_path_for(out), json.dumps(raw, indent=1, sort_keys=True) + "\n")
    write_atomic(out, dump_chip_yaml(doc, header))
    return doc
