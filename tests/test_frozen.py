"""specs/frozen.py: `make` builds the instance the dataclass __init__ builds, `hash_once` keeps the dataclass's own
hash, and what they keep on instances never leaks into equality, copies or the fields a class reads."""

from __future__ import annotations

import copy
import pickle
from dataclasses import MISSING, dataclass, field, fields

import pytest

from baige_plan.cost.estimate import DpTraffic, Estimate, StageCost
from baige_plan.errors import SpecError
from baige_plan.specs.frozen import hash_once, make
from baige_plan.specs.link import BandwidthCurve, LinkCurves
from baige_plan.specs.pipeline import ShapeKnobs, StageSpec
from baige_plan.specs.strategy import StrategySpec

STAGE = dict(index=1, layers=(4, 8), fwd_s=0.1, bwd_s=0.2, compute_s=0.25, tp_s=0.01, cp_s=0.0, ep_s=0.0, pp_s=0.02,
             weights_gib=1.0, grads_gib=2.0, optimizer_gib=3.0, activations_gib=4.0, other_gib=0.5,
             dense_params=1e8, expert_params=0.0, hw_flops=1e12)


def _same(a, b) -> None:
    assert type(a) is type(b) and a == b and hash(a) == hash(b) and repr(a) == repr(b)
    assert list(a.__dict__) == list(b.__dict__)        # every field, in field order


def test_make_is_the_init():
    _same(make(StageCost, **STAGE), StageCost(**STAGE))
    _same(make(StageCost, **STAGE, host_s=1.0, sources=(("compute", "analytical"),)),
          StageCost(**STAGE, host_s=1.0, sources=(("compute", "analytical"),)))
    _same(make(DpTraffic, grads_s=1.0, reductions=4), DpTraffic(grads_s=1.0, reductions=4))
    full = {f.name: getattr(StageCost(**STAGE), f.name) for f in fields(StageCost)}     # every field, in order
    _same(make(StageCost, **full), StageCost(**full))
    backwards = dict(reversed(list(full.items())))                                      # every field, out of order
    _same(make(StageCost, **backwards), StageCost(**backwards))
    # __post_init__ runs: the strategy's normalisation (sequence parallel follows tp) and its checks
    for kw in ({}, {"tp": 4}, {"tp": 1, "sequence_parallel": True}, {"tp": 8, "pp": 2, "vpp": 3, "zero": 3}):
        _same(make(StrategySpec, **kw), StrategySpec(**kw))
    with pytest.raises(SpecError, match="vpp"):
        make(StrategySpec, vpp=2)
    with pytest.raises(TypeError):
        make(StageCost, **{k: v for k, v in STAGE.items() if k != "fwd_s"})      # a field without a default
    with pytest.raises(TypeError):
        make(StrategySpec, tq=2)                                                # no such field


def test_make_default_factory():
    kw = {f.name: None for f in fields(Estimate) if f.default is MISSING and f.default_factory is MISSING}
    a, b = make(Estimate, **kw), Estimate(**kw)
    assert a.notes == () and a == b and list(a.__dict__) == list(b.__dict__)

    @dataclass(frozen=True)
    class Bag:
        items: list = field(default_factory=list)

    x, y = make(Bag), make(Bag)
    assert x == Bag() and x.items is not y.items          # a fresh default each time, as __init__ makes


def test_hash_once_is_the_dataclass_hash():
    @dataclass(frozen=True)
    class Plain:
        a: int
        b: tuple

    @hash_once
    @dataclass(frozen=True)
    class Kept:
        a: int
        b: tuple

    p, k = Plain(1, (2, 3)), Kept(1, (2, 3))
    assert hash(k) == hash(p) == hash(k)                  # computed, then read back
    assert k == Kept(1, (2, 3)) and repr(k) == "test_hash_once_is_the_dataclass_hash.<locals>.Kept(a=1, b=(2, 3))"
    c = copy.copy(k)
    assert "_hash_once" not in c.__dict__ and c == k and hash(c) == hash(k)


def test_kept_answers_stay_off_copies_and_fields():
    curve = BandwidthCurve("p2p", ((1e3, 1.0), (1e6, 10.0), (1e9, 20.0)))
    lc = LinkCurves((curve,))
    assert lc.pick("p2p", 4, 2) is curve and hash(lc) == hash((lc.curves,))
    assert curve.busbw_GBps(3e7) == pytest.approx(15.0, rel=0.2)
    back = pickle.loads(pickle.dumps(lc))
    assert set(back.__dict__) == {"curves"} and set(back.curves[0].__dict__) == {f.name for f in fields(curve)}
    assert back == lc and back.pick("p2p", 4, 2) == curve and back.curves[0].busbw_GBps(3e7) == curve.busbw_GBps(3e7)
    kn = ShapeKnobs(micro_batch=2, recompute="full")
    hash(kn)
    assert kn.items() == {"micro_batch": 2, "recompute": "full"}    # not the kept hash
    st = StageSpec("a100", (0, 4), 4)
    assert hash(st) == hash(("a100", (0, 4), 4)) and st == pickle.loads(pickle.dumps(st))
