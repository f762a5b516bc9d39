"""Runtimes run what their users run: torchtitan plans and exports any decoder the planner represents and
costs its op-level selective AC; Megatron plans ZeRO-3 as Megatron-FSDP runs it; the runs loader maps FSDP
rows to those runtimes. Numbers are derived by hand in the comments."""

import pytest
from _plan_docs import LLAMA3_8B, plan_doc
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.cost.compute import ChipRates, gemm_time_s
from baige_plan.cost.estimate import estimate, stage_cost
from baige_plan.cost.execution import EAGER
from baige_plan.cost.flops import Gemm, linear_gemms
from baige_plan.exports import megatron, torchtitan
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import _recompute, _zero, runtime_of
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec, MoESpec
from baige_plan.specs.runtimes import megatron as megatron_rt
from baige_plan.specs.runtimes import torchtitan as torchtitan_rt
from baige_plan.specs.strategy import StrategySpec

CAT = Catalog.create()
A100 = CAT.chip("a100-sxm4-80g")
PEAK = 312e12                       # chips/a100-sxm4-80g.yaml peak_tflops.bf16
EFF = 0.72 * 0.964                  # its bf16 GEMM curve at >= 1e12 FLOPs x the committed A100 calibration
                                    # (specs/calibration.py gemm_scale)
HBM = 2039e9 * 0.854                # hbm_GBps x hbm_efficiency
# a Llama-2-70B-wide layer: GEMMs of >= 1e12 FLOPs at micro-batch 2 x 8192 tokens (the curve's flat top)
WIDE = ModelSpec("wide", 2, 8192, 64, 28672, 32000, seq_len=8192, kv_heads=8)
MPT = CAT.model("tests/data/mpt-7b.yaml")
MOE_PREFIX = CAT.model("tests/data/moe-dense-prefix.yaml")


# -- torchtitan op-level SAC: what is recomputed (specs/runtimes/torchtitan.py op_sac_recomputed) ---------

def _names(model, moe=False):
    lin = linear_gemms(model, 8192, 1, moe)
    return [g.name for g in torchtitan_rt.op_sac_recomputed(lin, model.activation)]


def test_op_sac_recomputes_every_second_matmul():
    # forward mm order wqkv 1, wo 2, w1 3, w3 4, w2 5: the even ones, wo and w3, run again
    assert _names(WIDE) == ["attn_proj", "mlp_up_w3"]
    # GELU MLP: wqkv 1, wo 2, up 3, down 4
    assert _names(MPT) == ["attn_proj", "mlp_down"]
    # MoE: the router (forced) and the grouped-mm experts (not in the save set), then wo and the shared w3
    moe = ModelSpec("m", 2, 2048, 16, 8192, 32000, moe=MoESpec(experts=8, top_k=2, expert_ffn_hidden=1024,
                                                                shared_experts=1))
    assert _names(moe, moe=True) == ["router", "expert_up", "expert_down", "attn_proj", "shared_up_w3"]
    w3 = torchtitan_rt.op_sac_recomputed(linear_gemms(WIDE, 8192, 1, False), "swiglu")[1]
    assert (w3.m, w3.n, w3.k) == (8192, 28672, 8192)      # half of the fused w1|w3 GEMM


def _wide_estimate(recompute, execution="fused", tp=1, sp=False):
    cl, _ = CAT.cluster(f"a100-sxm4-80g:1x{tp}")
    s = StrategySpec(tp=tp, dp=1, zero=0, micro_batch=2, recompute=recompute, sequence_parallel=sp,
                     runtime="torchtitan", execution=execution, zero3_impl="fsdp")
    return estimate(WIDE, cl, JobSpec(global_batch=2, seq_len=8192), s)


