"""Activation offloading to host memory (cost/offload.py), by hand and on the published runs that use it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from baige_plan.cost.estimate import estimate
from baige_plan.cost.offload import activation_offload
from baige_plan.errors import SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import load_runs

ROOT = Path(__file__).resolve().parents[1]


def test_offload_by_hand():
    # 80 layers holding 320 GB per micro-batch (4 GB a layer), 40 offloaded over a 450 GB/s host link: 160 GB each way
    # = 0.356 s, hidden under 79/80 of a 1 s forward and a 2 s backward; 40 layers + the one in transfer stay
    o = activation_offload(40, 80, 320e9, 1.0, 2.0, 450.0)
    assert (o.layers, o.keep_fraction, o.buffer_bytes) == (40, 0.5, 4e9)
    assert o.exposed_fwd_s == 0.0 and o.exposed_bwd_s == 0.0
    # over PCIe (63 GB/s) the copies outlast the forward: 160e9 / 63e9 = 2.54 s against 0.9875 s of later layers
    o = activation_offload(40, 80, 320e9, 1.0, 2.0, 63.0)
    assert o.exposed_fwd_s == pytest.approx(160e9 / 63e9 - 79 / 80 * 1.0)
    assert o.exposed_bwd_s == pytest.approx(160e9 / 63e9 - 79 / 80 * 2.0)
    # at most L - 1 layers: the last layer's backward comes first
    assert activation_offload(99, 8, 8e9, 1.0, 1.0, 450.0).layers == 7
    assert activation_offload(0, 8, 8e9, 1.0, 1.0, 450.0).keep_fraction == 1.0


def test_grace_host_link_from_the_catalog_and_none_refused():
    cat = Catalog.create()
    assert cat.chip("gb200").host_link_GBps == 450.0            # NVLink-C2C, shared/reference row
    assert cat.chip("h100-sxm5-80g").host_link_GBps is None      # PCIe: pcie_GBps is used
    cases = {c.id: c for c in load_runs(ROOT / "benchmarks/corpus/nemo_perf_2509.yaml", cat)}
    c = cases["nemo_perf_2509_llama31_405b_gb200_128gpu_fsdp_tp2_fp8"]
    assert c.strategy.activation_offload_layers == 95
    with_off = estimate(c.model, c.cluster, c.job, c.strategy)
    without = estimate(c.model, c.cluster, c.job, replace(c.strategy, activation_offload_layers=0))
    # Llama 3.1 405B on 128 GB200 (FSDP, tp 2): the recipe offloads 95 of 126 layers and ran; without offloading the
    # activations alone would not fit
    assert with_off.fits and not without.fits
    # device activations (L - N) A / L + A / L + the rest (embedding, logits, working buffers), L = 126 layers:
    # act(0) - act(95) = A (95 - 1) / L and act(50) - act(95) = A 45 / L, whatever A and the rest are
    act = {n: estimate(c.model, c.cluster, c.job, replace(c.strategy, activation_offload_layers=n)).memory_gib[
        "activations"] for n in (0, 50, 95)}
    assert (act[0] - act[95]) / (act[50] - act[95]) == pytest.approx(94 / 45, rel=1e-9)
    b200 = replace(c.cluster.groups[0].chip, host_link_GBps=None, pcie_GBps=None)
    cl = replace(c.cluster, groups=(replace(c.cluster.groups[0], chip=b200),))
    with pytest.raises(SpecError, match="host link"):
        estimate(c.model, cl, c.job, c.strategy)
