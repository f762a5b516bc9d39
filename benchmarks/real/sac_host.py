"""Host time of torchtitan 0.2.2's activation-checkpointing modes, per transformer layer (one GPU, no
distribution): the torchtitan Llama model itself (torchtitan.models.llama3 Transformer) wrapped by torchtitan's own
`apply_ac` with the llama3 op-SAC save list, at sizes where the device work is negligible, so a forward + backward
takes the host's dispatch time. Why: on 2x H200, torchtitan FSDP plans with `--activation_checkpoint.mode selective`
(op-level SAC) at micro-batch 1 ran as slowly as full recomputation (Llama 2 7B dp2: 1.042 s vs 1.055 s a step of 2
micro-batches; none 0.843 s), where the cost model charged op-SAC's device work only.

  python benchmarks/real/sac_host.py [--layers 2,6] [--iters 30] > sac_host.json

Per mode (none, full, selective op) and layer count: the median wall time of a forward + backward after warm-up
(torch.cuda.synchronize each iteration) and `aten_ops`, the top-level aten ops torch.profiler recorded on one
iteration (the forward's: autograd's backward ops nest under its nodes, so this is not the whole count; the wall
time is the measurement). The per-layer figures are the difference between the two layer
counts, so the embedding, loss and output head drop out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def build(layers: int, mode: str):
    from torchtitan.config.job_config import ActivationCheckpoint
    from torchtitan.distributed.activation_checkpoint import apply_ac
    from torchtitan.models.llama3.infra.parallelize import _op_sac_save_list
    from torchtitan.models.llama3.model.args import TransformerModelArgs
    from torchtitan.models.llama3.model.model import Transformer

    args = TransformerModelArgs(dim=256, n_layers=layers, n_heads=4, n_kv_heads=4, vocab_size=1024, max_seq_len=256)
    with torch.device("cuda"):
        m = Transformer(args)
        with torch.no_grad():       # as torchtitan's train.py initialises (its in-place truncated normal)
            m.init_weights()
    for p in m.parameters():        # bf16 weights as FSDP2's param_dtype computes; buffers (complex RoPE freqs) stay
        p.data = p.data.to(torch.bfloat16)
    if mode != "none":
        apply_ac(m, ActivationCheckpoint(mode=mode, selective_ac_option="op"), op_sac_save_list=_op_sac_save_list)
    return m


def step(m, tok):
    out = m(tok)
    out.float().sum().backward()


def measure(layers: int, mode: str, iters: int) -> dict:
    m = build(layers, mode)
    tok = torch.randint(0, 1024, (1, 64), device="cuda")
    for _ in range(5):
        step(m, tok)
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step(m, tok)
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step(m, tok)
        torch.cuda.synchronize()
    ops = sum(1 for e in prof.events() if e.name.startswith("aten::") and e.cpu_parent is None)
    return {"layers": layers, "mode": mode, "median_s": statistics.median(ts), "min_s": min(ts), "aten_ops": ops}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="2,6")
    ap.add_argument("--iters", type=int, default=30)
    a = ap.parse_args()
    ls = [int(x) for x in a.layers.split(",")]
    rows = [measure(n, mode, a.iters) for mode in ("none", "full", "selective") for n in ls]
    lo, hi = ls[0], ls[-1]
    per_layer = {}
    for mode in ("none", "full", "selective"):
        r = {x["layers"]: x for x in rows if x["mode"] == mode}
        per_layer[mode] = {"s": (r[hi]["median_s"] - r[lo]["median_s"]) / (hi - lo),
                           "aten_ops": (r[hi]["aten_ops"] - r[lo]["aten_ops"]) / (hi - lo)}
    print(json.dumps({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "rows": rows,
                      "per_layer": per_layer}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
