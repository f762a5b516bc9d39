"""benchmarks/real/harness.py: the Megatron-style tensor-parallel model computes the unsharded
model's loss and gradients (2 CPU processes over gloo, fp32). Skipped where torch is missing
(CI has no torch; run it where torch is installed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

REAL = Path(__file__).parents[1] / "benchmarks" / "real"
sys.path.insert(0, str(REAL))

import config as C  # noqa: E402
import harness as H  # noqa: E402

TINY = dict(layers=2, hidden=64, heads=4, ffn_hidden=256, vocab=96, seq_len=16)


def _worker(rank: int, size: int, init: str, recompute: bool, q) -> None:
    from types import SimpleNamespace

    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=size)
    try:
        m = C.build_model(None, name="tiny", **TINY)
        GPT = H._build_modules(torch, nn, F, dist)
        torch.manual_seed(0)
        full = GPT(m, m.layers, amp=False, recompute=recompute)
        x = torch.randint(0, m.vocab, (2, m.seq_len))
        y = torch.randint(0, m.vocab, (2, m.seq_len))
        loss_full = full.loss(full(x), y)
        loss_full.backward()
        tp = SimpleNamespace(group=dist.group.WORLD, size=size, rank=rank)
        part = GPT(m, m.layers, amp=False, recompute=recompute, tp=tp)
        part.load_state_dict(H.shard_state_dict(full.state_dict(), rank, size))
        loss_tp = part.loss(part(x), y)
        loss_tp.backward()
        want = H.shard_state_dict({k: p.grad for k, p in full.named_parameters()}, rank, size)
        got = {k: p.grad for k, p in part.named_parameters()}
        assert set(got) == set(want), (set(got) ^ set(want))
        worst = max(float((got[k] - want[k]).abs().max() / (want[k].abs().max() + 1e-12)) for k in got)
        q.put((rank, float(loss_full), float(loss_tp), worst, tuple(part.blocks[0].qkv.weight.shape)))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("recompute", [False, True])
def test_tensor_parallel_matches_unsharded(tmp_path, recompute):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    init = f"file://{tmp_path / 'pg'}"
    procs = [ctx.Process(target=_worker, args=(r, 2, init, recompute, q)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    res = sorted(q.get(timeout=5) for _ in procs)
    for rank, lf, lt, worst, qkv_shape in res:
        assert lt == pytest.approx(lf, rel=1e-5), (rank, lf, lt)
        assert worst < 1e-4, (rank, worst)
        assert qkv_shape == (3 * TINY["hidden"] // 2, TINY["hidden"])


def _run_worker(rank: int, size: int, init: str, strategy: str, q) -> None:
    import torch.distributed as dist

    if size > 1:
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=size)
    try:
        m = C.build_model(None, name="tiny", **TINY)
        extra = {"grad_accum": 2} if strategy == "pp" else {}
        cfg = C.build_run(m, strategy, world=size, micro_batch=2, recompute="full", warmup=1, steps=2, **extra)
        res = H.run_one(cfg, torch, dist, rank, rank, print, profile=True, device=torch.device("cpu"))
        q.put((rank, res))
    finally:
        if size > 1:
            dist.destroy_process_group()


@pytest.mark.parametrize("strategy, size", [("single", 1), ("ddp", 2), ("fsdp", 2), ("tp", 2), ("pp", 2)])
def test_run_one_on_cpu(tmp_path, strategy, size):
    """The training loop, the host timing and the profiled step, on CPU (no kernels there)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    init = f"file://{tmp_path / 'pg'}"
    procs = [ctx.Process(target=_run_worker, args=(r, size, init, strategy, q)) for r in range(size)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    res = dict(q.get(timeout=5) for _ in procs)[0]
    assert len(res["step_time_samples_s"]) == 2 and res["host_step_s"] > 0
    assert res["cpu_ops_per_step"] > 100 and res["cpu_top_ops_per_step"] <= res["cpu_ops_per_step"]
    assert res["kernels_per_step"] == 0 and res["profiled_step_s"] > 0
    if size > 1:
        assert len(res["per_rank"]["cpu_ops_per_step"]) == size
    row = C.make_row(C.build_run(C.build_model("gpt-125m")), res, {}, "cmd", "d")
    assert row["results"]["cpu_ops_per_step"] == int(res["cpu_ops_per_step"])
