"""Collective times against nccl-tests bus-bandwidth formulas, numbers worked by hand."""

import math

from baige_plan.cost import collectives as C
from baige_plan.io.catalog import Catalog


def _group(shorthand):
    cl, _ = Catalog.create().cluster(shorthand)
    return cl.groups[0]


def test_intra_node_all_reduce_a100():
    g = _group("a100-sxm4-80g:4x8")
    link = C.group_link(g, 8, 8)
    busbw = 300 * 0.78                      # NVLink3 per direction x measured nccl-tests efficiency
    assert math.isclose(link.busbw_GBps, busbw)
    S = 1e9
    alpha = (C.LAUNCH_US + C.SCALEUP_STEP_US * 2 * 7) * 1e-6
    assert math.isclose(C.all_reduce_s(S, link), alpha + S * 2 * 7 / 8 / (busbw * 1e9))
    assert math.isclose(C.all_gather_s(S, link), alpha + S * 7 / 8 / (busbw * 1e9))
    assert math.isclose(C.reduce_scatter_s(S, link), C.all_gather_s(S, link))


def test_inter_node_one_rank_per_node_is_nic_bound():
    g = _group("a100-sxm4-80g:4x8")
    link = C.group_link(g, 4, 1)             # e.g. a DP group with tp=8
    assert math.isclose(link.busbw_GBps, 200 / 8 * 0.77)
    # 8 ranks per node share 8 NICs: hierarchical ring gets the node's NIC bandwidth, capped by NVLink
    link8 = C.group_link(g, 32, 8)
    assert math.isclose(link8.busbw_GBps, min(300 * 0.78, 8 * 25 * 0.77))


def test_mesh_fabric_subnode_groups_are_slower():
    g = _group("mi300x:1x8")
    full, pair = C.group_link(g, 8, 8), C.group_link(g, 2, 2)
    assert pair.busbw_GBps < full.busbw_GBps / 3   # one peer link of seven


def test_single_rank_is_free():
    g = _group("a100-sxm4-80g:1x8")
    assert C.all_reduce_s(1e9, C.group_link(g, 1, 1)) == 0.0
