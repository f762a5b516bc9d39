"""CI gate on leave-one-source-out accuracy: recompute LOSO over the corpus (reports/loso.py default_corpus, the files
`make corpus-tables` reads) and fail when a source's held-out median |step-time error| is more than 2 points
worse than the committed table (benchmarks/corpus/loso.json), when its evaluated share drops, or when a
committed source is gone. Sources not in the table yet are reported (a warning), not failed: regenerate the
tables with `make corpus-tables` and commit them."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import yaml

from baige_plan.io.catalog import Catalog
from baige_plan.reports.loso import check_loso_doc, default_corpus, loso

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "benchmarks" / "corpus" / "loso.json"
BANDS = ROOT / "baige_plan" / "data" / "bands.yaml"
WORSE_BY = 0.02          # 2 points of median |step-time error|
MEDIAN = "median_abs_step_time_error"


@pytest.fixture(scope="module")
def committed() -> dict:
    return check_loso_doc(json.loads(TABLE.read_text()), str(TABLE))


@pytest.fixture(scope="module")
def now() -> dict:
    return loso(default_corpus(ROOT), Catalog.create())


def test_no_source_got_worse(committed, now):
    problems, new = [], []
    sources = {s["source"]: s for s in now["sources"]}
    for name, s in sources.items():
        c = committed.get(name)
        if c is None:
            new.append(name)
            continue
        if s["evaluated_share"] < c["evaluated_share"] - 1e-9:
            problems.append(f"{name}: evaluated share {s['evaluated_share']:.0%} < committed {c['evaluated_share']:.0%} "
                            f"({s['evaluated_rows']} of {s['runs']} runs)")
        if MEDIAN in c:
            if MEDIAN not in s:
                problems.append(f"{name}: no evaluated run (committed median {c[MEDIAN]:.1%})")
            elif s[MEDIAN] > c[MEDIAN] + WORSE_BY + 1e-9:
                problems.append(f"{name}: held-out median |step-time error| {s[MEDIAN]:.1%} > committed "
                                f"{c[MEDIAN]:.1%} + {WORSE_BY:.0%}")
    problems += [f"{name}: in the committed table but no longer in the corpus" for name in sorted(set(committed) -
                                                                                                   set(sources))]
    if new:
        warnings.warn(f"sources not in {TABLE.name} (run `make corpus-tables`): {', '.join(sorted(new))}",
                      stacklevel=1)
    assert not problems, "leave-one-source-out got worse:\n" + "\n".join(problems)


def test_shipped_bands_come_from_the_committed_table():
    doc = json.loads(TABLE.read_text())
    bands = yaml.safe_load(BANDS.read_text())
    assert bands["classes"] == doc["bands"], "make corpus-tables writes both: regenerate them together"
    assert [f["path"] for f in bands["computed_from"]["files"]] == doc["files"]
