"""Sliding-window attention (gpt-oss: a 128-token window on every other layer): the layer pattern against
Megatron-core's rule, FLOPs against Megatron-Bridge's published Model TFLOP/s, parameters against the model card,
per-kind layer costs, the Hugging Face mapping, runtimes and the Megatron export."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.cost.estimate import stage_cost
from baige_plan.cost.flops import attention_gemms, megatron_model_flops
from baige_plan.cost.params import total_params
from baige_plan.errors import InputError
from baige_plan.io.catalog import Catalog
from baige_plan.io.hf_config import hf_config_to_model, load_hf_config
from baige_plan.io.models import load_model_file
from baige_plan.specs import runtimes
from baige_plan.specs.job import JobSpec
from baige_plan.specs.strategy import StrategySpec

ROOT = Path(__file__).resolve().parents[1]
OSS = load_model_file(ROOT / "models" / "gpt-oss-120b.yaml")
HF = ROOT / "tests" / "data" / "hf"


def _megatron_is_window(window_size, skip_freq, layer_number: int) -> bool:
    """megatron/core/transformer/utils.py is_layer_window_attention (layer_number 1-based), transcribed."""
    if not window_size:
        return False
    if skip_freq is None:
        return True
    return layer_number % skip_freq != 0


def test_layer_pattern_is_megatrons():
    for k in (None, 2, 4):
        m = replace(OSS, full_attention_every=k)
        assert [m.is_window_layer(i) for i in range(OSS.layers)] == \
            [_megatron_is_window((128, 0), k, i + 1) for i in range(OSS.layers)]
    assert OSS.window_layers_in(0, 36) == 18


def test_flops_per_token_match_megatron_bridge_published_model_tflops():
    # NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md, 26.08 container, GPT OSS 120B DGX-GB200 64 GPUs,
    # seq 4096: 28672 tokens/s/GPU at 934 Model TFLOP/s/GPU
    assert megatron_model_flops(OSS, 1, 4096) / 4096 == pytest.approx(934e12 / 28672, rel=0.005)
    # the 18 windowed layers' core over 128 keys instead of s/2 = 2048: 18 x 12 x 4096 x (2048 - 128) per token
    full = megatron_model_flops(replace(OSS, sliding_window=None, full_attention_every=None), 1, 4096) / 4096
    assert full - megatron_model_flops(OSS, 1, 4096) / 4096 == pytest.approx(18 * 12 * 4096 * (2048 - 128))


def test_parameters_match_the_model_card():
    # OpenAI, gpt-oss-120b model card: 116.83B parameters in total (biases and sinks aside here)
    assert total_params(OSS) / 1e9 == pytest.approx(116.8, rel=0.005)


def test_window_attention_gemms():
    full = attention_gemms(OSS, 2, 4096, 1, 1, standard=False)
    win = attention_gemms(OSS, 2, 4096, 1, 1, standard=False, window=128)
    assert [g.flops for g in win] == [g.flops * 128 / 2048 for g in full]
    # standard attention computes every score and masks: no saving
    assert [g.flops for g in attention_gemms(OSS, 2, 4096, 1, 1, standard=True, window=128)] == \
        [g.flops for g in attention_gemms(OSS, 2, 4096, 1, 1, standard=True)]
    # a window wider than half the sequence changes nothing
    assert [g.flops for g in attention_gemms(OSS, 2, 1024, 1, 1, standard=False, window=4096)] == \
        [g.flops for g in attention_gemms(OSS, 2, 1024, 1, 1, standard=False)]


def test_a_stage_costs_each_layer_by_its_own_attention():
    cl, _ = Catalog.create([]).cluster("h100-sxm5-80g:8x8")
    g = cl.groups[0]
    job = JobSpec(global_batch=512, seq_len=4096)
    s = StrategySpec(tp=1, pp=4, dp=16, ep=8, micro_batch=1, recompute="full", **runtimes.knobs("megatron"))
    win, full, both = (stage_cost(OSS, g, job, s, 1, a, n, 32) for a, n in ((0, 1), (1, 1), (0, 2)))
    assert win.time_s < full.time_s
    assert both.time_s == pytest.approx(win.time_s + full.time_s - win.pp_s, rel=1e-9)


def test_hf_gpt_oss_config_maps_to_the_model_file():
    hf = load_hf_config(HF / "gpt-oss-120b" / "config.json")
    for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab", "moe", "sliding_window",
              "full_attention_every", "qkv_bias", "linear_bias", "attention_sinks", "rope_theta"):
        assert getattr(hf, f) == getattr(OSS, f), f
    cfg = json.loads((HF / "gpt-oss-120b" / "config.json").read_text())
    cfg["layer_types"] = ["full_attention"] + ["sliding_attention"] * 35     # not every k-th layer
    with pytest.raises(InputError, match="layer_types"):
        hf_config_to_model(cfg, "x")
    cfg["layer_types"] = ["sliding_attention"] * 36
    assert hf_config_to_model(cfg, "x").full_attention_every is None


def test_mistral_sliding_window_is_every_layer():
    cfg = json.loads((HF / "llama3-8b" / "config.json").read_text())
    cfg.update(model_type="mistral", sliding_window=4096)
    m = hf_config_to_model(cfg, "x")
    assert m.sliding_window == 4096 and m.full_attention_every is None and m.is_window_layer(0)


@pytest.mark.parametrize("rt", ["torchtitan", "deepspeed", "paddle", "flagscale", "megatron-local"])
def test_runtimes_that_do_not_build_windows_refuse_them(rt):
    s = StrategySpec(tp=1, pp=1, dp=8, micro_batch=1, zero=0, recompute="full", **runtimes.knobs(rt))
    why = runtimes.get(rt).refusal(s, OSS, JobSpec(global_batch=64, seq_len=4096))
    assert why is not None and "sliding-window attention" in why


def test_megatron_export_builds_the_window_and_says_what_it_cannot(tmp_path):
    runner = CliRunner()
    plan = tmp_path / "p.yaml"
    r = runner.invoke(app, ["plan", "gpt-oss-120b", "h100-sxm5-80g:8x8", "--global-batch", "512", "--seq-len",
                            "4096", "--tp", "1", "--ep", "8", "--recompute", "full", "--out", str(plan)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["export", str(plan), "--out-dir", str(tmp_path / "x")])
    assert r.exit_code == 0, r.output
    args = (tmp_path / "x" / "megatron_args.txt").read_text().split()
    assert args[args.index("--window-size") + 1] == "128,0"
    assert args[args.index("--window-attn-skip-freq") + 1] == "2"
    text = "\n".join(p.read_text() for p in (tmp_path / "x").iterdir() if p.is_file())
    assert "attention sinks" in text


def test_plan_refuses_a_runtime_that_does_not_build_the_model():
    r = CliRunner().invoke(app, ["plan", "gpt-oss-120b", "h100-sxm5-80g:8x8", "--global-batch", "512", "--seq-len",
                                 "4096", "--runtime", "torchtitan"])
    assert r.exit_code == 2 and "torchtitan does not build sliding-window attention" in r.stderr
