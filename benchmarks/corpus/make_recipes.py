"""Write the published-recipe index shipped in the package (baige_plan/data/recipes.yaml, io/recipes.py) from
the validation corpus: `make recipes`, or

    python benchmarks/corpus/make_recipes.py --out baige_plan/data/recipes.yaml FILE...

One entry per row that io/runs.py loads (the loader `backtest` uses), in the order of the files given and of
their rows; a row the loader refuses is left out and named on stderr. The same files give the same bytes (no
date, no commit: each file's sha256 says what was read).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from baige_plan.errors import InputError
from baige_plan.io.catalog import Catalog
from baige_plan.io.recipes import recipe_row, recipes_text
from baige_plan.io.runs import case_from_row
from baige_plan.io.yamlio import read_document


def _stand_in(excluded: str | None) -> bool:
    """Whether a row's `excluded` reason says its device is outside the catalog (the corpus' two phrasings), so
    the chip file it loaded on is a stand-in."""
    return bool(excluded) and excluded.startswith(("hardware outside the catalog", "no chip file for"))


def rows_of(path: Path, catalog: Catalog) -> tuple[list[tuple[str, str, list]], list[str]]:
    doc = read_document(path)
    rows, skipped = [], []
    for i, raw in enumerate(doc.get("rows") or []):
        try:
            case = case_from_row(raw, catalog, str(path), i)
        except InputError as e:
            skipped.append(f"{path}: {e}")
            continue
        src = raw.get("source") or {}
        # a run not scored because its device is not in the catalog (loaded on a stand-in chip file) keeps the
        # device its source names (recipe_row)
        hw = (raw.get("hardware") or {}).get("gpu_model") if _stand_in(case.excluded) else None
        rows.append((str(src.get("key") or path.stem), str(src.get("url") or ""), recipe_row(case, hw and str(hw))))
    return rows, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("files", nargs="+", type=Path)
    a = ap.parse_args(argv)
    catalog = Catalog.create()
    rows, files = [], []
    for f in a.files:
        r, skipped = rows_of(f, catalog)
        rows += r
        for s in skipped:
            print(f"left out: {s}", file=sys.stderr)
        files.append({"path": f.as_posix(), "sha256": hashlib.sha256(f.read_bytes()).hexdigest()})
    text = recipes_text(rows, files)
    a.out.write_text(text, encoding="utf-8")
    print(f"wrote {a.out}: {len(rows)} recipes from {len(files)} files", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
