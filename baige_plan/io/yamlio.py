"""Strict YAML/JSON reading: safe loader, `schema:` line, unknown keys are errors.

Every error is an InputError naming the file, the field (dotted path) and the reason. Hostile input is
refused in bounded time and memory (baige_plan/limits.py): only regular files within the size limit
(8 MiB; plan files 64 MiB), UTF-8; YAML through libyaml's safe loader when available, with duplicate
keys, complex keys, unsupported tags and recursive aliases refused, alias expansion and nesting depth
limited; JSON with duplicate keys and NaN/Infinity refused; every number finite and |n| <= 2^63 - 1.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from baige_plan.errors import InputError
from baige_plan.limits import MAX_ALIAS_NODES, MAX_DEPTH, MAX_INPUT_BYTES, MAX_INT, MAX_PLAN_BYTES

PLAN_SCHEMA = "baige-plan/plan/v1"


_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml when built in: ~5x faster
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class _StrictLoader(_BASE_LOADER):
    """Safe loader (libyaml's when available) that refuses duplicate keys (a silent override is a bug in a
    config) and the tags no input needs (!!binary, !!set, !!omap, !!pairs, !!timestamp); an unquoted date
    stays a string."""


# dates are plain strings: a copy of the resolver table without the timestamp rule
_StrictLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in rules if tag != _TIMESTAMP]
    for ch, rules in yaml.resolver.Resolver.yaml_implicit_resolvers.items()}


def _construct_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":     # `<<: *base`: explicit keys override merged ones
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            dup = key in seen
        except TypeError:
            raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a plain value",
                                                    key_node.start_mark) from None
        if dup:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.constructor.SafeConstructor.construct_mapping(loader, node, deep)


def _refuse_tag(loader, node):
    raise yaml.constructor.ConstructorError(None, None, f"tag {node.tag.replace('tag:yaml.org,2002:', '!!')} is "
                                            "not supported in baige-plan files", node.start_mark)


def _scalar(kind: str, construct):
    def f(loader, node):
        try:
            return construct(loader, node)
        except (ValueError, OverflowError):     # `!!int 3.5`, an integer of more than 4300 digits
            v = str(node.value)
            shown = repr(v) if len(v) <= 40 else f"{v[:20]!r}... ({len(v)} characters)"
            raise yaml.constructor.ConstructorError(None, None, f"{shown} is not {kind}", node.start_mark) from None
    return f


_StrictLoader.add_constructor("tag:yaml.org,2002:int",
                              _scalar("an integer", yaml.constructor.SafeConstructor.construct_yaml_int))
_StrictLoader.add_constructor("tag:yaml.org,2002:float",
                              _scalar("a number", yaml.constructor.SafeConstructor.construct_yaml_float))
_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
for _t in ("binary", "set", "omap", "pairs", "timestamp"):
    _StrictLoader.add_constructor(f"tag:yaml.org,2002:{_t}", _refuse_tag)


# -- reading files ---------------------------------------------------------------------------------------

def file_kind(path: str | Path) -> str | None:
    """'file', 'dir' or 'other' (device, pipe, socket) for an existing path (links followed), else None.
    Never raises: a path the system cannot even look up (too long, NUL byte, link loop) is None."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else "other"


def is_regular_file(path: str | Path) -> bool:
    return file_kind(path) == "file"


def _size_limit(p: Path, size: int) -> int:
    """8 MiB for inputs; plan files (written by `plan --out`, schema on their first lines) may be larger."""
    if size <= MAX_INPUT_BYTES:
        return MAX_INPUT_BYTES
    try:
        with open(p, "rb") as f:
            head = f.read(4096)
    except OSError:
        return MAX_INPUT_BYTES
    return MAX_PLAN_BYTES if PLAN_SCHEMA.encode() in head else MAX_INPUT_BYTES


