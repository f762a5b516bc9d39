"""The Typer app: one thin module per command; errors become one line + exit code.

`main()` (the `baige-plan` entry point) imports only the command it runs: each command module pulls in what
its command needs (the catalog, the cost model, rich tables, the backtest reports...), and loading every one of
them cost a plan ~0.1 s of start-up. `app` (what tests and `typer` tooling import) is the whole app, built on
first access; `--help`, `--version`, no command or an unknown one (its "did you mean") get the whole app too.
"""

from __future__ import annotations

import os
import sys
from importlib import import_module

import typer

from baige_plan import __version__
from baige_plan.cli.common import set_quiet
from baige_plan.cli.values import CheckedCommand, OneLineGroup

# command name -> (module, function, help text when not the function's docstring), in `--help` order
COMMANDS: dict[str, tuple[str, str, str | None]] = {
    "evaluate": ("baige_plan.cli.evaluate", "evaluate", None),
    "backtest": ("baige_plan.cli.backtest", "backtest", None),
    "catalog": ("baige_plan.cli.catalog", "catalog", None),
    "validate": ("baige_plan.cli.validate", "validate", None),
    "plan": ("baige_plan.cli.plan", "plan", None),
    "explain": ("baige_plan.cli.explain", "explain", None),
    "check": ("baige_plan.cli.check", "check", None),
    "diff": ("baige_plan.cli.diff", "diff", None),
    "export": ("baige_plan.cli.export", "export", None),
    "profile": ("baige_plan.cli.profile", "profile", None),
    "whatif": ("baige_plan.cli.whatif", "whatif", None),
    "replan": ("baige_plan.cli.replan", "replan", "Re-plan after losing nodes, a chip family or a bridge (or adding "
               "nodes): keep ranks in place where throughput allows; report the change and the bytes to move."),
}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"baige-plan {__version__}")
        raise typer.Exit(0)


def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit."),
          quiet: bool = typer.Option(False, "--quiet", "-q", help="No notes and no progress on stderr (errors are "
                                     "still printed); put it before the command: baige-plan --quiet plan ...")) -> None:
    """baige-plan: given a model, a cluster and a batch, find the fastest parallel plan that fits."""
    set_quiet(quiet)


def build_app(names: tuple[str, ...] | None = None) -> typer.Typer:
    """The Typer app with the commands `names` (None: all of them), each imported here."""
    # OneLineGroup / CheckedCommand (cli/values.py): every number option checked once, by the same rule in
    # every command; usage errors are one line on stderr, exit 2
    a = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=OneLineGroup,
                    rich_markup_mode=None,
                    help="Plan parallel training of large models on big and mixed accelerator clusters.")
    for name, (mod, fn, help_) in COMMANDS.items():
        if names is None or name in names:
            a.command(name, cls=CheckedCommand, help=help_)(getattr(import_module(mod), fn))
    a.callback()(_root)
    return a


def __getattr__(name: str):
    if name == "app":     # `from baige_plan.cli.app import app`: every command
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def command_in(argv: list[str]) -> str | None:
    """The command `argv` runs when it is a known one reached past the root's flag options only (-q/--quiet);
    None otherwise (--help, --version, no command, an unknown word: the whole app answers those)."""
    for a in argv:
        if a in ("-q", "--quiet"):
            continue
        return a if a in COMMANDS else None
    return None


def main() -> None:
    import gc
    import signal

    from baige_plan.errors import InputError, SpecError
    from baige_plan.safe_text import one_line
    if hasattr(signal, "SIGPIPE"):
        # a reader that closes stdout early (`| head`): end as Unix tools do, killed by SIGPIPE (status 141 in the
        # shell), not exit 1, which means "no feasible plan" (rich and click both turned EPIPE into exit 1)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    cmd = command_in(sys.argv[1:])
    # `plan` allocates hundreds of thousands of small objects and keeps most of them to the end (the search's memo
    # keys, stage costs, estimates), with next to no reference cycles: the cyclic collector's passes over them took
    # 5-10% of a plan and freed under 4 MiB on the 16,384-device one, so that command runs with it paused (this
    # process only: enabled again when the command ends; its forked search workers exit without returning here)
    paused = cmd == "plan" and gc.isenabled()
    if paused:
        gc.disable()
    try:
        build_app((cmd,) if cmd else None)(standalone_mode=True)
    except (InputError, SpecError) as e:   # a command that forgot to catch: still one line, exit 2
        print(f"baige-plan: {one_line(str(e))}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - never show users a traceback
        if os.environ.get("BAIGE_PLAN_DEBUG"):
            raise
        if isinstance(e, OSError) and e.errno is not None:
            # the system refused a read or write (e.g. stdout on a full disk): the user's environment, not a bug
            where = e.filename if e.filename is not None else "standard output"
            print(f"baige-plan: {one_line(str(where))}: {one_line(e.strerror or str(e))}", file=sys.stderr)
            sys.exit(2)
        print(f"baige-plan: internal error: {type(e).__name__}: {one_line(str(e))} "
              "(set BAIGE_PLAN_DEBUG=1 for a traceback)",
              file=sys.stderr)
        sys.exit(70)
    finally:
        if paused:
            # the objects the command made are left out of later collections (gc.freeze: still freed by reference
            # counting): re-enabled as it was, the collector's next pass would scan them all once (~70 ms on the
            # 512-GPU plan, as the process exits), what pausing it saved
            gc.freeze()
            gc.enable()
