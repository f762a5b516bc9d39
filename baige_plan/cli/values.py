"""Command-line values, checked once for every command (issue 12).

Every number option has one rule here, the same in `plan`, `evaluate`, `check` and `profile`: an
integer range or a finite float range, with upper limits from baige_plan/limits.py. `CheckedCommand`
applies the rules right after parsing (before the command runs), and `OneLineGroup` prints every usage
error -- a rule broken, a value that does not parse, an unknown option, a missing argument -- as one
line on stderr, exit 2 (SPEC §3), instead of click's usage box. `--help` output is unchanged.
"""

from __future__ import annotations

import math
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from typer import Abort
from typer.core import TyperCommand, TyperGroup

from baige_plan.errors import InputError, SpecError
from baige_plan.limits import (
    MAX_DEVICES,
    MAX_GLOBAL_BATCH,
    MAX_LAYERS,
    MAX_SEQ_LEN,
    MAX_TIME_LIMIT_S,
    MAX_TOP,
)

try:        # typer >= 0.20 vendors click as typer._click
    from typer._click import _textwrap as _tw
    from typer._click import core as _core
    from typer._click import exceptions as _cx
    from typer._click import formatting as _fmt
except ImportError:  # pragma: no cover - older typer on click
    import click._textwrap as _tw
    import click.core as _core
    import click.exceptions as _cx
    import click.formatting as _fmt

PROG = "baige-plan"

# option -> (lowest, highest) for integers
INT_RULES: dict[str, tuple[int, int]] = {
    "--global-batch": (1, MAX_GLOBAL_BATCH), "--seq-len": (1, MAX_SEQ_LEN), "--micro-batch": (1, MAX_GLOBAL_BATCH),
    "--max-micro-batch": (1, MAX_GLOBAL_BATCH),
    "--tp": (1, MAX_DEVICES), "--pp": (1, MAX_DEVICES), "--dp": (1, MAX_DEVICES), "--cp": (1, MAX_DEVICES),
    "--ep": (1, MAX_DEVICES), "--etp": (1, MAX_DEVICES), "--max-tp": (1, MAX_DEVICES),
    "--max-pp": (1, MAX_DEVICES), "--max-cp": (1, MAX_DEVICES),
    "--vpp": (1, MAX_LAYERS), "--first-stage-layers": (1, MAX_LAYERS), "--last-stage-layers": (1, MAX_LAYERS),
    "--zero": (0, 3), "--top": (1, MAX_TOP), "--pick": (1, MAX_TOP), "--fsdp-shard": (0, MAX_DEVICES),
    "--devices": (1, 4096), "--reps": (1, 1_000_000),          # profile
}
# option -> (lowest, lowest allowed?, highest) for floats; NaN and infinities never pass
FLOAT_RULES: dict[str, tuple[float, bool, float]] = {
    "--time-limit": (0.0, False, MAX_TIME_LIMIT_S),
    "--max-memory-frac": (0.0, False, 1.0),
    "--tolerance": (0.0, True, 1e6),
    # issue 12 (cost/money.py): tokens to train, a deadline in hours, a budget in USD
    "--tokens": (0.0, False, 1e18), "--deadline": (0.0, False, 1e9), "--budget": (0.0, False, 1e15),
    # issue 18 (search/batch_tolerance.py): percent the global batch may move to split over whole groups
    "--batch-tolerance": (0.0, True, 50.0),
}


