"""Properties every `plan` result keeps, on a fixed sample of models, clusters (one group and several) and runtimes
(an audit of 200+ random plans on 2026-11-28 found four breaks of them, each fixed with its own test: the
heterogeneous breakdown without cp_comm, `--cp 1` not reaching a group's own search, the host time outside the
breakdown, a DeepSpeed split read back as a free-form one). Each property is checked against an independent
computation, not the code's own output:
  - the breakdown adds up to the step time (SPEC §3: every part of the step is stated);
  - the step time lies inside its band, and no two rows share time and memory;
  - context parallelism across nodes costs something (cp_comm > 0 when tp x cp exceeds a node);
  - `evaluate --plan` of the written file gives the step time and breakdown the plan was written with;
  - on one chip group the search is exact: pinning a knob never finds a faster plan than the unpinned search's
    fastest (the min over its --top 16; the first shown may be a simpler tie)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from baige_plan.cli.app import app

pytestmark = pytest.mark.slow
RUN = CliRunner()

CASES = [
    ("llama3-8b", "h100-sxm5-80g:4x8", 256, 8192, None),
    ("llama3-70b", "h200-sxm-141g:8x8", 512, 4096, "torchtitan"),
    ("gpt3-175b", "mi300x:4x8", 1024, 4096, "deepspeed"),
    ("mixtral-8x7b", "h100-sxm5-80g:4x8", 64, 2048, "torchtitan"),
    ("llama3-8b", "gb200:2x36", 256, 4096, "deepspeed"),
    ("llama3-8b", "a100-sxm4-80g:2x8+h100-sxm5-80g:2x8", 32, 65536, None),
    ("llama3-70b", "a100-sxm4-80g:8x8+ascend-910b:8x8", 512, 4096, None),
    ("llama2-7b", "a100-sxm4-80g:16x8", 512, 4096, "paddle"),
]


def _nodes(cluster: str) -> int | None:
    """Devices per node of a one-group shorthand (None for several groups)."""
    return None if "+" in cluster else int(cluster.split(":")[1].split("x")[1])


@pytest.mark.parametrize("model,cluster,gb,seq,runtime", CASES)
def test_plan_properties(model, cluster, gb, seq, runtime, tmp_path):
    out = tmp_path / "plan.yaml"
    args = ["plan", model, cluster, "--global-batch", str(gb), "--seq-len", str(seq), "--top", "16"] + \
        (["--runtime", runtime] if runtime else [])
    r = RUN.invoke(app, args + ["--format", "json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    plans = json.loads(r.stdout)["plans"]
    dpn = _nodes(cluster)
    seen = set()
    for p in plans:
        b, st = p["breakdown_s"], p["step_time_s"]
        assert abs(sum(b.values()) - st) <= 2e-4 * st + 1e-5, (p["strategy"], b, st)
        lo, hi = p["step_time_band_s"]
        assert lo <= st <= hi
        key = (st, p["peak_memory_gib"])
        assert key not in seen
        seen.add(key)
        s = p["strategy"]
        if dpn is not None and s["cp"] > 1 and s["tp"] * s["cp"] > dpn:
            assert b["cp_comm"] > 0, s
    # the plan file re-estimates to what was written (the first plan shown)
    ev = RUN.invoke(app, ["evaluate", "--plan", str(out), "--format", "json"])
    assert ev.exit_code == 0, ev.output
    again = json.loads(ev.stdout)
    assert again["step_time_s"] == plans[0]["step_time_s"]
    assert again["breakdown_s"] == plans[0]["breakdown_s"]
    if dpn is None:
        return
    fastest = min(p["step_time_s"] for p in plans)
    for pin in (["--tp", "8"], ["--recompute", "none"], ["--micro-batch", "1"], ["--pp", "4"]):
        rp = RUN.invoke(app, args + pin + ["--format", "json"])
        if rp.exit_code != 0:
            assert rp.exit_code in (1, 2), rp.output      # no plan with that pin, or the pin refused: said so
            continue
        assert min(p["step_time_s"] for p in json.loads(rp.stdout)["plans"]) >= fastest * (1 - 1e-9), pin
