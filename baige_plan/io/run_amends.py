"""Amendments to a runs file that must stay byte-identical to its source (tests/data/published_calibration.yaml is a
copy of shared/reference): `<name>.amend.yaml` beside `<name>.yaml` sets fields a row leaves unstated from a source
the row does not cite -- the configuration scripts its authors published, the cluster's own documentation.

    schema_version: 1
    rows:
    - id: narayanan2021_t1_76p1b             # a row of the amended file
      set: {parallel.micro_batch: 2, parallel.vpp: 3}    # section.key -> value
      source: NVIDIA/Megatron-LM@285068c examples/sc21/run_table_1.sh (MBS=2, ...)
      why: the row leaves micro-batch and interleaving unstated

Each set field is recorded in the row's `unstated` list (field, assumed value, why = source), so `backtest`
notes show it like any other sourced default. Only a field the row leaves null may be set: an amendment fills a
gap, it never overrides what the source states.
"""

from __future__ import annotations

import copy
from pathlib import Path

from baige_plan.errors import InputError
from baige_plan.io.yamlio import check_keys, is_regular_file, kind_of, read_document

SECTIONS = ("model", "hardware", "parallel")


def amend_path(path: str | Path) -> Path:
    """`x.yaml` -> `x.amend.yaml` beside it."""
    p = Path(path)
    return p.with_name(p.stem + ".amend.yaml")


def apply_amendments(rows: list, path: str | Path) -> list:
    """`rows` with the amendments of `amend_path(path)` applied (the rows themselves when there is no such file);
    InputError naming the amendment file and field for an unknown row, section or key, or a stated field."""
    ap = amend_path(path)
    if not is_regular_file(ap):
        return rows
    src = str(ap)
    doc = read_document(ap)
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise InputError(src, "rows", "expected a mapping with a 'rows:' list")
    by_id = {r.get("id"): i for i, r in enumerate(rows) if isinstance(r, dict)}
    out = list(rows)
    for k, a in enumerate(doc["rows"]):
        w = f"rows[{k}]"
        a = check_keys(a, src, w, {"id", "set", "source", "why"}, set())
        if a["id"] not in by_id:
            raise InputError(src, f"{w}.id", f"no row {a['id']!r} in {path}")
        if not isinstance(a["set"], dict) or not a["set"]:
            raise InputError(src, f"{w}.set", f"expected a mapping of section.key: value, got {kind_of(a['set'])}")
        i = by_id[a["id"]]
        row = copy.deepcopy(out[i])
        for field, value in a["set"].items():
            sec, _, key = str(field).partition(".")
            if sec not in SECTIONS or not key:
                raise InputError(src, f"{w}.set.{field}", f"expected {' | '.join(SECTIONS)}.<key>")
            section = row.get(sec)
            if not isinstance(section, dict):
                raise InputError(src, f"{w}.set.{field}", f"row {a['id']!r} has no {sec} mapping")
            if section.get(key) is not None:
                raise InputError(src, f"{w}.set.{field}",
                                 f"row {a['id']!r} states {key} = {section[key]!r}; an amendment only fills a gap")
            section[key] = value
            row.setdefault("unstated", [])
            row["unstated"] = list(row["unstated"] or []) + [
                {"field": field, "assumed": value, "why": f"{a['source']} ({a['why']}; {ap.name})"}]
        out[i] = row
    return out
