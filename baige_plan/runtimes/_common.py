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
    for g in i["cluster"].get("groups", []):
        for n in (i.get("hosts") or {}).get(g["name"], range(g["nodes"])):   # the nodes the plan uses
            host = f"{g['name']}-node{n:04d}"
            out.append(f"{host} slots={g['devices_per_node']}" if fmt == "slots" else host)
    return out


def hostfile_file(i: dict, *comments: str, fmt: str = "slots") -> ExportFile:
    """The `hostfile` launch file: the plan's title, comment lines on the format, then `hostfile_lines`."""
    head = [f"# {i['title']}", *(f"# {c}" for c in comments)]
    return ExportFile("hostfile", "\n".join(head + hostfile_lines(i, fmt)) + "\n")


def arg_lines(args: list[tuple[str, object]]) -> list[str]:
    """(flag, value or None) pairs as one shell-quoted argument per line (launch.sh reads them with eval)."""
    return [k if v is None else f"{k} {shlex.quote(str(v))}" for k, v in args]
