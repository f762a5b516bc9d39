"""The Typer app: one thin module per command; errors become one line + exit code."""

from __future__ import annotations

import os
import sys

import typer

from baige_plan import __version__
from baige_plan.cli.backtest import backtest
from baige_plan.cli.catalog import catalog
from baige_plan.cli.check import check
from baige_plan.cli.common import set_quiet
from baige_plan.cli.diff import diff
from baige_plan.cli.evaluate import evaluate
from baige_plan.cli.explain import explain
from baige_plan.cli.export import export
from baige_plan.cli.plan import plan
from baige_plan.cli.profile import profile
from baige_plan.cli.validate import validate
from baige_plan.cli.values import CheckedCommand, OneLineGroup
from baige_plan.cli.whatif import whatif

# OneLineGroup / CheckedCommand (cli/values.py): every number option checked once, by the same rule in
# every command; usage errors are one line on stderr, exit 2
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=OneLineGroup,
                  rich_markup_mode=None,
                  help="Plan parallel training of large models on big and mixed accelerator clusters.")
for _name, _fn in (("evaluate", evaluate), ("backtest", backtest), ("catalog", catalog), ("validate", validate),
                   ("plan", plan), ("explain", explain), ("check", check), ("diff", diff), ("export", export),
                   ("profile", profile), ("whatif", whatif)):
    app.command(_name, cls=CheckedCommand)(_fn)
from baige_plan.cli.replan import replan  # noqa: E402

app.command("replan", cls=CheckedCommand, help="Re-plan after losing nodes, a chip family or a bridge (or adding "
            "nodes): keep ranks in place where throughput allows; report the change and the bytes to move.")(replan)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"baige-plan {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit."),
          quiet: bool = typer.Option(False, "--quiet", "-q", help="No notes and no progress on stderr (errors are "
                                     "still printed); put it before the command: baige-plan --quiet plan ...")) -> None:
    """baige-plan: given a model, a cluster and a batch, find the fastest parallel plan that fits."""
    set_quiet(quiet)


def main() -> None:
    from baige_plan.errors import InputError, SpecError
    from baige_plan.safe_text import one_line
    try:
        app(standalone_mode=True)
    except (InputError, SpecError) as e:   # a command that forgot to catch: still one line, exit 2
        print(f"baige-plan: {one_line(str(e))}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - never show users a traceback
        if os.environ.get("BAIGE_PLAN_DEBUG"):
            raise
        print(f"baige-plan: internal error: {type(e).__name__}: {one_line(str(e))} "
              "(set BAIGE_PLAN_DEBUG=1 for a traceback)",
              file=sys.stderr)
        sys.exit(70)
