"""Shared by the runtime modules: the export result type and reading a plan document (a dict in the
plan-file form, SPEC §4) into what every exporter needs. Pure: no I/O."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ExportFile:
    name: str          # file name the CLI writes under --out-dir (e.g. "megatron_args.txt", "launch.sh")
    text: str


@dataclass(frozen=True)
class Export:
    """What `baige-plan export` produces: files[0] is printed on stdout; all are written with --out-dir.
    caveats: what the runtime cannot express of this plan (stderr, and comments where the format has them)."""

    files: tuple[ExportFile, ...]
    caveats: tuple[str, ...] = field(default_factory=tuple)


def plan_info(doc: dict) -> dict:
    """The fields every exporter reads, from a plan document. Heterogeneous plans: shape 0's knobs."""
    s = dict(doc["strategy"])
    pipes = doc["pipelines"]
    p0 = pipes[0]
    s.update(p0.get("strategy") or {})
    counts = [st["layers"][1] - st["layers"][0] for st in p0["stages"]]
    s["pp"] = len(counts)
    s["tp"] = p0["stages"][0]["tp"]
    s["dp"] = p0["replicas"]
    m = p0["micro_batches"]
    model = doc["inputs"]["model"]
    job = doc["inputs"]["job"]
    cluster = doc["inputs"]["cluster"]
    hosts = _used_nodes(cluster, doc.get("placement"))
    if hosts:   # a one-group plan on part of its cluster (search/partial.py): launch only the nodes it uses
        cluster = dict(cluster, groups=[dict(g, nodes=len(hosts[g["name"]])) for g in cluster["groups"]])
    est = doc.get("estimate") or {}
    return {"hosts": hosts, "s": s, "m": m, "counts": counts, "model": model, "job": job, "cluster": cluster,
            "gb": s["dp"] * m * s["micro_batch"], "layers": model["layers"], "shapes": len(pipes),
            "pipelines": pipes, "runtime": doc.get("runtime") or s.get("runtime") or "megatron",
            "stage_tps": [st["tp"] for st in p0["stages"]], "stage_groups": [st["group"] for st in p0["stages"]],
            "shape_groups": [sorted({st["group"] for st in p["stages"]}) for p in pipes],
            "devices": sum(g["nodes"] * g["devices_per_node"] for g in cluster.get("groups", [])),
            "opts": export_options(doc),
            "title": (f"{model['name']} on {cluster['name']}: predicted {est.get('step_time_s', 0):.4g} s/step, "
                      f"MFU {est.get('mfu', 0):.1%} (baige-plan)")}


def _used_nodes(cluster: dict, placement) -> dict[str, list[int]]:
    """{group: node indices its ranks use} when a one-group plan leaves nodes idle (fewer nodes, --exclude);
    {} otherwise (every node used, or several groups: their exporters read the placement themselves)."""
    groups = cluster.get("groups") or []
    if len(groups) != 1 or not isinstance(placement, list) or not placement:
        return {}
    g = groups[0]
    used = sorted({p["node"] for p in placement if isinstance(p, dict) and isinstance(p.get("node"), int)})
    if not used or used == list(range(g["nodes"])):
        return {}
    return {g["name"]: used}


def common_caveats(i: dict) -> list[str]:
    """What a single-shape launch configuration cannot express of a (heterogeneous) plan."""
    c = []
    if i["shapes"] > 1:
        groups = "; ".join(f"shape {k}: {', '.join(g)}" for k, g in enumerate(i["shape_groups"]))
        c.append(f"this plan has {i['shapes']} pipeline shapes ({groups}) trained as data-parallel replicas of "
                 "each other; one launch config cannot express that: only shape 0 is exported (its global batch "
                 "is shape 0's share), and the shapes' gradients must be synchronised across them")
    if len(set(i["stage_tps"])) > 1:
        c.append(f"per-stage tensor parallelism (stage tp {i['stage_tps']}) is not expressible: exported with "
                 f"tp={i['stage_tps'][0]} for every stage")
    if len(set(i["stage_groups"])) > 1:
        c.append(f"stages run on different groups ({' > '.join(i['stage_groups'])}); groups of different chip "
                 "families need their own launcher and collective library, bridged for the pipeline hops")
    if len({st for st in i["counts"][1:-1]}) > 1:
        c.append(f"free-form layer split {i['counts']}: only uneven first/last stages are exported")
    return c


