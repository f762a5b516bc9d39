"""Placement properties: every rank once, TP groups inside a node, Megatron order, the docstring example."""

from __future__ import annotations

from collections import defaultdict

import pytest

from baige_plan.search.placement import place, placement


@pytest.mark.parametrize("tp,cp,dp,pp,dpn", [(8, 1, 8, 8, 8), (2, 2, 4, 2, 4), (4, 1, 3, 2, 8), (1, 4, 2, 3, 2),
                                             (2, 1, 2, 2, 4)])
def test_every_rank_once_and_tp_in_node(tp, cp, dp, pp, dpn):
    slots = placement(tp, cp, dp, pp, "g", dpn)
    world = tp * cp * dp * pp
    assert [s.rank for s in slots] == list(range(world))
    # each (node, device) used exactly once
    assert len({(s.node, s.device) for s in slots}) == world
    # each logical coordinate used exactly once
    assert len({(s.stage, s.replica, s.cp_rank, s.tp_rank) for s in slots}) == world
    groups = defaultdict(set)
    for s in slots:
        groups[(s.stage, s.replica, s.cp_rank)].add(s.node)
    assert all(len(nodes) == 1 for nodes in groups.values())   # a TP group shares one node
    assert all(0 <= s.device < dpn for s in slots)


def test_docstring_example():
    s = placement(2, 1, 2, 2, "g", 4)
    assert (s[3].node, s[3].stage, s[3].replica, s[3].tp_rank) == (0, 0, 1, 1)
    assert (s[4].node, s[4].device, s[4].stage, s[4].replica) == (1, 0, 1, 0)
    assert (s[6].node, s[6].device, s[6].stage, s[6].replica, s[6].tp_rank) == (1, 2, 1, 1, 0)


def test_gpt3_512_ranks():
    slots = placement(8, 1, 8, 8, "a100", 8)
    assert len(slots) == 512 and len({s.rank for s in slots}) == 512
    assert {s.node for s in slots} == set(range(64))
    for s in slots:
        assert s.device == s.tp_rank          # tp 8 fills exactly one node
        assert s.stage == s.rank // 64


def test_rank_outside_shape():
    with pytest.raises(ValueError):
        place(16, 2, 1, 2, 2, "g", 4)
