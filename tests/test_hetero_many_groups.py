"""Spanning pipelines over many chip groups: the template enumeration stays polynomial beyond
EXHAUSTIVE_ORDER_GROUPS groups (it was n! x 2^n: 6 groups ran for minutes, found by a CLI fuzz pass)."""

from itertools import permutations

from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.search.hetero_templates import (
    EXHAUSTIVE_ORDER_GROUPS,
    SPANNING_TP_PER_GROUP,
    bounded_orders,
    segment_orders,
    tp_combos,
)

runner = CliRunner()


def test_up_to_four_groups_every_order_and_tp_combination():
    names = ["a", "b", "c", "d"]
    assert EXHAUSTIVE_ORDER_GROUPS == 4
    counts = {n: 2 for n in names}
    firsts = {o[0][0] + "".join(g for g, _ in o[1:]) for o in segment_orders(counts, names, {n: 80 for n in names})}
    assert {"".join(p) for p in permutations(names)} <= firsts       # all 24 orders, as before
    pref = {n: [2, 1, 4] for n in names}
    assert len(tp_combos(names, pref)) == SPANNING_TP_PER_GROUP ** 4  # 16: the full product


def test_more_groups_first_and_last_free_middle_by_memory():
    names = ["a", "b", "c", "d", "e", "f"]
    mem = {"a": 40, "b": 80, "c": 141, "d": 80, "e": 32, "f": 64}
    orders = bounded_orders(names, mem)
    assert len(orders) == 6 * 5 and len(set(orders)) == 30             # every (first, last) pair once
    assert {(o[0], o[-1]) for o in orders} == {(x, y) for x in names for y in names if x != y}
    # the middle groups by memory, largest first (ties in the given order): c 141, b 80, d 80, f 64, a 40, e 32
    assert orders[names.index("a") * 5] == ("a", "c", "d", "f", "e", "b")
    rank = {n: i for i, n in enumerate(["c", "b", "d", "f", "a", "e"])}
    assert all([rank[g] for g in o[1:-1]] == sorted(rank[g] for g in o[1:-1]) for o in orders)
    # tp: all first, all second, each group alone at its second: n + 2 (here 8 distinct) instead of 2^6 = 64
    pref = {n: [1, 2] for n in names}
    combos = tp_combos(names, pref)
    assert len(combos) == 8 and combos[0] == (1,) * 6 and combos[1] == (2,) * 6


def test_six_groups_plan_completes():
    spec = "+".join(["h100-sxm5-80g:1x2"] * 6)
    r = runner.invoke(app, ["plan", "llama3-8b", spec, "--global-batch", "64", "--seq-len", "2048",
                            "--format", "json"])
    assert r.exit_code == 0, r.output
    assert "6 chip groups: a pipeline spanning them was tried with every first and last group" in r.stderr


def test_many_groups_each_first_or_last():
    names = [f"g{i}" for i in range(13)]
    mem = {n: 80 for n in names}
    orders = bounded_orders(names, mem)
    assert len(orders) == 2 * 13 - 1                                   # 13 firsts, 13 lasts, one order twice
    assert {o[0] for o in orders} == set(names) and {o[-1] for o in orders} == set(names)
    assert len(tp_combos(names, {n: [1, 2] for n in names})) == 2       # all first, all second


def test_thirty_one_groups_plan_completes():
    # 31 groups of 2 H100 hung in the template enumeration (2^31 group subsets; fuzz pass)
    spec = "+".join(["h100-sxm5-80g:1x2"] * 31)
    r = runner.invoke(app, ["plan", "opt-350m", spec, "--global-batch", "8", "--seq-len", "512", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert "31 chip groups: a pipeline spanning them was tried with each group first and each group last" in r.stderr
