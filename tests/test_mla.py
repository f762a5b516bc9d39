"""Multi-head latent attention and multi-token prediction (DeepSeek-V3): the model spec, its FLOPs against
Megatron-Bridge's published Model TFLOP/s, its parameters against the DeepSeek-V3 report, the per-device GEMMs by
hand, the Hugging Face mapping, which runtimes build it, and the Megatron export."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from baige_plan.cost.estimate import estimate, stage_cost
from baige_plan.cost.flops import linear_gemms, megatron_model_flops
from baige_plan.cost.params import total_params
from baige_plan.errors import SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.io.hf_config import load_hf_config
from baige_plan.io.models import load_model_file, model_from_dict, model_to_dict
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import MLASpec, ModelSpec
from baige_plan.specs.strategy import StrategySpec

ROOT = Path(__file__).resolve().parents[1]
DSV3 = load_model_file(ROOT / "models" / "deepseek-v3.yaml")


def test_flops_per_token_match_megatron_bridge_published_model_tflops():
    # NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md, 26.08 container, DeepSeekV3 DGX-GB200 256 GPUs
    # MXFP8, seq 4096: 4912 tokens/s/GPU at 1276 Model TFLOP/s/GPU -> FLOPs per token (both rounded in the table)
    published = 1276e12 / 4912
    assert megatron_model_flops(DSV3, 1, 4096) / 4096 == pytest.approx(published, rel=0.002)


def test_parameters_match_the_deepseek_v3_report():
    # DeepSeek-V3 Technical Report (arXiv:2412.19437) Sec 4.2: 671B total parameters (the MTP module's are not
    # among them); hand count of one MLA layer (DeepSeek-V2 Sec 2.1.2): W^DQ 7168x1536, W^UQ 1536x128x192,
    # W^DKV+W^KR 7168x576, W^UK+W^UV 512x128x256, W^O 16384x7168
    assert total_params(DSV3) / 1e9 == pytest.approx(671.0, rel=0.002)
    mla = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    no_mla = replace(DSV3, mla=None, head_dim=None, kv_heads=None)
    gqa_attn = 7168 * (3 * 7168) + 7168 * 7168      # the same heads as plain MHA at head dim 56
    # the difference of the totals is the attention's over 61 layers (norm params aside: within 1e-4)
    diff = (total_params(DSV3) - total_params(no_mla)) / 61
    assert diff == pytest.approx(mla - gqa_attn, rel=1e-3)


def test_mla_gemms_per_device_by_hand():
    tokens, tp = 4096.0, 4
    g = {x.name: x for x in linear_gemms(DSV3, tokens, tp, moe=False, sp=True)}
    # down projections whole on every rank, on its sequence-parallel shard; up/output split over tp
    assert (g["q_down"].m, g["q_down"].n, g["q_down"].k) == (tokens / tp, 1536, 7168)
    assert (g["kv_down"].m, g["kv_down"].n, g["kv_down"].k) == (tokens / tp, 512 + 64, 7168)
    assert (g["q_up"].m, g["q_up"].n, g["q_up"].k) == (tokens, 128 * 192 / tp, 1536)
    assert (g["kv_up"].m, g["kv_up"].n, g["kv_up"].k) == (tokens, 128 * 256 / tp, 512)
    assert (g["attn_proj"].m, g["attn_proj"].n, g["attn_proj"].k) == (tokens, 7168, 128 * 128 / tp)
    # without sequence parallelism every rank projects every token down
    g2 = {x.name: x for x in linear_gemms(DSV3, tokens, tp, moe=False, sp=False)}
    assert g2["q_down"].m == tokens and g2["kv_down"].m == tokens


def test_model_file_round_trip_and_hf_config():
    assert model_from_dict(model_to_dict(DSV3), "x", check_schema=True) == DSV3
    hf = load_hf_config(ROOT / "tests" / "data" / "hf" / "deepseek-v3" / "config.json")
    assert hf.mla == DSV3.mla and hf.moe.first_dense_layers == 3 and hf.moe.experts == 256
    assert hf.mtp_layers == 1 and hf.kv_heads == 128 and hf.head_dim == 192
    assert total_params(hf) == total_params(DSV3)


def test_mla_rules():
    with pytest.raises(SpecError, match="kv_heads"):
        ModelSpec(name="x", layers=2, hidden=512, heads=8, kv_heads=2, ffn_hidden=1024, vocab=1000,
                  mla=MLASpec(kv_lora_rank=64, qk_head_dim=32, qk_rope_head_dim=16, v_head_dim=32))
    with pytest.raises(SpecError, match="mla.kv_lora_rank"):
        MLASpec(kv_lora_rank=0, qk_head_dim=32, qk_rope_head_dim=16, v_head_dim=32)


@pytest.mark.parametrize("rt", ["deepspeed", "torchtitan", "paddle", "flagscale", "megatron-local"])
def test_runtimes_that_do_not_build_mla_refuse_it(rt):
    s = StrategySpec(tp=1, pp=1, dp=8, micro_batch=1, zero=0, recompute="full", **runtimes.knobs(rt))
    why = runtimes.get(rt).refusal(s, DSV3, JobSpec(global_batch=64, seq_len=4096, precision="bf16"))
    assert why is not None and "multi-head latent attention" in why
    s = StrategySpec(tp=1, pp=1, dp=8, micro_batch=1, recompute="full", **runtimes.knobs("megatron"))
    assert runtimes.get("megatron").refusal(s, DSV3, JobSpec(global_batch=64, seq_len=4096)) is None


def test_mtp_costs_one_more_layer_and_output_layer_on_the_last_stage_only():
    cl, _ = Catalog.create([]).cluster("gb200:4x64")
    group = cl.groups[0]
    job = JobSpec(global_batch=4096, seq_len=4096, precision="bf16")
    s = StrategySpec(tp=1, pp=4, dp=64, ep=64, micro_batch=1, recompute="full", first_stage_layers=16,
                     last_stage_layers=13, **runtimes.knobs("megatron"))
    no_mtp = replace(DSV3, mtp_layers=0)
    a0, a1 = (stage_cost(m, group, job, s, 0, 0, 16, 64) for m in (DSV3, no_mtp))
    assert a0.time_s == a1.time_s and a0.memory_gib == a1.memory_gib
    z0, z1 = (stage_cost(m, group, job, s, 3, 48, 13, 64) for m in (DSV3, no_mtp))
    # the last stage grows by about one of its 13 layers plus an output layer (more than 1/13, less than 1/4)
    assert z1.time_s * (1 + 1 / 13) < z0.time_s < z1.time_s * 1.25
    # and holds the shared input embedding for the MTP module: + vocab x hidden parameters
    assert z0.dense_params - z1.dense_params > 129280 * 7168
    e = estimate(DSV3, cl, job, s)
    assert e.step_time_s > estimate(no_mtp, cl, job, s).step_time_s


def test_megatron_export_builds_mla_and_mtp(tmp_path):
    from typer.testing import CliRunner

    from baige_plan.cli.app import app
    runner = CliRunner()
    plan = tmp_path / "p.yaml"
    r = runner.invoke(app, ["plan", "deepseek-v3", "gb200:4x64", "--global-batch", "4096", "--seq-len", "4096",
                            "--tp", "1", "--pp", "4", "--ep", "64", "--micro-batch", "1", "--precision", "fp8",
                            "--recompute", "full", "--out", str(plan)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["export", str(plan), "--out-dir", str(tmp_path / "x")])
    assert r.exit_code == 0, r.output
    args = (tmp_path / "x" / "megatron_args.txt").read_text().split()
    for flag, val in (("--q-lora-rank", "1536"), ("--kv-lora-rank", "512"), ("--qk-head-dim", "128"),
                      ("--qk-pos-emb-head-dim", "64"), ("--v-head-dim", "128"), ("--mtp-num-layers", "1")):
        assert args[args.index(flag) + 1] == val
    assert "--multi-latent-attention" in args and "--kv-channels" not in args


def test_mla_up_proj_recompute_drops_q_k_v_and_reruns_the_up_projections():
    from baige_plan.cost.estimate import _StageContext

    cl, _ = Catalog.create([]).cluster("gb200:4x64")
    g = cl.groups[0]
    base = dict(tp=1, pp=4, dp=64, ep=64, micro_batch=1, recompute="selective", **runtimes.knobs("megatron"))
    s0, s1 = StrategySpec(**base), StrategySpec(**base, recompute_modules="mla_up_proj")
    t0, t1 = (_StageContext(g, "bf16", s, None, True).layer_terms(DSV3, s, 4096, 4096.0, False, False, True, None)
              for s in (s0, s1))
    # Q (128 x 192), K (128 x 192) and V (128 x 128) of 4096 tokens in bf16 are no longer kept
    assert t0["act"] - t1["act"] == pytest.approx(4096 * (24576 + 24576 + 16384) * 2)
    # the q and kv up projections run once more: 2 x 4096 x (1536 x 24576 + 512 x 32768) FLOPs
    assert t1["hw"] - t0["hw"] == pytest.approx(2 * 4096 * (1536 * 24576 + 512 * 32768))
    assert t1["rec"] > t0["rec"]
    with pytest.raises(SpecError, match="recompute_modules"):
        StrategySpec(recompute="full", recompute_modules="mla_up_proj")
    with pytest.raises(SpecError, match="recompute_modules"):
        StrategySpec(recompute="selective", recompute_modules="mlp")


def test_corpus_rows_name_their_recompute_modules():
    from baige_plan.io.runs import load_runs
    cases = {c.id: c for c in load_runs(ROOT / "benchmarks" / "corpus" / "mbridge_perf_2511.yaml", Catalog.create([]))}
    c = cases["mbridge_perf_2511_deepseek_v3_gb200_256gpu_bf16"]
    assert c.strategy.recompute == "selective" and c.strategy.recompute_modules == "mla_up_proj"
    assert c.strategy.pipeline_layout == (4,) * 15 + (1,) and c.model.mtp_layers == 0
    assert cases["mbridge_perf_2511_deepseek_v3_b200_256gpu_mxfp8"].model.mtp_layers == 1


def test_nargs_arguments_are_separate_words():
    import shlex

    from baige_plan.exports._common import arg_lines
    line, = arg_lines([("--recompute-modules", ("core_attn", "mla_up_proj"))])
    assert shlex.split(line) == ["--recompute-modules", "core_attn", "mla_up_proj"]


def test_layernorm_and_moe_act_recompute_drop_what_they_rebuild():
    from baige_plan.cost.memory import layer_activation_bytes
    kw = dict(seq_len=4096, micro_batch=1, tp=1, cp=1, sp=False, recompute="selective", standard_attention=False,
              moe=True)
    base = layer_activation_bytes(DSV3, **kw)
    # per token, bf16: the two norms' outputs 2 x 7168 x 2 B; the routed experts' activation output 8 x 2048 x 2 B
    assert base - layer_activation_bytes(DSV3, **kw, modules="layernorm") == pytest.approx(4096 * 2 * 7168 * 2)
    assert base - layer_activation_bytes(DSV3, **kw, modules="moe_act") == pytest.approx(4096 * 8 * 2048 * 2)
    assert layer_activation_bytes(DSV3, **dict(kw, moe=False), modules="moe_act") == \
        layer_activation_bytes(DSV3, **dict(kw, moe=False))