def test_op_sac_recompute_time_by_hand():
    # per layer, tokens T = 2 x 8192 = 16384, h = q = 8192, f = 28672, bf16 on A100 (all GEMMs >= 1e12 FLOPs:
    # compute-bound at 0.72 of 312 TFLOP/s):
    T, h, f = 16384, 8192, 28672
    wo = 2 * T * h * h / (PEAK * EFF)                    # 2.199e12 FLOP: 9.79 ms
    w3 = 2 * T * f * h / (PEAK * EFF)                    # 7.697e12 FLOP: 34.26 ms
    # memory-bound forward ops, re-run: 2 norms (read + write h) and 2 residual adds (read 2h, write h) in
    # bf16 = 20h B per token, SwiGLU reads 2f and writes f = 6f B per token; flash attention is saved
    mem = T * (20 * h + 6 * f) / HBM                     # 5.50e9 B: 3.16 ms
    assert wo == pytest.approx(9.788e-3 / 0.964, rel=1e-3) and w3 == pytest.approx(34.26e-3 / 0.964, rel=1e-3)
    assert mem == pytest.approx(3.160e-3, rel=1e-3)
    none, sel = _wide_estimate("none"), _wide_estimate("selective")
    # one micro-batch, two layers; nothing else differs (no TP/CP collectives to re-run on one device)
    assert sel.breakdown_s["compute"] - none.breakdown_s["compute"] == pytest.approx(2 * (wo + w3 + mem), rel=1e-9)
    assert sel.step_time_s - none.step_time_s == pytest.approx(2 * (wo + w3 + mem), rel=1e-9)
    # HFU counts the recomputed FLOPs: 2 layers x (2.199e12 + 7.697e12)
    hw = (sel.hfu - none.hfu) * sel.step_time_s * PEAK + none.hfu * (sel.step_time_s - none.step_time_s) * PEAK
    assert hw == pytest.approx(2 * 2 * T * h * (h + f), rel=1e-6)


def test_op_sac_recompute_eager_uses_the_measured_recompute_traffic():
    # eager PyTorch: the re-run memory-bound ops are the measured recompute traffic (EAGER, 105 B per token,
    # layer and hidden unit), as under full recompute; the GEMMs are the same two
    T, h, f = 16384, 8192, 28672
    assert EAGER.recompute_bytes_per_token_layer_hidden == 105
    gemms = 2 * T * h * (h + f) / (PEAK * EFF)
    r = ChipRates.of(A100, "bf16")
    assert gemm_time_s(Gemm("x", T, h, h), r) + gemm_time_s(Gemm("y", T, f, h), r) == pytest.approx(gemms)
    cl, _ = CAT.cluster("a100-sxm4-80g:1x1")
    job = JobSpec(global_batch=2, seq_len=8192)
    st = {rec: stage_cost(WIDE, cl.groups[0], job, StrategySpec(dp=1, zero=0, micro_batch=2, recompute=rec,
                                                                 runtime="torchtitan", execution="eager",
                                                                 eager_traffic="autocast_fp32"), 0, 0, 2, 1)
          for rec in ("none", "selective")}
    assert st["selective"].compute_s - st["none"].compute_s == pytest.approx(
        2 * (gemms + 105 * T * h / HBM), rel=1e-9)
    # torchtitan's own (bf16 parameters, fused RMSNorm: cost/execution.py Bf16EagerTraffic): the re-run forward moves
    # a third of (84 B x h + 16.1 B x the SwiGLU's 3 f) per token and layer
    st = {rec: stage_cost(WIDE, cl.groups[0], job, StrategySpec(dp=1, zero=0, micro_batch=2, recompute=rec,
                                                                 runtime="torchtitan", execution="eager"), 0, 0, 2, 1)
          for rec in ("none", "selective")}
    assert st["selective"].compute_s - st["none"].compute_s == pytest.approx(
        2 * (gemms + (84 * h + 16.1 * 3 * f) / 3 * T / HBM), rel=1e-9)


def test_op_sac_reruns_the_tp_all_gathers_not_the_reduce_scatters():
    # tp 2 with SP: per layer forward 2 all-gathers + 2 reduce-scatters of T x h bf16; SAC saves the
    # reduce-scatter outputs, so the backward re-runs the 2 all-gathers (tp_comm grows by exactly them)
    none, sel = _wide_estimate("none", tp=2, sp=True), _wide_estimate("selective", tp=2, sp=True)
    from baige_plan.cost import collectives as C
    cl, _ = CAT.cluster("a100-sxm4-80g:1x2")
    link = C.group_link(cl.groups[0], 2, 2)
    ag = C.all_gather_s(16384 * 8192 * 2, link)
    assert sel.breakdown_s["tp_comm"] - none.breakdown_s["tp_comm"] == pytest.approx(2 * 2 * ag, rel=1e-9)


