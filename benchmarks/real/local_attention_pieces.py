"""Device time of Megatron-core's unfused local attention core (megatron/core/transformer/dot_product_attention.py
DotProductAttention.forward with core/fusions/fused_softmax.py forward_torch_softmax, 16-bit softmax: the
--transformer-impl local path without the compiled softmax kernel) against torch SDPA, forward and forward +
backward, piece by piece, on one GPU (torch only). What specs/runtimes/megatron_local.py costs its standard attention from.

  python benchmarks/real/local_attention_pieces.py --out FILE.json [--b 4 --heads 32 --seq 4096 --head-dim 64]"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    import torch
    import torch.nn.functional as F

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--b", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    b, n, s, d = a.b, a.heads, a.seq, a.head_dim
    dev, dt = "cuda", torch.bfloat16
    q, k, v = (torch.randn(s, b, n, d, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
    mask = ~torch.tril(torch.ones(s, s, dtype=torch.bool, device=dev)).view(1, 1, s, s).expand(b, 1, s, s).contiguous()
    buf = torch.empty(b * n, s, s, device=dev, dtype=dt)
    scale = d ** -0.5

    def scores(qq, kk):
        return torch.baddbmm(buf, qq.reshape(s, b * n, d).transpose(0, 1),
                             kk.reshape(s, b * n, d).transpose(0, 1).transpose(1, 2), beta=0.0, alpha=scale).view(b, n, s, s)

    def local(qq, kk, vv):
        p = torch.softmax(scores(qq, kk).masked_fill_(mask, -10000.0), dim=-1)
        ctx = torch.bmm(p.view(b * n, s, s), vv.reshape(s, b * n, d).transpose(0, 1))
        return ctx.view(b, n, s, d).permute(2, 0, 1, 3).contiguous().view(s, b, n * d)

    def sdpa(qq, kk, vv):
        o = F.scaled_dot_product_attention(*(t.permute(1, 2, 0, 3) for t in (qq, kk, vv)), is_causal=True, scale=scale)
        return o.permute(2, 0, 1, 3).reshape(s, b, n * d)

    def timed(fn, reps=a.reps):
        for _ in range(2):
            fn()
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            fn()
        e1.record()
        torch.cuda.synchronize()
        return e0.elapsed_time(e1) / reps / 1e3

    g = torch.randn(s, b, n * d, device=dev, dtype=dt)
    sc = scores(q, k).detach().clone()
    res = {"shape": {"b": b, "heads": n, "seq": s, "head_dim": d}, "device": torch.cuda.get_device_name(),
           "torch": torch.__version__, "scores": b * n * s * s}
    with torch.no_grad():
        res["baddbmm_s"] = timed(lambda: scores(q, k))
        res["masked_fill_s"] = timed(lambda: sc.masked_fill_(mask, -10000.0))
        res["softmax_s"] = timed(lambda: torch.softmax(sc, dim=-1))
        res["bmm_pv_s"] = timed(lambda: torch.bmm(sc.view(b * n, s, s), v.reshape(s, b * n, d).transpose(0, 1)))
        res["local_fwd_s"] = timed(lambda: local(q, k, v))
        res["sdpa_fwd_s"] = timed(lambda: sdpa(q, k, v))
    res["local_fwd_bwd_s"] = timed(lambda: local(q, k, v).backward(g))
    res["sdpa_fwd_bwd_s"] = timed(lambda: sdpa(q, k, v).backward(g))
    big = torch.empty(b * n * s * s, device=dev, dtype=dt)
    res["copy_GBps"] = 2 * big.numel() * 2 / timed(lambda: big.clone()) / 1e9
    json.dump(res, open(a.out, "w"), indent=1)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
