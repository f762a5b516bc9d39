"""Strict YAML/JSON reading: safe loader, `schema:` line, unknown keys are errors.

Every error is an InputError naming the file, the field (dotted path) and the reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from baige_plan.errors import InputError


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (a silent override is a bug in a config)."""


def _construct_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_document(path: str | Path) -> Any:
    """Parse a YAML or JSON file (JSON by extension) with a safe loader."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(str(p), "", "file not found") from None
    except IsADirectoryError:
        raise InputError(str(p), "", "is a directory, expected a file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(str(p), "", f"cannot read: {e}") from None
    try:
        if p.suffix.lower() == ".json":
            return json.loads(text)
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except json.JSONDecodeError as e:
        raise InputError(str(p), f"line {e.lineno}", f"invalid JSON: {e.msg}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(str(p), where, f"invalid YAML: {problem}") from None


def expect_schema(doc: Any, source: str, schema: str) -> dict:
    if not isinstance(doc, dict):
        raise InputError(source, "", f"expected a mapping with 'schema: {schema}', got {type(doc).__name__}")
    got = doc.get("schema")
    if got is None:
        raise InputError(source, "schema", f"missing; expected 'schema: {schema}'")
    if got != schema:
        raise InputError(source, "schema", f"expected {schema!r}, got {got!r}")
    return doc


def check_keys(d: Any, source: str, path: str, required: set[str], optional: set[str] = frozenset()) -> dict:
    """Validate a mapping's keys: all required present, nothing unknown."""
    where = path or "(top level)"
    if not isinstance(d, Mapping):
        raise InputError(source, where, f"expected a mapping, got {type(d).__name__}")
    for k in d:
        if k not in required and k not in optional:
            known = ", ".join(sorted(required | set(optional)))
            raise InputError(source, f"{path}.{k}" if path else str(k), f"unknown key (allowed: {known})")
    for k in sorted(required):
        if k not in d:
            raise InputError(source, f"{path}.{k}" if path else k, "required key is missing")
    return dict(d)


def get_typed(d: Mapping, key: str, source: str, path: str, types: tuple, default: Any = ...) -> Any:
    """d[key] checked against types (bool is never accepted as a number)."""
    full = f"{path}.{key}" if path else key
    if key not in d or d[key] is None:
        if default is ...:
            raise InputError(source, full, "required value is missing")
        return default
    v = d[key]
    if isinstance(v, bool) and bool not in types:
        raise InputError(source, full, f"expected {'/'.join(t.__name__ for t in types)}, got {v!r}")
    if not isinstance(v, types):
        raise InputError(source, full, f"expected {'/'.join(t.__name__ for t in types)}, got {v!r}")
    return v
