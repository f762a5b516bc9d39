"""DeepSpeed's balanced pipeline partition (StrategySpec.balanced_partition): uneven layer counts go one extra
to each of the first layers % pp stages, as PipelineModule's partition_method 'type:transformer' does."""

from __future__ import annotations

import pytest

from baige_plan import runtimes
from baige_plan.errors import SpecError
from baige_plan.specs.strategy import StrategySpec, stage_layers


def test_bloom_split():
    # BLOOM-176B: 70 layers on 12 stages ran as [6] x 10 + [5] x 2 (runtimes/deepspeed.py docstring)
    s = StrategySpec(tp=4, pp=12, dp=8, balanced_partition=True)
    assert stage_layers(s, 70) == (6,) * 10 + (5,) * 2


def test_even_counts_and_megatron_unchanged():
    assert stage_layers(StrategySpec(pp=4, balanced_partition=True), 32) == (8, 8, 8, 8)
    with pytest.raises(SpecError):
        stage_layers(StrategySpec(pp=12), 70)       # Megatron needs first/last counts or split accounting


def test_the_runtime_declares_it():
    assert runtimes.knobs("deepspeed")["balanced_partition"] is True
    assert runtimes.knobs("megatron")["balanced_partition"] is False
