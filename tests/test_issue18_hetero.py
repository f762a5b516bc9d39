"""Issue 18: per-chip matmul precision, DP reduction timing with pipelines, ring channels over shared VM NICs,
whole-cluster batch tolerance -- hand-derived references."""

from dataclasses import replace

import pytest

from baige_plan.cost import collectives as C
from baige_plan.cost.estimate import DpTraffic, engine_precision
from baige_plan.io.catalog import Catalog
from baige_plan.search.batch_tolerance import candidate_batches


@pytest.fixture(scope="module")
def cloud():
    cat = Catalog.create([])
    return {n: cat.cluster(f"cloud-a100-v100-{n}")[0] for n in (128, 320)}


def test_engine_precision_per_chip(cloud):
    a100, v100 = cloud[128].group("a100"), cloud[128].group("v100")
    # fp32 job on Megatron/FlagScale (NGC container: TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1): TF32 where the chip has it
    assert engine_precision(a100, "fp32", "flagscale") == "tf32"
    assert engine_precision(a100, "fp32", "megatron") == "tf32"
    assert engine_precision(v100, "fp32", "flagscale") == "fp32"      # Volta has no TF32
    # stock PyTorch (allow_tf32 False since 1.12): IEEE fp32
    assert engine_precision(a100, "fp32", "torchtitan") == "fp32"
    # a tf32 job keeps V100s, running IEEE fp32 on them
    assert engine_precision(v100, "tf32", "torchtitan") == "fp32"
    assert engine_precision(a100, "tf32", "torchtitan") == "tf32"
    # the group's own setting wins
    assert engine_precision(replace(a100, fp32_matmul="fp32"), "fp32", "flagscale") == "fp32"
    assert engine_precision(replace(a100, fp32_matmul="fp32"), "tf32", "flagscale") == "fp32"
    assert engine_precision(replace(v100, fp32_matmul="tf32"), "fp32", "torchtitan") == "fp32"
    # 16-bit jobs are unchanged
    assert engine_precision(a100, "bf16", "flagscale") == "bf16"


def test_exposed_dp_is_reduction_minus_last_backward():
    # a reduction of 0.5 s started under the last micro-batch's backward (0.25 s, 5 layers: the last layer's bucket
    # cannot overlap, window 0.25 * 4/5 = 0.2 s): exposed 0.5 - 0.2 = 0.3 s on stage 0
    t = DpTraffic(grads_s=0.5, grad_window_s=0.25 * (1 - 1 / 5), last_bucket=1 / 5, overlap_contention=0.0)
    assert t.exposed_s == pytest.approx(0.3)
    # stage 1 ends stage 0's last backward (0.12 s) before the pipeline does: 0.3 - 0.12 = 0.18 s
    assert replace(t, tail_s=0.12).exposed_s == pytest.approx(0.18)
    # issued after the flush (DeepSpeed's pipeline engine: no window): all of it on stage 0
    assert DpTraffic(grads_s=0.5).exposed_s == pytest.approx(0.5)
    # a reduction shorter than its window still exposes its last bucket: 0.1 * 1/5
    assert DpTraffic(grads_s=0.1, grad_window_s=0.2, last_bucket=1 / 5,
                     overlap_contention=0.0).exposed_s == pytest.approx(0.02)
    # ... and, beside the compute it overlaps, slows it by K x 0.1 s (K measured: cost/estimate.py
    # DP_OVERLAP_CONTENTION, the median of benchmarks/real/collective_contention_h200x{2,4}.raw.json at 512 MiB)
    assert DpTraffic(grads_s=0.1, grad_window_s=0.2, last_bucket=1 / 5).exposed_s == pytest.approx(0.574 * 0.1)


def test_hetero_stage_tail_hides_later_stages_reduction(cloud):
    """In a heterogeneous pipeline stage i > 0 gets the 1F1B lead sum_{j<i} t_b,j (cost/hetero.py)."""
    from baige_plan.cost.estimate import dp_traffic
    from baige_plan.cost.hetero import estimate_pipelines
    from baige_plan.specs.job import JobSpec
    from baige_plan.specs.pipeline import PipelineShape, PipelinesSpec, ShapeKnobs, StageSpec

    cat = Catalog.create([])
    m = cat.model("opt-350m")
    cl = cloud[128]
    job = JobSpec(global_batch=1024, seq_len=2048, precision="fp32")
    sh = PipelineShape(replicas=32, micro_batches=32, knobs=ShapeKnobs(),
                       stages=(StageSpec(group="a100", layers=(0, 12), tp=1),
                               StageSpec(group="v100", layers=(12, 24), tp=1)))
    p = PipelinesSpec(shapes=(sh,), runtime="flagscale")
    e = estimate_pipelines(m, cl, job, p)
    from baige_plan.cost.hetero import _stage_strategy
    st0, st1 = e.stages
    s1 = _stage_strategy(p, sh, sh.stages[1])
    s0 = _stage_strategy(p, sh, sh.stages[0])
    ex0 = dp_traffic(st0, cl.group("a100"), s0, job, 32).exposed_s
    ex1 = dp_traffic(st1, cl.group("v100"), s1, job, 32, tail_s=st0.bwd_s).exposed_s
    assert e.breakdown_s["dp_comm_exposed"] == pytest.approx(max(ex0, ex1))


