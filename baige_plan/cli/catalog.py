"""`baige-plan catalog chips|models|topologies [NAME]`: the AI-efficiency matrix and built-ins."""

from __future__ import annotations

import typer
from rich.table import Table

from baige_plan.cli.common import FORMAT_HELP, CatalogOpt, Fmt, fail_input
from baige_plan.errors import InputError
from baige_plan.io.catalog import Catalog
from baige_plan.io.serialize import rnd, to_json, to_yaml
from baige_plan.present.catalog_view import _v, chip_rows, detail, model_rows, topology_rows
from baige_plan.present.render import print_tables

KINDS = ("chips", "models", "topologies")


def catalog(
    kind: str = typer.Argument(..., metavar="KIND", help="chips, models or topologies."),
    name: str = typer.Argument(None, metavar="NAME", help="Show one entry in full (with sources) [default: list "
                               "them all]."),
    fmt: Fmt = typer.Option(Fmt.table, "--format", help=FORMAT_HELP),
    catalog: list[str] = CatalogOpt,
) -> None:
    """List the catalog; `catalog chips` is the AI-efficiency matrix (peak and measured)."""
    try:
        if kind not in KINDS:
            raise InputError("catalog", "KIND", f"must be one of {', '.join(KINDS)}, got {kind!r}")
        cat = Catalog.create(catalog or [])
        if name is not None:
            doc = detail(cat, kind, name)
            typer.echo(to_json(doc) if fmt is Fmt.json else to_yaml(doc), nl=False)
            return
        rows = {"chips": chip_rows, "models": model_rows, "topologies": topology_rows}[kind](cat)
    except InputError as e:
        fail_input(e)
    if fmt is not Fmt.table:
        doc = rnd({"schema": f"baige-plan/catalog-{kind}/v1", kind: rows})
        typer.echo(to_json(doc) if fmt is Fmt.json else to_yaml(doc), nl=False)
        return
    t = Table(title=f"{kind} ({len(rows)})" + ("  — AI-efficiency matrix: peak | measured fraction" if kind == "chips"
                                               else ""), title_justify="left")
    if not rows:
        print_tables([t], prefer=160)
        return
    for col in rows[0]:
        t.add_column(col, justify="left" if col in ("id", "name", "family", "groups", "bridges", "moe",
                                                    "scaleup_kind") else "right", no_wrap=col in ("id", "name"))
    for r in rows:
        t.add_row(*[_v(v, "{:.3g}") if isinstance(v, float) or v is None else str(v) for v in r.values()])
    print_tables([t], prefer=160)     # no cell cut at any width; names from user catalogs print as written
