"""Heterogeneous placement: every used device once, TP blocks inside one node of their group."""

from baige_plan.io.catalog import Catalog
from baige_plan.search.hetero_placement import hetero_placement
from baige_plan.specs.pipeline import PipelineShape, PipelinesSpec, StageSpec


def test_mixed_tp_blocks_stay_in_nodes():
    cl, _ = Catalog.create().cluster("mixed-a100-910b-128")
    p = PipelinesSpec((
        PipelineShape(8, 16, (StageSpec("gpu", (0, 20), 4), StageSpec("gpu", (20, 40), 2), StageSpec("npu", (40, 80), 8))),
    ))
    slots = hetero_placement(p, cl)
    assert [s.rank for s in slots] == list(range(8 * (4 + 2 + 8)))
    seen = {(s.group, s.node, s.device) for s in slots}
    assert len(seen) == len(slots)                           # no device twice
    groups = {}
    for s in slots:
        groups.setdefault((s.pipeline, s.stage, s.replica), []).append(s)
    for (j, i, _r), members in groups.items():
        tp = p.shapes[j].stages[i].tp
        assert sorted(m.tp_rank for m in members) == list(range(tp))
        assert len({(m.group, m.node) for m in members}) == 1   # one node per TP group
