"""FlagScale export and shape_refusal on hand-built plan documents (expected values derived by hand from
FlagScale's hetero rules, see baige_plan/specs/runtimes/flagscale.py)."""

import csv
import io

import pytest
import yaml

from baige_plan.errors import SpecError
from baige_plan.exports import flagscale as F

MODEL = {"name": "m32", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128,
         "ffn_hidden": 14336, "vocab": 128256, "seq_len": 8192, "activation": "swiglu", "tie_embeddings": False}


def group(name, family, nodes, dpn=8):
    return {"name": name, "nodes": nodes, "devices_per_node": dpn, "chip": {"id": name, "family": family}}


def stage(g, a, b, tp):
    return {"group": g, "layers": [a, b], "tp": tp}


def doc(pipelines, groups, strategy=None, bridges=None, model=None, gb=None, placement=None):
    s = {"tp": 4, "pp": 2, "dp": 2, "cp": 1, "ep": 1, "etp": 1, "zero": 1, "micro_batch": 1, "vpp": 1,
         "recompute": "selective", "sequence_parallel": True, "runtime": "flagscale"}
    s.update(strategy or {})
    gb = gb or sum(p["replicas"] * p["micro_batches"] * s["micro_batch"] for p in pipelines)
    d = {"inputs": {"model": dict(model or MODEL), "job": {"global_batch": gb, "seq_len": 4096, "precision": "bf16"},
                    "cluster": {"name": "c", "groups": groups, "bridges": bridges or []}},
         "strategy": s, "pipelines": pipelines, "estimate": {"step_time_s": 1.0, "mfu": 0.5}}
    if placement is not None:
        d["placement"] = placement
    return d


GPU_NPU = [group("gpu", "nvidia", 1), group("npu", "ascend", 2)]
CPU_BRIDGE = [{"groups": ["gpu", "npu"], "kind": "cpu-forwarding", "GBps_per_node": 25, "latency_us": 30}]
SPAN = {"replicas": 2, "micro_batches": 16, "stages": [stage("gpu", 0, 20, 4), stage("npu", 20, 32, 8)]}


def files(ex):
    return {f.name: f.text for f in ex.files}


def cfg(ex):
    return yaml.safe_load(files(ex)[F.CONFIG])


def test_runtime_declared():
    rt = F.RUNTIME
    assert (rt.name, rt.package, rt.version) == ("flagscale", "flag-scale", "0.8.0")
    assert rt.heterogeneous and rt.zero_stages == (0, 1) and rt.zero_stages_with_pp == (0, 1)
    assert F.PYPI == "flag-scale==0.8.0" and F.COMMIT.startswith("da4935ec")


# ------------------------------------------------------------------------------------------- shape_refusal

def test_one_spanning_pipeline_runs():
    assert F.shape_refusal([SPAN]) is None


def test_shapes_as_dp_replicas_refused():
    a = {"replicas": 2, "micro_batches": 65, "stages": [stage("gpu", 0, 40, 4), stage("gpu", 40, 80, 4)]}
    b = {"replicas": 4, "micro_batches": 63, "stages": [stage("npu", 0, 40, 8), stage("npu", 40, 80, 8)]}
    why = F.shape_refusal([a, b])
    assert "one pipeline" in why and "not 2 different pipeline shapes" in why


def test_identical_shapes_merge_uneven_split_refused():
    assert F.shape_refusal([SPAN, dict(SPAN)]) is None
    assert F.merge_shapes([SPAN, dict(SPAN)])[0]["replicas"] == 4
    other = dict(SPAN, micro_batches=15)
    assert "same micro-batch size and count" in F.shape_refusal([SPAN, other])
    knob = dict(SPAN, strategy={"micro_batch": 2})
    assert "same micro-batch size and count" in F.shape_refusal([SPAN, knob])


def test_cp_vpp_zero_in_hetero_mode():
    assert "context parallelism" in F.shape_refusal([dict(SPAN, strategy={"cp": 2})])
    assert "interleaved" in F.shape_refusal([dict(SPAN, strategy={"vpp": 2})])
    assert "ZeRO 0 and 1" in F.shape_refusal([SPAN], {"zero": 2})
    # the plan-wide strategy is the fallback for missing per-shape knobs
    assert "context parallelism" in F.shape_refusal([SPAN], {"cp": 2})


