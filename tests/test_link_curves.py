"""Measured link curves (specs/link.py): interpolation by hand, how the cost model uses them, that
estimates without curves keep the alpha-beta formulas, the loaders' errors, the profile writer."""

import dataclasses
import json
import math
from pathlib import Path

import pytest
import yaml

from baige_plan.cost import collectives as C
from baige_plan.cost.estimate import estimate
from baige_plan.cost.hetero import path_link
from baige_plan.errors import InputError, SpecError
from baige_plan.io.catalog import Catalog
from baige_plan.io.chips import chip_from_doc
from baige_plan.io.topologies import cluster_from_dict, link_curve_extras
from baige_plan.io.yamlio import read_document
from baige_plan.profile import writer as W
from baige_plan.profile.measure import coll_sizes, collective_worlds
from baige_plan.specs.job import JobSpec
from baige_plan.specs.link import BandwidthCurve, LinkCurves
from baige_plan.specs.strategy import StrategySpec
from baige_plan.specs.topology import ClusterSpec

ROOT = Path(__file__).parents[1]
CAT = Catalog.create()
CLOUD = ROOT / "topologies" / "cloud-a100-v100-128.yaml"


# -- the curve type -----------------------------------------------------------------------------
def test_interpolation_by_hand():
    c = BandwidthCurve("p2p", ((1e3, 1.0), (1e5, 3.0), (1e7, 5.0)))
    assert c.busbw_GBps(1e4) == pytest.approx(2.0)        # halfway in log(bytes)
    assert c.busbw_GBps(1e6) == pytest.approx(4.0)
    assert c.busbw_GBps(1e5) == 3.0                        # on a point
    assert c.busbw_GBps(10 ** 4.5) == pytest.approx(2.5)
    assert c.busbw_GBps(1e9) == 5.0                        # above: bandwidth of the largest
    assert c.busbw_GBps(1e2) == pytest.approx(0.1)         # below: time of the smallest (1e3 B / 1 GB/s)
    assert c.time_s(1e2) == pytest.approx(1e3 / 1e9)
    assert c.time_s(1e6) == pytest.approx(1e6 / 4e9)


def test_collective_time_and_algbw_conversion():
    ar = BandwidthCurve.from_algbw("all_reduce", [(1e6, 10.0), (1e8, 20.0)], n=4)
    assert ar.points == ((1e6, 15.0), (1e8, 30.0))        # busbw = algbw x 2(n-1)/n
    assert ar.time_s(1e7) == pytest.approx(1e7 * 1.5 / 22.5e9)
    ag = BandwidthCurve.from_algbw("all_gather", [(1e6, 8.0)], n=4)
    assert ag.points == ((1e6, 6.0),)                      # (n-1)/n


@pytest.mark.parametrize("kw, field, text", [
    ({"op": "p2p", "points": ((1e3, 1.0), (1e3, 2.0))}, "points[1]", "1000.0 after 1000.0"),
    ({"op": "p2p", "points": ((1e3, 1.0), (1e4, 0.0))}, "points[1]", "got 0.0"),
    ({"op": "broadcast", "points": ((1e3, 1.0),)}, "op", "'broadcast'"),
    ({"op": "p2p", "points": ((1e3, 1.0),), "n": 1}, "n", "got 1"),
    ({"op": "p2p", "points": ((1e3, 1.0),), "n": 4, "per_node": 8}, "per_node", "got 8"),
    ({"op": "p2p", "points": ()}, "points", "at least one"),
])
def test_curve_validates_itself(kw, field, text):
    with pytest.raises(SpecError) as e:
        BandwidthCurve(**kw)
    assert e.value.field == field and text in e.value.reason


def test_pick_nearest_per_node_then_n():
    pts = ((1e3, 1.0),)
    cs = LinkCurves((BandwidthCurve("p2p", pts, 2, 1), BandwidthCurve("p2p", pts, 8, 4),
                     BandwidthCurve("all_reduce", pts, 2), BandwidthCurve("all_reduce", pts, 8)))
    assert cs.pick("p2p", 8, 4).per_node == 4
    assert cs.pick("p2p", 2, 1).per_node == 1
    assert cs.pick("p2p", 6, 3).per_node == 4              # |log 4/3| < |log 1/3|
    assert cs.pick("all_reduce", 4, 4).n == 8              # tie in log ratio: the larger measurement
    assert cs.pick("all_reduce", 3, 3).n == 2
    assert cs.pick("all_gather", 8, 8) is None
    with pytest.raises(SpecError, match="duplicate"):
        LinkCurves((BandwidthCurve("p2p", pts), BandwidthCurve("p2p", pts)))