def hostfile_lines(i: dict, fmt: str = "slots") -> list[str]:
    """One line per node, placeholder host names `GROUP-nodeNNNN` in placement order.
    fmt "slots": `HOST slots=N` (DeepSpeed / OpenMPI); "plain": `HOST` (torchrun rendezvous list)."""
    out = []
    names = host_names(i)     # --hostfile's hosts in line order, else placeholders
    for g in i["cluster"].get("groups", []):
        for n in (i.get("hosts") or {}).get(g["name"], range(g["nodes"])):   # the nodes the plan uses
            host = names[(g["name"], n)]
            out.append(f"{host} slots={g['devices_per_node']}" if fmt == "slots" else host)
    return out


def hostfile_file(i: dict, *comments: str, fmt: str = "slots") -> ExportFile:
    """The `hostfile` launch file: the plan's title, comment lines on the format, then `hostfile_lines`."""
    if not placeholder_hosts(i):   # the comments say "placeholder names": these are the --hostfile's
        comments = tuple(c.replace("placeholder names: replace with yours", "hosts from --hostfile")
                         .replace("placeholder names: replace with the nodes' IPs, in rank order",
                                  "hosts from --hostfile, in rank order")
                         .replace("(placeholder names: replace with yours)", "(hosts from --hostfile)") for c in comments)
    head = [f"# {i['title']}", *(f"# {c}" for c in comments)]
    return ExportFile("hostfile", "\n".join(head + hostfile_lines(i, fmt)) + "\n")


def arg_lines(args: list[tuple[str, object]]) -> list[str]:
    """(flag, value or None) pairs as one shell-quoted argument per line (launch.sh reads them with eval); a
    tuple value is several arguments (argparse nargs)."""
    return [k if v is None else f"{k} " + " ".join(shlex.quote(str(x)) for x in v) if isinstance(v, tuple)
            else f"{k} {shlex.quote(str(v))}" for k, v in args]


# -- launch artifacts shared by every runtime's export (issue 17: exports as launch artifacts) ---------------
EXPORT_KEY = "_export"    # exports/files.py puts the export options into the plan document under this key


@dataclass(frozen=True)
class ExportOptions:
    """What `baige-plan export` is told beside the plan: the hosts of `--hostfile` (name, slots or None, in
    line order), whether the launch scripts default to mock data, and the runtime version to write for."""

    hosts: tuple[tuple[str, int | None], ...] = ()
    mock_data: bool = False
    runtime_version: str | None = None


def export_options(doc: dict) -> ExportOptions:
    o = doc.get(EXPORT_KEY) if isinstance(doc, dict) else None
    return o if isinstance(o, ExportOptions) else ExportOptions()


def plan_nodes(i: dict) -> list[tuple[str, int]]:
    """(group, node index) of every node the plan launches, in the order of `hostfile_lines`: the order the
    lines of `--hostfile` are given to."""
    return [(g["name"], n) for g in i["cluster"].get("groups", [])
            for n in (i.get("hosts") or {}).get(g["name"], range(g["nodes"]))]


def host_names(i: dict) -> dict[tuple[str, int], str]:
    """(group, node) -> the host name launch files write: the --hostfile line of that position, else the
    placeholder `GROUP-nodeNNNN`."""
    given = i.get("opts", ExportOptions()).hosts
    return {(g, n): (given[k][0] if k < len(given) else f"{g}-node{n:04d}") for k, (g, n) in enumerate(plan_nodes(i))}


def placeholder_hosts(i: dict) -> bool:
    return not i.get("opts", ExportOptions()).hosts


# Data, tokenizer and run length: one environment variable each, read by every launch script.
DATA_VAR, TOKENIZER_VAR, ITERS_VAR, MOCK_VAR = "BAIGE_DATA_PATH", "BAIGE_TOKENIZER", "BAIGE_TRAIN_ITERS", "BAIGE_MOCK_DATA"
DEFAULT_TRAIN_ITERS = 100


def _msg(text: str) -> str:
    """Text safe inside "${VAR:?...}" (no quote, brace, dollar or backquote: bash reads a single quote there as
    opening a quoted string)."""
    return "".join(ch for ch in text if ch not in '"\'}$`\\')


