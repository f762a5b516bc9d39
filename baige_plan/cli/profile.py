"""`baige-plan profile`: measure the local accelerator(s) and write a measured chip file.

Needs the optional torch extra (`pip install 'baige-plan[profile]'`); --help works without it.
Register with `app.command("profile")(profile)`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import typer

from baige_plan.cli.values import json_file, micro_batch_list, no_dash, recompute_list, tp_list


def _clean(text: str) -> str:
    """One line, no terminal control characters (an option value or a file name may carry escapes)."""
    from baige_plan.safe_text import one_line
    return one_line(text)


_NO_TORCH = "baige-plan profile needs PyTorch: pip install 'baige-plan[profile]'"


def profile(
    out: Path = typer.Option(Path("chip-profiled.yaml"), "--out", metavar="FILE", callback=no_dash, help="Chip YAML to write; raw samples go to "
                             "<out stem>.raw.json beside it."),
    devices: int = typer.Option(1, "--devices", min=1, help="Local GPUs; >1 also measures NCCL collectives "
                                "(all-reduce, all-gather, reduce-scatter, all-to-all, send/recv)."),
    quick: bool = typer.Option(False, "--quick", help="Smaller GEMM grid and fewer message sizes."),
    base: str = typer.Option("h100-sxm5-80g", "--base", callback=no_dash, help="Datasheet chip (catalog id or file) whose peaks, "
                             "capacities and link rates are kept."),
    catalog: list[str] = typer.Option([], "--catalog", metavar="DIR", callback=no_dash, help="Extra catalog folder "
                                      "(repeatable) [default: none]."),
    chip_id: str = typer.Option(None, "--id", callback=no_dash, help="id of the written chip [default: <base "
                                "id>-profiled]."),
    refit: Path = typer.Option(None, "--refit", callback=json_file, help="Fit and write from an existing .raw.json (no torch, "
                               "no GPU) [default: measure]."),
    model: str = typer.Option(None, "--model", callback=no_dash, help="Measure this model's per-layer profile instead of a chip file "
                              "(baige-plan/profile/v1: forward/backward time and memory per layer by tp and "
                              "micro-batch, embedding, logits, optimizer), for plan/evaluate --profile "
                              "[default: a chip file]."),
    seq_len: int = typer.Option(None, "--seq-len", help="With --model: sequence length [default: the model's]."),
    precision: str = typer.Option("bf16", "--precision", callback=no_dash, help="With --model: bf16, fp16, fp32 (IEEE fp32 matmuls) or tf32 (fp32 storage, TF32 matmuls); "
                            "with --analytical also fp8."),
    tp: str = typer.Option("1,2", "--tp", callback=tp_list, help="With --model: tensor-parallel sizes, emulated on one GPU by "
                           "dividing heads and ffn (TP communication stays in the cost model)."),
    micro_batch: str = typer.Option("1,2", "--micro-batch", callback=micro_batch_list, help="With --model: micro-batch sizes."),
    recompute: str = typer.Option("none,selective,full", "--recompute", callback=recompute_list, help="With --model: recompute modes."),
    chip: str = typer.Option(None, "--chip", callback=no_dash, help="With --model: catalog chip id the profile is for [default: "
                             "from the GPU's name]."),
    analytical: bool = typer.Option(False, "--analytical", help="With --model --chip: write the cost model's own "
                                    "per-layer numbers as a profile (no torch, no GPU)."),
    reps: int = typer.Option(10, "--reps", min=1, help="With --model: timed iterations (median)."),
    name: str = typer.Option(None, "--name", callback=no_dash, help="With --model: profile name [default: MODEL@CHIP-PRECISION]."),
) -> None:
    """Measure GEMM efficiency, HBM bandwidth and collective bus bandwidth; write a chip file.

    Needs the optional extra: pip install 'baige-plan[profile]' (adds torch).
    """
    from baige_plan.errors import InputError
    from baige_plan.io.outfile import check_target

    if model is not None:
        _profile_model(model, None if out == Path("chip-profiled.yaml") else out, seq_len, precision, tp, micro_batch,
                       recompute, chip, analytical, reps, name, catalog)
        return
    from baige_plan.profile.writer import raw_path_for

    try:    # refuse a device, pipe or folder as --out before measuring, not after
        for target in (out,) if refit is not None else (out, raw_path_for(out)):
            check_target(target)
    except InputError as e:
        typer.echo(f"baige-plan: {_clean(str(e))}", err=True)
        raise typer.Exit(2) from None
    argv = ["--out", str(out), "--devices", str(devices), "--base", base]
    argv += ["--quick"] if quick else []
    for c in catalog:
        argv += ["--catalog", c]
    if chip_id:
        argv += ["--id", chip_id]
    if refit is not None:
        argv += ["--refit", str(refit)]
    elif importlib.util.find_spec("torch") is None:
        typer.echo(f"baige-plan: profile: {_NO_TORCH}", err=True)
        raise typer.Exit(2)
    from baige_plan.profile import measure

    try:
        rc = measure.main(argv)
    except InputError as e:
        typer.echo(f"baige-plan: {_clean(str(e))}", err=True)
        raise typer.Exit(2) from None
    except RuntimeError as e:       # no CUDA device, too few devices
        typer.echo(f"baige-plan: profile: {_clean(str(e).splitlines()[0])}", err=True)
        raise typer.Exit(2) from None
    if rc:
        raise typer.Exit(rc)
    sys.stderr.flush()


def _profile_model(model: str, out: Path | None, seq_len: int | None, precision: str, tp: str, micro_batch: str,
                   recompute: str, chip: str | None, analytical: bool, reps: int, name: str | None,
                   catalog: list[str]) -> None:
    """`profile --model`: a per-layer profile (baige_plan/profile/layers.py), measured or analytical."""
    from baige_plan.errors import InputError, SpecError
    from baige_plan.io.outfile import check_target

    measured = ("bf16", "fp16", "fp32", "tf32")
    allowed = measured + (("fp8",) if analytical else ())
    if precision not in allowed:
        typer.echo(f"baige-plan: --precision: must be {', '.join(allowed[:-1])} or {allowed[-1]}"
                   f"{' (fp8: only with --analytical, the profiler measures no fp8 layers)' if precision == 'fp8' else ''}"
                   f", got {precision!r}", err=True)
        raise typer.Exit(2)
    argv = ["--model", model, "--precision", precision, "--tp", tp, "--micro-batch", micro_batch,
            "--recompute", recompute, "--reps", str(reps)]
    for flag, v in (("--out", out), ("--seq-len", seq_len), ("--chip", chip), ("--name", name)):
        if v is not None:
            argv += [flag, str(v)]
    for c in catalog:
        argv += ["--catalog", c]
    if analytical:
        argv.append("--analytical")
    elif importlib.util.find_spec("torch") is None:
        typer.echo(f"baige-plan: profile: {_NO_TORCH} (or write the analytical numbers: --analytical --chip CHIP)",
                   err=True)
        raise typer.Exit(2)
    from baige_plan.profile import layers

    try:
        if out is not None:
            check_target(out)
        layers.main(argv)
    except (InputError, SpecError, ValueError) as e:
        typer.echo(f"baige-plan: {_clean(str(e))}", err=True)
        raise typer.Exit(2) from None
    except RuntimeError as e:       # no CUDA device
        typer.echo(f"baige-plan: profile: {_clean(str(e).splitlines()[0])}", err=True)
        raise typer.Exit(2) from None
    sys.stderr.flush()
