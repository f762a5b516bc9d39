"""Resolve MODEL / CLUSTER / chip references against catalog folders (user ones first)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from baige_plan.errors import InputError
from baige_plan.io.chips import load_chip_file
from baige_plan.io.models import load_model_file
from baige_plan.io.paths import catalog_roots
from baige_plan.io.topologies import cluster_from_shorthand, is_shorthand, load_topology_file
from baige_plan.io.yamlio import file_kind, is_regular_file
from baige_plan.limits import MAX_DEVICES, MAX_GROUPS
from baige_plan.specs.chip import ChipSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.topology import ClusterSpec

_EXTS = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Catalog:
    roots: tuple[Path, ...]

    @classmethod
    def create(cls, extra: list[str] | tuple[str, ...] = ()) -> Catalog:
        check_roots(extra)
        return cls(tuple(catalog_roots(extra)))

    @staticmethod
    def _dirs(root: Path, kind: str) -> list[Path]:
        """A kind's folders under one root; chips/measured/ holds profiled chips (`baige-plan profile`)."""
        return [root / kind] + ([root / kind / "measured"] if kind == "chips" else [])

    def find(self, kind: str, name: str) -> Path | None:
        for root in self.roots:
            for d in self._dirs(root, kind):
                for ext in _EXTS:
                    p = d / f"{name}{ext}"
                    if is_regular_file(p):
                        return p
        return None

    def names(self, kind: str) -> list[str]:
        seen: dict[str, Path] = {}
        for root in self.roots:
            for d in self._dirs(root, kind):
                if d.is_dir():
                    for p in sorted(d.iterdir()):
                        if p.suffix in _EXTS and p.stem not in seen and not p.name.endswith(".raw.json"):
                            seen[p.stem] = p
        return sorted(seen)

    # -- chips ---------------------------------------------------------------------------
    def chip(self, ref: str, source: str = "CLUSTER", field: str = "chip") -> ChipSpec:
        p = Path(ref)
        if p.suffix in _EXTS and file_kind(p) is not None:
            return load_chip_file(p)        # a folder, device or pipe is refused there, naming the path
        found = self.find("chips", ref)
        if found is None:
            raise InputError(source, field, f"unknown chip {_short(ref)}{did_you_mean(ref, self.names('chips'))}")
        return load_chip_file(found)

    # -- models --------------------------------------------------------------------------
    def model(self, ref: str) -> ModelSpec:
        p = Path(ref)
        kind = file_kind(p)
        if kind == "file" or (kind == "other" and p.suffix in _EXTS):
            if p.name == "config.json" or _looks_like_hf(p):
                from baige_plan.io.hf_config import load_hf_config
                return load_hf_config(p)
            return load_model_file(p)
        found = self.find("models", ref) if ref else None
        if found is None:
            if kind is not None:        # a folder, device or pipe: refused there, naming the path
                return load_model_file(p)
            if p.suffix in _EXTS:
                raise InputError(ref, "", "file not found")
            raise InputError("MODEL", "", f"unknown model {_short(ref)}: not a file and not a catalog model"
                             f"{did_you_mean(ref, self.names('models'))}")
        return load_model_file(found)

    # -- clusters ------------------------------------------------------------------------
    def cluster(self, ref: str) -> tuple[ClusterSpec, bool]:
        """Returns (cluster, default_bridge_added)."""
        p = Path(ref)
        kind = file_kind(p)
        if kind == "file" or (kind == "other" and p.suffix in _EXTS):
            return check_cluster_size(load_topology_file(p, self.chip), str(p)), False
        found = self.find("topologies", ref) if ref else None
        if found is not None:
            return check_cluster_size(load_topology_file(found, self.chip), str(found)), False
        if ":" in ref and is_shorthand(ref):
            _check_shorthand(ref)
            cl, bridged = cluster_from_shorthand(ref, self.chip)
            return check_cluster_size(cl, "CLUSTER"), bridged
        if kind is not None:            # a folder, device or pipe: refused there, naming the path
            return load_topology_file(p, self.chip), False
        if p.suffix in _EXTS:
            raise InputError(ref, "", "file not found")
        if ":" in ref:          # shorthand with an unknown chip: name the chip, with a suggestion
            for i, part in enumerate(ref.split("+")):
                m = _CHIP_PART.match(part.strip())
                if m and self.find("chips", m[1]) is None and file_kind(m[1]) is None:
                    raise InputError("CLUSTER", f"part {i + 1}", f"unknown chip {_short(m[1])}"
                                     f"{did_you_mean(m[1], self.names('chips'))}")
        raise InputError("CLUSTER", "", f"{_short(ref)} is not a topology file, a catalog topology or "
                         f"CHIP:NODESxDEVICES[+...] shorthand{did_you_mean(ref, self.names('topologies'))}")


