"""How much of an EP all-to-all Megatron-core's 1F1B overlap really hides (issue 16, MoE mechanism).

Megatron-core's `overlap_moe_expert_parallel_comm` runs one micro-batch's forward beside another's backward, layer by
layer, on two CUDA streams (models/common/model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run):
    comm stream: combine_bwd        | dispatch_fwd -> dispatch_bwd         | combine_fwd
    comp stream: pre_dispatch_fwd   | mlp_bwd -> mlp_fwd                   | pre_dispatch_bwd
with the data dependencies of the code. This replays that schedule with NCCL all_to_all_single for the four
all-to-alls and bf16 GEMMs for the compute phases, on `world` GPUs (torchrun --nproc_per_node N), and times:
  serial_s:  the same work one micro-batch after the other on one stream (forward layers, then backward layers);
  merged_s:  the two-stream schedule above;
  pieces:    each phase alone (pre_f, mlp_f, pre_b, mlp_b, one all-to-all), for the cost model's
             cost/moe.py a2a_overlap_pair_s, whose prediction for these pieces is printed beside the measurement.
Prints one JSON line per shape on rank 0 and writes them to --out.

    torchrun --standalone --nproc_per_node 4 benchmarks/real/a2a_overlap.py --out a2a_overlap_h200x4.raw.json
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
from gpu_timing import emit, events_s, write_rows

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


class Phases:
    """The compute phases of one MoE layer (GEMM chains) and its all-to-all buffers."""

    def __init__(self, tokens: int, hidden: int, ffn: int, a2a_mb: float, dt=torch.bfloat16) -> None:
        self.x = torch.randn(tokens, hidden, device="cuda", dtype=dt)
        self.w_pre = torch.randn(hidden, hidden * 3 // 2, device="cuda", dtype=dt)   # qkv + proj-sized
        self.w_up = torch.randn(hidden, ffn, device="cuda", dtype=dt)
        self.w_dn = torch.randn(ffn, hidden, device="cuda", dtype=dt)
        n = int(a2a_mb * 2**20 / 2)
        n -= n % dist.get_world_size()
        self.send = torch.randn(n, device="cuda", dtype=dt)
        self.recv = torch.empty_like(self.send)

    def pre(self, passes: int) -> None:
        for _ in range(passes):
            torch.matmul(self.x, self.w_pre)

    def mlp(self, passes: int) -> None:
        for _ in range(passes):
            h = torch.matmul(self.x, self.w_up)
            torch.matmul(h, self.w_dn)

    def a2a(self) -> None:
        dist.all_to_all_single(self.recv, self.send)


def serial(p: Phases, layers: int) -> None:
    for _ in range(layers):          # forward of one micro-batch
        p.pre(1)
        p.a2a()
        p.mlp(1)
        p.a2a()
    for _ in range(layers):          # backward of another
        p.a2a()
        p.mlp(2)
        p.a2a()
        p.pre(2)


def merged(p: Phases, layers: int, comm: torch.cuda.Stream) -> None:
    comp = torch.cuda.current_stream()
    ev = torch.cuda.Event
    f_ready, b_ready = ev(), ev()
    f_ready.record(comp)
    b_ready.record(comp)
    for _ in range(layers):
        cb, af, mb, df, db, mf, cf, ab = (ev() for _ in range(8))
        with torch.cuda.stream(comm):
            comm.wait_event(b_ready)
            p.a2a()                      # combine backward
            cb.record(comm)
        comp.wait_event(f_ready)
        p.pre(1)                         # pre-dispatch forward
        af.record(comp)
        comp.wait_event(cb)
        p.mlp(2)                         # experts backward
        mb.record(comp)
        with torch.cuda.stream(comm):
            comm.wait_event(af)
            p.a2a()                      # dispatch forward
            df.record(comm)
            comm.wait_event(mb)
            p.a2a()                      # dispatch backward
            db.record(comm)
        comp.wait_event(df)
        p.mlp(1)                         # experts forward
        mf.record(comp)
        with torch.cuda.stream(comm):
            comm.wait_event(mf)
            p.a2a()                      # combine forward
            cf.record(comm)
        comp.wait_event(db)
        p.pre(2)                         # pre-dispatch backward
        ab.record(comp)
        f_ready, b_ready = cf, ab
    comp.wait_stream(comm)


def _timings(p: Phases, layers: int, iters: int, comm: torch.cuda.Stream) -> tuple[dict, float, float]:
    """(each phase alone, the serial schedule, the merged schedule), seconds."""
    def t(fn) -> float:
        return events_s(fn, iters, barrier=True)

    pieces = {"pre_f": t(lambda: p.pre(1)), "mlp_f": t(lambda: p.mlp(1)), "pre_b": t(lambda: p.pre(2)),
              "mlp_b": t(lambda: p.mlp(2)), "a2a": t(p.a2a)}
    return pieces, t(lambda: serial(p, layers)), t(lambda: merged(p, layers, comm))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    try:    # the cost model's prediction for the measured pieces (needs the package's dependencies there)
        from baige_plan.cost.moe import A2A_OVERLAP_CONTENTION_SHARE, a2a_overlap_pair_s
        sm = A2A_OVERLAP_CONTENTION_SHARE
    except ImportError:
        a2a_overlap_pair_s = sm = None
    comm = torch.cuda.Stream()
    rows = []
    # (tokens, hidden, expert ffn, all-to-all MiB per rank): comm from ~0.2x to ~1.5x the compute it pairs with
    for tokens, hidden, ffn, mb in ((8192, 4096, 6144, 16), (8192, 4096, 6144, 64), (8192, 4096, 6144, 128),
                                    (8192, 4096, 6144, 256), (4096, 4096, 3072, 128), (16384, 2048, 3072, 64)):
        p = Phases(tokens, hidden, ffn, mb)
        for _ in range(3):
            serial(p, 2)
            merged(p, 2, comm)
        pieces, t_serial, t_merged = _timings(p, args.layers, args.iters, comm)
        args_ = (pieces["pre_f"], pieces["mlp_f"], pieces["pre_b"], pieces["mlp_b"], pieces["a2a"], args.layers)
        pred = a2a_overlap_pair_s(*args_, sm) if sm is not None else float("nan")
        pred0 = a2a_overlap_pair_s(*args_, 0.0) if sm is not None else float("nan")
        comp_s = args.layers * (pieces["pre_f"] + pieces["mlp_f"] + pieces["pre_b"] + pieces["mlp_b"])
        ideal_hidden = t_serial - pred0
        row = {"world": dist.get_world_size(), "device": torch.cuda.get_device_name(), "tokens": tokens,
               "hidden": hidden, "ffn": ffn, "a2a_mib": mb, "layers": args.layers,
               "pieces_ms": {k: round(v * 1e3, 4) for k, v in pieces.items()},
               "serial_ms": round(t_serial * 1e3, 3), "merged_ms": round(t_merged * 1e3, 3),
               "compute_only_ms": round(comp_s * 1e3, 3), "a2a_total_ms": round(4 * args.layers * pieces["a2a"] * 1e3, 3),
               "model_ms": round(pred * 1e3, 3), "model_no_contention_ms": round(pred0 * 1e3, 3),
               "hidden_share_of_ideal": round((t_serial - t_merged) / ideal_hidden, 4) if ideal_hidden > 0 else None}
        rows.append(row)
        emit(row)
    write_rows(rows, args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
