"""Built-in topology files, the cluster shorthand, and bad topology inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from baige_plan.errors import InputError
from baige_plan.io.catalog import Catalog
from baige_plan.specs.topology import DEFAULT_BRIDGE_GBPS_PER_NODE

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = sorted((ROOT / "topologies").glob("*.yaml"))

# name: {group: (chip id, nodes, devices_per_node)}, bridged pairs
EXPECTED = {
    "dgx-a100-superpod": ({"gpu": ("a100-sxm4-80g", 140, 8)}, []),
    "dgx-h100-cluster": ({"gpu": ("h100-sxm5-80g", 128, 8)}, []),
    "baidu-xman4": ({"gpu": ("a100-sxm4-80g", 1, 8)}, []),
    "ascend-910b-cluster": ({"npu": ("ascend-910b", 64, 8)}, []),
    "mixed-a100-910b-128": ({"gpu": ("a100-sxm4-80g", 8, 8), "npu": ("ascend-910b", 8, 8)}, [{"gpu", "npu"}]),
    "mixed-3family-1024": ({"gpu": ("a100-sxm4-80g", 48, 8), "npu": ("ascend-910b", 48, 8),
                            "xpu": ("kunlun-p800", 32, 8)},
                           [{"gpu", "npu"}, {"gpu", "xpu"}, {"npu", "xpu"}]),
    "hetero-a100-v100": ({"a100": ("a100-sxm4-40g", 16, 8), "v100": ("v100-sxm2-32g", 16, 8)}, []),
    "hetero-h100-a100": ({"h100": ("h100-sxm5-80g", 16, 8), "a100": ("a100-sxm4-80g", 16, 8)}, []),
}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.create()


def test_expected_topologies_present():
    names = {p.stem for p in TOPOLOGIES}
    assert set(EXPECTED) <= names, f"missing: {sorted(set(EXPECTED) - names)}"


@pytest.mark.parametrize("path", TOPOLOGIES, ids=[p.stem for p in TOPOLOGIES])
def test_topology_loads_by_name(catalog, path):
    cluster, default_bridge = catalog.cluster(path.stem)
    assert not default_bridge
    assert cluster.name == path.stem
    raw = yaml.safe_load(path.read_text())
    assert raw["schema"] == "baige-plan/topology/v1"
    assert raw.get("notes"), "every built-in topology explains itself in notes"
    if path.stem in EXPECTED:
        groups, bridged = EXPECTED[path.stem]
        got = {g.name: (g.chip.id, g.nodes, g.devices_per_node) for g in cluster.groups}
        assert got == groups
        assert [set(b.groups) for b in cluster.bridges] == bridged
    # Bridges exactly where families differ (a same-family bridge would be a mistake in a file).
    for i, a in enumerate(cluster.groups):
        for b in cluster.groups[i + 1:]:
            assert (cluster.bridge(a.name, b.name) is not None) == (a.family != b.family), (a.name, b.name)


def test_device_counts(catalog):
    assert catalog.cluster("mixed-3family-1024")[0].devices == 1024
    assert catalog.cluster("mixed-a100-910b-128")[0].devices == 128
    assert catalog.cluster("dgx-a100-superpod")[0].devices == 1120
    assert catalog.cluster("baidu-xman4")[0].devices == 8


def test_mixed_bridge_values(catalog):
    c, _ = catalog.cluster("mixed-a100-910b-128")
    br = c.bridge("gpu", "npu")
    assert (br.kind, br.GBps_per_node, br.latency_us) == ("cpu-forwarding", 25.0, 30.0)
    assert c.is_heterogeneous and c.group("gpu").family != c.group("npu").family


def test_scaleout_overrides(catalog):
    c, _ = catalog.cluster("dgx-h100-cluster")
    assert c.group("gpu").nic_GBps == pytest.approx(50.0)
    c, _ = catalog.cluster("baidu-xman4")
    assert c.group("gpu").nic_GBps == pytest.approx(25.0)


def test_topology_loads_by_path(catalog):
    c, _ = catalog.cluster(str(ROOT / "topologies" / "baidu-xman4.yaml"))
    assert c.devices == 8


# -- shorthand ---------------------------------------------------------------------------------

def test_shorthand_two_families(catalog):
    c, default_bridge = catalog.cluster("a100-sxm4-80g:16x8+ascend-910b:16x8")
    assert default_bridge
    assert len(c.groups) == 2 and c.devices == 256
    assert [(g.chip.id, g.nodes, g.devices_per_node) for g in c.groups] == [
        ("a100-sxm4-80g", 16, 8), ("ascend-910b", 16, 8)]
    (br,) = c.bridges
    assert br.kind == "cpu-forwarding" and br.GBps_per_node == DEFAULT_BRIDGE_GBPS_PER_NODE
    assert set(br.groups) == {g.name for g in c.groups}


def test_shorthand_one_family(catalog):
    c, default_bridge = catalog.cluster("a100-sxm4-80g:4x8")
    assert not default_bridge and c.devices == 32 and c.bridges == ()
    c, default_bridge = catalog.cluster("a100-sxm4-80g:2x8+a100-sxm4-80g:3x4")
    assert not default_bridge and c.devices == 28 and len({g.name for g in c.groups}) == 2


@pytest.mark.parametrize("text", [
    "a100-sxm4-80g:16",
    "a100-sxm4-80g:16x",
    "a100-sxm4-80g:x8",
    "a100-sxm4-80g:16x8+",
    "a100-sxm4-80g:0x8",
    "a100-sxm4-80g:4x0",
    "a100-sxm4-80g:16*8",
    ":16x8",
])
def test_shorthand_malformed(catalog, text):
    with pytest.raises(InputError):
        catalog.cluster(text)


def test_shorthand_unknown_chip(catalog):
    with pytest.raises(InputError) as ei:
        catalog.cluster("tpu-v9:4x8")
    assert "unknown chip" in ei.value.reason and "tpu-v9" in ei.value.reason


def test_unknown_cluster_name(catalog):
    with pytest.raises(InputError) as ei:
        catalog.cluster("no-such-cluster")
    assert ei.value.source == "CLUSTER"


# -- bad topology files ------------------------------------------------------------------------

def _topo(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.yaml"
    p.write_text(text)
    return p


TWO_FAMILIES = """schema: baige-plan/topology/v1
name: t
groups:
  - {name: gpu, chip: a100-sxm4-80g, nodes: 2, devices_per_node: 8}
  - {name: npu, chip: ascend-910b, nodes: 2, devices_per_node: 8}