_CHIP_PART = re.compile(r"^([^:]+):[^:]*$")


def did_you_mean(ref: str, names: list[str], n: int = 4) -> str:
    """`: did you mean 'h100-sxm5-80g'?` for a near-miss name (difflib, plus names starting with or
    containing it, case-insensitive); else the known names (at most 40)."""
    import difflib
    low = ref.strip().lower()
    lowmap = {x.lower(): x for x in names}
    close = [lowmap[x] for x in difflib.get_close_matches(low, list(lowmap), n=n, cutoff=0.6)]
    if low and len(low) >= 2:
        close += [x for x in names if x.lower().startswith(low) and x not in close]
        close += [x for x in names if low in x.lower() and x not in close]
    close = close[:n]
    if close:
        return "; did you mean " + " or ".join(repr(x) for x in close) + "?"
    shown = names[:40]
    more = f", ... ({len(names)} in all)" if len(names) > len(shown) else ""
    return f" (known: {', '.join(shown)}{more})" if names else ""


def check_roots(extra: list[str] | tuple[str, ...] = ()) -> None:
    """Every catalog folder given (--catalog, BAIGE_PLAN_CATALOG) must be a folder: a typo is an error
    naming the option or variable and the path, never silently ignored."""
    for p in extra:
        if file_kind(p) != "dir":
            raise InputError("--catalog", "", f"{_short(p)} is not a directory")
    env = os.environ.get("BAIGE_PLAN_CATALOG", "")
    for p in env.split(os.pathsep):
        if p and file_kind(p) != "dir":
            raise InputError("BAIGE_PLAN_CATALOG", "", f"{_short(p)} is not a directory")


def check_cluster_size(cl: ClusterSpec, src: str) -> ClusterSpec:
    """At most MAX_GROUPS chip groups and MAX_DEVICES devices (baige_plan/limits.py)."""
    if len(cl.groups) > MAX_GROUPS:
        raise InputError(src, "groups", f"{len(cl.groups)} groups exceed the limit of {MAX_GROUPS}")
    if cl.devices > MAX_DEVICES:
        raise InputError(src, "groups", f"{cl.devices:,} devices exceed the limit of {MAX_DEVICES:,}")
    return cl


_PART = re.compile(r":(\d+)x(\d+)$")


def _check_shorthand(ref: str) -> None:
    """Refuse absurd shorthand sizes before anything is built (`a100-sxm4-80g:99999999x8`)."""
    parts = ref.split("+")
    if len(parts) > MAX_GROUPS:
        raise InputError("CLUSTER", "", f"{len(parts)} groups exceed the limit of {MAX_GROUPS}")
    total = 0
    for i, part in enumerate(parts):
        m = _PART.search(part.strip())
        if m is None:
            continue
        if any(len(g) > 9 for g in m.groups()):
            raise InputError("CLUSTER", f"part {i + 1}", f"more than the limit of {MAX_DEVICES:,} devices")
        nodes, dpn = int(m[1]), int(m[2])
        total += nodes * dpn
        if total > MAX_DEVICES:
            raise InputError("CLUSTER", f"part {i + 1}", f"{nodes:,}x{dpn:,}: the cluster exceeds the limit of "
                             f"{MAX_DEVICES:,} devices")


def _short(text: str, n: int = 120) -> str:
    """repr of a user string, cut to n characters (an error stays one readable line)."""
    return repr(text) if len(text) <= n else repr(text[:n]) + f"... ({len(text)} characters)"


def _looks_like_hf(p: Path) -> bool:
    if p.suffix != ".json" or not is_regular_file(p):
        return False
    try:
        with open(p, "rb") as f:
            head = f.read(4000).decode("utf-8", "replace")
    except OSError:
        return False
    return '"model_type"' in head or '"architectures"' in head
