"""Check `baige-plan export --to flagscale --out-dir DIR` exports with FlagScale's own code, CPU only.

    .venv-it/flagscale/bin/python tests/integration/check_flagscale.py DIR [DIR...]

Runtime venv (see requirements-flagscale.txt): PyPI flag-scale==0.8.0 installed --no-deps (the wheel ships
FlagScale's runner, flagscale/train/{arguments.py,hetero/} and its patched Megatron-LM under
flag_scale/third_party/Megatron-LM), torch CPU and the few modules those imports need.

Per DIR (flagscale_train.yaml, hostfile, rank_map.csv as the export writes them):
1. FlagScale's runner, `run.py --config-path DIR --config-name flagscale_train action=dryrun`: Hydra composes
   the config, flagscale/runner/utils.py parse_hostfile reads the hostfile, runner_train.py flattens the
   config into Megatron arguments and writes one torchrun script per host (nothing is started).
2. For every rank of every host script (ranks numbered as torchrun does: hosts in hostfile order, local
   ranks in order), with that script's environment and arguments: FlagScale-patched Megatron
   `parse_args` (unknown arguments fail), then, as megatron/training/initialize.py does in hetero mode,
   `FSTrainArguments(args).pre_validate_args()`, Megatron `validate_args`, `post_validate_args()`, and
   `ParallelContext(args)` (RankMapper, ProcessMesh per mesh, inter-mesh and global pipeline groups).
   Non-hetero exports: parse_args + validate_args and Megatron's RankGenerator.
3. What FlagScale computed for each rank (mesh, global pipeline stage, layer range = offset
   sum(split[:stage]) as in the patched transformer_layer.py, tp rank, dp rank, micro-batch size,
   micro-batches per step) must equal rank_map.csv (the plan's placement as exported), and every
   global pipeline group must run stages 0..P-1 of one replica.
Shims, because there is no GPU and no real world of processes: torch's `fake` process-group backend
(no communication; group creation drops the nccl/gloo backend argument); `all_gather_object`
answered with each rank's own (rank, device type of its host) and, for the process-mesh index, the
index each rank computed for itself in a first pass; Megatron's `get_device_arch_version` (a CUDA
query) answers 8; `apply_rope_fusion` off when Transformer Engine is absent; a NullTokenizer global, as
FlagScale's own tests/unit_tests/test_parallel_context.py sets.
Prints `ok DIR` or `FAIL DIR: reason` per DIR and `N passed, M failed`; exits 1 on any failure.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import shlex
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

CONFIG = "flagscale_train"


class _Stop(Exception):
    pass


PYPI = "flag-scale==0.8.0"   # baige_plan/exports/flagscale.py PYPI


def _root() -> Path:
    """The installed wheel's flag_scale folder; installs the wheel --no-deps when it is missing (its declared
    dependencies, CUDA torch 2.7.1, ray, wandb..., are not needed to parse and validate a config)."""
    try:
        import flag_scale  # noqa: F401  (the PyPI package's top-level module)
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", PYPI], check=True)
        import flag_scale  # noqa: F401
    return Path(flag_scale.__file__).resolve().parent


def _dryrun(root: Path, d: Path, tmp: Path) -> list[dict]:
    """FlagScale's runner in dryrun mode; returns the hosts' torchrun commands in node-rank order."""
    cmd = [sys.executable, "run.py", f"--config-path={d}", f"--config-name={CONFIG}", "action=dryrun",
           f"experiment.runner.hostfile={d / 'hostfile'}", f"experiment.exp_dir={tmp / 'exp'}",
           f"hydra.run.dir={tmp / 'hydra'}"]
    r = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("FlagScale runner dryrun failed: " + (r.stderr or r.stdout).strip().splitlines()[-1])
    hosts = []
    for s in sorted((tmp / "exp" / "logs" / "scripts").glob("host_*_run.sh")):
        text = s.read_text()
        line = next(x for x in text.splitlines() if x.startswith('cmd="'))
        toks = shlex.split(line[len('cmd="'):-1])
        k = toks.index("torchrun")
        env = dict(t.split("=", 1) for t in toks[:k])
        tr = toks[k + 1:]
        ep = next(i for i, t in enumerate(tr) if t.endswith(".py"))
        opts = dict(zip(tr[:ep:2], tr[1:ep:2], strict=False))
        hosts.append({"env": env, "node_rank": int(opts["--node_rank"]), "nproc": int(opts["--nproc_per_node"]),
                      "args": tr[ep + 1:], "script": s.name})
    if not hosts:
        raise RuntimeError("FlagScale runner wrote no host scripts")
    hosts.sort(key=lambda h: h["node_rank"])
    return hosts


def _ranks(hosts: list[dict]) -> list[dict]:
    out = []
    for h in hosts:
        a = h["args"]
        dt = a[a.index("--hetero-current-device-type") + 1] if "--hetero-current-device-type" in a else None
        for lr in range(h["nproc"]):
            out.append({"host": h, "local_rank": lr, "device_type": dt})
    return out


def _setup_megatron(root: Path):
    for p in (str(root / "third_party" / "Megatron-LM"), str(root)):
        if p not in sys.path:
            sys.path.insert(0, p)
    warnings.filterwarnings("ignore")
    import megatron.core.parallel_state as ps
    import megatron.training.arguments as ma
    import megatron.training.global_vars as gv
    from megatron.training.tokenizer.tokenizer import _NullTokenizer

    ma.get_device_arch_version = lambda: 8
    orig = ps.create_group

    def create_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False,
                     group_desc=None):
        return orig(ranks=ranks, timeout=timeout, backend=None, pg_options=None,
                    use_local_synchronization=use_local_synchronization, group_desc=group_desc)

    ps.create_group = create_group
    gv._GLOBAL_TOKENIZER = _NullTokenizer(vocab_size=64)
    return ma


def _args_for(ma, rk: dict, rank: int, world: int):
    h = rk["host"]
    os.environ.update({k: str(v) for k, v in h["env"].items()})
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rk["local_rank"]))
    sys.argv = ["train_gpt.py"] + list(h["args"])
    with contextlib.redirect_stdout(io.StringIO()):
        return ma.parse_args()


def _hetero(ma, ranks: list[dict]) -> dict[int, dict]:
    import torch.distributed as dist
    from flagscale.train.arguments import FSTrainArguments
    from flagscale.train.hetero.parallel_context import ParallelContext
    from torch.testing._internal.distributed.fake_pg import FakeStore

    world = len(ranks)
    mesh_idx: dict[int, int] = {}

    def run(rank: int, first_pass: bool):
        args = _args_for(ma, ranks[rank], rank, world)
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)

        def gather(out, obj, group=None):
            if "process_mesh_idx" in obj and first_pass:
                mesh_idx[rank] = obj["process_mesh_idx"]
                raise _Stop
            for q in range(world):
                o = dict(obj)
                o["rank"] = q
                if "device_type" in o:
                    o["device_type"] = ranks[q]["device_type"]
                if "process_mesh_idx" in o:
                    o["process_mesh_idx"] = mesh_idx[q]
                out[q] = o

        dist.all_gather_object = gather
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                fs = FSTrainArguments(args)
                fs.pre_validate_args()
                ma.validate_args(args, {})
                fs.post_validate_args()
                try:
                    import transformer_engine  # noqa: F401
                except ImportError:
                    args.apply_rope_fusion = False
                pc = ParallelContext(args)
            return _observe(args, pc)
        except _Stop:
            return None
        finally:
            dist.destroy_process_group()

    orig = dist.all_gather_object
    got: dict[int, dict] = {}
    try:
        for r in range(world):
            run(r, True)
        for r in range(world):
            got[r] = run(r, False)
        got["pp_groups"], got["stages"] = got[0].pop("pp_groups"), got[0].pop("stages")
    finally:
        dist.all_gather_object = orig
    return got


def _observe(args, pc) -> dict:
    """What FlagScale decided for this rank (read while its process groups exist), including, for the last
    stage of a mesh before the last, where ParallelContext.get_inter_mesh_tensor_slices sends its activations."""
    import torch.distributed as dist

    stage = pc.get_pipeline_model_parallel_rank()
    sends = None
    k = pc._current_process_mesh_index
    last_of_mesh = stage == sum(m._rank_generator.pp for m in pc._process_meshes[: k + 1]) - 1
    if last_of_mesh and k + 1 < len(pc._process_meshes):
        tp = args.tensor_model_parallel_size
        shape = (args.seq_length // (tp if args.sequence_parallel else 1), args.micro_batch_size, args.hidden_size)
        try:
            sends = [s[0] for s in pc.get_inter_mesh_tensor_slices(dist.get_rank(), shape, next=True)]
        except KeyError:
            sends = []
    split = args.hetero_pipeline_layer_split
    start = sum(([0] + list(split))[: stage + 1])   # patched transformer_layer.py: the layer offset
    return {"mesh": pc._current_process_mesh_index, "stage": stage, "layers_start": start,
            "layers_end": start + split[stage], "tp_rank": pc.get_tensor_model_parallel_rank(),
            "replica": pc.get_data_parallel_rank(), "tp": args.tensor_model_parallel_size,
            "dp": args.data_parallel_size, "micro_batch": args.micro_batch_size,
            "micro_batches": args.global_batch_size // (args.micro_batch_size * args.data_parallel_size),
            "pp_groups": [list(g) for g in pc.get_global_all_group_ranks("pp")], "stages": len(split), "sends": sends}


def _megatron(ma, ranks: list[dict]) -> dict[int, dict]:
    from megatron.core.parallel_state import RankGenerator

    world = len(ranks)
    args = _args_for(ma, ranks[0], 0, world)
    with contextlib.redirect_stdout(io.StringIO()):
        ma.validate_args(args, {})
    tp, pp, cp, dp = (args.tensor_model_parallel_size, args.pipeline_model_parallel_size,
                      args.context_parallel_size, args.data_parallel_size)
    gen = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order="tp-cp-ep-dp-pp")
    got: dict = {r: {"mesh": 0, "tp": tp, "dp": dp, "micro_batch": args.micro_batch_size,
                     "micro_batches": args.global_batch_size // (args.micro_batch_size * dp)} for r in range(world)}
    for token, key in (("tp", "tp_rank"), ("pp", "stage"), ("dp", "replica"), ("cp", "cp_rank")):
        for group in gen.get_ranks(token):
            for i, r in enumerate(group):
                got[r][key] = i
    L = args.num_layers
    first, last = args.decoder_first_pipeline_num_layers, args.decoder_last_pipeline_num_layers
    counts = [0] * pp
    rest, mids = L - (first or 0) - (last or 0), pp - (first is not None) - (last is not None)
    for s in range(pp):
        counts[s] = first if (s == 0 and first is not None) else last if (s == pp - 1 and last is not None) \
            else rest // max(mids, 1)
    for r in range(world):
        s = got[r]["stage"]
        got[r]["layers_start"], got[r]["layers_end"] = sum(counts[:s]), sum(counts[: s + 1])
    got["pp_groups"] = gen.get_ranks("pp")
    got["stages"] = pp
    return got


def check(d: Path, root: Path, ma) -> str | None:
    rows = list(csv.DictReader((d / "rank_map.csv").open()))
    want = {int(x["rank"]): x for x in rows}
    with tempfile.TemporaryDirectory() as t:
        hosts = _dryrun(root, d, Path(t))
    ranks = _ranks(hosts)
    if len(ranks) != len(want):
        return f"FlagScale starts {len(ranks)} ranks, rank_map.csv has {len(want)}"
    hetero = "--enable-hetero" in hosts[0]["args"]
    got = _hetero(ma, ranks) if hetero else _megatron(ma, ranks)
    mbs = {got[r]["micro_batches"] for r in range(len(ranks))}
    if len(mbs) != 1:
        return f"ranks disagree on micro-batches per step: {sorted(mbs)}"
    for r in range(len(ranks)):
        w, g = want[r], got[r]
        if ranks[r]["host"]["script"].split("_", 2)[2].rsplit("_run.sh", 1)[0] != w["host"]:
            return f"rank {r}: FlagScale puts it on host {ranks[r]['host']['script']}, rank_map.csv on {w['host']}"
        if hetero and ranks[r]["device_type"] != w["device_type"]:
            return f"rank {r}: device type {ranks[r]['device_type']} != {w['device_type']}"
        for k in ("mesh", "stage", "layers_start", "layers_end", "replica", "tp_rank"):
            if int(w[k]) != int(g[k]):
                return (f"rank {r} ({w['host']} local {w['local_rank']}): FlagScale {k}={g[k]}, rank_map.csv "
                        f"{k}={w[k]}")
    for r in range(len(ranks)):
        sends = got[r].get("sends")
        if sends is None:
            continue
        if not sends:
            return f"rank {r} ({want[r]['host']}): FlagScale's inter-mesh p2p has no receiver for its activations"
        for q in sends:
            if int(want[q]["stage"]) != int(want[r]["stage"]) + 1 or want[q]["replica"] != want[r]["replica"]:
                return (f"rank {r} (stage {want[r]['stage']} replica {want[r]['replica']}) sends its activations to "
                        f"rank {q} (stage {want[q]['stage']} replica {want[q]['replica']})")
    for group in got["pp_groups"]:
        st = [int(want[r]["stage"]) for r in group]
        reps = {int(want[r]["replica"]) for r in group}
        if st != list(range(got["stages"])) or len(reps) != 1:
            return f"global pipeline group {group} runs stages {st} of replicas {sorted(reps)}"
    return None


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip())
        return 2
    root = _root()
    ma = _setup_megatron(root)
    ok = bad = 0
    for a in argv:
        d = Path(a).resolve()
        try:
            why = check(d, root, ma)
        except Exception as e:  # noqa: BLE001  (FlagScale's asserts and errors are the verdict)
            why = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        if why is None:
            ok += 1
            print(f"ok {a}", flush=True)
            for line in (d / f"{CONFIG}.yaml").read_text().splitlines():
                if line.startswith("# cannot express:"):     # the export's caveats: ok checks what was exported
                    print(f"  note: {line[2:]}", flush=True)
        else:
            bad += 1
            print(f"FAIL {a}: {why}", flush=True)
    print(f"{ok} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
