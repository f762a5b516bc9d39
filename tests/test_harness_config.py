"""benchmarks/real/config.py: presets, batch arithmetic, invalid combinations (no torch)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

REAL = Path(__file__).parents[1] / "benchmarks" / "real"
sys.path.insert(0, str(REAL))

import config as C  # noqa: E402
import steptrace as S  # noqa: E402


def test_presets_are_gpt_shapes():
    m = C.build_model("gpt-350m")
    assert (m.layers, m.hidden, m.heads, m.ffn_hidden, m.vocab, m.seq_len) == (24, 1024, 16, 4096, 50304, 2048)
    assert C.build_model("gpt-1.3b").head_dim == 128
    assert C.build_model("gpt-125m").params() == pytest.approx(125.3e6, rel=1e-3)
    assert C.build_model("gpt-1.3b").params() == pytest.approx(1.3158e9, rel=1e-3)
    assert C.build_model("gpt-760m", seq_len=1024).seq_len == 1024


def test_global_batch_arithmetic():
    m = C.build_model("gpt-350m")
    r = C.build_run(m, "ddp", world=2, micro_batch=8, grad_accum=2)
    assert (r.dp, r.global_batch, r.zero) == (2, 32, 0)
    r = C.build_run(m, "fsdp", world=2, micro_batch=4, global_batch=32)
    assert (r.grad_accum, r.zero) == (4, 3)
    r = C.build_run(m, "tp", world=2, micro_batch=8)
    assert (r.tp, r.dp, r.global_batch) == (2, 1, 8)
    r = C.build_run(m, "pp", world=2, micro_batch=4, grad_accum=8)
    assert (r.pp, r.dp, r.global_batch, r.tie_embeddings) == (2, 1, 32, False)
    assert C.build_run(m).id == "h100_gpt350m_single_mb1_noac"


@pytest.mark.parametrize("kwargs, msg", [
    ({"strategy": "tp", "world": 3, "tp": 3}, "tp=3 does not divide heads=16"),
    ({"strategy": "tp", "world": 4, "tp": 2}, "tp=2 != world=4"),
    ({"strategy": "tp", "world": 2, "tp": 2, "_vocab": 50257}, "tp=2 does not divide vocab=50257"),
    ({"strategy": "pp", "world": 2, "grad_accum": 1}, "at least pp=2 micro-batches"),
    ({"strategy": "single", "world": 2}, "one GPU"),
    ({"strategy": "ddp", "world": 1}, "world >= 2"),
    ({"strategy": "ddp", "world": 2, "tp": 2}, "data parallel only"),
    ({"strategy": "ddp", "world": 2, "micro_batch": 4, "global_batch": 12}, "not a multiple of micro_batch*dp"),
    ({"strategy": "ddp", "world": 2, "micro_batch": 4, "grad_accum": 2, "global_batch": 8}, "global_batch=8 !="),
    ({"strategy": "zero9"}, "unknown strategy"),
    ({"recompute": "selective"}, "recompute must be one of"),
    ({"micro_batch": 0}, "micro_batch must be a positive integer"),
])
def test_invalid_combinations(kwargs, msg):
    kwargs = dict(kwargs)
    model = C.build_model("gpt-350m", vocab=kwargs.pop("_vocab", None))
    with pytest.raises(C.ConfigError, match=msg.replace("*", r"\*").replace("(", r"\(")):
        C.build_run(model, **kwargs)


def test_invalid_models():
    with pytest.raises(C.ConfigError, match="unknown preset"):
        C.build_model("gpt-7b")
    with pytest.raises(C.ConfigError, match="not divisible by heads"):
        C.build_model(None, layers=2, hidden=1000, heads=16)
    with pytest.raises(C.ConfigError, match="--heads"):
        C.build_model(None, layers=2, hidden=1024)
    with pytest.raises(C.ConfigError, match="pp=2 does not divide layers=3"):
        C.build_run(C.build_model(None, layers=3, hidden=512, heads=8), "pp", world=2, grad_accum=4)


def test_mapping_and_plan_files_parse():
    with pytest.raises(C.ConfigError, match="unknown keys: bogus"):
        C.from_mapping({"preset": "gpt-125m", "bogus": 1})
    for plan in sorted((REAL / "plans").glob("*.yaml")):
        cfgs = [C.from_mapping(e) for e in yaml.safe_load(plan.read_text())]
        assert cfgs and len({c.id for c in cfgs}) == len(cfgs)


def test_row_schema_and_append(tmp_path):
    cfg = C.build_run(C.build_model("gpt-350m"), "fsdp", world=2, micro_batch=8, recompute="full")
    env = {"gpu_model": "NVIDIA H200", "driver": "580.159.04", "torch": "2.11.0+cu130", "cuda": "13.0",
           "nccl": "2.28.9", "gpus_per_node": 2}
    row = C.make_row(cfg, {"step_time_samples_s": [0.3, 0.1, 0.2], "peak_memory_gib": 10.0,
                           "reserved_memory_gib": 12.0}, env, "cmd", "2026-11-26")
    assert row["id"] == "h200_gpt350m_fsdp2_mb8_ac"
    assert row["hardware"]["chip"] == "h200-sxm-141g"
    p = row["parallel"]
    assert (p["zero"], p["recompute"], p["global_batch_seqs"], p["dp"]) == (3, "full", 16, 2)
    assert row["results"]["step_time_s"] == 0.2
    assert row["results"]["tokens_per_s_per_gpu"] == pytest.approx(16 * 2048 / 0.2 / 2, abs=0.1)
    out = tmp_path / "runs.yaml"
    C.append_row(out, row)
    C.append_row(out, row)                         # same id replaces
    doc = yaml.safe_load(out.read_text())
    assert doc["schema_version"] == 1 and len(doc["rows"]) == 1


def test_committed_runs_file():
    doc = yaml.safe_load((REAL / "runs_h200.yaml").read_text())
    rows = doc["rows"]
    assert len(rows) >= 8
    strategies = {r["parallel"]["framework"].split()[2] for r in rows}
    assert {"DDP", "FSDP2", "Megatron-style", "pipelining", "single"} <= strategies
    for r in rows:
        res = r["results"]
        assert res["step_time_s"] > 0 and res["peak_memory_gib"] > 0
        assert res["gpu_busy_s"] > 0 and res["kernels_per_step"] > 0 and res["cpu_ops_per_step"] > 0
        assert 0 < res["host_step_s"] <= res["step_time_s"] * 1.5
        assert r["parallel"]["global_batch_seqs"] == (r["parallel"]["micro_batch"] * r["parallel"]["grad_accum"]
                                                      * r["parallel"]["dp"])


def test_row_carries_instrumentation():
    cfg = C.build_run(C.build_model("gpt-350m"), "tp", world=2, micro_batch=8)
    res = {"step_time_samples_s": [0.2], "peak_memory_gib": 1.0, "reserved_memory_gib": 2.0,
           "host_step_s": 0.0512345678, "gpu_busy_s": 0.19, "kernels_per_step": 4321.0, "cpu_ops_per_step": 9876.0,
           "optimizer_s": None, "per_rank": {"gpu_busy_s": [0.19, 0.18], "kernels_per_step": [4321.0, 4300.0]}}
    r = C.make_row(cfg, res, {"gpu_model": "NVIDIA H200"}, "cmd", "2026-11-26")["results"]
    assert r["host_step_s"] == 0.05123 and r["gpu_busy_s"] == 0.19
    assert r["kernels_per_step"] == 4321 and isinstance(r["cpu_ops_per_step"], int)
    assert "optimizer_s" not in r and "gpu_span_s" not in r
    assert r["per_rank"] == {"gpu_busy_s": [0.19, 0.18], "kernels_per_step": [4321, 4300]}
    assert C.make_row(cfg, res, {}, "cmd", "d")["parallel"]["framework"].split()[2] == "Megatron-style"


def test_interval_union():
    assert S.interval_union([]) == 0.0
    assert S.interval_union([(0, 10), (5, 15), (20, 25), (21, 22), (30, 30)]) == 20.0
    assert S.interval_union([(20, 25), (0, 10)]) == 15.0


def test_analyze_trace_union_counts_and_optimizer():
    def k(name, ts, dur, stream=7, corr=None, cat="kernel", device=0):
        return {"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
                "args": {"device": device, "stream": stream, "correlation": corr}}

    def cpu(name, ts, dur, tid=1, cat="cpu_op", corr=None):
        return {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur,
                "args": {"correlation": corr} if corr is not None else {}}

    ev = [
        k("ampere_gemm", 100, 50, corr=1), k("ncclDevKernel_AllReduce", 120, 60, stream=9, corr=2),
        k("Memset (Device)", 190, 5, cat="gpu_memset", corr=3), k("other_gpu", 100, 1000, device=1),
        k("multi_tensor_apply_kernel", 300, 20, corr=4), k("multi_tensor_apply_kernel", 330, 10, corr=5),
        cpu("aten::linear", 0, 30), cpu("aten::addmm", 5, 20), cpu("aten::t", 6, 2),
        cpu("aten::mm", 10, 5, tid=2), cpu("profiler::x", 0, 1), cpu("autograd::engine", 0, 50, tid=2),
        cpu("cudaLaunchKernel", 6, 1, cat="cuda_runtime", corr=1),
        cpu(S.OPTIMIZER_RANGE, 200, 40, cat="user_annotation"),
        cpu("cudaLaunchKernel", 210, 1, cat="cuda_runtime", corr=4),
        cpu("cudaLaunchKernel", 220, 1, cat="cuda_runtime", corr=5),
        cpu("cudaLaunchKernel", 230, 1, cat="cuda_runtime", corr=99, tid=3),     # another thread
        {"ph": "s", "cat": "ac2g", "ts": 6, "id": 1},
    ]
    r = S.analyze_trace(ev, device=0)
    assert r["gpu_busy_s"] == pytest.approx((80 + 5 + 20 + 10) * 1e-6)     # 100..180 union, memset, optimizer
    assert r["gpu_kernel_sum_s"] == pytest.approx((50 + 60 + 20 + 10) * 1e-6)
    assert r["nccl_busy_s"] == pytest.approx(60e-6)
    assert r["compute_busy_s"] == pytest.approx((50 + 5 + 20 + 10) * 1e-6)
    assert r["gpu_span_s"] == pytest.approx(240e-6)
    assert r["kernels_per_step"] == 4
    assert (r["cpu_ops_per_step"], r["cpu_top_ops_per_step"]) == (4, 2)
    assert r["optimizer_kernels_s"] == pytest.approx(30e-6)
    assert S.analyze_trace(ev, device=1)["kernels_per_step"] == 1


def test_moe_presets_and_row():
    m = C.build_model("moe-350m-8e")
    assert (m.layers, m.hidden, m.heads, m.moe) == (24, 1024, 16, C.MoEConfig(8, 2, 2048))
    per_layer = 4 * 1024 * 1024 + 4 * 1024 + 4 * 1024 + 1024 * 8 + 8 * (2 * 1024 * 2048 + 2048 + 1024)
    assert m.params() == 24 * per_layer + 50304 * 1024 + 2048 * 1024 + 2 * 1024
    assert C.build_model("gpt-350m").moe is None
    r = C.build_run(m, "ddp", world=2, ep=2, micro_batch=4)
    assert (r.dp, r.ep, r.global_batch, r.router) == (2, 2, 8, "balanced")
    env = {"gpu_model": "NVIDIA H200", "torch": "2.11.0+cu130"}
    row = C.make_row(r, {"step_time_samples_s": [0.1], "peak_memory_gib": 1.0, "reserved_memory_gib": 2.0},
                     env, "cmd", "d")
    assert row["id"] == "h200_moe350m8e_ddp2_ep2_mb4_noac"
    assert row["model"]["type"] == "moe"
    assert row["model"]["moe"] == {"experts": 8, "top_k": 2, "expert_ffn_hidden": 2048, "shared_experts": 0,
                                   "layer_freq": 1, "first_dense_layers": 0}
    p = row["parallel"]
    assert (p["ep"], p["dp"], p["moe_router"]) == (2, 2, "balanced")
    assert p["framework"] == "pytorch 2.11.0+cu130 MoE EP (alltoall dispatcher, balanced router)"
    one = C.build_run(m, "single", micro_batch=2, router="learned")
    assert one.make_id("h200") == "h200_moe350m8e_single_mb2_noac_learned"
    assert C.make_row(one, {"step_time_samples_s": [0.1], "peak_memory_gib": 1.0, "reserved_memory_gib": 2.0},
                      env, "cmd", "d")["parallel"]["ep"] == 1
    assert C.build_run(C.build_model("gpt-350m")).make_id("h200") == "h200_gpt350m_single_mb1_noac"
    cfg = C.from_mapping({"model": {"preset": "gpt-125m", "experts": 4, "top_k": 1, "expert_ffn_hidden": 768},
                          "strategy": "ddp", "world": 2, "ep": 2, "router": "learned"})
    assert cfg.model.moe == C.MoEConfig(4, 1, 768) and cfg.ep == 2


@pytest.mark.parametrize("model_over, kwargs, msg", [
    ({}, {"strategy": "ddp", "world": 2, "ep": 3}, "experts=8 is not divisible by ep=3"),
    ({}, {"strategy": "ddp", "world": 4, "ep": 2}, "ep must be 1 or world=4"),
    ({}, {"strategy": "single", "ep": 2}, "ep must be 1 or world=1"),
    ({}, {"strategy": "fsdp", "world": 2}, "runs with strategy single or ddp"),
    ({}, {"strategy": "tp", "world": 2}, "runs with strategy single or ddp"),
    ({}, {"router": "sinkhorn"}, "router must be one of"),
    ({"seq_len": 3}, {"micro_batch": 1}, "balanced router needs"),
    ({"_dense": True}, {"strategy": "ddp", "world": 2, "ep": 2}, "needs an MoE model"),
])
def test_invalid_moe_combinations(model_over, kwargs, msg):
    model = C.build_model("gpt-350m") if model_over.pop("_dense", False) else C.build_model("moe-350m-8e",
                                                                                              **model_over)
    with pytest.raises(C.ConfigError, match=msg):
        C.build_run(model, **kwargs)


def test_invalid_moe_models():
    with pytest.raises(C.ConfigError, match="top_k=9 exceeds experts=8"):
        C.build_model("moe-350m-8e", top_k=9)
    with pytest.raises(C.ConfigError, match="missing top_k, expert_ffn_hidden"):
        C.build_model("gpt-350m", experts=8)
