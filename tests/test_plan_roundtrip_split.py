"""A plan file re-estimates to the step time it was written with (`evaluate --plan`, `check`), also when the layer
split is the runtime's own rather than Megatron's, and both estimates put pipeline neighbours on the same link
(2026-11-28: a DeepSpeed plan on gb200:2x36 split 32 layers 4,4,4,4,4,3,3,3,3 -- PipelineModule's balanced
partition -- was read back as a free-form split, costed by the heterogeneous estimate, whose p2p rule put stages 8
ranks apart on NVLink where the homogeneous one, with 36 devices per node, crosses the NIC: 1.299 s for 1.318 s)."""

import json

from typer.testing import CliRunner

from baige_plan.cli.app import app
from baige_plan.cost.estimate import homogeneous_pp_link
from baige_plan.cost.hetero import _p2p_links
from baige_plan.io.catalog import Catalog
from baige_plan.specs.pipeline import PipelineShape, ShapeKnobs, StageSpec
from baige_plan.specs.strategy import StrategySpec

runner = CliRunner()


def test_deepspeed_balanced_split_round_trips(tmp_path):
    out = tmp_path / "plan.yaml"
    r = runner.invoke(app, ["plan", "llama3-8b", "gb200:2x36", "--global-batch", "256", "--seq-len", "4096",
                            "--runtime", "deepspeed", "--tp", "1", "--pp", "9", "--dp", "8", "--format", "json",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    planned = json.loads(r.stdout)["plans"][0]
    counts = [b - a for a, b in (st["layers"] for st in planned["stages"])]
    assert counts == [4, 4, 4, 4, 4, 3, 3, 3, 3]       # DeepSpeed's balanced partition of 32 layers over 9
    ev = runner.invoke(app, ["evaluate", "--plan", str(out), "--format", "json"])
    assert ev.exit_code == 0, ev.output
    again = json.loads(ev.stdout)
    assert again["step_time_s"] == planned["step_time_s"]
    assert again["breakdown_s"] == planned["breakdown_s"]


def test_one_group_pipeline_links_agree_with_the_homogeneous_rule():
    cat = Catalog.create()
    for shorthand, tp, replicas in (("gb200:2x36", 1, 8), ("gb200:2x36", 2, 2), ("h100-sxm5-80g:4x8", 1, 2),
                                    ("h100-sxm5-80g:4x8", 2, 2), ("h100-sxm5-80g:4x8", 8, 1)):
        cl, _ = cat.cluster(shorthand)
        g = cl.groups[0]
        stages = tuple(StageSpec(g.name, (i, i + 1), tp) for i in range(3))
        sh = PipelineShape(replicas, 4, stages, ShapeKnobs())
        _prev, nxt = _p2p_links(cl, sh, 1)
        ref = homogeneous_pp_link(g, StrategySpec(tp=tp, pp=3, dp=replicas))
        # the same kind of link at the same rate: NVLink inside a node, the NIC when stage pairs do not tile it
        assert (nxt.crosses, nxt.busbw_GBps, nxt.alpha_s) == (ref.crosses, ref.busbw_GBps, ref.alpha_s), \
            (shorthand, tp, replicas, nxt, ref)
