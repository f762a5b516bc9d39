"""`baige-plan evaluate`: estimate one strategy (or re-estimate a plan file)."""

from __future__ import annotations

from pathlib import Path

import typer

from baige_plan.cli.common import (
    ATTENTION_HELP,
    FORMAT_HELP,
    MAX_MEMORY_FRAC,
    PRECISION_HELP,
    RECOMPUTE_HELP,
    Attention,
    CatalogOpt,
    Dispatcher,
    Execution,
    Fmt,
    Precision,
    Recompute,
    RuntimeOpt,
    domain_notes,
    err,
    fail_input,
    note,
    progress_line,
)
from baige_plan.cli.profile_opts import ProfileOpt, apply_profiles, report_sources
from baige_plan.cli.runtime_opts import contract_defaults, default_sequence_parallel, pick_runtime
from baige_plan.cli.values import plan_file
from baige_plan.cost.classes import primary_class
from baige_plan.cost.estimate import estimate
from baige_plan.errors import InputError, SpecError
from baige_plan.io.bands import estimate_band, load_bands
from baige_plan.io.catalog import Catalog
from baige_plan.io.serialize import estimate_dict, to_json, to_yaml
from baige_plan.present.render import estimate_tables, print_tables
from baige_plan.specs.job import JobSpec
from baige_plan.specs.strategy import StrategySpec, infer_dp