# -- the GCP cloud topologies (Sailor measurements) ----------------------------------------------
def _cloud():
    cl, _ = CAT.cluster(str(CLOUD))
    return cl, cl.group("a100"), cl.group("v100")


def test_cloud_topologies_load_with_sailor_split():
    for total, a, v in ((128, 32, 96), (320, 80, 240), (512, 128, 384)):
        cl, _ = CAT.cluster(f"cloud-a100-v100-{total}")
        assert (cl.group("a100").devices, cl.group("v100").devices, cl.devices) == (a, v, total)
        assert cl.group("a100").devices_per_node == cl.group("v100").devices_per_node == 4
        assert not cl.bridges and cl.group("a100").nic_curves and cl.group("v100").scaleup_curves


def test_p2p_8mb_over_gcp_a100_vm_curve_by_hand():
    cl, a, v = _cloud()
    doc = yaml.safe_load(CLOUD.read_text())
    nic = next(g for g in doc["groups"] if g["name"] == "a100")["links"]["nic"]
    four = next(c for c in nic if c.get("per_node") == 4)["points"]
    # the file's neighbours of 8 MB (Sailor's fit, aggregate of 4 senders / 4), and the hand interpolation
    assert [4194304, 1.347] in four and [8388608, 1.42] in four
    bw = 1.347 + (1.42 - 1.347) * math.log(8e6 / 4194304) / math.log(2)
    link = path_link(cl, a, a, 4)                          # all 4 GPUs of the VM send at once
    assert C.p2p_s(8e6, link) == pytest.approx(8e6 / (bw * 1e9), rel=1e-12)
    one = next(c for c in nic if c.get("per_node") == 1)["points"]
    assert [4194304, 1.398] in one and [8388608, 1.526] in one
    bw1 = 1.398 + (1.526 - 1.398) * math.log(8e6 / 4194304) / math.log(2)
    assert C.p2p_s(8e6, path_link(cl, a, a, 1)) == pytest.approx(8e6 / (bw1 * 1e9), rel=1e-12)
    # A100 <-> V100: the slower group's curve at each size (Sailor's cross entries equal V100's)
    cross = C.p2p_s(8e6, path_link(cl, a, v, 4))
    assert cross == pytest.approx(max(C.p2p_s(8e6, path_link(cl, v, v, 4)), C.p2p_s(8e6, link)), rel=1e-12)


def test_dp_all_reduce_ring_from_p2p_curve_by_hand():
    """Across VMs, a collective without its own curve is a ring of p2p steps of S/n (one rank per VM
    here, every GPU of the VM sending at once), read per bucket of S/buckets."""
    _, a, _ = _cloud()
    n, layers = 8, 6
    S = n * layers * 4194304                               # each step's piece lands on a measured point
    link = C.group_link(a, n, 1, buckets=layers)
    assert C.all_reduce_s(S, link) == pytest.approx(S * 2 * (n - 1) / n / (1.347 * 1e9), rel=1e-12)
    assert C.latency_s(link, "all_reduce") == 0.0          # the curve holds the latency
    # without buckets the curve is read at S/n: a bigger piece, faster
    assert C.all_reduce_s(S, C.group_link(a, n, 1)) < C.all_reduce_s(S, link)


def test_intra_vm_pipeline_p2p_uses_the_scaleup_curve():
    _, a, _ = _cloud()
    link = C.scaleup_p2p_link(a, 2)
    assert C.p2p_s(8388608, link) == pytest.approx(8388608 / (90.92 * 1e9), rel=1e-12)
    # the chip's constants would give 300 GB/s x efficiency: the measured curve is far slower at 8 MiB
    assert link.busbw_GBps == pytest.approx(300 * a.chip.scaleup_efficiency)