def test_ring_over_shared_vm_nic_uses_one_connection(cloud):
    """4 GPUs of a VM share one NIC (nics_per_node 1): a DP group of 4 ranks per VM crosses on one ring
    connection at the single-sender p2p rate; with one NIC per GPU it was 4 x the 4-sender rate."""
    g = cloud[128].group("a100")
    n, piece = 32, 2097152            # a point of the measured curves: per_node 1 1.265 GB/s, per_node 4 1.257
    size = piece * n
    t1 = C.reduce_scatter_s(size, C.group_link(g, n, 4))
    t4 = C.reduce_scatter_s(size, C.group_link(replace(g, nics_per_node=None), n, 4))
    assert t1 / t4 == pytest.approx(4 * 1.257 / 1.265, rel=1e-3)
    assert t1 == pytest.approx(size * (n - 1) / n / (1.265e9), rel=1e-3)


def test_batch_tolerance_candidates(cloud):
    cl = cloud[320]             # 80 A100 + 240 V100
    # 1040 = 20 x 52 = 80 x 13 (+1.56%), 1020 = 20 x 51 (-0.39%), 1008 = 16 x 63 (-1.56%)
    assert candidate_batches(1024, cl, 2.0) == [1020, 1040, 1008]
    assert 1040 % 20 == 0 and 1040 % 80 == 0
    assert all(abs(b - 1024) <= 1024 * 0.02 for b in candidate_batches(1024, cl, 2.0, limit=20))
    assert candidate_batches(1024, cl, 0.0) == []
    assert candidate_batches(1024, cl, 0.1) == [1025, 1023]    # 5 x 205 (+0.10%), 3 x 341 (-0.10%)


def _plan(args):
    from typer.testing import CliRunner

    from baige_plan.cli.app import app
    return CliRunner().invoke(app, ["plan", "opt-350m", "a100-sxm4-40g:1x4+v100-sxm2-16g:1x4", "--seq-len", "1024",
                                    "--precision", "fp32", "--format", "json", *args])


def test_plan_states_matmul_precision_per_group_and_takes_the_option():
    import json
    r = _plan(["--global-batch", "32"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)["plans"][0]["matmul_precision"]
    assert got.get("a100-sxm4-40g", "tf32") == "tf32" and got.get("v100-sxm2-16g", "fp32") == "fp32"
    r = _plan(["--global-batch", "32", "--fp32-matmul", "a100-sxm4-40g=fp32"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["plans"][0]["matmul_precision"].get("a100-sxm4-40g", "fp32") == "fp32"
    r = _plan(["--global-batch", "32", "--fp32-matmul", "h100=tf32"])
    assert r.exit_code == 2 and "h100" in r.output


def test_batch_tolerance_runs_the_batch_that_splits_and_says_so():
    import json
    # 30 sequences on 4 + 4 devices: 32 = 4 x 8 (+6.67%) and 28 = 4 x 7 (-6.67%) are within 10%
    r = _plan(["--global-batch", "30", "--batch-tolerance", "10"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    bt = d["search"]["batch_tolerance"]
    assert bt["asked"] == 30 and bt["percent"] == 10.0
    assert bt["global_batch"] == d["plans"][0]["strategy"]["global_batch"]
    assert bt["global_batch"] in (30, 32, 28)
    assert "--batch-tolerance 10%" in r.stderr


def test_topology_group_keys_round_trip(tmp_path):
    from baige_plan.io.plan_doc import cluster_doc
    from baige_plan.io.topologies import cluster_from_dict
    cat = Catalog.create([])
    cl = cat.cluster("cloud-a100-v100-128")[0]
    assert all(g.nics_per_node == 1 for g in cl.groups)
    g0 = replace(cl.groups[0], fp32_matmul="fp32")
    cl2 = replace(cl, groups=(g0, *cl.groups[1:]))
    doc = cluster_doc(cl2, {g.name: {"schema": "x"} for g in cl2.groups})
    assert doc["groups"][0]["fp32_matmul"] == "fp32" and doc["groups"][0]["nics_per_node"] == 1
    doc["groups"] = [dict(g, chip=c.chip_ref) for g, c in zip(doc["groups"], cl2.groups, strict=True)]
    back = cluster_from_dict(doc, "t", lambda ref, src, field: cat.chip(ref))
    assert back.groups[0].fp32_matmul == "fp32" and back.groups[0].nics_per_node == 1


def test_idle_devices_note_names_the_batches_batch_tolerance_would_try(cloud):
    """80 A100 + 240 V100, batch 1024: a plan leaving devices idle says which batches --batch-tolerance 2 tries
    (1020 = 20 x 51, 1040 = 80 x 13, 1008 = 16 x 63: test_batch_tolerance_candidates), with their change."""
    from baige_plan.search.hetero import _nearest_batches
    assert _nearest_batches(1024, cloud[320]) == ": with 2, it tries 1020 (-0.4%), 1040 (+1.6%), 1008 (-1.6%)"
    assert _nearest_batches(1024, cloud[320], 0.0) == ""