def evaluate(
    model: str = typer.Argument(None, metavar="MODEL", help="Built-in model name, model YAML, or Hugging Face "
                                "config.json."),
    cluster: str = typer.Argument(None, metavar="CLUSTER", help="Built-in topology, topology YAML, or "
                                  "CHIP:NODESxDEVICES[+CHIP:NODESxDEVICES...]."),
    plan: Path = typer.Option(None, "--plan", metavar="PLAN", help="Re-estimate this plan file as written, instead "
                              "of MODEL CLUSTER and the strategy options [default: none].", callback=plan_file),
    global_batch: int = typer.Option(None, "--global-batch", help="Sequences per optimizer step "
                                     "[default: dp x micro-batch x 4 x pp]."),
    seq_len: int = typer.Option(None, "--seq-len", help="Sequence length [default: the model's]."),
    precision: Precision = typer.Option(Precision.bf16, "--precision", help=PRECISION_HELP),
    tp: int = typer.Option(1, "--tp", help="Tensor parallel size (within a node)."),
    pp: int = typer.Option(1, "--pp", help="Pipeline parallel size (stages)."),
    dp: int = typer.Option(None, "--dp", help="Data parallel size (model replicas) [default: devices / (tp x pp x "
                           "cp)]."),
    cp: int = typer.Option(1, "--cp", help="Context parallel size (sequence split across devices)."),
    ep: int = typer.Option(1, "--ep", help="Expert parallel size (MoE models; divides tp x cp x dp / etp)."),
    etp: int = typer.Option(1, "--etp", help="Expert tensor parallel size."),
    zero: int = typer.Option(None, "--zero", min=0, max=3, show_default=False,
                             help="ZeRO stage (1 = distributed optimizer) [default: 1]."),
    micro_batch: int = typer.Option(1, "--micro-batch", help="Sequences per micro-batch."),
    vpp: int = typer.Option(1, "--vpp", help="Model chunks per device (interleaved 1F1B); 1 = none."),
    recompute: Recompute = typer.Option(None, "--recompute", show_default=False,
                                        help=RECOMPUTE_HELP + " [default: selective]"),
    sequence_parallel: bool = typer.Option(None, "--sequence-parallel/--no-sequence-parallel",
                                           help="Sequence parallelism (Megatron: activations split along the "
                                           "sequence within the TP group; off where the runtime has none or with "
                                           "--distribute-saved-activations) [default: on when tp > 1]."),
    attention: Attention = typer.Option(Attention.flash, "--attention",
                                        help=ATTENTION_HELP),
    execution: Execution = typer.Option(None, "--execution",
                                        help="fused (Megatron/TE kernels) or eager (PyTorch eager + autocast) "
                                        "[default: the runtime's]."),
    runtime: str | None = RuntimeOpt,
    first_stage_layers: int = typer.Option(None, "--first-stage-layers",
                                           help="Uneven pipeline split: transformer layers of the first stage "
                                           "(Megatron --decoder-first-pipeline-num-layers; a multiple of --vpp) "
                                           "[default: an even split]."),
    last_stage_layers: int = typer.Option(None, "--last-stage-layers",
                                          help="Uneven pipeline split: transformer layers of the last stage "
                                          "(Megatron --decoder-last-pipeline-num-layers; a multiple of --vpp) "
                                          "[default: an even split]."),
    pipeline_layout: str = typer.Option(None, "--pipeline-layout", metavar="LAYOUT",
                                        help="Explicit layers per virtual stage (pp x vpp of them, model order): "
                                        "Megatron's --pipeline-model-parallel-layout string (\"Et*4|(t*4|)*14tmL\") "
                                        "or comma-separated counts (\"4,4,...,1\") [default: the split Megatron builds "
                                        "from --first/--last-stage-layers and the accounting flags]."),
    account_for_embedding: bool = typer.Option(False, "--account-for-embedding/--no-account-for-embedding",
                                               help="Count the embedding as one pipeline layer of the first stage "
                                               "(Megatron --account-for-embedding-in-pipeline-split)."),
    account_for_loss: bool = typer.Option(False, "--account-for-loss/--no-account-for-loss",
                                          help="Count the output layer and loss as one pipeline layer of the last "
                                          "stage (Megatron --account-for-loss-in-pipeline-split)."),
    grad_reduce_bf16: bool = typer.Option(False, "--grad-reduce-in-bf16/--grad-reduce-in-fp32",
                                          help="Megatron: keep main gradients in bf16 and reduce them in bf16 "
                                          "(--grad-reduce-in-bf16; Megatron-Bridge perf recipes' "
                                          "grad_reduce_in_fp32=False); --grad-reduce-in-fp32: fp32 main grads."),
    moe_a2a_overlap: bool = typer.Option(False, "--moe-a2a-overlap/--no-moe-a2a-overlap",
                                         help="MoE, Megatron: overlap the EP all-to-alls of one micro-batch with "
                                         "another's compute (--overlap-moe-expert-parallel-comm; Megatron-Bridge "
                                         "moe_a2a_overlap), costed with its measured contention."),
    moe_dispatcher: Dispatcher = typer.Option(Dispatcher.alltoall, "--moe-dispatcher",
                                              help="MoE token dispatcher (Megatron --moe-token-dispatcher-type): "
                                              "alltoall, allgather, or flex (DeepEP / HybridEP: a token crosses a node "
                                              "once per remote node, permutations inside the exchange)."),
    moe_fused_mlp: bool = typer.Option(False, "--moe-fused-mlp/--no-moe-fused-mlp",
                                       help="MoE: Transformer Engine's fused grouped MLP (Megatron "
                                       "--use-transformer-engine-op-fuser with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1; "
                                       "Blackwell, MXFP8 / NVFP4 only)."),
    tp_pp_dp_mapping: bool = typer.Option(False, "--tp-pp-dp-mapping/--no-tp-pp-dp-mapping",
                                          help="Megatron: order ranks tp-cp-ep-pp-dp (--use-tp-pp-dp-mapping): a "
                                          "replica's pipeline stages are neighbours, data parallelism strides over "
                                          "replicas (NVL72 domains)."),
    distribute_saved_activations: bool = typer.Option(
        False, "--distribute-saved-activations/--no-distribute-saved-activations",
        help="Full recompute, tp > 1, no sequence parallelism: keep 1/tp of each checkpointed layer input and "
        "all-gather it over TP before the recompute (Megatron --distribute-saved-activations, DeepSpeed "
        "partition_activations)."),
    fsdp_shard: int = typer.Option(0, "--fsdp-shard", metavar="N",
                                   help="Hybrid sharding (HSDP), zero 2/3: shard the states over groups of N of the "
                                   "dp x cp ranks and replicate the groups (torchtitan data_parallel_shard_degree x "
                                   "cp, FSDP HYBRID_SHARD, Megatron-FSDP --num-distributed-optimizer-instances "
                                   "dp x cp / N) [default: 0, shard over all dp x cp ranks]."),
    max_memory_frac: float = typer.Option(MAX_MEMORY_FRAC, "--max-memory-frac",
                                          help="Fraction of device memory the strategy may use (fits: peak <= "
                                          "capacity x F; the output states F and the margin; the same default "
                                          "as `plan`)."),
    fmt: Fmt = typer.Option(Fmt.table, "--format", help=FORMAT_HELP),
    exclude: list[str] = typer.Option(None, "--exclude", metavar="NODES", help="Nodes not to use: GROUP:INDEX or "
                                      "GROUP:FIRST-LAST (as `plan --exclude`); the strategy runs on the nodes left "
                                      "[default: none]."),
    catalog: list[str] = CatalogOpt,
    profile: list[Path] = ProfileOpt,
) -> None:
    """Estimate step time, MFU and memory of one strategy. Exits 1 (printing fits: false) when it does not fit."""
    prog = progress_line(f"evaluate: re-estimating {plan}" if plan is not None else "evaluate: estimating")
    try:
        cat = Catalog.create(catalog or [])
        if plan is not None:
            if profile:
                raise InputError("--profile", "", "a plan file carries its profiles (inputs.cluster.groups[].profile); "
                                 "--profile applies to MODEL CLUSTER")
            if exclude:
                raise InputError("--exclude", " ".join(exclude), "applies to MODEL CLUSTER; a plan file's placement "
                                 "names the nodes it uses")
            from baige_plan.io.plans import evaluate_plan_file
            doc, fits = evaluate_plan_file(plan)    # plans on several groups: each group's best plan alone too
            prog.close()
            _emit_doc(doc, fmt, fits)
            if not fits:
                err(doc.get("bottleneck", "does not fit in memory"))
                raise typer.Exit(1)
            return
        if model is None or cluster is None:
            raise InputError("evaluate", "MODEL CLUSTER", "give a model and a cluster, or --plan PLAN_FILE")
        m = cat.model(model)
        cl, bridged = cat.cluster(cluster)
        if bridged:
            note("shorthand mixes chip families: added a default cpu-forwarding bridge")
        domain_notes(cl)
        if exclude:   # the nodes left (search/partial.py); excluding a whole group leaves nothing to estimate: exit 2
            from baige_plan.search.partial import parse_exclude, without
            cl = without(cl, parse_exclude(exclude, cl))
        if dp is None:
            dp = infer_dp(cl.devices, tp, pp, cp)
        if global_batch is None:
            global_batch = dp * micro_batch * 4 * pp
            note(f"--global-batch not given: using dp x micro-batch x 4 x pp = {global_batch}")
        job = JobSpec(global_batch=global_batch, seq_len=seq_len or m.seq_len, precision=precision.value)
        cl = apply_profiles(cl, profile, m, job)
        if sequence_parallel is None:
            sequence_parallel = default_sequence_parallel(runtime)
        zero, recompute = contract_defaults(runtime, zero, recompute.value if recompute is not None else None)
        s = StrategySpec(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, zero=zero, micro_batch=micro_batch, vpp=vpp,
                         recompute=recompute, sequence_parallel=sequence_parallel, attention=attention.value,
                         first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers,
                         account_for_embedding=account_for_embedding, account_for_loss=account_for_loss,
                         pipeline_layout=_layout(pipeline_layout),
                         grad_reduce_bf16=grad_reduce_bf16, moe_a2a_overlap=moe_a2a_overlap,
                         moe_dispatcher="" if moe_dispatcher is Dispatcher.alltoall else moe_dispatcher.value,
                         moe_fused_mlp=moe_fused_mlp,
                         tp_pp_dp_mapping=tp_pp_dp_mapping, fsdp_shard=fsdp_shard,
                         distribute_saved_activations=distribute_saved_activations)
        s = pick_runtime(s, m, job, runtime)
        if execution is not None:
            s = s.with_(execution=execution.value)
        if not 0 < max_memory_frac <= 1:
            raise SpecError("--max-memory-frac", f"must be in (0, 1], got {max_memory_frac}")
        e = estimate(m, cl, job, s, memory_frac=max_memory_frac)
        report_sources(e.sources)
    except InputError as ex:
        fail_input(ex)
    except SpecError as ex:
        fail_input(ex, "strategy")
    finally:
        prog.close()
    bands = load_bands()
    band = estimate_band(e, m, job, bands)
    if fmt is Fmt.table:
        print_tables(estimate_tables(e, f"{m.name} on {cl.name}  (global batch {job.global_batch}, seq {job.seq_len}, "
                                        f"{job.precision})", band, bands.band_of(primary_class(m, job, e.strategy))[0]))
    else:
        _emit_doc(estimate_dict(e, band), fmt, e.fits, table_ok=False)
        if not e.fits:
            pass
    if not e.fits:
        err(e.bottleneck)
        raise typer.Exit(1)


def _emit_doc(doc: dict, fmt: Fmt, fits: bool, table_ok: bool = True) -> None:
    if fmt is Fmt.yaml:
        typer.echo(to_yaml(doc), nl=False)
    else:
        typer.echo(to_json(doc), nl=False)


def _layout(text: str | None) -> tuple[int, ...] | None:
    """--pipeline-layout: a Megatron layout string or comma-separated counts (io/runs.py parse_layout)."""
    if text is None:
        return None
    from baige_plan.io.runs import parse_layout
    try:
        if all(x.strip().isdigit() for x in text.split(",")):
            return tuple(int(x) for x in text.split(","))
        return parse_layout(text)
    except ValueError as e:
        raise SpecError("--pipeline-layout", str(e)) from None