def test_selective_means_core_attention_on_megatron_still():
    # Megatron's "selective" recomputes the attention core: nothing with flash attention
    cl, _ = CAT.cluster("a100-sxm4-80g:1x1")
    job = JobSpec(global_batch=2, seq_len=8192)
    step = {rec: estimate(WIDE, cl, job, StrategySpec(dp=1, zero=0, micro_batch=2, recompute=rec)).step_time_s
            for rec in ("none", "selective")}
    assert step["selective"] == step["none"]


# -- torchtitan: any decoder shape ------------------------------------------------------------------

def test_swiglu_stand_in_width_by_hand():
    # feed_forward.py compute_ffn_hidden_dim's rule: int(2F/3) rounded up to 256
    assert torchtitan.swiglu_width(16384) == 11008            # 10922 -> 43 x 256 (MPT-7B; Llama 2 7B's width)
    assert torchtitan.swiglu_width(49152) == 32768            # GPT-3 175B: exactly 2F/3
    # 3 x 4096 x 11008 = 135.3 M weights per layer for 2 x 4096 x 16384 = 134.2 M: within 1 %
    assert 3 * 11008 / (2 * 16384) == pytest.approx(1.0078, abs=1e-4)


def test_mpt_export_names_each_model_difference():
    doc = plan_doc(dict(MPT.__dict__, moe=None), "torchtitan", zero=3, dp=16, nodes=2, seq=2048)
    ex = torchtitan.export(doc)
    f = {x.name: x.text for x in ex.files}
    assert ex.caveats[:2] == (
        "model difference: activation: planned gelu, built swiglu (" + torchtitan.GELU_WHY + ")",
        "model difference: ffn_hidden: planned 16384, built 11008 (" + torchtitan.WIDTH_WHY + ")")
    assert f"# cannot express: {ex.caveats[1]}" in f[torchtitan.ARGS_FILE].splitlines()
    mod = f[f"{torchtitan.CONFIG_MODULE}.py"]
    compile(mod, "m.py", "exec")
    assert "'activation': ('gelu', 'swiglu')," in mod and "'ffn_hidden': (16384, 11008)," in mod
    assert "hidden_dim=11008" in mod and "enable_weight_tying=True" in mod and "_EMBEDDING_SKIP_INIT" in mod
    assert "dim, vocab_size, n_layers = 4096, 50368, 32" in mod


def test_dropout_is_a_model_difference():
    doc = plan_doc(dict(LLAMA3_8B, dropout=0.1), "torchtitan", zero=3, dp=8)
    assert torchtitan.export(doc).caveats[0].startswith("model difference: dropout: planned 0.1, built 0.0 (")


def test_moe_with_dense_prefix_and_shared_experts_is_one_qwen3_module():
    doc = plan_doc(dict(MOE_PREFIX.__dict__, moe=MOE_PREFIX.moe.__dict__), "torchtitan", zero=3, dp=8, seq=4096)
    ex = torchtitan.export(doc)
    mod = {x.name: x.text for x in ex.files}[f"{torchtitan.CONFIG_MODULE}.py"]
    compile(mod, "m.py", "exec")
    assert ex.caveats == ()
    for want in ("FIRST_DENSE_LAYERS, MOE_LAYER_FREQ = 1, 2",
                 "feed_forward=make_ffn_config(dim=dim, hidden_dim=8192",          # the dense layers
                 "hidden_dim=1408, num_experts=16, top_k=2",                        # routed experts
                 "shared_experts=make_ffn_config(dim=dim, hidden_dim=2816",         # 2 shared x 1408
                 "n_heads=16, n_kv_heads=4, head_dim=head_dim", "qk_norm=_qwen3_norm(head_dim)"):
        assert want in mod, want


