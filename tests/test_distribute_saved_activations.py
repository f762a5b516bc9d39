"""Full recomputation with the checkpointed inputs split over TP (StrategySpec.distribute_saved_activations:
Megatron --distribute-saved-activations, DeepSpeed activation_checkpointing.partition_activations), against
hand-derived values.

One node of 8 A100-SXM4-80GB, as tests/test_deepspeed_execution.py: HBM 2039 GB/s x 0.854 = 1741.3 GB/s; NVSwitch
all-gather bus bandwidth 300 GB/s x 0.78 = 234 GB/s, latency (8 + 2(n-1)) us for n ranks. Per layer and
micro-batch, with A = b s h x 2 B the checkpointed layer input and t = tp:
  - forward: the rank's chunk copied into a new buffer, 2 A / t of HBM traffic (Megatron-core
    split_tensor_into_1d_equal_chunks(new_buffer=True); DeepSpeed narrow(...).clone());
  - backward, before the recompute: all-gather of A over TP (alpha + A (t-1)/t / busbw); DeepSpeed's
    gather_partitioned_activations also zero-fills the full buffer (A), copies the rank's part in (2 A / t) and
    torch.distributed's list all_gather copies the parts out of its flat staging buffer (2 A): (3 + 2/t) A;
  - memory: the stored checkpoint is A / t instead of A (Korthikanti 2022's 2 s b h per layer, split t ways).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import yaml

from baige_plan.cost.estimate import estimate
from baige_plan.cost.memory import layer_activation_bytes
from baige_plan.errors import SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import load_runs
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.runtimes import knobs
from baige_plan.specs.strategy import StrategySpec

CAT = Catalog.create()
MODEL = ModelSpec("gpt-1b", 16, 2048, 16, 8192, 50304, activation="gelu", dropout=0.0)
CLUSTER, _ = CAT.cluster("a100-sxm4-80g:1x8")
HBM = 2039e9 * 0.854
BUSBW = 300e9 * 0.78
JOB = JobSpec(global_batch=16, seq_len=2048, precision="bf16")
KW = dict(tp=4, dp=2, zero=1, micro_batch=2, recompute="full", sequence_parallel=False)


def _pair(runtime: str):
    """(with, without) the knob, one stage each, same everything else."""
    s1 = StrategySpec(**KW, distribute_saved_activations=True, **knobs(runtime))
    s0 = StrategySpec(**KW, **knobs(runtime))
    return estimate(MODEL, CLUSTER, JOB, s1).stages[0], estimate(MODEL, CLUSTER, JOB, s0).stages[0]


A = 2 * 2048 * 2048 * 2                 # micro-batch x seq x hidden x 2 B
T = 4
AG = (8 + 2 * (T - 1)) * 1e-6 + A * (T - 1) / T / BUSBW
SPLIT = 2 * A / T / HBM
LAYERS = 16


@pytest.mark.parametrize("runtime,copies", [("megatron", 0.0), ("deepspeed", (3 + 2 / T) * A / HBM)])
def test_split_in_forward_gather_before_recompute(runtime, copies):
    on, off = _pair(runtime)
    assert math.isclose(on.fwd_s - off.fwd_s, LAYERS * SPLIT, rel_tol=1e-9)
    assert math.isclose(on.bwd_s - off.bwd_s, LAYERS * (AG + copies), rel_tol=1e-9)
    assert math.isclose(on.tp_s - off.tp_s, LAYERS * AG, rel_tol=1e-9)


def test_checkpoint_memory_is_split_over_tp():
    full = layer_activation_bytes(MODEL, 2048, 2, T, 1, False, "full", False)
    split = layer_activation_bytes(MODEL, 2048, 2, T, 1, False, "full", False, distributed=True)
    assert full == 2 * 2048 * 2 * 2048            # 2 s b h (Korthikanti 2022, full recomputation, no SP)
    assert split == full / T
    on, off = _pair("megatron")
    # pp 1: one micro-batch in flight, so the stage holds each layer's checkpoint once
    assert math.isclose((off.activations_gib - on.activations_gib) * 2**30, LAYERS * (full - split), rel_tol=1e-9)


@pytest.mark.parametrize("kw,why", [
    (dict(tp=1), "needs tp > 1, got tp=1"),
    (dict(recompute="selective"), "full recomputation only, got recompute='selective'"),
    (dict(sequence_parallel=True), "got sequence_parallel=True"),
])
def test_rules_of_megatron_arguments(kw, why):
    with pytest.raises(SpecError) as e:
        StrategySpec(**{**KW, **kw}, distribute_saved_activations=True)
    assert e.value.field == "distribute_saved_activations" and why in e.value.reason


def test_runtimes_without_it_refuse():
    s = StrategySpec(**{**KW, "zero": 3}, distribute_saved_activations=True, **knobs("torchtitan"))
    why = runtimes.get("torchtitan").refusal(s)
    assert why is not None and "distribute-saved-activations" in why
    for rt in ("megatron", "deepspeed", "megatron-local"):
        assert runtimes.get(rt).distribute_saved_activations in ("into_tensor", "zeros_list")
    # FlagScale's fork has the flag, but its export (hetero process meshes) does not write it: refused
    assert runtimes.get("flagscale").refusal(StrategySpec(**KW, distribute_saved_activations=True,
                                                          **knobs("flagscale"))) is not None


def test_runs_loader_reads_partition_activations(tmp_path):
    rows = yaml.safe_load(open("benchmarks/corpus/glm130b2022.yaml"))
    assert "partition_activations True" in rows["rows"][0]["parallel"]["recompute"]
    cases = load_runs("benchmarks/corpus/glm130b2022.yaml", Catalog.create([]))
    assert all(c.strategy.distribute_saved_activations for c in cases)
    # stated where it cannot act (tp 1): read as off, with a note
    row = rows["rows"][0]
    row["parallel"].update(tp=1, dp=96)
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump({"schema_version": 1, "rows": [row]}))
    (c,) = load_runs(str(p), Catalog.create([]))
    assert not c.strategy.distribute_saved_activations
    assert any("inert" in n for n in c.assumptions)



def test_runs_loader_reads_megatron_2020_flag_name(tmp_path):
    """Megatron-LM called the switch --distribute-checkpointed-activations from d6c4248b (2020-09) until its rename;
    metaseq's OPT-175B launcher passes that name (benchmarks/corpus/opt2022.yaml). Its checkpoints then hold 1/tp of
    each layer input: 96 layers x 8 x 2048 x 12288 x 2 B / 8 ranks, 4.5 GiB where the whole input would be 36 GiB."""
    rows = yaml.safe_load(open("benchmarks/corpus/opt2022.yaml"))
    row = rows["rows"][0]
    assert "--distribute-checkpointed-activations" in row["parallel"]["recompute"]
    row["parallel"]["runtime"] = "megatron"       # one that runs fp16 (the row's own, metaseq, is not modelled)
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump({"schema_version": 1, "rows": [row]}))
    (c,) = load_runs(str(p), Catalog.create([]))
    assert c.strategy.distribute_saved_activations
    off = replace(c.strategy, distribute_saved_activations=False)
    on_gib = estimate(c.model, c.cluster, c.job, c.strategy).peak_memory_gib
    off_gib = estimate(c.model, c.cluster, c.job, off).peak_memory_gib
    saved_gib = 96 * 8 * 2048 * 12288 * 2 * (1 - 1 / 8) / 2**30
    assert off_gib - on_gib == pytest.approx(saved_gib, rel=0.05)

def test_plan_file_evaluate_and_exports_carry_it():
    from _plan_docs import LLAMA3_70B
    from _plan_docs import plan_doc as _plan_doc

    from baige_plan.exports import deepspeed as ds_export
    from baige_plan.exports import megatron
    from baige_plan.io.plans import _strategy
    from baige_plan.io.serialize import strategy_dict

    s = StrategySpec(**KW, distribute_saved_activations=True)
    d = strategy_dict(s, 16)
    assert d["distribute_saved_activations"] is True
    assert _strategy(d).distribute_saved_activations is True            # plan file -> strategy
    assert "distribute_saved_activations" not in strategy_dict(StrategySpec(**KW), 16)   # plan files unchanged
    kw = dict(tp=8, pp=4, dp=2, m=4, nodes=8, recompute="full", sp=False)
    doc = _plan_doc(LLAMA3_70B, "megatron", **kw, distribute_saved_activations=True)
    args = {f.name: f.text for f in megatron.export(doc).files}["megatron_args.txt"].split()
    assert "--distribute-saved-activations" in args
    assert "--distribute-saved-activations" not in {f.name: f.text for f in megatron.export(
        _plan_doc(LLAMA3_70B, "megatron", **kw)).files}["megatron_args.txt"].split()
    # Megatron-DeepSpeed: its flag (megatron/arguments.py --partition-activations, which megatron/initialize.py
    # passes to deepspeed.checkpointing.configure) and the config file agree
    doc = _plan_doc(LLAMA3_70B, "deepspeed", **{**kw, "pp": 1, "dp": 8}, distribute_saved_activations=True)
    cfg, _ = ds_export.ds_config(doc)
    assert cfg["activation_checkpointing"]["partition_activations"] is True
    flags = [k for k, _ in ds_export.megatron_deepspeed_args(doc)[0]]
    assert "--partition-activations" in flags


REAL = "benchmarks/real/runs_megatron_local_dsa_h200x2.yaml"


@pytest.mark.parametrize("model", ["llama3.2-1b_tp2_mb16_full", "llama3-8b_tp2_mb8_full"])
def test_real_megatron_pair_moves_as_predicted(model):
    """Real Megatron-core 0.19.2 (megatron-local export, 2x H200, 2026-11-28; raw in benchmarks/real/
    raw_megatron_local_dsa_h200x2/): the same plan with and without --distribute-saved-activations. Measured:
    step +0.0185 s (1B) / +0.0302 s (8B), allocated peak -2.00 / -4.00 GiB. The model must move the same way:
    the step by the forward copy + the backward all-gather, the memory by (t-1)/t of the checkpoints."""
    rows = {r["id"]: r for r in yaml.safe_load(open(REAL))["rows"]}
    base, dsa = rows[model + "_base"], rows[model + "_dsa"]
    assert dsa["parallel"]["distribute_saved_activations"] and not base["parallel"]["distribute_saved_activations"]
    cases = {c.id: c for c in load_runs(REAL, Catalog.create([]))}
    e0, e1 = (estimate(cases[r["id"]].model, cases[r["id"]].cluster, cases[r["id"]].job, cases[r["id"]].strategy)
              for r in (base, dsa))
    d_meas = dsa["results"]["step_time_s"] - base["results"]["step_time_s"]
    d_pred = e1.step_time_s - e0.step_time_s
    assert d_meas > 0 and 0.5 * d_meas <= d_pred <= 1.5 * d_meas
    m_meas = dsa["results"]["peak_memory_gib"] - base["results"]["peak_memory_gib"]
    m_pred = e1.memory_gib["activations"] - e0.memory_gib["activations"]
    assert m_meas < 0 and m_pred == pytest.approx(m_meas, abs=0.15)


def test_evaluate_sequence_parallel_default_follows_runtime_and_knob():
    """--sequence-parallel left unset: off for a runtime that has none (megatron-local), and off when the
    checkpointed inputs are distributed (the two exclude each other) -- not an error about a flag not given."""
    from typer.testing import CliRunner

    from baige_plan.cli.app import app
    base = ["evaluate", "llama3-8b", "h200-sxm-141g:1x2", "--global-batch", "16", "--seq-len", "4096", "--tp", "2",
            "--dp", "1", "--zero", "0", "--micro-batch", "4", "--recompute", "full", "--format", "json"]
    for extra in (["--runtime", "megatron-local"], ["--runtime", "megatron", "--distribute-saved-activations"],
                  ["--runtime", "megatron-local", "--distribute-saved-activations"]):
        r = CliRunner().invoke(app, base + extra)
        assert r.exit_code == 0, r.output
        assert '"sequence_parallel": false' in r.output
    r = CliRunner().invoke(app, base + ["--runtime", "megatron"])
    assert r.exit_code == 0 and '"sequence_parallel": true' in r.output
    # asked for explicitly, the conflict is still an error naming both
    r = CliRunner().invoke(app, base + ["--runtime", "megatron", "--distribute-saved-activations",
                                        "--sequence-parallel"])
    assert r.exit_code == 2 and "sequence_parallel=True" in r.output