def check_value(flag: str, value: Any) -> str | None:
    """The reason `value` breaks `flag`'s rule, or None. Raises KeyError for a number option with no rule."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and flag in INT_RULES:
        lo, hi = INT_RULES[flag]
        if not lo <= value <= hi:
            return f"must be an integer from {lo} to {hi:,}, got {value}"
        return None
    if isinstance(value, (int, float)):
        lo, lo_ok, hi = FLOAT_RULES[flag]
        v = float(value)
        if not math.isfinite(v) or v < lo or (v == lo and not lo_ok) or v > hi:
            side = ">=" if lo_ok else ">"
            return f"must be a finite number {side} {lo:g} and <= {hi:g}, got {v}"
    return None


def number_params(command) -> list:
    """The options of `command` whose value is an int or a float."""
    out = []
    for p in command.params:
        desc = getattr(p, "type_descriptor", None)
        ann = getattr(desc, "annotation", None)
        if ann in (int, float) and getattr(p, "opts", None):
            out.append(p)
    return out


def check_params(ctx) -> None:
    """Apply the rules to every number option of the parsed command (a list: each value)."""
    for p in number_params(ctx.command):
        value = ctx.params.get(p.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if v is None:
                continue
            flag = next(o for o in p.opts if o.startswith("--"))
            why = check_value(flag, v)
            if why is not None:
                raise _cx.BadParameter(why, ctx=ctx, param=p)


def plan_file(ctx, param, value):
    """Callback of a PLAN argument or option (explain, export, evaluate --plan): the file passes every check
    `baige-plan validate` makes (reports/plan_check.py, shared with check and diff), so every command judges a
    plan file as validate does. InputError (file, field, reason) otherwise: one line, exit 2."""
    if value is None or ctx.resilient_parsing:
        return value
    from baige_plan.cli.common import progress_line
    from baige_plan.reports.plan_check import validate_plan_file

    with progress_line(f"checking {value}") as prog:     # a plan of 16k devices takes seconds: on stderr after 1 s
        validate_plan_file(value, step=lambda text: prog.update(f"checking {text}"))
    return value


def out_dir_option(ctx, param, value):
    """Callback of --out-dir: a folder, or a path where one can be made (not a file, device or link)."""
    if value is None or ctx.resilient_parsing:
        return value
    if not str(value).strip():
        raise _cx.BadParameter("must name a folder, got ''", ctx=ctx, param=param)
    from baige_plan.safe_text import printable
    if printable(str(value)) != str(value):
        raise _cx.BadParameter(f"{_shorten(printable(str(value)))}: a folder name with a control character",
                               ctx=ctx, param=param)
    value = Path(value)
    try:
        os.lstat(value)
    except FileNotFoundError:
        return value                    # made by the command
    except (OSError, ValueError) as e:  # a name too long, a NUL byte, a component that is a file
        raise _cx.BadParameter(f"{_shorten(str(value))}: {getattr(e, 'strerror', None) or e}", ctx=ctx,
                               param=param) from None
    if not os.path.isdir(value):
        raise _cx.BadParameter(f"{_shorten(str(value))} exists and is not a directory", ctx=ctx, param=param)
    return value


def _list_option(kind: str, parse, ok, rule: str):
    def callback(ctx, param, value):
        if value is None or ctx.resilient_parsing:
            return value
        items = [x.strip() for x in str(value).split(",")]
        if not 0 < len(items) <= 64:
            raise _cx.BadParameter(f"must be a comma-separated list of 1 to 64 {kind}, got {_shorten(str(value))}",
                                   ctx=ctx, param=param)
        for x in items:
            try:
                v = parse(x)
            except ValueError:
                v = None
            if v is None or not ok(v):
                raise _cx.BadParameter(f"{_shorten(x)} is not {rule} (in {_shorten(str(value))})", ctx=ctx,
                                       param=param)
        return ",".join(items)
    return callback


def _int_or_none(x: str) -> int | None:
    return int(x) if x.isascii() and x.isdigit() else None


# `profile --model` lists: --tp 1,2,4 (1..MAX_DEVICES), --micro-batch 1,2 (1..MAX_GLOBAL_BATCH), --recompute
tp_list = _list_option("integers", _int_or_none, lambda v: 1 <= v <= MAX_DEVICES,
                       f"an integer from 1 to {MAX_DEVICES:,}")
micro_batch_list = _list_option("integers", _int_or_none, lambda v: 1 <= v <= MAX_GLOBAL_BATCH,
                                f"an integer from 1 to {MAX_GLOBAL_BATCH:,}")
recompute_list = _list_option("modes", str, lambda v: v in ("none", "selective", "full"),
                              "one of none, selective, full")


def no_dash(ctx, param, value):
    """Callback of a `profile` option handed on to the measuring module's own parser: a name must not start
    with '-' (it would read as an option there); a path that does is made absolute."""
    if value is None or ctx.resilient_parsing:
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(no_dash(ctx, param, v) for v in value)
    if isinstance(value, os.PathLike):
        return Path(os.path.abspath(value)) if str(value).startswith("-") else value
    if not str(value).strip() or str(value).startswith("-"):
        raise _cx.BadParameter(f"must be a non-empty name not starting with '-', got {_shorten(str(value))}",
                               ctx=ctx, param=param)
    return value


def json_file(ctx, param, value):
    """Callback of a JSON input option (profile --refit): a regular file within the size limit holding
    valid JSON (io/yamlio.py); InputError otherwise."""
    if value is None or ctx.resilient_parsing:
        return value
    from baige_plan.io.yamlio import read_json

    read_json(value)
    return value


def _raw_values(args: list[str], opts: list[str]):
    """What the user typed for an option, each occurrence in order (`--opt v` or `--opt=v`)."""
    for i, a in enumerate(args):
        for o in opts:
            if a == o and i + 1 < len(args):
                yield args[i + 1]
            elif a.startswith(o + "="):
                yield a[len(o) + 1:]


def _raw_value(args: list[str], opts: list[str]) -> str | None:
    """What the user typed for an option (the last occurrence), for messages."""
    typed = list(_raw_values(args, opts))
    return typed[-1] if typed else None


class _WholeWords(_tw.TextWrapper):
    def __init__(self, *args, **kwargs):
        kwargs["break_on_hyphens"] = False
        super().__init__(*args, **kwargs)


@contextmanager
def _whole_words():
    real = _tw.TextWrapper
    _tw.TextWrapper = _WholeWords       # click's wrap_text imports it at each call
    try:
        yield
    finally:
        _tw.TextWrapper = real


class HelpFormatter(_fmt.HelpFormatter):
    """click's plain help formatter (the app has no rich markup: "[default: ...]" and "[plot]" are text),
    wrapping at spaces only: an option name (--decoder-first-pipeline-num-layers) or an install hint
    (pip install 'baige-plan[plot]') is never split at a hyphen."""

    def write_text(self, text: str) -> None:
        with _whole_words():
            super().write_text(text)

    def write_dl(self, rows, col_max: int = 30, col_spacing: int = 2) -> None:
        with _whole_words():
            super().write_dl(rows, col_max, col_spacing)


class HelpContext(_core.Context):
    formatter_class = HelpFormatter


class CheckedCommand(TyperCommand):
    """A command whose number options are checked against the rules above once parsed, and whose
    catalog environment (BAIGE_PLAN_CATALOG, --catalog) must name folders."""

    context_class = HelpContext

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        from baige_plan.cli.coercion import install
        from baige_plan.io.catalog import check_roots

        install(self, ctx)       # plain values coerced without pydantic (cli/coercion.py): ~0.13 s of start-up
        raw = list(args)
        if not ctx.resilient_parsing and not any(a in ("--help", "-h") for a in raw):
            check_roots()           # BAIGE_PLAN_CATALOG first: a broken environment is named before anything else
        try:
            rest = super().parse_args(ctx, args)
        except _cx.BadParameter as e:
            p = e.param
            if p is not None and getattr(p, "opts", None) and "got " not in e.message:
                v = _raw_value(raw, p.opts)
                if v is not None and v[:60] not in e.message:
                    e.message = f"{e.message.rstrip('.')}, got {_shorten(v)}"
            raise
        if not ctx.resilient_parsing:
            check_params(ctx)
            check_file_options(self.params, raw, ctx)
            cat = ctx.params.get("catalog")
            check_roots(list(cat) if isinstance(cat, (list, tuple)) else ([cat] if cat else []))
        return rest


def check_file_options(params, raw: list[str], ctx) -> None:
    """An option that names a file (metavar FILE) given a path ending in a separator names a folder: refused as
    typed. The parsed value is a pathlib.Path, which drops the trailing '/' -- `--out x.yaml/` would write x.yaml."""
    seps = tuple({"/", os.sep})
    for p in params:
        if getattr(p, "metavar", None) != "FILE" or getattr(p, "param_type_name", "") != "option":
            continue
        for v in _raw_values(raw, [o for o in p.opts if o.startswith("-")]):
            if v.endswith(seps):
                shown = repr(v) if len(v) <= 60 else repr("..." + v[-57:])      # the end says why
                raise _cx.BadParameter(f"names a folder (it ends with {v[-1]!r}), not a file, got {shown}",
                                       ctx=ctx, param=p)


def _shorten(v: str, n: int = 60) -> str:
    return repr(v) if len(v) <= n else repr(v[:n]) + f"... ({len(v)} characters)"


def _flat(text: str) -> str:
    from baige_plan.safe_text import one_line
    return one_line(text)


def one_line(e: Exception) -> str:
    """A usage error as one line, naming the option and the value where there is one."""
    ctx = getattr(e, "ctx", None)
    sub = ctx.info_name if ctx is not None and ctx.parent is not None else None
    help_ = f"{PROG} {sub} --help" if sub else f"{PROG} --help"
    if isinstance(e, _cx.BadParameter):
        p = e.param
        if e.param_hint is not None:
            hint = e.param_hint if isinstance(e.param_hint, str) else " / ".join(e.param_hint)
        elif p is not None and getattr(p, "param_type_name", "") == "option":
            hint = " / ".join(o for o in p.opts if o.startswith("-"))
        elif p is not None:
            hint = (p.name or "").upper()
        else:
            hint = ""
        if isinstance(e, _cx.MissingParameter):
            return f"{PROG}: {_flat(e.format_message())} (see '{help_}')"
        return f"{PROG}: {hint + ': ' if hint else ''}{_flat(e.message)}"
    msg = _flat(e.format_message()) if isinstance(e, _cx.ClickException) else _flat(str(e))
    where = f"{sub}: " if sub else ""
    return f"{PROG}: {where}{msg} (see '{help_}')"


_NO_ARGS = getattr(_cx, "NoArgsIsHelpError", ())


class OneLineGroup(TyperGroup):
    """The app: usage errors are one line on stderr, exit 2; bad input escaping a command is one line,
    exit 2; help and the exit codes of the commands are unchanged."""

    context_class = HelpContext

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        from baige_plan.cli.coercion import install

        install(self, ctx)       # the root's --quiet/--version, as CheckedCommand's options (cli/coercion.py)
        return super().parse_args(ctx, args)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _NO_ARGS as e:           # `baige-plan` or a command with no arguments: the help text
            e.show()
            sys.exit(e.exit_code)
        except _cx.ClickException as e:
            print(one_line(e), file=sys.stderr)
            sys.exit(e.exit_code if not isinstance(e, _cx.UsageError) else 2)
        except Abort:
            print(f"{PROG}: aborted", file=sys.stderr)
            sys.exit(1)
        except InputError as e:
            print(f"{PROG}: {_flat(str(e))}", file=sys.stderr)
            sys.exit(2)
        except SpecError as e:
            print(f"{PROG}: {e.field}: {_flat(e.reason)}", file=sys.stderr)
            sys.exit(2)
        sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)