def _with_nic_curve(group, points):
    curve = BandwidthCurve("p2p", tuple(points), n=2 * group.devices_per_node, per_node=group.devices_per_node)
    return dataclasses.replace(group, nic_curves=LinkCurves((curve,)))


def test_curve_is_slower_than_constant_for_mid_size_messages():
    cl, _ = CAT.cluster("a100-sxm4-40g:4x8")
    g = cl.groups[0]
    peak = C.nic_p2p_link(g).busbw_GBps                    # the constant model's per-device NIC
    gc = _with_nic_curve(g, [(65536, 0.2 * peak), (8388608, 0.8 * peak), (1 << 30, peak)])
    for S in (1e6, 8388608, 3e7):
        assert C.p2p_s(S, C.nic_p2p_link(gc, per_node=8)) > C.p2p_s(S, C.nic_p2p_link(g, per_node=8))
    assert C.p2p_s(8388608, C.nic_p2p_link(gc, per_node=8)) == pytest.approx(8388608 / (0.8 * peak * 1e9))
    # a whole estimate: pipeline stages on different nodes (stride tp*cp*dp = 8 = devices per node)
    m, job, s = CAT.model("opt-350m"), JobSpec(64, 2048, "fp16"), StrategySpec(tp=2, pp=4, dp=4)
    base = estimate(m, cl, job, s)
    slow = estimate(m, ClusterSpec(cl.name, (gc,)), job, s)
    assert slow.breakdown_s["pp_comm"] > base.breakdown_s["pp_comm"]
    assert slow.step_time_s > base.step_time_s


# -- without curves: the alpha-beta formulas, unchanged ------------------------------------------
def test_no_curve_pipeline_p2p_by_hand():
    """opt-350m, tp 1, pp 2, dp 4 on 2 nodes x 4 A100-40GB: stages on different nodes, one 4 MiB
    activation (b*s*h*2 B) per micro-batch each way over the per-device NIC:
    pp_comm = m * (alpha + S / (nic_Gbps / 8 * nic_efficiency)), alpha = 8 + 6 us."""
    cl, _ = CAT.cluster("a100-sxm4-40g:2x4")
    chip = cl.groups[0].chip
    assert chip.nic_curves is None and chip.scaleup_curves is None
    e = estimate(CAT.model("opt-350m"), cl, JobSpec(8, 2048, "fp16"), StrategySpec(tp=1, pp=2, dp=4))
    S, m = 2048 * 1024 * 2, 8 // 4
    per = (8 + 6) * 1e-6 + S / (chip.nic_Gbps / 8 * chip.nic_efficiency * 1e9)
    assert e.breakdown_s["pp_comm"] == pytest.approx(m * per, rel=1e-12)
    # the same on the cloud A100 group with its curve: all 4 GPUs of a VM send at once, S = 4 MiB is a point
    cloud, a, _ = _cloud()
    ec = estimate(CAT.model("opt-350m"), ClusterSpec("a100", (dataclasses.replace(a, nodes=2),)),
                  JobSpec(8, 2048, "fp16"), StrategySpec(tp=1, pp=2, dp=4))
    assert ec.breakdown_s["pp_comm"] == pytest.approx(m * S / (1.347 * 1e9), rel=1e-12)


def test_no_curve_dp_and_tp_collectives_by_hand():
    cl, _ = CAT.cluster("a100-sxm4-40g:2x8")
    g = cl.groups[0]
    chip = g.chip
    S = 3e8
    # DP over 2 nodes, 1 rank per node, buckets make no difference without curves
    link = C.group_link(g, 2, 1, buckets=12)
    alpha = (8 + 6 * 2 * math.log2(2)) * 1e-6
    nic = chip.nic_Gbps / 8 * chip.nic_efficiency
    assert link.curves == ()
    assert C.all_reduce_s(S, link) == pytest.approx(alpha + S * 2 * 1 / 2 / (nic * 1e9), rel=1e-12)
    # TP 8 in a node
    tp = C.group_link(g, 8, 8)
    su = 300 * chip.scaleup_efficiency
    assert C.all_gather_s(S, tp) == pytest.approx((8 + 1 * 2 * 7) * 1e-6 + S * 7 / 8 / (su * 1e9), rel=1e-12)