def test_single_group_megatron_mode_keeps_cp_and_vpp():
    homo = {"replicas": 1, "micro_batches": 256, "stages": [stage("gpu", 0, 42, 8), stage("gpu", 42, 80, 8)]}
    assert F.shape_refusal([homo], {"cp": 2, "vpp": 2}) is None
    # a split Megatron cannot express (middle stages differ) needs hetero mode: cp 1 only
    free = {"replicas": 1, "micro_batches": 8, "stages": [stage("gpu", 0, 10, 8), stage("gpu", 10, 15, 8),
                                                          stage("gpu", 15, 24, 8), stage("gpu", 24, 32, 8)]}
    assert F.shape_refusal([free], {"cp": 1}) is None
    assert "context parallelism" in F.shape_refusal([free], {"cp": 2})


def test_group_in_two_parts_needs_whole_nodes():
    sw = {"replicas": 4, "micro_batches": 8, "stages": [stage("gpu", 0, 10, 4), stage("npu", 10, 22, 8),
                                                        stage("gpu", 22, 32, 4)]}
    assert "separate parts" in F.shape_refusal([sw])
    assert F.shape_refusal([sw], devices_per_node={"gpu": 8, "npu": 8}) is None   # 4*4 = 16 = 2 nodes each
    assert "not whole nodes" in F.shape_refusal([sw], devices_per_node={"gpu": 32, "npu": 8})


def test_pp_and_dp_before_last_mesh_miswired_across_families():
    a = {"replicas": 8, "micro_batches": 64, "stages": [stage("gpu", 0, 11, 4), stage("gpu", 11, 22, 4),
                                                        stage("npu", 22, 32, 8)]}
    assert "wrong ranks" in F.shape_refusal([a])
    assert "wrong ranks" in F.shape_refusal([a], families={"gpu": "nvidia", "npu": "ascend"})
    assert F.shape_refusal([a], families={"gpu": "nvidia", "npu": "nvidia"}) is None
    # the same meshes in the other order: the pp2 mesh is last, FlagScale wires it right
    b = {"replicas": 8, "micro_batches": 64, "stages": [stage("npu", 0, 10, 8), stage("gpu", 10, 21, 4),
                                                        stage("gpu", 21, 32, 4)]}
    assert F.shape_refusal([b]) is None
    # dp 1 is wired right too
    c = dict(a, replicas=1)
    assert F.shape_refusal([c]) is None


def test_tied_embeddings_and_experts():
    assert "same tp" in F.shape_refusal([SPAN], tie_embeddings=True)
    assert "divisible by etp*ep" in F.shape_refusal([SPAN], {"ep": 3})
    assert "expert-dp" in F.shape_refusal([SPAN], {"ep": 2})          # gpu mesh: 4*2/2 = 4 expert-dp ranks
    one = {"replicas": 1, "micro_batches": 8, "stages": [stage("gpu", 0, 20, 4), stage("npu", 20, 32, 8)]}
    assert F.shape_refusal([one], {"ep": 4}) is None                   # expert dp 1 in the first mesh


def test_empty_stage_refused():
    z = {"replicas": 1, "micro_batches": 8, "stages": [stage("gpu", 0, 0, 4), stage("npu", 0, 32, 8)]}
    assert "at least one layer" in F.shape_refusal([z])


# ---------------------------------------------------------------------------------------------------- export

