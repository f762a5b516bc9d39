"""benchmarks/real/config.py: presets, batch arithmetic, invalid combinations (no torch)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

REAL = Path(__file__).parents[1] / "benchmarks" / "real"
sys.path.insert(0, str(REAL))

import config as C  # noqa: E402


def test_presets_are_gpt_shapes():
    m = C.build_model("gpt-350m")
    assert (m.layers, m.hidden, m.heads, m.ffn_hidden, m.vocab, m.seq_len) == (24, 1024, 16, 4096, 50304, 2048)
    assert C.build_model("gpt-1.3b").head_dim == 128
    assert C.build_model("gpt-125m").params() == pytest.approx(125.3e6, rel=1e-3)
    assert C.build_model("gpt-1.3b").params() == pytest.approx(1.3158e9, rel=1e-3)
    assert C.build_model("gpt-760m", seq_len=1024).seq_len == 1024


def test_global_batch_arithmetic():
    m = C.build_model("gpt-350m")
    r = C.build_run(m, "ddp", world=2, micro_batch=8, grad_accum=2)
    assert (r.dp, r.global_batch, r.zero) == (2, 32, 0)
    r = C.build_run(m, "fsdp", world=2, micro_batch=4, global_batch=32)
    assert (r.grad_accum, r.zero) == (4, 3)
    r = C.build_run(m, "tp", world=2, micro_batch=8)
    assert (r.tp, r.dp, r.global_batch) == (2, 1, 8)
    r = C.build_run(m, "pp", world=2, micro_batch=4, grad_accum=8)
    assert (r.pp, r.dp, r.global_batch, r.tie_embeddings) == (2, 1, 32, False)
    assert C.build_run(m).id == "h100_gpt350m_single_mb1_noac"


@pytest.mark.parametrize("kwargs, msg", [
    ({"strategy": "tp", "world": 3, "tp": 3}, "tp=3 does not divide heads=16"),
    ({"strategy": "tp", "world": 4, "tp": 2}, "tp=2 != world=4"),
    ({"strategy": "pp", "world": 2, "grad_accum": 1}, "at least pp=2 micro-batches"),
    ({"strategy": "single", "world": 2}, "one GPU"),
    ({"strategy": "ddp", "world": 1}, "world >= 2"),
    ({"strategy": "ddp", "world": 2, "tp": 2}, "data parallel only"),
    ({"strategy": "ddp", "world": 2, "micro_batch": 4, "global_batch": 12}, "not a multiple of micro_batch*dp"),
    ({"strategy": "ddp", "world": 2, "micro_batch": 4, "grad_accum": 2, "global_batch": 8}, "global_batch=8 !="),
    ({"strategy": "zero9"}, "unknown strategy"),
    ({"recompute": "selective"}, "recompute must be one of"),
    ({"micro_batch": 0}, "micro_batch must be a positive integer"),
])
def test_invalid_combinations(kwargs, msg):
    with pytest.raises(C.ConfigError, match=msg.replace("*", r"\*").replace("(", r"\(")):
        C.build_run(C.build_model("gpt-350m"), **kwargs)


def test_invalid_models():
    with pytest.raises(C.ConfigError, match="unknown preset"):
        C.build_model("gpt-7b")
    with pytest.raises(C.ConfigError, match="not divisible by heads"):
        C.build_model(None, layers=2, hidden=1000, heads=16)
    with pytest.raises(C.ConfigError, match="--heads"):
        C.build_model(None, layers=2, hidden=1024)
    with pytest.raises(C.ConfigError, match="pp=2 does not divide layers=3"):
        C.build_run(C.build_model(None, layers=3, hidden=512, heads=8), "pp", world=2, grad_accum=4)


def test_mapping_and_plan_files_parse():
    with pytest.raises(C.ConfigError, match="unknown keys: bogus"):
        C.from_mapping({"preset": "gpt-125m", "bogus": 1})
    for plan in sorted((REAL / "plans").glob("*.yaml")):
        cfgs = [C.from_mapping(e) for e in yaml.safe_load(plan.read_text())]
        assert cfgs and len({c.id for c in cfgs}) == len(cfgs)


def test_row_schema_and_append(tmp_path):
    cfg = C.build_run(C.build_model("gpt-350m"), "fsdp", world=2, micro_batch=8, recompute="full")
    env = {"gpu_model": "NVIDIA H200", "driver": "580.159.04", "torch": "2.11.0+cu130", "cuda": "13.0",
           "nccl": "2.28.9", "gpus_per_node": 2}
    row = C.make_row(cfg, {"step_time_samples_s": [0.3, 0.1, 0.2], "peak_memory_gib": 10.0,
                           "reserved_memory_gib": 12.0}, env, "cmd", "2026-11-26")
    assert row["id"] == "h200_gpt350m_fsdp2_mb8_ac"
    assert row["hardware"]["chip"] == "h200-sxm-141g"
    p = row["parallel"]
    assert (p["zero"], p["recompute"], p["global_batch_seqs"], p["dp"]) == (3, "full", 16, 2)
    assert row["results"]["step_time_s"] == 0.2
    assert row["results"]["tokens_per_s_per_gpu"] == pytest.approx(16 * 2048 / 0.2 / 2, abs=0.1)
    out = tmp_path / "runs.yaml"
    C.append_row(out, row)
    C.append_row(out, row)                         # same id replaces
    doc = yaml.safe_load(out.read_text())
    assert doc["schema_version"] == 1 and len(doc["rows"]) == 1


def test_committed_runs_file():
    doc = yaml.safe_load((REAL / "runs_h200.yaml").read_text())
    rows = doc["rows"]
    assert len(rows) >= 8
    strategies = {r["parallel"]["framework"].split()[2] for r in rows}
    assert {"DDP", "FSDP2", "DTensor", "pipelining", "single"} <= strategies
    for r in rows:
        res = r["results"]
        assert res["step_time_s"] > 0 and res["peak_memory_gib"] > 0
        assert r["parallel"]["global_batch_seqs"] == (r["parallel"]["micro_batch"] * r["parallel"]["grad_accum"]
                                                      * r["parallel"]["dp"])
