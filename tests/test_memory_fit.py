"""Memory terms of issue "configurations that ran fit at 100%": fp8 primary weights, recipe optimizer state and
gradient dtype, and what of the caching allocator's slack counts against capacity (docs/COST_MODEL.md "Memory
model"). Every expected number is derived by hand in the comment beside it."""

from pathlib import Path

import pytest

from baige_plan.cost import memory as M
from baige_plan.cost.estimate import estimate
from baige_plan.io.catalog import Catalog
from baige_plan.io.runs import load_runs
from baige_plan.specs.job import JobSpec
from baige_plan.specs.runtimes import megatron, torchtitan
from baige_plan.specs.strategy import StrategySpec
from baige_plan.specs.topology import ClusterSpec, GroupSpec

GIB = 2**30
CAT = Catalog.create()
H100 = CAT.chip("h100-sxm5-80g")
LLAMA3_8B = CAT.model("llama3-8b")
# Llama-3-8B parameters by hand (cost/params.py convention: two norms of weight + bias per layer, 4h, no final
# norm): q, k, v, o = 4096 x (4096 + 2 x 1024) + 4096 x 4096, SwiGLU MLP 3 x 4096 x 14336, norms 4 x 4096:
# 25,165,824 + 16,777,216 + 176,160,768 + 16,384 = 218,120,192
LAYER_P = 218_120_192
LAYERS_P = 32 * LAYER_P                       # 6,979,846,144
EMB_P = 2 * 128256 * 4096                     # untied embedding + output layer: 1,050,673,152
TOTAL_P = LAYERS_P + EMB_P                    # 8,030,519,296


def approx(x):
    return pytest.approx(x, rel=1e-9)


