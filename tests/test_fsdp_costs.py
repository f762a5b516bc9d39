"""FSDP2 host cost (cost/execution.py `Fsdp2Host`, docs/COST_MODEL.md §2) against numbers derived by hand
here: the per-unit hook time and the DTensor optimizer step of fully_shard, and that a small model's
FSDP step becomes host-bound while its DDP step stays device-bound."""

import pytest

from baige_plan.cost.estimate import estimate
from baige_plan.cost.execution import EAGER_HOST, FSDP2_HOST, eager_host_s
from baige_plan.io.catalog import Catalog
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import StrategySpec

# benchmarks/real/harness.py gpt-350m: 24 layers, hidden 1024, GeLU ffn 4096, tied embeddings
GPT350M = ModelSpec("gpt-350m", 24, 1024, 16, 4096, 50304, seq_len=2048, activation="gelu", tie_embeddings=True)


def test_fsdp2_host_by_hand():
    # the measured constants (benchmarks/real/fsdp_host_traces.py over the six H100 traces)
    assert FSDP2_HOST.unit_s == pytest.approx(2.97e-3)
    assert FSDP2_HOST.optimizer_unit_s == pytest.approx(15.2e-3 / 25, rel=0.01)
    # 24 blocks at dp 4, one micro-batch: 24 x 290 eager ops at 6.47 us = 45.03 ms, plus 25 fully_shard
    # units (24 blocks + root) x (2.97 ms of hooks + 0.61 ms of the DTensor AdamW step) = 89.50 ms
    assert 24 * 290 * 6.47e-6 == pytest.approx(0.0450312)
    assert eager_host_s(24, 0, 0, False, 4, 3, 1) == pytest.approx(0.0450312 + 0.0895)
    # 4 micro-batches: the hooks run every micro-batch, the optimizer once a step (a quarter per micro-batch)
    assert eager_host_s(24, 0, 0, False, 4, 3, 1, micro_batches=4) == pytest.approx(0.0450312 + 25 * (2.97e-3 + 0.61e-3 / 4))
    # DDP keeps its counted hook ops: 24 x (290 + 36) x 6.47 us = 50.62 ms
    assert eager_host_s(24, 0, 0, False, 4, 0, 1) == pytest.approx(24 * 326 * EAGER_HOST.dense_us_per_op * 1e-6)
    assert eager_host_s(24, 0, 0, False, 4, 0, 1) == pytest.approx(0.05062128)


def _harness(zero: int):
    cl, _ = Catalog.create().cluster("h200-sxm-141g:1x4")
    s = StrategySpec(dp=4, zero=zero, micro_batch=8, recompute="none", execution="eager", runtime="pytorch")
    return estimate(GPT350M, cl, JobSpec(32, 2048, "bf16"), s)


def test_small_fsdp_step_is_host_bound_ddp_is_not():
    """gpt-350m, micro-batch 8 on 4 H200 (runs_h200x4.yaml: FSDP 0.200 s, host until the last launch
    0.16-0.20 s; DDP 0.126 s, host 0.087 s): the FSDP stage takes its host time, DDP its device time."""
    host = eager_host_s(24, 0, 0, False, 4, 3, 1)
    fsdp, ddp = _harness(3), _harness(0)
    st = fsdp.stages[0]
    assert st.time_s >= host
    # host-bound: the stage time exceeds its device work by host - layers' device time (> 0)
    assert st.time_s > st.compute_s
    assert ddp.stages[0].time_s == pytest.approx(ddp.stages[0].compute_s)
    assert fsdp.step_time_s > ddp.step_time_s