@pytest.mark.parametrize("model", ["models/llama2-7b.yaml", "tests/data/mpt-7b.yaml", "tests/data/moe-dense-prefix.yaml"])
def test_plan_and_export_on_torchtitan(model, tmp_path):
    runner = CliRunner()
    out = tmp_path / "plan.yaml"
    r = runner.invoke(app, ["plan", model, "h100-sxm5-80g:2x8", "--global-batch", "64", "--seq-len", "2048",
                            "--runtime", "torchtitan", "--top", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["export", str(out), "--to", "torchtitan", "--out-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / f"{torchtitan.CONFIG_MODULE}.py").exists()


def test_evaluate_selective_on_torchtitan():
    r = CliRunner().invoke(app, ["evaluate", "llama3-8b", "h100-sxm5-80g:1x8", "--global-batch", "16", "--seq-len",
                                 "8192", "--dp", "8", "--tp", "1", "--pp", "1", "--zero", "3", "--recompute",
                                 "selective", "--runtime", "torchtitan", "--format", "json"])
    assert r.exit_code in (0, 1), r.output


# -- Megatron ZeRO-3 = Megatron-FSDP ----------------------------------------------------------------

LLAMA = ModelSpec("llama3-8b", 32, 4096, 32, 14336, 128256, seq_len=8192, kv_heads=8)


def test_megatron_space_has_zero3_without_pp():
    rt = megatron_rt.RUNTIME
    assert rt.zero_stages == (0, 1, 3) and rt.zero_stages_with_pp == (0, 1)
    job = JobSpec(global_batch=64, seq_len=8192)
    for kw in (dict(dp=8), dict(dp=4, tp=2, sequence_parallel=True), dict(dp=4, cp=2)):
        assert rt.refusal(StrategySpec(zero=3, **kw), LLAMA, job) is None, kw
    assert "pipeline" in rt.refusal(StrategySpec(dp=4, pp=2, zero=3), LLAMA, job)
    assert "not zero=2" in rt.refusal(StrategySpec(dp=8, zero=2), LLAMA, job)
    assert rt.zero3_gather(1) == "micro_batch" and rt.zero3_impl == "fsdp"


def test_megatron_fsdp_memory_by_hand():
    # 16-bit params, grads and fp32 main params + Adam m, v all sharded over dp x cp = 8:
    # (2 + 2 + 12) / 8 = 2 B per parameter; fp32 step copy of the owned grads 4/8
    from baige_plan.cost.memory import state_bytes
    assert state_bytes(megatron_rt.MEMORY, "bf16", 3, 8) == (2 / 8, 2 / 8, 12 / 8, 4 / 8)
    assert state_bytes(megatron_rt.MEMORY, "bf16", 1, 8) == (2, 4, 12 / 8, 0)         # ZeRO-1 unchanged
    assert megatron_rt.MEMORY.zero3_reduce_bytes == 2


def test_megatron_zero3_export_writes_megatron_fsdp():
    from _plan_docs import LLAMA3_70B
    doc = plan_doc(LLAMA3_70B, "megatron", tp=4, dp=16, zero=3, nodes=8)
    ex = megatron.export(doc)
    f = {x.name: x.text for x in ex.files}
    args = f["megatron_args.txt"]
    for flag in ("--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads_params",
                 "--ckpt-format fsdp_dtensor", "--init-model-with-meta-device", "--use-distributed-optimizer",
                 "--overlap-grad-reduce", "--overlap-param-gather"):
        assert flag in args.splitlines(), flag
    assert "zero=3" not in " ".join(ex.caveats)
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in f["launch.sh"]
    assert "export CUDA_DEVICE_MAX_CONNECTIONS" not in f["launch.sh"]       # tp 4, yet FSDP asserts != 1
    # ZeRO-1 keeps the distributed optimizer and CUDA_DEVICE_MAX_CONNECTIONS=1
    f1 = {x.name: x.text for x in megatron.export(plan_doc(LLAMA3_70B, "megatron", tp=4, dp=16, zero=1,
                                                             nodes=8)).files}
    assert "--use-megatron-fsdp" not in f1["megatron_args.txt"]
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in f1["launch.sh"]


def test_megatron_zero3_costs_per_micro_batch_gathers():
    # evaluate --runtime megatron --zero 3: three 16-bit gathers-or-reduce-scatters of the stage's
    # weights per micro-batch (2 gathers + 1 reduce-scatter), against ZeRO-1's one reduce-scatter per step
    cl, _ = CAT.cluster("h100-sxm5-80g:1x8")
    job = JobSpec(global_batch=64, seq_len=8192)
    e3 = estimate(LLAMA, cl, job, StrategySpec(dp=8, zero=3, micro_batch=1, runtime="megatron"))
    e1 = estimate(LLAMA, cl, job, StrategySpec(dp=8, zero=1, micro_batch=1, runtime="megatron"))
    # weights: ZeRO-1 holds 2 B x P; ZeRO-3 2 B x P/8 + the gathered unit and the prefetched one, here the
    # embedding-sized unit V x h = 128256 x 4096 (larger than a layer's 218 M parameters)
    P = e1.memory_gib["weights"] * 2**30 / 2
    assert e3.memory_gib["weights"] * 2**30 == pytest.approx(2 * P / 8 + 2 * 2 * 128256 * 4096, rel=1e-9)
    # grads: bf16 main grads sharded, 2 B x P/8, + the unit's 16-bit grads and its 16-bit reduce-scatter input
    assert e3.memory_gib["grads"] * 2**30 == pytest.approx(2 * P / 8 + (2 + 2) * 128256 * 4096, rel=1e-9)
    assert e3.breakdown_s["dp_comm_exposed"] > e1.breakdown_s["dp_comm_exposed"]
    r = CliRunner().invoke(app, ["evaluate", "llama3-8b", "h100-sxm5-80g:1x8", "--global-batch", "64", "--seq-len",
                                 "8192", "--dp", "8", "--tp", "1", "--pp", "1", "--zero", "3", "--runtime", "megatron"])
    assert r.exit_code == 0, r.output


# -- runs loader -------------------------------------------------------------------------------------

@pytest.mark.parametrize("par,runtime,zero", [
    (dict(framework="NeMo (Megatron-Bridge, Megatron-FSDP), NeMo 25.11", zero_or_sharding="not stated"),
     "megatron", 3),
    (dict(framework="Megatron-LM --use-megatron-fsdp", zero_or_sharding="optim_grads (Megatron-FSDP)"), "megatron", 2),
    (dict(framework="PyTorch FSDP2 in Megatron-core (--use-torch-fsdp2)"), "megatron", 3),
    (dict(framework="megatron-fsdp", zero_or_sharding="optim_grads_params"), "megatron", 3),
    (dict(framework="LLM Foundry v0.3.0 on MosaicML Composer", zero_or_sharding="FSDP FULL_SHARD (ZeRO-3)"),
     "torchtitan", 3),
    (dict(framework="IBM fms-fsdp (PyTorch FSDP1)", zero_or_sharding="FSDP FULL_SHARD"), "torchtitan", 3),
    (dict(framework="pytorch 2.11.0+cu130 Megatron-style TP", zero_or_sharding="none (tensor parallel)"),
     "pytorch", 0),
    (dict(framework="Megatron-DeepSpeed", zero_or_sharding="ZeRO-1"), "deepspeed", 1),
    (dict(framework="NeMo AutoModel (PyTorch FSDP2 + Transformer Engine)", zero_or_sharding="FSDP2 full shard"),
     "automodel", 3),
])
def test_runs_loader_maps_fsdp_rows(par, runtime, zero):
    assert runtime_of(par.get("framework"), par.get("zero_or_sharding")) == runtime
    assert _zero(par) == zero


def test_per_layer_selective_ac_is_not_op_sac():
    assert _recompute("selective (torchtitan op-level SAC, selective_ac_option 'op')") == "selective"
    assert _recompute("selective (selective_ac_option: 1)") == "full"
    with pytest.raises(ValueError, match="per-layer selective AC"):
        _recompute("selective (selective_ac_option = 2)")
