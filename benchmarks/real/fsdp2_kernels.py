"""FSDP2's per-parameter kernels per micro-batch, from profiled torchtitan 0.2.2 steps (issue 16): the heaviest
kernels of one profiled step per plan (trace_top.py rows, rank 0) of plans that differ only in micro-batch count or
ZeRO stage, so each difference is what one more micro-batch (or one more all-gather per micro-batch) adds.

FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py) per unit and micro-batch: foreach_all_gather
copies the local shards in (a multi_tensor_apply _foreach_copy_), all-gathers, and foreach_all_gather_copy_out
splits the result into the parameters (split_with_sizes_copy); foreach_reduce chunk_cat's the bf16 gradients into
the fp32 reduce buffer (chunk_cat_cuda_kernel<float, BFloat16>), reduce-scatters, and from the second micro-batch
adds the result into the sharded fp32 gradient (CUDAFunctor_add<float>). ZeRO-2 (reshard_after_forward=False)
all-gathers once per micro-batch, ZeRO-3 twice (forward and backward).

    python benchmarks/real/fsdp2_kernels.py benchmarks/real/raw_fsdp2_kernels_h200x4/traces_top_profiled.jsonl

Prints, per pair and kernel family, the added milliseconds, picoseconds per parameter and the bytes per parameter
they are worth at the H200's achievable 4.30 TB/s (the rate the cost model charges memory-bound kernels at)."""

from __future__ import annotations

import json
import sys

HBM_BPS = 4.30e12
# total parameters (cost/params.py total_params of the plans' models: benchmarks/real/catalog/models/olmoe-1b-7b.yaml,
# the catalog llama3-8b)
PARAMS = {"olmoe": 6.919e9, "llama3-8b": 8.030e9}
# kernel family: (name substring, what it scales with: "mb" per micro-batch, "gather" per all-gather)
FAMILIES = {"chunk_cat (reduce copy-in)": ("chunk_cat_cuda_kernel<float", "mb"),
            "split_with_sizes_copy (all-gather copy-out)": ("split_with_sizes_copy_out", "gather"),
            "multi_tensor_apply (all-gather copy-in, foreach)": ("multi_tensor_apply_kernel", "gather"),
            "add<float> (fp32 shard accumulation)": ("CUDAFunctor_add<float>", "mb")}
# (base plan, plan with more FSDP work, model, extra micro-batches, extra all-gathers per step)
PAIRS = [("02_olmoe", "03_olmoe", "olmoe", 1, 2),            # zero3 mb4 -> mb2: one more micro-batch, two gathers
         ("05_llama3", "07_llama3", "llama3-8b", 2, 2),      # zero2 mb2 -> mb1: two more micro-batches, one each
         ("05_llama3", "06_llama3", "llama3-8b", 0, 2)]      # zero2 -> zero3 at mb2: one more gather per micro-batch


def load(path: str) -> dict[str, dict[str, float]]:
    """Rank 0's kernel milliseconds per family, by plan id."""
    out: dict[str, dict[str, float]] = {}
    for line in open(path):
        r = json.loads(line)
        if r["id"].endswith("/rank0"):
            out[r["id"].split("/")[0]] = {name: sum(ms for k, _n, ms in r["kernels"] if pat in k)
                                          for name, (pat, _per) in FAMILIES.items()}
    return out


def main() -> None:
    rows = load(sys.argv[1])
    for base, more, model, mbs, gathers in PAIRS:
        a = next(v for k, v in rows.items() if k.startswith(base))
        b = next(v for k, v in rows.items() if k.startswith(more))
        p = PARAMS[model]
        print(f"{base} -> {more}: +{mbs} micro-batch(es), +{gathers} all-gather(s) per step ({p / 1e9:.2f} B params)")
        for name, (_pat, per) in FAMILIES.items():
            d_ms = b[name] - a[name]
            n = mbs if per == "mb" else gathers
            if n == 0:
                print(f"  {name:50s} {d_ms:+8.2f} ms")
                continue
            ps = d_ms * 1e-3 / n / p * 1e12
            print(f"  {name:50s} {d_ms:+8.2f} ms / {n} = {ps:5.2f} ps per param = {ps * 1e-12 * HBM_BPS:5.1f} B at "
                  "4.30 TB/s")


if __name__ == "__main__":
    main()