def test_catalog_chips_without_links_keep_no_curves():
    for name in CAT.names("chips"):
        chip = CAT.chip(name)
        if "profiled" not in chip.id:
            assert chip.scaleup_curves is None and chip.nic_curves is None, name


# -- measured chips ---------------------------------------------------------------------------
def test_h200_profiled_tp_all_reduce_reads_the_measured_curve():
    cl, _ = CAT.cluster("h200-sxm-141g-profiled:1x2")
    g = cl.groups[0]
    c = g.chip.scaleup_curves.pick("all_reduce", 2, 2)
    assert c.n == 2 and c.points[0][0] == 1024 and c.points[-1][0] == 1 << 30
    S, bw = next(p for p in c.points if p[0] == 8388608)
    assert C.all_reduce_s(S, C.group_link(g, 2, 2)) == pytest.approx(S * 1.0 / (bw * 1e9), rel=1e-12)
    raw = json.loads((ROOT / "chips/measured/h200-sxm-141g-links.raw.json").read_text())
    (run,) = raw["collectives"]
    t = next(r["time_s"] for r in run["results"] if r["op"] == "all_reduce" and r["bytes"] == 8388608)
    assert bw == pytest.approx(8388608 / t / 1e9, rel=1e-3)     # busbw = algbw x 2(n-1)/n = algbw at n = 2


# -- loaders --------------------------------------------------------------------------------
def _chip_doc():
    return read_document(ROOT / "chips" / "a100-sxm4-40g.yaml")


def _curve_item(**kw):
    item = {"op": "p2p", "n": 2, "points": [[1024, 1.0], [1048576, 10.0]], "sources": ["GKW"]}
    item.update(kw)
    return item


@pytest.mark.parametrize("item, field, text", [
    (_curve_item(bogus=1), "measured.links.scaleup[0].bogus", "unknown key"),
    (_curve_item(sources=["NOPE"]), "measured.links.scaleup[0].sources", "unknown source 'NOPE'"),
    (_curve_item(points=[[2048, 1.0], [1024, 2.0]]), "measured.links.scaleup[0].points[1]", "increase, got 1024.0 after 2048.0"),
    (_curve_item(op="bcast"), "measured.links.scaleup[0].op", "'bcast'"),
    (_curve_item(metric="goodput"), "measured.links.scaleup[0].metric", "'goodput'"),
    ({k: v for k, v in _curve_item().items() if k != "sources"}, "measured.links.scaleup[0]", "sources"),
])
def test_chip_loader_errors_name_key_and_file(item, field, text):
    doc = _chip_doc()
    doc["measured"]["links"] = {"scaleup": [item]}
    with pytest.raises(InputError) as e:
        chip_from_doc(doc, "chips/x.yaml")
    assert e.value.source == "chips/x.yaml" and e.value.field.startswith(field) and text in str(e.value)


def test_chip_loader_unknown_domain_and_algbw():
    doc = _chip_doc()
    doc["measured"]["links"] = {"pcie": [_curve_item()]}
    with pytest.raises(InputError, match=r"chips/x.yaml: measured.links.pcie: unknown key"):
        chip_from_doc(doc, "chips/x.yaml")
    doc["measured"]["links"] = {"nic": [_curve_item(op="all_reduce", n=4, metric="algbw", estimated=True)]}
    chip = chip_from_doc(doc, "chips/x.yaml")
    (c,) = chip.nic_curves.curves
    assert c.points == ((1024.0, 1.5), (1048576.0, 15.0)) and c.estimated and c.sources == ("GKW",)


def _topo_doc():
    return yaml.safe_load(CLOUD.read_text())


def test_topology_loader_errors_name_key_and_file():
    d = _topo_doc()
    d["groups"][0]["links"]["nic"][0]["weird"] = 1
    with pytest.raises(InputError) as e:
        cluster_from_dict(d, "t.yaml", CAT.chip)
    assert e.value.source == "t.yaml" and e.value.field == "groups[0].links.nic[0].weird"
    d = _topo_doc()
    d["groups"][1]["links"]["nic"][0]["sources"] = ["GKW"]
    with pytest.raises(InputError, match=r"t.yaml: groups\[1\].links.nic\[0\].sources: unknown source 'GKW'"):
        cluster_from_dict(d, "t.yaml", CAT.chip)
    d = _topo_doc()
    d["groups"][0]["links"]["nic"][0]["per_node"] = 9
    with pytest.raises(InputError, match=r"groups\[0\].links.nic\[0\].per_node: must be an integer in \[1, n=2\]"):
        cluster_from_dict(d, "t.yaml", CAT.chip)


