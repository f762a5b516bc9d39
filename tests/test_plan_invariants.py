"""Properties every `plan` result keeps (tests/fuzz/invariants.py: breakdown adds up, step in band, no duplicate rows,
cp across nodes costs, `evaluate --plan` reproduces the file, a pinned search never beats the unpinned fastest on
one group), on a fixed sample of models, clusters (one group and several) and runtimes. The 2026-11-28 audits found
five breaks of them, each fixed with its own test: the heterogeneous breakdown without cp_comm, `--cp 1` not reaching
a group's own search, the host time outside the breakdown, a DeepSpeed split read back as a free-form one, an
internal error when a mixed cluster had no template."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent / "fuzz"))

from invariants import plan_violations  # noqa: E402

pytestmark = pytest.mark.slow
RUN = CliRunner()
PINS = [["--tp", "8"], ["--recompute", "none"], ["--micro-batch", "1"], ["--pp", "4"]]

CASES = [
    ("llama3-8b", "h100-sxm5-80g:4x8", 256, 8192, None),
    ("llama3-70b", "h200-sxm-141g:8x8", 512, 4096, "torchtitan"),
    ("gpt3-175b", "mi300x:4x8", 1024, 4096, "deepspeed"),
    ("mixtral-8x7b", "h100-sxm5-80g:4x8", 64, 2048, "torchtitan"),
    ("llama3-8b", "gb200:2x36", 256, 4096, "deepspeed"),
    ("llama3-8b", "a100-sxm4-80g:2x8+h100-sxm5-80g:2x8", 32, 65536, None),
    ("llama3-70b", "a100-sxm4-80g:8x8+ascend-910b:8x8", 512, 4096, None),
    ("llama2-7b", "a100-sxm4-80g:16x8", 512, 4096, "paddle"),
    # two groups that cannot hold the model alone: --tp 4 was 18 % faster than the search (2026-11-29)
    ("llama3-70b", "a100-sxm4-40g:4x8+h100-sxm5-80g:2x8", 128, 4096, None),
]


@pytest.mark.parametrize("model,cluster,gb,seq,runtime", CASES)
def test_plan_properties(model, cluster, gb, seq, runtime, tmp_path):
    args = ["plan", model, cluster, "--global-batch", str(gb), "--seq-len", str(seq)] + \
        (["--runtime", runtime] if runtime else [])
    assert plan_violations(RUN, args, cluster, tmp_path / "plan.yaml", 16, lambda _s0: PINS, must_plan=True) == []