def data_lines(*, data: str, tokenizer: str, mock: str | None, mock_default: bool = False,
               who: str = "launch.sh") -> list[str]:
    """Bash lines that read the data placeholders: BAIGE_DATA_PATH and BAIGE_TOKENIZER must be set (the script
    stops with a message naming them) unless BAIGE_MOCK_DATA=1 (`mock`: what mock data is; None: the runtime
    has none, BAIGE_MOCK_DATA=1 is refused); BAIGE_TRAIN_ITERS is the run length."""
    lines = ["# Data, tokenizer and run length: set these variables, nothing else needs editing",
             f"#   {DATA_VAR}: {data}", f"#   {TOKENIZER_VAR}: {tokenizer}",
             f"#   {ITERS_VAR}: optimizer steps to run (default {DEFAULT_TRAIN_ITERS})"]
    if mock is not None:
        lines.append(f"#   {MOCK_VAR}=1: {mock}, no {DATA_VAR} needed"
                     + (" (the default of this export: --mock-data; set 0 for real data)" if mock_default else ""))
    lines += [f'{MOCK_VAR}="${{{MOCK_VAR}:-{1 if mock_default else 0}}}"',
              f'{ITERS_VAR}="${{{ITERS_VAR}:-{DEFAULT_TRAIN_ITERS}}}"',
              f'case "${ITERS_VAR}" in ""|*[!0-9]*) echo "{who}: {ITERS_VAR} must be a whole number of steps, '
              f'not \'${ITERS_VAR}\'" >&2; exit 2 ;; esac']
    if mock is None:
        lines += [f'if [ "${MOCK_VAR}" = 1 ]; then',
                  f'  echo "{who}: this runtime has no mock data: set {DATA_VAR} and {TOKENIZER_VAR}" >&2; exit 2',
                  "fi",
                  f': "${{{DATA_VAR}:?set {DATA_VAR} to {_msg(data)}}}"',
                  f': "${{{TOKENIZER_VAR}:?set {TOKENIZER_VAR} to {_msg(tokenizer)}}}"']
    else:
        lines += [f'if [ "${MOCK_VAR}" != 1 ]; then',
                  f'  : "${{{DATA_VAR}:?set {DATA_VAR} to {_msg(data)} -- or {MOCK_VAR}=1 for mock data}}"',
                  f'  : "${{{TOKENIZER_VAR}:?set {TOKENIZER_VAR} to {_msg(tokenizer)}}}"',
                  "fi"]
    return lines


@dataclass(frozen=True)
class VersionCheck:
    """A package the launch needs at a version in [low, high) (high None: no upper bound). `dists`: its
    distribution names (the first installed one counts); `files`: source files whose MAJOR/MINOR/PATCH lines
    give the version when it runs from a checkout (Megatron-LM's megatron/core/package_info.py), tried first."""

    label: str
    low: str
    high: str | None = None
    dists: tuple[str, ...] = ()
    files: tuple[str, ...] = ()

    @property
    def range(self) -> str:
        return f"{self.label}>={self.low}" + (f",<{self.high}" if self.high else "")


_VERSION_SCRIPT = r'''import os, re, sys
from importlib import metadata

def rel(v):
    out = []
    for part in re.split(r"[.+-]", v)[:3]:
        m = re.match(r"\d+", part)
        out.append(int(m.group()) if m else 0)
        if not m or m.group() != part:
            break
    return tuple(out + [0] * (3 - len(out)))

def find(path):
    for d in sys.path:
        p = os.path.join(d or ".", path)
        if os.path.isfile(p):
            return p
    return None

def from_files(files):
    for f in files:
        p = find(f)
        if p:
            v = dict(re.findall(r"^(MAJOR|MINOR|PATCH)\s*=\s*(\d+)", open(p).read(), re.M))
            if len(v) == 3:
                return "%s.%s.%s" % (v["MAJOR"], v["MINOR"], v["PATCH"])
    return None

bad = []
for label, low, high, dists, files in CHECKS:
    found = from_files(files)
    for d in dists:
        if found is None:
            try:
                found = metadata.version(d)
            except metadata.PackageNotFoundError:
                pass
    want = label + ">=" + low + ("," + "<" + high if high else "")
    if found is None:
        bad.append("%s is not installed for %s (supported: %s)" % (label, sys.executable, want))
    elif rel(found) < rel(low) or (high and rel(found) >= rel(high)):
        bad.append("%s %s is outside the supported range %s" % (label, found, want))
for path, needle, why in PROBES:
    p = find(path)
    if not bad and (p is None or needle not in open(p).read()):
        bad.append(why + (" (%s)" % p if p else ""))
if bad:
    for b in bad:
        print(WHO + ": " + b, file=sys.stderr)
    print(WHO + ": these launch files were written for " + TARGET + "; install that, or export again for "
          "your stack (BAIGE_SKIP_VERSION_CHECK=1 skips this check)", file=sys.stderr)
    sys.exit(3)
'''


