"""`baige-plan validate FILE...`: schema check of chip, model, topology, runs and plan files."""

from __future__ import annotations

from pathlib import Path

import typer

from baige_plan.cli.common import CatalogOpt, Fmt, err, progress_line
from baige_plan.errors import InputError, SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.io.yamlio import read_document


def _check_one(path: Path, cat: Catalog, step=None) -> str:
    """The kind of file `path` is, once it passes that kind's checks (InputError otherwise). `step(text)`: told
    each stage of a long check (a progress line)."""
    tell = step or (lambda text: None)
    tell(f"{path}: reading")
    doc = read_document(path)
    if isinstance(doc, dict) and "model_type" in doc:
        from baige_plan.io.hf_config import load_hf_config
        load_hf_config(path)
        return "hf-config"
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if schema == "baige-plan/chip/v1":
        cat.chip(str(path))
        return "chip"
    if schema == "baige-plan/model/v1":
        cat.model(str(path))
        return "model"
    if schema == "baige-plan/topology/v1":
        cat.cluster(str(path))
        return "topology"
    if schema == "baige-plan/profile/v1":
        from baige_plan.io.profiles import load_profile
        load_profile(path)
        return "profile"
    if schema == "baige-plan/plan/v1":
        from baige_plan.reports.plan_check import validate_plan_file  # shared with `check` and `diff`
        validate_plan_file(path, doc, step)     # the document parsed above: a plan file is read once
        return "plan"
    if isinstance(doc, dict) and "rows" in doc:
        from baige_plan.io.runs import load_runs
        load_runs(path, cat)
        return "runs"
    raise InputError(str(path), "schema", f"unknown or missing schema {schema!r} (chip, model, topology, plan, "
                     "profile or a runs file with rows:)")


def validate(files: list[Path] = typer.Argument(..., metavar="FILE", help="Files to check: chip, model, topology, "
                                                "plan, profile, runs or Hugging Face config.json files."),
             fmt: Fmt = typer.Option(Fmt.table, "--format", help="Output: table (one `ok FILE (kind)` line per "
                                     "good file), json or yaml (one document on stdout: every file, ok or not)."),
             catalog: list[str] = CatalogOpt) -> None:
    """Check each file against its schema; print one line per problem (stderr) and exit 2 if any."""
    bad = 0
    try:
        cat = Catalog.create(catalog or [])
    except InputError as e:
        err(str(e))
        raise typer.Exit(2) from None
    results = []
    for f in files:
        try:
            with progress_line(f"validating {f}") as prog:     # on stderr after a second; never with --quiet
                kind = _check_one(f, cat, lambda text: prog.update(f"validating {text}"))
            results.append({"file": str(f), "ok": True, "kind": kind, "error": None})
            if fmt is Fmt.table:
                typer.echo(f"ok  {f} ({kind})")
        except (InputError, SpecError) as e:
            bad += 1
            msg = str(e) if isinstance(e, InputError) else f"{f}: {e.field}: {e.reason}"
            err(msg)
            results.append({"file": str(f), "ok": False, "kind": None, "error": msg})
    if fmt is not Fmt.table:
        from baige_plan.io.plans import dumps
        typer.echo(dumps({"schema": "baige-plan/validate/v1", "ok": not bad, "files": results}, fmt.value), nl=False)
    if bad:
        raise typer.Exit(2)
