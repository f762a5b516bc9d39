"""Resolve MODEL / CLUSTER / chip references against catalog folders (user ones first)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from baige_plan.errors import InputError
from baige_plan.io.chips import load_chip_file
from baige_plan.io.models import load_model_file
from baige_plan.io.paths import catalog_roots
from baige_plan.io.topologies import cluster_from_shorthand, is_shorthand, load_topology_file
from baige_plan.specs.chip import ChipSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.topology import ClusterSpec

_EXTS = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Catalog:
    roots: tuple[Path, ...]

    @classmethod
    def create(cls, extra: list[str] | tuple[str, ...] = ()) -> Catalog:
        for p in extra:
            if not Path(p).is_dir():
                raise InputError("--catalog", "", f"{p!r} is not a directory")
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
                    if p.is_file():
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
        if p.suffix in _EXTS and p.is_file():
            return load_chip_file(p)
        found = self.find("chips", ref)
        if found is None:
            known = ", ".join(self.names("chips"))
            raise InputError(source, field, f"unknown chip {ref!r} (known: {known})")
        return load_chip_file(found)

    # -- models --------------------------------------------------------------------------
    def model(self, ref: str) -> ModelSpec:
        p = Path(ref)
        if p.is_file():
            if p.name == "config.json" or _looks_like_hf(p):
                from baige_plan.io.hf_config import load_hf_config
                return load_hf_config(p)
            return load_model_file(p)
        found = self.find("models", ref)
        if found is None:
            if p.suffix in _EXTS:
                raise InputError(ref, "", "file not found")
            raise InputError("MODEL", "", f"unknown model {ref!r}: not a file and not a catalog model "
                             f"(known: {', '.join(self.names('models'))})")
        return load_model_file(found)

    # -- clusters ------------------------------------------------------------------------
    def cluster(self, ref: str) -> tuple[ClusterSpec, bool]:
        """Returns (cluster, default_bridge_added)."""
        p = Path(ref)
        if p.is_file():
            return load_topology_file(p, self.chip), False
        found = self.find("topologies", ref)
        if found is not None:
            return load_topology_file(found, self.chip), False
        if ":" in ref and is_shorthand(ref):
            return cluster_from_shorthand(ref, self.chip)
        if p.suffix in _EXTS:
            raise InputError(ref, "", "file not found")
        raise InputError("CLUSTER", "", f"{ref!r} is not a topology file, a catalog topology "
                         f"({', '.join(self.names('topologies'))}) or CHIP:NODESxDEVICES[+...] shorthand")


def _looks_like_hf(p: Path) -> bool:
    if p.suffix != ".json":
        return False
    try:
        head = p.read_text(encoding="utf-8")[:4000]
    except OSError:
        return False
    return '"model_type"' in head or '"architectures"' in head