def test_bridge_curves_and_plan_round_trip():
    d = yaml.safe_load((ROOT / "topologies" / "mixed-a100-910b-128.yaml").read_text())
    d["sources"] = {"M": "a bridge measurement"}
    d["bridges"][0]["links"] = [{"op": "p2p", "n": 16, "per_node": 8, "points": [[1e6, 1.0], [1e8, 2.0]],
                                 "sources": ["M"]}]
    cl = cluster_from_dict(d, "m.yaml", CAT.chip)
    gpu, npu = cl.group("gpu"), cl.group("npu")
    assert C.p2p_s(1e8, path_link(cl, gpu, npu, 8)) == pytest.approx(1e8 / 2e9)
    # what plan files need to rebuild the curves (io/plans.py cluster_doc merges these)
    for cluster in (cl, _cloud()[0]):
        groups, bridges, cites = link_curve_extras(cluster)
        doc = {"name": cluster.name, "sources": cites,
               "groups": [{"name": g.name, "chip": g.chip_ref, "nodes": g.nodes, "devices_per_node": g.devices_per_node,
                           **({"scaleout_Gbps": g.scaleout_Gbps} if g.scaleout_Gbps else {}), **groups.get(g.name, {})}
                          for g in cluster.groups],
               "bridges": [{"groups": list(b.groups), "kind": b.kind, "GBps_per_node": b.GBps_per_node,
                            "latency_us": b.latency_us, **x} for b, x in zip(cluster.bridges, bridges, strict=True)]}
        back = cluster_from_dict(doc, "plan", CAT.chip, check_schema=False)
        assert [(g.scaleup_curves, g.nic_curves) for g in back.groups] == \
            [(g.scaleup_curves, g.nic_curves) for g in cluster.groups]
        assert [b.curves for b in back.bridges] == [b.curves for b in cluster.bridges]
    assert link_curve_extras(CAT.cluster("hetero-a100-v100")[0]) == ({}, [], {})


# -- profile writer -------------------------------------------------------------------------
def test_profile_sizes_worlds_and_curves():
    assert coll_sizes(False)[0] == 1024 and coll_sizes(False)[-1] == 1 << 30 and len(coll_sizes(False)) == 21
    assert len(coll_sizes(True)) == 11
    assert collective_worlds(4) == [2, 4] and collective_worlds(6) == [2, 4, 6] and collective_worlds(1) == []
    res = lambda op, w: [{"op": op, "bytes": b, "time_s": t} for b, t in ((1024, 2e-5), (1 << 30, 4e-3))]  # noqa: E731
    runs = [{"world": w, "dtype": "float32", "results": res("all_reduce", w) + res("sendrecv", w)} for w in (4, 2)]
    raw = {"device": {"name": "X", "count": 4}, "collectives": runs}
    assert [r["world"] for r in W.collective_runs(raw)] == [2, 4]
    curves = W.link_curves_doc(W.collective_runs(raw), ["PROFILE"])
    assert [(c["op"], c["n"]) for c in curves] == [("all_reduce", 2), ("p2p", 2), ("all_reduce", 4), ("p2p", 4)]
    ar4 = curves[2]["points"]
    assert ar4[1] == [1 << 30, pytest.approx((1 << 30) / 4e-3 / 1e9 * 1.5, rel=1e-3)]   # busbw = algbw x 2(n-1)/n
    base = read_document(ROOT / "tests" / "data" / "h200-sxm-141g.datasheet.yaml")
    doc = W.build_chip_doc(base, raw, "x-profiled")
    chip = chip_from_doc(doc, "x")
    assert {c.n for c in chip.scaleup_curves.curves} == {2, 4}
    assert chip.scaleup_curves.pick("p2p", 4, 4).points[0] == (1024.0, pytest.approx(1024 / 2e-5 / 1e9, rel=1e-3))
    assert "measured.links" not in W.dump_chip_yaml(doc) and "links:" in W.dump_chip_yaml(doc)
