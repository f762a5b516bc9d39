"""Runs files -> strategies: what the backtest assumes from a row's framework text."""

import yaml

from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import balanced_split, case_from_row

ROW = yaml.safe_load("""
id: r
source: {key: test2025}
model: {name: m, layers: 8, hidden: 1024, heads: 16, kv_heads: 16, ffn_hidden: 4096, vocab: 32000, seq_len: 2048}
hardware: {gpu_model: NVIDIA H100 80GB HBM3, num_gpus: 16, gpus_per_node: 8}
parallel: {tp: 2, pp: 1, dp: 8, global_batch_seqs: 64, recompute: none, precision: bf16}
results: {step_time_s: 1.0}
""")


def _case(**par):
    row = yaml.safe_load(yaml.safe_dump(ROW))
    row["parallel"].update(par)
    return case_from_row(row, Catalog.create(), "test.yaml")


def test_framework_sets_execution_overlap_and_zero3_impl():
    nemo = _case(framework="NeMo 24.07").strategy
    assert (nemo.execution, nemo.tp_comm_overlap) == ("fused", True)
    mega = _case(framework="Megatron-LM").strategy
    assert (mega.execution, mega.tp_comm_overlap) == ("fused", False)
    ds = _case(framework="Megatron-LM + DeepSpeed ZeRO-3", zero_or_sharding="DeepSpeed ZeRO-3", tp=1, dp=16).strategy
    assert (ds.zero, ds.zero3_impl) == (3, "deepspeed")
    fsdp = _case(framework="pytorch FSDP2", zero_or_sharding="FSDP2 full shard", tp=1, dp=16).strategy
    assert (fsdp.zero, fsdp.zero3_impl, fsdp.execution) == (3, "fsdp", "eager")


def test_unstated_micro_batch_is_one_and_said():
    c = _case(framework="Megatron-LM")
    assert c.strategy.micro_batch == 1
    assert any("micro-batch unstated" in a for a in c.assumptions)


def test_embedding_as_a_layer_split():
    assert balanced_split(70, 12) == (5, 5)      # BLOOM-176B: 72 "layers" / 12 stages
    assert balanced_split(96, 8) == (None, None)
