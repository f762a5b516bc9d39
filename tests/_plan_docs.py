"""Hand-built plan documents (the plan-file form, only the fields exports read) and model shapes, shared by
the export tests (tests/test_export_*.py)."""

LLAMA3_8B = dict(name="llama3-8b", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn_hidden=14336,
                 vocab=128256, seq_len=8192, activation="swiglu", tie_embeddings=False, dropout=0.0)
LLAMA3_70B = dict(LLAMA3_8B, name="llama3-70b", layers=80, hidden=8192, heads=64, ffn_hidden=28672)
LLAMA3_405B = dict(LLAMA3_70B, name="llama3-405b", layers=126, hidden=16384, heads=128, ffn_hidden=53248)
QWEN3 = dict(name="qwen3-235b-a22b", layers=94, hidden=4096, heads=64, kv_heads=4, head_dim=128, ffn_hidden=12288,
             vocab=151936, seq_len=4096, activation="swiglu", tie_embeddings=False,
             moe=dict(experts=128, top_k=8, expert_ffn_hidden=1536, shared_experts=0, layer_freq=1,
                      first_dense_layers=0))


def plan_doc(model, runtime, *, tp=1, pp=1, dp=1, cp=1, ep=1, etp=1, zero=1, micro_batch=1, m=8, vpp=1,
             recompute="none", sp=None, counts=None, nodes=1, per_node=8, seq=8192, precision="bf16", chip=None,
             **extra):
    """A plan document for `runtime`: one pipeline shape, `counts` layers per stage (default even); `chip`
    (optional) is embedded as the group's chip document; `extra` goes into the strategy."""
    counts = counts or [model["layers"] // pp] * pp
    assert len(counts) == pp and sum(counts) == model["layers"]
    stages, start = [], 0
    for k, c in enumerate(counts):
        stages.append({"index": k, "group": "h100-sxm5-80g", "layers": [start, start + c], "tp": tp})
        start += c
    strategy = dict(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, zero=zero, micro_batch=micro_batch,
                    global_batch=dp * m * micro_batch, vpp=vpp, recompute=recompute,
                    sequence_parallel=tp > 1 if sp is None else sp, attention="flash", runtime=runtime, **extra)
    group = {"name": "h100-sxm5-80g", "nodes": nodes, "devices_per_node": per_node}
    if chip is not None:
        group["chip"] = chip
    return {
        "inputs": {"model": model,
                   "cluster": {"name": f"h100-sxm5-80g:{nodes}x{per_node}", "groups": [group]},
                   "job": {"global_batch": dp * m * micro_batch, "seq_len": seq, "precision": precision}},
        "strategy": strategy,
        "pipelines": [{"replicas": dp, "micro_batches": m, "stages": stages}],
        "estimate": {"step_time_s": 1.0, "mfu": 0.5},
    }