def read_input_bytes(path: str | Path) -> bytes:
    """A regular file's bytes, within the size limit, or an InputError naming the file (missing, a folder,
    a device, pipe or socket, too large, unreadable). Never blocks on a pipe, never reads a device."""
    p = Path(path)
    src = str(p)
    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        raise InputError(src, "", "file not found") from None
    except OSError as e:
        raise InputError(src, "", f"cannot read: {e.strerror or e}") from None
    except ValueError:
        raise InputError(src, "", "invalid path (it contains a NUL byte)") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(src, "", "is a directory, expected a file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(src, "", "is not a regular file (a device, pipe or socket); give a file")
    limit = _size_limit(p, st.st_size)
    too_big = f"is larger than the {limit >> 20} MiB limit for input files"
    if st.st_size > limit:
        raise InputError(src, "", f"{too_big} ({st.st_size / 2 ** 20:.1f} MiB)")
    try:
        with open(p, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise InputError(src, "", f"cannot read: {e.strerror or e}") from None
    if len(data) > limit:
        raise InputError(src, "", too_big)
    return data


def _decode(data: bytes, src: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(src, "", f"not UTF-8 text (byte {e.start}: {e.reason})") from None


def read_document(path: str | Path) -> Any:
    """Parse a YAML or JSON file (JSON by extension), strictly: a regular file within the size limit,
    UTF-8; YAML with a safe loader, no duplicate or complex keys, aliases bounded, no recursion;
    nesting at most MAX_DEPTH; keys strings; numbers finite and |n| <= 2^63 - 1.
    Every refusal is an InputError naming the file, the field (or line) and the reason."""
    p = Path(path)
    return parse_text(_decode(read_input_bytes(p), str(p)), str(p), json_=p.suffix.lower() == ".json")


def read_json(path: str | Path) -> Any:
    """read_document for a JSON file whatever its name (Hugging Face config.json)."""
    p = Path(path)
    return parse_text(_decode(read_input_bytes(p), str(p)), str(p), json_=True)


def parse_text(text: str, src: str, *, json_: bool = False) -> Any:
    """Parse a document already read (YAML, or JSON when json_); the same checks as read_document."""
    doc = _parse_json(text, src) if json_ else _parse_yaml(text, src)
    check_values(doc, src)
    return doc


class _JSONRefusal(Exception):
    def __init__(self, field: str, reason: str):
        super().__init__(reason)
        self.field, self.reason = field, reason


def _json_pairs(pairs: list) -> dict:
    d: dict = {}
    for k, v in pairs:
        if k in d:
            raise _JSONRefusal(k, "duplicate key (each key may appear once)")
        d[k] = v
    return d


def _parse_json(text: str, src: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_json_pairs)   # NaN/Infinity: refused by check_values, by path
    except _JSONRefusal as e:
        raise InputError(src, e.field, e.reason) from None
    except json.JSONDecodeError as e:
        raise InputError(src, f"line {e.lineno}", f"invalid JSON: {e.msg}") from None
    except RecursionError:
        raise InputError(src, "", f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:     # e.g. an integer of more than 4300 digits
        raise InputError(src, "", f"invalid JSON: {str(e).splitlines()[0]}") from None


def _parse_yaml(text: str, src: str) -> Any:
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, src)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(src, where, f"invalid YAML: {problem}") from None
    except RecursionError:      # the pure-Python loader's composer on deep nesting
        raise InputError(src, "", f"nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, OverflowError) as e:   # e.g. `!!int 3.5`, an integer of more than 4300 digits
        raise InputError(src, "", f"invalid value: {str(e).splitlines()[0][:200]}") from None
    finally:
        loader.dispose()


def _check_nodes(root, src: str) -> None:
    """Before any value is built: nesting depth, complex keys, and aliases -- no recursion (`&a [*a]`), and
    expansion bounded (a 'billion laughs' document composes to a few nodes and expands to 10^9)."""
    size: dict[int, int] = {}       # id(node) -> nodes when expanded
    height: dict[int, int] = {}
    on_path: set[int] = set()
    distinct = 0
    stack: list = [(root, 1, False)]

    def children(n):
        if isinstance(n, yaml.MappingNode):
            return [c for kv in n.value for c in kv]
        if isinstance(n, yaml.SequenceNode):
            return n.value
        return ()

    def line(n) -> str:
        return f"line {n.start_mark.line + 1}" if getattr(n, "start_mark", None) is not None else ""

    while stack:
        node, depth, done = stack.pop()
        nid = id(node)
        if done:
            on_path.discard(nid)
            kids = children(node)
            size[nid] = 1 + sum(size[id(c)] for c in kids)
            height[nid] = 1 + max((height[id(c)] for c in kids), default=0)
            continue
        if nid in size:             # an alias of a node already checked
            if depth - 1 + height[nid] > MAX_DEPTH:
                raise InputError(src, line(node), f"nested deeper than {MAX_DEPTH} levels")
            continue
        if depth > MAX_DEPTH:
            raise InputError(src, line(node), f"nested deeper than {MAX_DEPTH} levels")
        distinct += 1
        on_path.add(nid)
        stack.append((node, depth, True))
        if isinstance(node, yaml.MappingNode):
            for k, _ in node.value:
                if not isinstance(k, yaml.ScalarNode):
                    raise InputError(src, line(k), "complex mapping key (? [...] or ? {...}); keys must be "
                                     "plain strings")
        for c in children(node):
            if id(c) in on_path:
                raise InputError(src, line(c), "recursive alias: an anchor (&name) is used inside itself")
            stack.append((c, depth + 1, False))
    if size[id(root)] - distinct > MAX_ALIAS_NODES:
        raise InputError(src, "", f"aliases (*name) expand the document by {size[id(root)] - distinct:,} values, "
                         f"more than the limit of {MAX_ALIAS_NODES:,} (a YAML bomb?)")


def _join(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def check_values(doc: Any, src: str) -> None:
    """Every key a string, every number finite and within |n| <= 2^63 - 1, nesting <= MAX_DEPTH (JSON;
    YAML was checked on its nodes). Iterative: any document the parsers accept is walked in bounded time."""
    stack: list = [(doc, "", 1)]
    while stack:
        v, path, depth = stack.pop()
        if isinstance(v, dict):
            if depth > MAX_DEPTH:
                raise InputError(src, path, f"nested deeper than {MAX_DEPTH} levels")
            for k, x in v.items():
                if not isinstance(k, str):
                    raise InputError(src, _join(path, k), f"key {k!r} is not a string (quote it)")
                stack.append((x, _join(path, k), depth + 1))
        elif isinstance(v, list):
            if depth > MAX_DEPTH:
                raise InputError(src, path, f"nested deeper than {MAX_DEPTH} levels")
            stack.extend((x, f"{path}[{i}]", depth + 1) for i, x in enumerate(v))
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise InputError(src, path, f"must be a finite number, got {v}")
        elif isinstance(v, int) and not isinstance(v, bool):
            if abs(v) > MAX_INT:
                raise InputError(src, path, f"integer of {len(str(abs(v)))} digits is out of range "
                                 "(|n| <= 2^63 - 1)")


def kind_of(v: Any) -> str:
    """What a value is, in the words of a file format (for messages)."""
    if v is None:
        return "nothing (empty)"
    if isinstance(v, bool):
        return f"{str(v).lower()} (a boolean)"
    if isinstance(v, (int, float)):
        return f"the number {v!r}"
    if isinstance(v, str):
        return f"the string {v[:40]!r}" + ("..." if len(v) > 40 else "")
    if isinstance(v, list):
        return f"a list of {len(v)}"
    if isinstance(v, dict):
        return "a mapping"
    return type(v).__name__


def expect_schema(doc: Any, source: str, schema: str) -> dict:
    if not isinstance(doc, dict):
        raise InputError(source, "", f"expected a mapping with 'schema: {schema}', got {kind_of(doc)}")
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
        raise InputError(source, where, f"expected a mapping, got {kind_of(d)}")
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
