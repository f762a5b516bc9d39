"""Options and helpers shared by the command modules (thin layer over io/ and cost/)."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path

import typer

from baige_plan.errors import InputError, SpecError
from baige_plan.specs import runtimes as _runtimes
from baige_plan.specs.runtimes import NAMES as RUNTIME_NAMES

# the default of --max-memory-frac, one value for every command that takes it (plan, evaluate, whatif): a plan
# or strategy fits when its peak memory is at most this fraction of the device's
MAX_MEMORY_FRAC = 0.9

CatalogOpt = typer.Option(None, "--catalog", metavar="DIR", help="Extra catalog folder (chips/, models/, "
                          "topologies/), searched before the built-ins; repeatable [default: BAIGE_PLAN_CATALOG, "
                          "else none].")


# help texts of options several commands share (one wording everywhere)
PRECISION_HELP = ("Training precision: bf16, fp16, fp8, fp4 (NVFP4 GEMMs through Transformer Engine, Blackwell), fp32 "
                  "(IEEE fp32 on CUDA cores) or tf32 (fp32 storage, TF32 matrix math).")
FORMAT_HELP = "Output: table (for people), json or yaml (one document on stdout)."
ATTENTION_HELP = "flash (fused kernels) or standard (materialised scores, 2021-era)."
RECOMPUTE_HELP = "Activation recomputation: none, selective (attention core) or full (every layer)."


class Fmt(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


class Recompute(str, Enum):
    none = "none"
    selective = "selective"
    full = "full"


class Precision(str, Enum):
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    fp4 = "fp4"        # NVFP4 GEMMs (Transformer Engine NVFP4BlockScaling), bf16 elsewhere
    fp32 = "fp32"      # IEEE fp32 on CUDA cores (PyTorch default, allow_tf32=False)
    tf32 = "tf32"      # fp32 storage, TF32 tensor-core matmuls (torch.backends.cuda.matmul.allow_tf32=True)


def runtime_option(ctx, param, value):
    """Callback of --runtime / --framework: the runtime's name (specs/runtimes canonical: a runtime, or a framework
    name such as nemo, megatron-lm or llm-foundry, said on stderr), or a one-line usage error (exit 2)."""
    if value is None or ctx.resilient_parsing:
        return value
    try:
        name = _runtimes.canonical(value)
    except SpecError as e:
        raise typer.BadParameter(e.reason) from None
    why = _runtimes.alias_note(value)
    if why:
        note(f"--runtime {why}")
    return name


RuntimeOpt = typer.Option(None, "--runtime", "--framework", metavar="RUNTIME", callback=runtime_option,
                          help="Runtime the plan targets: " + ", ".join(RUNTIME_NAMES) + " (evaluate also costs "
                          + ", ".join(_runtimes.BACKTEST_ONLY) + "); framework names map to the runtime that "
                          "executes them (nemo, megatron-lm, megatron-bridge, mindspeed: megatron; megatron-deepspeed, "
                          "gpt-neox: deepspeed; fsdp, llm-foundry, fms-fsdp: torchtitan; paddleformers: paddle). The "
                          "search keeps to what it runs and the cost follows how it executes (when gradients are "
                          "reduced, what overlaps). [default: megatron; flagscale on clusters of several chip groups]")


class Execution(str, Enum):
    fused = "fused"
    eager = "eager"


class Attention(str, Enum):
    flash = "flash"
    standard = "standard"


class Dispatcher(str, Enum):
    alltoall = "alltoall"
    allgather = "allgather"
    flex = "flex"


# `baige-plan --quiet COMMAND` (cli/app.py sets it on every invocation): no notes and no progress on stderr;
# errors are still printed
_QUIET = {"on": False}


def set_quiet(on: bool) -> None:
    _QUIET["on"] = bool(on)


def is_quiet() -> bool:
    return _QUIET["on"]


def err(msg: str) -> None:
    """One line on stderr (printed even with --quiet)."""
    from baige_plan.safe_text import one_line
    print(f"baige-plan: {one_line(msg)}", file=sys.stderr)


def note(msg: str) -> None:
    """A note on stderr, unless --quiet."""
    if not _QUIET["on"]:
        from baige_plan.safe_text import printable
        print(f"note: {printable(msg)}", file=sys.stderr)


def domain_notes(cluster) -> None:
    """A note per chip group whose nodes are smaller than the chip's NVLink domain (GB200 / GB300 NVL72: 4-GPU trays
    in 72-GPU domains): the cost model takes the node as the scale-up domain, so TP / EP / CP across trays are
    costed over the NIC unless the nodes are written as the domain."""
    for g in cluster.groups:
        dom = g.chip.scaleup_domain_devices
        # nodes written as the chip's tray (its devices_per_node), several of them: the user left the domain out
        if dom and g.devices_per_node <= g.chip.devices_per_node < dom and g.devices > g.devices_per_node:
            per = max(d for d in range(1, dom + 1) if g.devices % d == 0 and d % g.devices_per_node == 0) \
                if g.devices >= g.devices_per_node else g.devices_per_node
            hint = f"{g.chip.id}:{g.devices // per}x{per}" if per > g.devices_per_node else "a topology file"
            note(f"{g.name}: nodes of {g.devices_per_node} devices, but {g.chip.id} NVLink domains hold {dom}: "
                 f"traffic between the nodes is costed over the NIC; to plan over the NVLink domain write the nodes "
                 f"as the domain ({hint}, or devices_per_node up to {dom} in a topology)")


# a progress line shows once the work has taken this long (tests set 0 to see every command's line)
PROGRESS_AFTER_S = 1.0


def progress_line(text: str = "", after_s: float | None = None):
    """A transient progress line on stderr for work that may take over a second (present/render_plans.Progress):
    shown after `after_s` seconds (PROGRESS_AFTER_S), only on a terminal, never with --quiet. `text`: a
    format string over done and total for `progress(done, total)` calls, or the first status for
    `.update(text)` calls."""
    from baige_plan.present.render_plans import Progress

    wait = PROGRESS_AFTER_S if after_s is None else after_s
    p = Progress(after_s=wait, text=text or Progress.SEARCH, enabled=not _QUIET["on"])
    if text and "{" not in text:
        p.update(text)
    return p


def fail_input(e: InputError | SpecError, source: str = "") -> None:
    """Print a bad-input error (file, field, reason) and exit 2."""
    if isinstance(e, SpecError):
        err(f"{source + ': ' if source else ''}{e.field}: {e.reason}")
    else:
        err(str(e))
    raise typer.Exit(2)


def write_atomic(path: Path, text: str) -> None:
    """Write an output file: regular files only (a device, pipe, socket or folder -- or a link to one -- is
    refused with an InputError), temp file in the same folder + fsync + os.replace, never half-written;
    a new file gets 0o666 & ~umask, an existing one keeps its mode (baige_plan/io/outfile.py)."""
    from baige_plan.io.outfile import write_atomic as write

    write(path, text)