def version_check_lines(target: str, checks: tuple[VersionCheck, ...], probes: tuple[tuple[str, str, str], ...] = (),
                        pythonpath: str = "", who: str = "launch.sh") -> list[str]:
    """Bash lines that stop the launch (exit 3) unless $PYTHON (default python3) has every package of
    `checks` in its range; `probes`: (source file on sys.path, text it must contain, why) for versions that
    report the same number but renamed flags (a torchtitan checkout of main). BAIGE_SKIP_VERSION_CHECK=1
    skips it. `pythonpath`: a folder put first on PYTHONPATH for the check (a source checkout)."""
    consts = [f"WHO = {who!r}", f"TARGET = {target!r}",
              "CHECKS = " + repr([(c.label, c.low, c.high, c.dists, c.files) for c in checks]),
              "PROBES = " + repr(list(probes))]
    env = f'PYTHONPATH="{pythonpath}${{PYTHONPATH:+:$PYTHONPATH}}" ' if pythonpath else ""
    return ([f"# versions: {', '.join(c.range for c in checks)}; the launch stops on any other "
             "(BAIGE_SKIP_VERSION_CHECK=1 skips the check; PYTHON names the interpreter, default python3)",
             'PYTHON="${PYTHON:-python3}"',
             'if [ "${BAIGE_SKIP_VERSION_CHECK:-0}" != 1 ]; then',
             f"  {env}\"$PYTHON\" - <<'BAIGE_VERSIONS' || exit 3"]
            + consts + _VERSION_SCRIPT.rstrip("\n").split("\n") + ["BAIGE_VERSIONS", "fi"])


def slurm_file(i: dict, *, nnodes: int, gpus: int, runtime: str, data_kw: dict, pre: list[str] = (),
               per_node: bool = True, note: str = "") -> ExportFile:
    """`slurm.sbatch`: an sbatch script whose header is the plan's allocation (nodes, one task per node,
    GPUs per node) and whose body runs this folder's launch.sh: on every node through srun (per_node, with
    NODE_RANK = SLURM_NODEID and MASTER_ADDR = the first host of `scontrol show hostnames`), or once on the
    first node (runtimes whose own launcher reaches the others). The data variables are checked before
    anything starts; `pre`: runtime-specific lines after MASTER_ADDR is known."""
    name = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in f"baige-{runtime}-{i['model']['name']}")
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name={name}",
             f"#SBATCH --nodes={nnodes}",
             "#SBATCH --ntasks-per-node=1",
             f"#SBATCH --gpus-per-node={gpus}",
             "#SBATCH --exclusive",
             "#SBATCH --output=%x-%j.out",
             f"# {i['title']}",
             f"# SLURM launcher for {runtime}: submit from this folder, `sbatch slurm.sbatch [ARGS...]` (ARGS go to "
             "launch.sh); BAIGE_EXPORT_DIR names the folder otherwise. It must be at the same path on every node "
             "(a shared filesystem).",
             "# Set the data variables below before submitting (sbatch passes the environment on).",
             *([f"# {note}"] if note else []),
             "set -euo pipefail",
             'HERE="${BAIGE_EXPORT_DIR:-${SLURM_SUBMIT_DIR:-$PWD}}"',
             '[ -f "$HERE/launch.sh" ] || { echo "slurm.sbatch: no launch.sh in $HERE: submit from the export folder '
             'or set BAIGE_EXPORT_DIR" >&2; exit 2; }',
             *data_lines(**data_kw, mock_default=i["opts"].mock_data and data_kw.get("mock") is not None,
                         who="slurm.sbatch"),
             f'export {MOCK_VAR} {ITERS_VAR}',
             'mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
             f'[ "${{#NODES[@]}}" -eq {nnodes} ] || {{ echo "slurm.sbatch: SLURM gave ${{#NODES[@]}} nodes, the plan '
             f'needs {nnodes}" >&2; exit 2; }}',
             'export MASTER_ADDR="${MASTER_ADDR:-${NODES[0]}}"',
             'export MASTER_PORT="${MASTER_PORT:-29500}"',
             *pre]
    if per_node:
        lines.append(f'srun --nodes={nnodes} --ntasks-per-node=1 --kill-on-bad-exit=1 '
                     'bash -c \'NODE_RANK="$SLURM_NODEID" exec bash "$0/launch.sh" "$@"\' "$HERE" "$@"')
    else:
        lines.append('srun --nodes=1 --ntasks=1 bash "$HERE/launch.sh" "$@"')
    return ExportFile("slurm.sbatch", "\n".join(lines) + "\n")
