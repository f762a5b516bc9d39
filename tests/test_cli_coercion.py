"""cli/coercion.py: the pydantic-free coercion of plain values gives what typer's own coercion gives -- the same
value of the same type, or the same error -- for every parameter of every command, on plain and awkward values."""

from __future__ import annotations

import math
from enum import Enum
from pathlib import Path

import pytest
from typer.main import get_command

from baige_plan.cli.app import build_app
from baige_plan.cli.coercion import QuickCoercion

typer_coercion = pytest.importorskip("typer._coercion")

WORDS = ["0", "1", "16", "007", "-3", "+4", "1_000", " 7", "7 ", "1.5", "0.9", ".5", "1.", "1e3", "2E-2", "1e400",
         "nan", "inf", "abc", "", "fp32", "bf16", "FP32", "table", "json", "selective", "full", "flash", "megatron",
         "flagscale", "true", "false", "x.yaml", "/tmp", "/nonexistent/x", "README.md", "-", "99999999999999999999"]
TYPED = [0, 1, 16, -1, 0.9, 1.0, math.inf, math.nan, True, False, Path("x.yaml"), Path("/tmp")]


def _params():
    group = get_command(build_app())
    out = []
    for cmd in [group, *group.commands.values()]:
        ctx = cmd.context_class(cmd, info_name=cmd.name)
        for p in cmd.get_params(ctx):
            if hasattr(p, "type_descriptor"):
                out.append(pytest.param(cmd, ctx, p, id=f"{cmd.name}-{p.name}"))
    return out


def _outcome(rp, value, param, ctx):
    try:
        r = rp.coerce(value, param=param, ctx=ctx)
    except Exception as e:  # noqa: BLE001 - the error is part of the outcome
        return ("error", type(e), str(e))
    if isinstance(r, float) and math.isnan(r):
        return ("ok", float, "nan")
    return ("ok", type(r), r, [type(x) for x in r] if isinstance(r, (list, tuple)) else None)


@pytest.mark.parametrize(("cmd", "ctx", "param"), _params())
def test_quick_coercion_is_typers(cmd, ctx, param, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])      # README.md exists, x.yaml does not
    desc = param.type_descriptor
    values = [None, param.default, *WORDS, *TYPED]
    ann = desc.annotation
    if isinstance(ann, type) and issubclass(ann, Enum):
        values += list(ann)
    if param.multiple or param.nargs == -1:
        values = [None, (), [], ("x.yaml",), ["x.yaml", "/tmp"], ("1", "2"), ("fp32",), "x.yaml",
                  tuple(WORDS), [param.default] if param.default is not None else ()]
    full = typer_coercion.build_runtime_param(desc)
    for v in values:
        assert _outcome(QuickCoercion(desc), v, param, ctx) == _outcome(full, v, param, ctx), (param.name, v)
