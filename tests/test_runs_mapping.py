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


def test_recompute_forms_published_runs_state():
    # Megatron recompute_modules lists are module-level selective recomputation; booleans and "uniform" (Megatron
    # --recompute-method uniform) checkpoint every layer
    assert _case(recompute=["mla_up_proj", "moe_act"]).strategy.recompute == "selective"
    assert _case(recompute=[]).strategy.recompute == "none"
    assert _case(recompute=True).strategy.recompute == "full"
    assert _case(recompute=False).strategy.recompute == "none"
    assert _case(recompute="uniform").strategy.recompute == "full"
    import pytest

    from baige_plan.errors import InputError
    with pytest.raises(InputError, match="recompute_modules"):
        _case(recompute=["everything"])


def test_gpu_model_text_names_the_catalog_chip():
    import re

    import pytest

    from baige_plan.errors import InputError
    from baige_plan.io.runs import _GPU_MAP

    def chip(text):
        return next(cid for pat, cid in _GPU_MAP if re.search(pat, text, re.I))

    # each is a chip file in chips/: the more specific name wins (GB200 is not a B200, H200 not an H20)
    for text, cid in (("GB200 NVL72", "gb200"), ("NVIDIA GB300", "gb300"), ("NVIDIA B200", "b200"), ("B300", "b300"), ("H200", "h200-sxm-141g"),
                      ("NVIDIA H20", "h20"), ("A100 80GB PCIe", "a100-pcie-80g"), ("A800", "a800-sxm4-80g"),
                      ("AMD Instinct MI325X", "mi325x"), ("AMD Instinct MI350X", "mi350x"), ("TPU v5p", "tpu-v5p"), ("Trillium", "tpu-v6e"),
                      ("Intel Gaudi 3", "gaudi3"), ("AWS Trainium2", "trainium2"), ("Ascend 910", "ascend-910a"),
                      ("Ascend 910B3", "ascend-910b"), ("Kunlun P800", "kunlun-p800")):
        assert chip(text) == cid, text
        Catalog.create().chip(cid, "t", "chip")
    row = yaml.safe_load(yaml.safe_dump(ROW))
    row["hardware"]["gpu_model"] = "AMD Instinct MI455X"      # no pattern, no chip file: the row must name hardware.chip
    with pytest.raises(InputError, match="unknown gpu_model"):
        case_from_row(row, Catalog.create(), "test.yaml")