"""


def test_two_families_without_bridge(catalog, tmp_path):
    p = _topo(tmp_path, TWO_FAMILIES)
    with pytest.raises(InputError) as ei:
        catalog.cluster(str(p))
    assert ei.value.field == "bridges"
    assert ei.value.source == str(p)


def test_two_families_with_bridge(catalog, tmp_path):
    text = TWO_FAMILIES + "bridges:\n  - {groups: [gpu, npu], kind: cpu-forwarding, GBps_per_node: 25}\n"
    c, _ = catalog.cluster(str(_topo(tmp_path, text)))
    assert c.bridge("npu", "gpu").latency_us == 30.0


ONE = """schema: baige-plan/topology/v1
name: t
groups:
  - {name: gpu, chip: a100-sxm4-80g, nodes: 2, devices_per_node: 8}
"""


@pytest.mark.parametrize("text, field", [
    (ONE + "colour: red\n", "colour"),
    (ONE.replace("nodes: 2", "nodes: 0"), "groups[0].nodes"),
    (ONE.replace("nodes: 2", "nodes: two"), "groups[0].nodes"),
    (ONE.replace("devices_per_node: 8}", "devices_per_node: 8, fabric: x}"), "groups[0].fabric"),
    (ONE.replace("chip: a100-sxm4-80g", "chip: tpu-v9"), "groups[0].chip"),
    (ONE.replace("schema: baige-plan/topology/v1", "schema: baige-plan/topology/v0"), "schema"),
    ("schema: baige-plan/topology/v1\nname: t\ngroups: []\n", "groups"),
    (ONE + "  - {name: gpu, chip: a100-sxm4-80g, nodes: 1, devices_per_node: 8}\n", "groups[1].name"),
    (ONE + "bridges:\n  - {groups: [gpu, npu], kind: rdma, GBps_per_node: 25}\n", "bridges[0].groups"),
    (ONE.replace("devices_per_node: 8}", "devices_per_node: 8, scaleout_Gbps: -1}"), "groups[0].scaleout_Gbps"),
])
def test_bad_topology(catalog, tmp_path, text, field):
    p = _topo(tmp_path, text)
    with pytest.raises(InputError) as ei:
        catalog.cluster(str(p))
    assert ei.value.field == field, str(ei.value)
    assert ei.value.source == str(p)


def test_bad_bridge_kind(catalog, tmp_path):
    text = TWO_FAMILIES + "bridges:\n  - {groups: [gpu, npu], kind: carrier-pigeon, GBps_per_node: 25}\n"
    with pytest.raises(InputError) as ei:
        catalog.cluster(str(_topo(tmp_path, text)))
    assert ei.value.field == "bridges[0].kind"
