"""DeepSpeed execution semantics outside the GEMMs (specs/runtimes/deepspeed.py docstring), against hand-derived values.

One node of 8 A100-SXM4-80GB: HBM 2039 GB/s x 0.854 (chip file hbm_efficiency) = 1741.3 GB/s; NVSwitch all-reduce
/ all-gather bus bandwidth 300 GB/s x 0.78 = 234 GB/s, latency (8 + 2(n-1)) us for n ranks in the node
(cost/collectives.py LAUNCH_US, SCALEUP_STEP_US). Per micro-batch, with P the parameters a stage holds:
  - gradient accumulation: BF16_Optimizer.update_hp_grads (bf16, ZeRO-1) moves 2 + 4 + 4 + 4 + 4 = 18 B per
    parameter in every micro-batch; autograd's AccumulateGrad in fp16 6 B from the second micro-batch on:
    18 P / HBM and 6 P (m - 1) / m / HBM seconds of backward;
  - pipe-partitioned p2p (tp > 1, no SP): PartitionedTensor.full() = all-gather of the b s h 16-bit tensor over the
    TP group + zeros and clone (3 b s h 2 B of HBM traffic); once in the forward of a non-first stage, twice
    (output, gradient) in the backward of a non-last stage;
  - ZeRO-1 gradients: one all-reduce of 16-bit gradients per step: alpha + 2 P 2 (n-1)/n / busbw;
  - selective recomputation: free with flash attention on CUDA (Megatron-DeepSpeed never checkpoints its flash
    path); one more attention forward per layer on Intel Gaudi (HabanaAI Megatron-DeepSpeed checkpoints FusedSDPA).
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import yaml
from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.cost import collectives as C
from baige_plan.cost.compute import gemm_time_s
from baige_plan.cost.estimate import _gemm_set, dp_traffic, estimate, strategy_rates
from baige_plan.exports import deepspeed as ds_export
from baige_plan.io.catalog import Catalog
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.runtimes import deepspeed as ds
from baige_plan.specs.runtimes import knobs
from baige_plan.specs.strategy import StrategySpec

CAT = Catalog.create()
MODEL = ModelSpec("gpt-1b", 16, 2048, 16, 8192, 50304, activation="gelu", dropout=0.0)
CLUSTER, _ = CAT.cluster("a100-sxm4-80g:1x8")
GROUP = CLUSTER.groups[0]
HBM = 2039e9 * 0.854
BUSBW = 300e9 * 0.78


def _est(job: JobSpec, cluster=CLUSTER, model=MODEL, **kw):
    s = StrategySpec(**kw, **knobs("deepspeed"))
    return s, estimate(model, cluster, job, s)


def _without(monkeypatch, **fields):
    """The same estimate with some DeepSpeed semantics switched off (the rest as shipped)."""
    monkeypatch.setattr(ds, "RUNTIME", dataclasses.replace(ds.RUNTIME, **fields))


def test_bf16_optimizer_accumulates_every_micro_batch(monkeypatch):
    job = JobSpec(global_batch=64, seq_len=2048, precision="bf16")
    _, e = _est(job, dp=4, pp=2, zero=1, micro_batch=2)
    _without(monkeypatch, grad_accum=None)
    _, e0 = _est(job, dp=4, pp=2, zero=1, micro_batch=2)
    for st, st0 in zip(e.stages, e0.stages, strict=True):
        want = 18 * st.dense_params / HBM
        assert math.isclose(st.bwd_s - st0.bwd_s, want, rel_tol=1e-9)
        assert math.isclose(st.fwd_s, st0.fwd_s, rel_tol=1e-12)
    # 8 layers of 12 h^2 (+ biases, norms) and the 50304 x 2048 embedding: ~ 0.5e9 parameters -> ~ 5 ms
    assert 4e-3 < 18 * e.stages[0].dense_params / HBM < 6e-3


def test_fp16_accumulates_from_the_second_micro_batch(monkeypatch):
    job = JobSpec(global_batch=64, seq_len=2048, precision="fp16")
    _, e = _est(job, dp=4, pp=2, zero=0, micro_batch=2)
    m = e.micro_batches
    assert m == 8
    _without(monkeypatch, grad_accum=None)
    _, e0 = _est(job, dp=4, pp=2, zero=0, micro_batch=2)
    for st, st0 in zip(e.stages, e0.stages, strict=True):
        assert math.isclose(st.bwd_s - st0.bwd_s, 6 * st.dense_params * (m - 1) / m / HBM, rel_tol=1e-9)


def test_grad_accum_bytes_per_path():
    ga = ds.RUNTIME.grad_accum
    assert (ga("bf16", 1, 1).bytes_per_param, ga("bf16", 1, 1).first) == (18, True)
    assert (ga("bf16", 0, 4).bytes_per_param, ga("bf16", 0, 4).first) == (18, True)   # BF16_Optimizer with pp
    assert (ga("bf16", 0, 1).bytes_per_param, ga("bf16", 0, 1).first) == (6, False)   # DDP_BFLOAT16: AccumulateGrad
    assert (ga("fp16", 1, 2).bytes_per_param, ga("fp16", 1, 2).first) == (6, False)
    assert ga("fp32", 0, 1).bytes_per_param == 12
    assert ga("bf16", 2, 1).bytes_per_param == ga("bf16", 3, 1).bytes_per_param == ga("fp8", 1, 1).bytes_per_param == 0


def test_pipe_partitioned_p2p_rebuilds_over_tp(monkeypatch):
    job = JobSpec(global_batch=32, seq_len=2048, precision="bf16")
    kw = dict(tp=2, dp=2, pp=2, zero=1, micro_batch=2, sequence_parallel=False)
    _, e = _est(job, **kw)
    _without(monkeypatch, pipe_partitioned=False)
    _, e0 = _est(job, **kw)
    full = 2 * 2048 * 2048 * 2                          # micro-batch x seq x hidden x 2 B
    ag = (8 + 2 * 1) * 1e-6 + full * (2 - 1) / 2 / BUSBW
    rebuild = ag + 3 * full / HBM
    first, last = e.stages
    assert math.isclose(first.fwd_s, e0.stages[0].fwd_s, rel_tol=1e-12)
    assert math.isclose(first.bwd_s - e0.stages[0].bwd_s, 2 * rebuild, rel_tol=1e-9)
    assert math.isclose(last.fwd_s - e0.stages[1].fwd_s, rebuild, rel_tol=1e-9)
    assert math.isclose(last.bwd_s, e0.stages[1].bwd_s, rel_tol=1e-12)
    assert math.isclose(first.pp_s - e0.stages[0].pp_s, 2 * rebuild, rel_tol=1e-9)


def test_pipe_partitioning_is_off_with_sequence_parallelism(monkeypatch):
    job = JobSpec(global_batch=32, seq_len=2048, precision="bf16")
    kw = dict(tp=2, dp=2, pp=2, zero=1, micro_batch=2, sequence_parallel=True)
    _, e = _est(job, **kw)
    _without(monkeypatch, pipe_partitioned=False)
    _, e0 = _est(job, **kw)
    assert [st.time_s for st in e.stages] == [st.time_s for st in e0.stages]


def test_zero1_all_reduces_16_bit_gradients():
    job = JobSpec(global_batch=64, seq_len=2048, precision="bf16")
    s, e = _est(job, dp=8, zero=1, micro_batch=2)
    st = e.stages[0]
    P = st.dense_params
    ar = (8 + 2 * 7) * 1e-6 + 2 * P * 2 * 7 / 8 / BUSBW     # all-reduce of 2-byte gradients over 8 ranks
    ag = (8 + 2 * 7) * 1e-6 + 2 * P * 7 / 8 / BUSBW         # the 16-bit parameters after the step
    t = dp_traffic(st, GROUP, s, job, e.micro_batches)
    assert math.isclose(t.grads_s, ar, rel_tol=1e-9) and math.isclose(t.params_s, ag, rel_tol=1e-9)
    # the same bytes on the wire as the reduce-scatter of 4-byte gradients the model charged before
    assert math.isclose(ar, C.reduce_scatter_s(4 * P, C.group_link(GROUP, 8, 8)), rel_tol=1e-9)


def test_zero0_all_reduce_halves_with_16_bit_communication():
    job = JobSpec(global_batch=64, seq_len=2048, precision="fp16")
    s, e = _est(job, dp=8, zero=0, micro_batch=2)
    P = e.stages[0].dense_params
    t = dp_traffic(e.stages[0], GROUP, s, job, e.micro_batches)
    assert math.isclose(t.grads_s, (8 + 2 * 7) * 1e-6 + 2 * P * 2 * 7 / 8 / BUSBW, rel_tol=1e-9)


@pytest.mark.parametrize(("cluster", "recomputes"), [("gaudi2:1x8", True), ("a100-sxm4-80g:1x8", False)])
def test_selective_recompute_of_fused_attention(monkeypatch, cluster, recomputes):
    cl, _ = CAT.cluster(cluster)
    job = JobSpec(global_batch=64, seq_len=4096, precision="bf16")
    kw = dict(tp=1, dp=8, zero=1, micro_batch=1, recompute="selective", attention="flash")
    s, e = _est(job, cluster=cl, **kw)
    _without(monkeypatch, selective_attention_recompute=())
    _, e0 = _est(job, cluster=cl, **kw)
    st, st0 = e.stages[0], e0.stages[0]
    r = strategy_rates(cl.groups[0].chip, "bf16", s)
    _, att = _gemm_set(MODEL, s, 4096, False)
    attn_fwd = sum(gemm_time_s(g, r) for g in att)       # QK^T and PV of one layer, the fused kernel's rate
    assert attn_fwd > 0
    want = MODEL.layers * attn_fwd if recomputes else 0.0
    assert math.isclose(st.bwd_s - st0.bwd_s, want, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(st.fwd_s, st0.fwd_s, rel_tol=1e-12)


def test_export_turns_pipe_partitioning_off_with_sequence_parallelism(tmp_path):
    """The cost model charges no partition + all-gather with SP; the export writes what makes DeepSpeed agree
    (its get_pipeline_config defaults both keys to true)."""
    runner = CliRunner()
    out = {}
    for sp in ("--sequence-parallel", "--no-sequence-parallel"):
        f = tmp_path / f"{sp}.yaml"
        r = runner.invoke(app, ["plan", "gpt-22b", "a100-sxm4-80g:4x8", "--global-batch", "256", "--seq-len", "2048",
                                "--runtime", "deepspeed", "--tp", "2", "--pp", "4", "--zero", "1", "--micro-batch", "1",
                                sp, "--out", str(f), "--format", "json"])
        assert r.exit_code == 0, r.output
        cfg = json.loads(next(x.text for x in ds_export.export(yaml.safe_load(f.read_text())).files
                              if x.name == "ds_config.json"))
        out[sp] = cfg["pipeline"]
    assert out["--sequence-parallel"]["pipe_partitioned"] is False
    assert out["--sequence-parallel"]["grad_partitioned"] is False
    assert "pipe_partitioned" not in out["--no-sequence-parallel"]     # DeepSpeed's default (true) applies
