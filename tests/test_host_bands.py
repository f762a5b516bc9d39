"""Step-time bands of eager steps their host sets (io/bands.py estimate_band): the same plan's host-bound steps ran
1.3-1.8x apart on two 4x H200 machines (docs/VALIDATION.md "Thirteen 4-GPU configurations"), so a host-bound
estimate's band spans the measured machines' host rates; device-bound and fused estimates keep the corpus band."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from baige_plan.cost.bands import ClassBand, StepTimeBands, step_time_band_s
from baige_plan.cost.estimate import estimate
from baige_plan.cost.execution import EAGER_HOST
from baige_plan.io.bands import band_for, estimate_band
from baige_plan.io.catalog import Catalog
from baige_plan.specs.job import JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import StrategySpec

REAL = Path(__file__).resolve().parents[1] / "benchmarks" / "real"
GPT760M = ModelSpec("gpt-760m", 24, 1536, 16, 4 * 1536, 50304, activation="gelu", tie_embeddings=True)


def _eager(mb: int, dp: int = 4) -> StrategySpec:
    return StrategySpec(dp=dp, micro_batch=mb, recompute="none", zero=0, execution="eager", runtime="pytorch")


def test_host_factors_are_the_measured_machines():
    # fastest single process: host_launch_h200.raw.json dense 4.64 us against the modelled 6.47
    assert EAGER_HOST.host_fast_factor == pytest.approx(4.64 / 6.47)
    # slowest 4-rank host: gpt-760m DDP4 mb 2 on the first lease, its slowest rank's host over its ops, against
    # 6.47 us x the 4-rank contention
    row = next(r for r in yaml.safe_load((REAL / "runs_h200x4_unseen.yaml").read_text())["rows"]
               if r["id"] == "h200_gpt760m_ddp4_mb2_noac")
    res = row["results"]
    us = max(res["per_rank"]["host_step_s"]) / res["cpu_ops_per_step"] * 1e6
    assert us == pytest.approx(EAGER_HOST.slowest_4_rank_host_us_per_op, abs=0.01)
    assert EAGER_HOST.host_slow_factor == pytest.approx(us / (6.47 * 7.33 / 5.29), rel=1e-3)


def test_stage_host_delta_by_hand():
    cl, _ = Catalog.create().cluster("h200-sxm-141g:1x4")
    st = estimate(GPT760M, cl, JobSpec(8, 2048, "bf16"), _eager(2)).stages[0]
    # a host of 10 ms against 8 ms of device: 1.5x slower -> 15 ms (+5); 0.5x -> the device's 8 ms (-2)
    st = replace(st, host_s=0.010, host_vs_s=0.008, host_serial=False)
    assert st.host_delta_s(1.5) == pytest.approx(0.005)
    assert st.host_delta_s(0.5) == pytest.approx(-0.002)
    # serialised with the device (EP all-to-alls with data-dependent splits): the host's own change
    assert replace(st, host_serial=True).host_delta_s(1.5) == pytest.approx(0.005)
    assert replace(st, host_serial=True).host_delta_s(0.5) == pytest.approx(-0.005)
    assert replace(st, host_s=0.0).host_delta_s(2.0) == 0.0


def test_host_bound_step_scales_with_the_host_device_bound_does_not():
    cl, _ = Catalog.create().cluster("h200-sxm-141g:1x4")
    # gpt-760m DDP4 micro-batch 2: host-bound (one micro-batch: the step moves by the host's change)
    e = estimate(GPT760M, cl, JobSpec(8, 2048, "bf16"), _eager(2))
    st = e.stages[0]
    assert st.host_s > st.host_vs_s > 0
    assert e.host_scaled_step_s(1.5) == pytest.approx(e.step_time_s + 0.5 * st.host_s)
    assert e.host_scaled_step_s(0.5) == pytest.approx(e.step_time_s - (st.host_s - st.host_vs_s))
    # micro-batch 16: the device's 2x the host -> a 1.5x slower host changes nothing
    e16 = estimate(GPT760M, cl, JobSpec(64, 2048, "bf16"), _eager(16))
    assert e16.stages[0].host_vs_s > 1.5 * e16.stages[0].host_s
    assert e16.host_scaled_step_s(1.5) == e16.step_time_s
    # fused runtimes have no eager host term
    ef = estimate(GPT760M, cl, JobSpec(8, 2048, "bf16"), replace(_eager(2), execution="fused", runtime="megatron"))
    assert ef.stages[0].host_s == 0.0 and ef.host_scaled_step_s(2.0) == ef.step_time_s


def test_band_widens_only_for_host_bound_estimates():
    bands = StepTimeBands((("all", ClassBand(0.9, 1.0, 1.2, 100)),))
    job = JobSpec(8, 2048, "bf16")
    assert step_time_band_s(1.0, GPT760M, job, _eager(2), bands, (0.7, 1.5)) == pytest.approx((0.63, 1.8))
    assert step_time_band_s(1.0, GPT760M, job, _eager(2), bands, (1.0, 1.0)) == pytest.approx((0.9, 1.2))
    cl, _ = Catalog.create().cluster("h200-sxm-141g:1x4")
    e = estimate(GPT760M, cl, job, _eager(2))
    lo, hi = estimate_band(e, GPT760M, job)
    lo0, hi0 = band_for(e.step_time_s, GPT760M, job, e.strategy)
    assert lo < lo0 and hi > hi0
    assert hi / hi0 == pytest.approx(e.host_scaled_step_s(EAGER_HOST.host_slow_factor) / e.step_time_s)
    e16 = estimate(GPT760M, cl, JobSpec(64, 2048, "bf16"), _eager(16))
    assert estimate_band(e16, GPT760M, JobSpec(64, 2048, "bf16")) == \
        band_for(e16.step_time_s, GPT760M, JobSpec(64, 2048, "bf16"), e16.strategy)