def _h100(n):
    return ClusterSpec(name="h", groups=(GroupSpec(name="g", chip=H100, nodes=max(1, n // 8),
                                                   devices_per_node=min(8, n)),))


def test_fp8_layer_weight_bytes():
    # bf16 primary weights: TE's cached fp8 weight (1 B) + transpose (1 B) on top of the bf16 weight
    assert M.fp8_layer_weight_bytes(megatron.MEMORY, primary=False) == 2
    # fp8 primary weights (--fp8-param-gather): fp8 data 1 + transpose 1 replace the bf16 2: +0
    assert M.fp8_layer_weight_bytes(megatron.MEMORY, primary=True) == 0
    # a runtime without the mode (torchtitan: no TE fp8 weights, fp8_param_bytes 0) keeps its own figure
    assert M.fp8_layer_weight_bytes(torchtitan.MEMORY, primary=True) == torchtitan.MEMORY.fp8_weight_cache_bytes


def test_optimizer_bytes_override():
    # a 16-bit remainder master (2) + Adam m, v (8) = 10 B, sharded over d = 8: 1.25; grads and weights unchanged
    assert M.state_bytes(megatron.MEMORY, "bf16", 1, 8, 10) == approx((2, 4, 1.25, 0))
    # the runtime's own 12 B without an override
    assert M.state_bytes(megatron.MEMORY, "bf16", 1, 8) == approx((2, 4, 1.5, 0))


def test_nemo_llama3_8b_cp2_fp8_states_by_hand():
    """NeMo 24.07 Llama 3 8B fp8, tp1 cp2 dp4 (the user's 95 GiB row): bf16 weights 2 B + TE fp8 cache 2 B of the
    layers, bf16 grads (grad_sync_dtype bf16) 2 B, apex DistributedFusedAdam with a remainder master 10 B / (dp x cp
    = 8)."""
    s = StrategySpec(tp=1, pp=1, dp=4, cp=2, zero=1, micro_batch=1, recompute="none", runtime="megatron",
                     grad_reduce_bf16=True, optimizer_bytes_per_param=10)
    e = estimate(LLAMA3_8B, _h100(8), JobSpec(128, 8192, "fp8"), s)
    st = e.stages[0]
    assert st.dense_params == TOTAL_P
    assert st.weights_gib * GIB == approx(2 * TOTAL_P + 2 * LAYERS_P)         # 27.96 GiB
    assert st.grads_gib * GIB == approx(2 * TOTAL_P)                          # 14.96 GiB
    assert st.optimizer_gib * GIB == approx(10 / 8 * TOTAL_P)                 # 9.35 GiB (the step copy 4/8 B
    #                                                                           is smaller than the activations)
    # fp8 primary weights: the layers' bf16 copy and cache go, fp8 data + transpose come: 2 B less per layer param
    e2 = estimate(LLAMA3_8B, _h100(8), JobSpec(128, 8192, "fp8"), s.with_(fp8_param_gather=True))
    assert (st.weights_gib - e2.stages[0].weights_gib) * GIB == approx(2 * LAYERS_P)   # 13.0 GiB


def test_what_counts_against_capacity():
    """other = 1 % of allocated (unreclaimable) + context + NCCL (2 communicators: CP, dp x cp);
    the reserved peak adds the rest of the 4.35 % slack (14.9 % with full recompute), which PyTorch frees before
    reporting out of memory."""
    s = StrategySpec(tp=1, pp=1, dp=4, cp=2, zero=1, micro_batch=1, recompute="none", runtime="megatron")
    e = estimate(LLAMA3_8B, _h100(8), JobSpec(128, 8192, "bf16"), s)
    st = e.stages[0]
    a = st.allocated_gib
    outside = 0.743 + 0.822 + 0.475                                  # context + first + one more communicator
    assert st.outside_gib == approx(outside)
    assert st.other_gib == approx(0.01 * a + outside)
    assert e.peak_memory_gib == approx(a * 1.01 + outside)
    assert e.reserved_peak_gib == approx(a * 1.0435 + outside)
    assert e.fits == (e.peak_memory_gib <= e.capacity_gib)
    f = estimate(LLAMA3_8B, _h100(8), JobSpec(128, 8192, "bf16"), s.with_(recompute="full"))
    af = f.stages[0].allocated_gib
    assert f.peak_memory_gib == approx(af * 1.01 + outside)
    assert f.reserved_peak_gib == approx(af * 1.149 + outside)


def _rows(tmp_path: Path, framework: str, precision: str, extra: str = "") -> StrategySpec:
    doc = f"""schema_version: 1
rows:
- id: r
  model: {{name: Llama-3-8B, layers: 32, hidden: 4096, heads: 32, kv_heads: 8, ffn_hidden: 14336, vocab: 128256,
          seq_len: 8192, activation: swiglu, tie_embeddings: false}}
  hardware: {{chip: h100-sxm5-80g, num_gpus: 8, gpus_per_node: 8}}
  parallel: {{tp: 1, pp: 1, dp: 4, cp: 2, micro_batch: 1, global_batch_seqs: 128, recompute: none,
             zero_or_sharding: 'not stated', precision: '{precision}', framework: '{framework}'{extra}}}
  results: {{step_time_s: 1.0}}
"""
    p = tmp_path / "r.yaml"
    p.write_text(doc)
    return load_runs(p, CAT)[0].strategy


def test_recipe_defaults_per_release(tmp_path):
    # Megatron-Bridge / NeMo 25.11 fp8: bf16 grads, fp8 primary weights, the runtime's 12 B optimizer
    s = _rows(tmp_path, "NeMo (Megatron-Bridge / Megatron-Core), NeMo 25.11", "fp8 (FP8-CS, bf16 elsewhere)")
    assert (s.grad_reduce_bf16, s.fp8_param_gather, s.optimizer_bytes_per_param) == (True, True, 0.0)
    # NeMo 25.11 bf16: precision-aware optimizer with a remainder master: 10 B
    s = _rows(tmp_path, "NeMo (Megatron-Bridge / Megatron-Core), NeMo 25.11", "bf16")
    assert (s.grad_reduce_bf16, s.fp8_param_gather, s.optimizer_bytes_per_param) == (True, False, 10.0)
    # NeMo 24.12 fp8 (the v2.2.0 performance scripts' layouts, which set grad_reduce_in_fp32 False for fp8): fp8
    # primary weights, bf16 grads; bf16 keeps the v2.1.0 recipes' fp32 grads
    s = _rows(tmp_path, "NeMo 24.12 (NeMo 2.0 recipes)", "fp8")
    assert (s.grad_reduce_bf16, s.fp8_param_gather, s.optimizer_bytes_per_param) == (True, True, 0.0)
    s = _rows(tmp_path, "NeMo 24.12 (NeMo 2.0 recipes)", "bf16")
    assert (s.grad_reduce_bf16, s.fp8_param_gather, s.optimizer_bytes_per_param) == (False, False, 0.0)
    # NeMo 24.07 launcher (NeMo 1, apex DistributedFusedAdam): bf16 weights + fp8 cache, remainder master 10 B
    s = _rows(tmp_path, "NeMo (Megatron-Core), NeMo 24.07", "fp8")
    assert (s.grad_reduce_bf16, s.fp8_param_gather, s.optimizer_bytes_per_param) == (False, False, 10.0)
    # NeMo 1 with model.fp8_params=True: fp8 primary weights and a full fp32 master (store_params): 12 B
    s = _rows(tmp_path, "NeMo 24.09 container (NeMo 1.0 launcher path)", "fp8 (model.fp8=True, fp8_params=True)")
    assert (s.fp8_param_gather, s.optimizer_bytes_per_param) == (True, 12.0)
    # a row that states its configuration wins
    s = _rows(tmp_path, "NeMo (Megatron-Core), NeMo 24.07", "fp8",
              ", grad_reduce_in_fp32: false, optimizer_bytes_per_param: 4")
    assert (s.grad_reduce_bf16, s.optimizer_bytes_per_param) == (True, 4.0)
    # not a NeMo recipe: nothing assumed
    s = _rows(tmp_path, "Megatron-LM core_r0.13.0", "fp8")
    assert (s.grad_reduce_bf16, s.fp8_param_gather, s.optimizer_bytes_per_param) == (False, False, 0.0)
