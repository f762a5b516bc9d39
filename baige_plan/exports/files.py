"""Plan -> launch files for a runtime. Each runtime's exporter lives in its own module
(baige_plan/exports/NAME.py; its space and pinned version are in baige_plan/specs/runtimes/NAME.py); this
module dispatches, adds the plain hostfile target, and writes the files atomically.
"""

from __future__ import annotations

import re
from importlib import import_module
from pathlib import Path
from types import ModuleType, SimpleNamespace

from baige_plan.errors import InputError, SpecError
from baige_plan.exports._common import (
    EXPORT_KEY,
    Export,
    ExportOptions,
    hostfile_file,
    plan_info,
    plan_nodes,
)
from baige_plan.specs import runtimes

TARGETS = runtimes.NAMES + ("hostfile",)


def exporter(name: str) -> ModuleType:
    """The runtime's export module (baige_plan/exports/NAME.py); `runtimes.module` checks the name."""
    runtimes.module(name)
    return import_module(f"baige_plan.exports.{name.replace('-', '_')}")   # megatron-local: megatron_local.py


def hostfile(doc: dict) -> Export:
    i = plan_info(doc)
    caveats = []
    if len(i["cluster"].get("groups", [])) > 1:
        caveats.append("several groups: launch each family with its own launcher")
    f = hostfile_file(i, "one line per node: HOSTNAME slots=DEVICES (placeholder names: replace with yours);",
                      "ranks follow the plan's placement: node n holds ranks n*slots .. n*slots + slots - 1")
    return Export((f,), tuple(caveats))


_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:%-]*$")


def read_hostfile(path: str | Path) -> tuple[tuple[str, int | None], ...]:
    """`--hostfile FILE`: one host (name or IP) per line, optionally `slots=N` (or a bare N) after it; `#`
    starts a comment. Returns (host, slots or None) in line order; InputError names the file and line."""
    src = str(path)
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(src, "--hostfile", f"cannot read: {getattr(e, 'strerror', None) or e}") from None
    out: list[tuple[str, int | None]] = []
    seen: dict[str, int] = {}
    for k, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        host, slots = words[0], None
        if not _HOST.match(host):
            raise InputError(src, f"line {k}", f"{host!r} is not a host name or IP address")
        for w in words[1:]:
            v = w[len("slots="):] if w.startswith("slots=") else w
            if slots is not None or not v.isdigit() or int(v) < 1:
                raise InputError(src, f"line {k}", f"expected `HOST [slots=N]`, got {raw.strip()!r}")
            slots = int(v)
        if host in seen:
            raise InputError(src, f"line {k}", f"host {host} is listed twice (line {seen[host]})")
        seen[host] = k
        out.append((host, slots))
    if not out:
        raise InputError(src, "--hostfile", "no hosts in the file")
    return tuple(out)


def _ns(x):
    return SimpleNamespace(**{k: _ns(v) for k, v in x.items()}) if isinstance(x, dict) else x