def test_hetero_export_spanning():
    ex = F.export(doc([SPAN], GPU_NPU, bridges=CPU_BRIDGE))
    assert ex.caveats == ()
    c = cfg(ex)
    s, h = c["train"]["system"], c["train"]["system"]["hetero"]
    assert h["hetero_process_meshes"] == [4, 1, 1, 2, 1, 8, 1, 1, 2, 1]      # tp, cp, ep, dp, pp per mesh
    assert h["hetero_pipeline_layer_split"] == [20, 12]
    assert h["hetero_device_types"] == ["gpu", "npu"] and h["hetero_current_device_type"] == "gpu"
    assert h["enable_hetero"] and h["hetero_use_cpu_communication"] and h["standalone_embedding_stage"] is False
    assert s["tensor_model_parallel_size"] == 4 and s["pipeline_model_parallel_size"] == 2
    assert "context_parallel_size" not in s and s["use_distributed_optimizer"] and s["sequence_parallel"]
    assert s["recompute"] == {"recompute_granularity": "selective"}
    m = c["train"]["model"]
    assert (m["micro_batch_size"], m["global_batch_size"], m["num_layers"]) == (1, 32, 32)
    assert (m["num_query_groups"], m["seq_length"], m["untie_embeddings_and_output_weights"]) == (8, 4096, True)
    assert c["train"]["data"]["tokenizer"] == {"tokenizer_type": "NullTokenizer", "vocab_size": 128255}
    e = c["experiment"]
    assert e["task"]["entrypoint"] == "flagscale/train/train_gpt.py"
    assert e["runner"]["rdzv_backend"] == "static" and c["action"] == "run"
    assert e["envs"]["device_type_specific"] == {"gpu": {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"},
                                                 "npu": {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}}
    hf = [x for x in files(ex)["hostfile"].splitlines() if not x.startswith("#")]
    assert hf == ["gpu-node0000 slots=8 type=gpu", "npu-node0000 slots=8 type=npu", "npu-node0001 slots=8 type=npu"]
    rows = list(csv.DictReader(io.StringIO(files(ex)["rank_map.csv"])))
    assert len(rows) == 24
    # gpu mesh: tp4 dp2 -> ranks 0-3 replica 0, 4-7 replica 1; npu mesh: one node per replica
    assert [(r["rank"], r["stage"], r["replica"], r["tp_rank"]) for r in rows[3:5]] == [("3", "0", "0", "3"),
                                                                                          ("4", "0", "1", "0")]
    r17 = rows[17]
    assert (r17["host"], r17["local_rank"], r17["stage"], r17["replica"], r17["tp_rank"], r17["layers_start"],
            r17["layers_end"], r17["device_type"]) == ("npu-node0001", "1", "1", "1", "1", "20", "32", "npu")
    text = files(ex)[F.CONFIG]
    assert "flag-scale==0.8.0" in text and "da4935ec" in text
    launch = files(ex)["launch.sh"]
    assert '"$FLAGSCALE_ROOT/run.py" --config-path' in launch and "--config-name flagscale_train" in launch
    assert 'cd "$FLAGSCALE_ROOT"' not in launch and 'experiment.exp_dir="$OUT"' in launch   # not in site-packages
    assert "pip install flag-scale==0.8.0" in launch


def test_export_follows_plan_placement_reordering_nodes():
    # the plan put the npu stage's replica 1 on node 0 and replica 0 on node 1: the hostfile lists node 1 first
    place = [{"rank": i, "group": "gpu", "node": 0, "device": i, "pipeline": 0, "replica": i // 4, "stage": 0,
              "tp_rank": i % 4, "cp_rank": 0} for i in range(8)]
    place += [{"rank": 8 + i, "group": "npu", "node": i // 8, "device": i % 8, "pipeline": 0,
               "replica": 1 - i // 8, "stage": 1, "tp_rank": i % 8, "cp_rank": 0} for i in range(16)]
    ex = F.export(doc([SPAN], GPU_NPU, bridges=CPU_BRIDGE, placement=place))
    assert ex.caveats == ()
    hf = [x for x in files(ex)["hostfile"].splitlines() if not x.startswith("#")]
    assert hf == ["gpu-node0000 slots=8 type=gpu", "npu-node0001 slots=8 type=npu", "npu-node0000 slots=8 type=npu"]
    # a placement FlagScale cannot follow (a TP group split over two nodes' halves out of order)
    bad = [dict(p) for p in place]
    bad[8]["device"], bad[9]["device"] = 1, 0
    ex2 = F.export(doc([SPAN], GPU_NPU, bridges=CPU_BRIDGE, placement=bad))
    assert any("not one FlagScale can follow" in c for c in ex2.caveats)


def test_miswired_meshes_across_families_are_refused():
    a = {"replicas": 2, "micro_batches": 8, "stages": [stage("gpu", 0, 11, 2), stage("gpu", 11, 22, 2),
                                                       stage("npu", 22, 32, 8)]}
    # shape_refusal: splitting the mesh would send its inner hops across families; refused (exit 2), not exported
    with pytest.raises(SpecError, match="flagscale refuses this plan.*wrong ranks"):
        F.export(doc([a], GPU_NPU, bridges=CPU_BRIDGE))


def test_group_in_two_parts_gets_two_labels():
    groups = [group("gpu", "nvidia", 2), group("npu", "ascend", 1)]
    sw = {"replicas": 2, "micro_batches": 8, "stages": [stage("gpu", 0, 10, 4), stage("npu", 10, 22, 4),
                                                        stage("gpu", 22, 32, 4)]}
    ex = F.export(doc([sw], groups, bridges=CPU_BRIDGE))
    assert ex.caveats == ()
    h = cfg(ex)["train"]["system"]["hetero"]
    assert h["hetero_device_types"] == ["gpu_1", "npu", "gpu_2"]
    hf = [x for x in files(ex)["hostfile"].splitlines() if not x.startswith("#")]
    assert hf == ["gpu-node0000 slots=8 type=gpu_1", "npu-node0000 slots=8 type=npu", "gpu-node0001 slots=8 type=gpu_2"]


def test_same_family_uses_nccl_rdma_bridge_uses_flagcx():
    groups = [group("h100", "nvidia", 1), group("a100", "nvidia", 2)]
    sp = {"replicas": 2, "micro_batches": 16, "stages": [stage("h100", 0, 20, 4), stage("a100", 20, 32, 8)]}
    s = cfg(F.export(doc([sp], groups)))["train"]["system"]
    assert "hetero_use_cpu_communication" not in s["hetero"] and "distributed_backend" not in s
    rdma = [{"groups": ["gpu", "npu"], "kind": "rdma", "GBps_per_node": 100, "latency_us": 5}]
    ex = F.export(doc([SPAN], GPU_NPU, bridges=rdma))
    s2 = cfg(ex)["train"]["system"]
    assert s2["distributed_backend"] == "flagcx" and "hetero_use_cpu_communication" not in s2["hetero"]
    assert any("flagcx" in c for c in ex.caveats)


def test_megatron_mode_single_group():
    homo = {"replicas": 1, "micro_batches": 256, "stages": [stage("gpu", 0, 18, 8), stage("gpu", 18, 32, 8)]}
    ex = F.export(doc([homo], [group("gpu", "nvidia", 4)], {"tp": 8, "cp": 2, "vpp": 2, "recompute": "full"}))
    assert ex.caveats == ()
    s = cfg(ex)["train"]["system"]
    assert "hetero" not in s
    assert (s["tensor_model_parallel_size"], s["pipeline_model_parallel_size"], s["context_parallel_size"]) == (8, 2, 2)
    assert s["num_virtual_stages_per_pipeline_rank"] == 2
    assert (s["decoder_first_pipeline_num_layers"], s["decoder_last_pipeline_num_layers"]) == (18, 14)
    assert s["recompute"] == {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    hf = [x for x in files(ex)["hostfile"].splitlines() if not x.startswith("#")]
    assert hf == [f"gpu-node000{n} slots=8" for n in range(4)]          # tp8 x cp2 x pp2 = 32 devices
    rows = list(csv.DictReader(io.StringIO(files(ex)["rank_map.csv"])))
    # Megatron order tp-cp-dp-pp: node 1 holds stage 0's cp rank 1, node 2 starts stage 1
    assert [(r["host"], r["stage"], r["cp_rank"]) for r in (rows[8], rows[16])] == [("gpu-node0001", "0", "1"),
                                                                                   ("gpu-node0002", "1", "0")]
    assert cfg(ex)["experiment"]["envs"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"


def test_several_shapes_are_refused():
    a = {"replicas": 1, "micro_batches": 10, "stages": [stage("gpu", 0, 32, 8)]}
    b = {"replicas": 2, "micro_batches": 11, "stages": [stage("npu", 0, 32, 8)]}
    with pytest.raises(SpecError, match="not 2 different pipeline shapes"):   # FlagScale runs one pipeline
        F.export(doc([a, b], GPU_NPU, {"tp": 8}, bridges=CPU_BRIDGE))
