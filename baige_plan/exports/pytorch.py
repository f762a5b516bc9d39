"""pytorch: plan -> launch files (export). Its execution semantics, the RuntimeSpec the cost model and the
search read, are in baige_plan/specs/runtimes/pytorch.py."""

from __future__ import annotations

from baige_plan.exports._common import Export


def export(doc: dict) -> Export:
    from baige_plan.errors import SpecError
    raise SpecError("--to", "pytorch is the benchmark harness's runtime; it has no launch export")