def refusal(doc: dict, target: str) -> tuple[str, str] | None:
    """(field, reason) when the target runtime refuses the plan's strategy (RuntimeSpec.refusal: its space and
    its extra rules, read from the plan document); None when it runs it. Plans of several pipeline shapes are
    judged by their exporters (FlagScale's shape_refusal; the others export shape 0 with caveats)."""
    i = plan_info(doc)
    if i["shapes"] > 1 or len(set(i["stage_groups"])) > 1:
        return None
    s, counts = i["s"], i["counts"]
    rt = runtimes.get(target)
    even = len(set(counts[1:-1] or counts)) <= 1
    L, pp = sum(counts), len(counts)
    balanced = [L // pp + (1 if k < L % pp else 0) for k in range(pp)]
    # uneven stages the plan does not name: first/last counts, unless the target partitions layers balanced
    # itself (DeepSpeed's PipelineModule: the first L % pp stages one layer more) and these are its counts
    # (or counts the embedding / loss as pipeline layers: account_for_*, which the plan names)
    uneven = (len(set(counts)) > 1 and not (rt.balanced_partition and counts == balanced)
              and not (s.get("account_for_embedding") or s.get("account_for_loss")))
    st = SimpleNamespace(
        tp=s["tp"], pp=s["pp"], dp=s["dp"], cp=s.get("cp", 1), ep=s.get("ep", 1), etp=s.get("etp", 1),
        zero=s.get("zero", 0), micro_batch=s["micro_batch"], vpp=s.get("vpp", 1), recompute=s.get("recompute", "none"),
        sequence_parallel=bool(s.get("sequence_parallel")),
        first_stage_layers=s.get("first_stage_layers") or (counts[0] if uneven and even else None),
        last_stage_layers=s.get("last_stage_layers") or (counts[-1] if uneven and even else None),
        account_for_embedding=bool(s.get("account_for_embedding")), account_for_loss=bool(s.get("account_for_loss")),
        grad_reduce_bf16=bool(s.get("grad_reduce_bf16")), runtime=s.get("runtime"), attention=s.get("attention"))
    if uneven and not even:      # a free-form split: first/last counts do not describe it
        st.first_stage_layers = counts[0]
    job = SimpleNamespace(global_batch=i["gb"], seq_len=i["job"]["seq_len"],
                          precision=i["job"].get("precision", "bf16"))
    why = rt.refusal(st, _ns(i["model"]), job)
    if why is None:
        return None
    v = rt.violation(zero=st.zero, pp=st.pp, vpp=st.vpp, cp=st.cp, ep=st.ep, etp=st.etp,
                     uneven=bool(st.first_stage_layers or st.last_stage_layers), tp=st.tp,
                     sequence_parallel=st.sequence_parallel if st.tp > 1 else None, recompute=st.recompute,
                     precision=job.precision)
    field = "inputs.job.precision" if v and v[0] == "precision" else f"strategy.{v[0]}" if v else "strategy"
    return field, why


def _runtime_version(target: str, version: str | None) -> str | None:
    """The runtime version to write for: one the target's module exports (EXPORT_VERSIONS, newest first;
    default its pinned version); a prefix ("0.2") picks the newest of that line."""
    if version is None or target == "hostfile":
        if version is not None:
            raise InputError("--runtime-version", "", "the hostfile target has no runtime version")
        return None
    known = tuple(getattr(exporter(target), "EXPORT_VERSIONS", (runtimes.get(target).version,)))
    for v in known:
        if version == v or v.startswith(version.rstrip(".") + "."):
            return v
    raise InputError("--runtime-version", "", f"{target} exports are written for {', '.join(known)}, not {version!r}")


def export_plan(doc: dict, target: str, *, hosts: tuple[tuple[str, int | None], ...] = (), mock_data: bool = False,
                runtime_version: str | None = None, src: str = "PLAN", hostfile_src: str = "--hostfile") -> Export:
    """The target's launch files for the plan `doc`. A runtime that refuses the plan is an InputError (exit 2)
    naming the strategy field; `hosts` (--hostfile) replace the placeholder host names in plan order."""
    if target not in TARGETS:
        raise InputError("--to", "", f"unknown target {target!r} (one of {', '.join(TARGETS)})")
    version = _runtime_version(target, runtime_version)
    doc = {**doc, EXPORT_KEY: ExportOptions(hosts=tuple(hosts), mock_data=mock_data, runtime_version=version)}
    try:
        if hosts:
            _check_hosts(doc, hosts, hostfile_src)
        if target == "hostfile":
            return hostfile(doc)
        refused = refusal(doc, target)
        if refused:
            raise InputError(src, refused[0], f"{target} refuses this plan: {refused[1]}")
        return exporter(target).export(doc)
    except SpecError as e:
        raise InputError(src, e.field, e.reason) from None
    except (KeyError, TypeError, IndexError) as e:
        raise InputError(src, "", f"plan is missing what the {target} export needs: {e}") from None


def _check_hosts(doc: dict, hosts, src: str) -> None:
    i = plan_info(doc)
    nodes = plan_nodes(i)
    if len(hosts) < len(nodes):
        raise InputError(src, "", f"{len(hosts)} host(s) for a plan on {len(nodes)} nodes: one line per node, in the "
                         "order `baige-plan export PLAN --to hostfile` lists them")
    per = {g["name"]: int(g["devices_per_node"]) for g in i["cluster"].get("groups", [])}
    for (host, slots), (g, _n) in zip(hosts, nodes, strict=False):
        if slots is not None and slots < per[g]:
            raise InputError(src, host, f"slots={slots}, the plan uses {per[g]} devices on each {g} node")


def write_export(ex: Export, out_dir: Path, write) -> list[Path]:
    """Write every file of `ex` into `out_dir` (created if missing) with `write(path, text)` (atomic)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(str(out_dir), "--out-dir", "exists and is not a folder")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:        # a parent that cannot be made (read-only, /proc, a file in the way, too long)
        raise InputError(str(out_dir), "--out-dir", f"cannot create the folder: {e.strerror or e}") from None
    paths = []
    for f in ex.files:
        p = out_dir / f.name
        write(p, f.text)
        if f.name.endswith(".sh"):
            try:
                p.chmod(0o755)
            except OSError as e:
                raise InputError(str(p), "", f"cannot make it executable: {e.strerror or e}") from None
        paths.append(p)
    return paths
