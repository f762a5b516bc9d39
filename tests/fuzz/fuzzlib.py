"""The input fuzzer of issue 12: seeded, deterministic malformed and hostile inputs for every command.

Each case is a command line plus the files (and environment) it needs, built from the repo's own valid
inputs (models, chips, topologies, Hugging Face configs, runs, plans and profiles the CLI writes) by
mutation: deleted keys, wrong types, huge/negative/zero/NaN/inf numbers, unicode, deep nesting, alias
bombs, duplicate and complex keys, tags, truncation, binary garbage, empty files, directories, pipes and
devices as input paths, and odd CLI values. Cases run in-process (typer's CliRunner) in forked worker
processes, so a hang is killed after the per-case timeout and a memory bomb hits the worker's address
space limit instead of the machine.

The contract each result is held to (SPEC §3):
  - exit code in {0, 1, 2} ({0, 2, 3} for `check`); never 70 ("internal error": an exception escaped);
  - no traceback; exit 2 prints exactly one error line on stderr (notes aside) and nothing on stdout;
  - the case finishes within the timeout;
  - a file the command read is judged as `validate` judges it: exit 1 (infeasible) only when `validate`
    passes the file, and a file `validate` rejects is rejected by the command (exit 2).

Case i of seed s depends only on (s, i), so a sample is a prefix of the whole run.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing import connection
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable

# -- cases ---------------------------------------------------------------------------------------

@dataclass
class Case:
    id: str
    family: str
    args: list[str]
    files: dict[str, object] = field(default_factory=dict)   # relative name -> bytes | ("dir",) | ("fifo",) | ...
    env: dict[str, str] = field(default_factory=dict)
    validate: str | None = None        # the mutated file, cross-checked with `validate`
    kind: str | None = None            # what `validate` must call it (model, chip, ..., hf-config)
    timeout: float = 10.0
    must_reject: str | None = None     # an invalid value the command must refuse (exit 2): what it is

    @property
    def command(self) -> str:
        return self.args[0] if self.args else ""


@dataclass
class Result:
    case: Case
    code: int                   # as `baige-plan` would exit (70: an exception escaped)
    stdout: str = ""
    stderr: str = ""
    exception: str = ""
    seconds: float = 0.0


# -- the valid inputs mutations start from ------------------------------------------------------

SMALL_CLUSTER = "a100-sxm4-80g:1x8"
HETERO_CLUSTER = "a100-sxm4-80g:1x8+ascend-910b:1x8"


def make_fixtures(d: Path) -> dict[str, Path]:
    """Plan and profile files written by the CLI itself (subprocesses, so nothing is imported here)."""
    d.mkdir(parents=True, exist_ok=True)
    runs = {
        "plan.yaml": ["plan", "llama3-8b", SMALL_CLUSTER, "--global-batch", "16", "--out", "{}"],
        "plan-moe.json": ["plan", "mixtral-8x7b", "a100-sxm4-80g:2x8", "--global-batch", "32", "--out", "{}"],
        "plan-hetero.yaml": ["plan", "llama3-8b", HETERO_CLUSTER, "--global-batch", "16", "--time-limit", "3",
                             "--out", "{}"],
        "profile.yaml": ["profile", "--model", "llama3-8b", "--chip", "h100-sxm5-80g", "--analytical", "--out", "{}"],
    }
    out = {}
    for name, args in runs.items():
        p = d / name
        if not p.is_file():
            cmd = [PY, "-m", "baige_plan"] + [a.replace("{}", str(p)) for a in args]
            subprocess.run(cmd, cwd=d, check=True, capture_output=True, timeout=120)
        out[name] = p
    return out


def _load(p: Path):
    text = p.read_text(encoding="utf-8")
    return json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)


def base_documents(fixtures: dict[str, Path]) -> dict[str, list[tuple[str, object]]]:
    """family -> [(file name, parsed document)]."""
    runs_doc = _load(REPO / "tests/data/published_calibration.yaml")
    h200 = _load(REPO / "benchmarks/real/runs_h200.yaml")
    return {
        "model": [(n, _load(REPO / "models" / n)) for n in ("llama3-8b.yaml", "mixtral-8x7b.yaml", "gpt3-175b.yaml",
                                                           "qwen3-235b-a22b.yaml")],
        "chip": [(n, _load(REPO / "chips" / n)) for n in ("a100-sxm4-80g.yaml", "h100-sxm5-80g.yaml",
                                                          "ascend-910b.yaml")]
                + [("h200-sxm-141g-profiled.yaml", _load(REPO / "chips/measured/h200-sxm-141g-profiled.yaml"))],
        "topology": [(n, _load(REPO / "topologies" / n)) for n in ("mixed-a100-910b-128.yaml",
                                                                   "hetero-h100-a100.yaml",
                                                                   "dgx-a100-superpod.yaml")],
        "hf": [(f"{n}/config.json", _load(REPO / "tests/data/hf" / n / "config.json"))
               for n in ("llama3-8b", "mixtral-8x7b", "gpt2", "qwen3-235b-a22b", "opt-1.3b", "bloom-560m")],
        "runs": [("runs.yaml", {"schema_version": 1, "rows": runs_doc["rows"][:2]}),
                 ("runs-h200.yaml", {k: v if k != "rows" else v[:2] for k, v in h200.items()})],
        "plan": [(n, _load(fixtures[n])) for n in ("plan.yaml", "plan-moe.json", "plan-hetero.yaml")],
        "raw": [("chip.raw.json", _load(REPO / "chips/measured/h100-sxm5-80g-profiled.raw.json"))],
        "profile": [("profile.yaml", _load(fixtures["profile.yaml"]))],
    }


def commands_for(family: str, f: str, fixtures: dict[str, Path], rng: random.Random) -> list[str]:
    """A command that reads file `f` of `family` (relative to the case folder)."""
    base_plan = str(fixtures["plan.yaml"])
    gb = ["--global-batch", "16"]
    if family == "model":
        return rng.choice([["plan", f, SMALL_CLUSTER, *gb, "--time-limit", "5"],
                           ["evaluate", f, SMALL_CLUSTER, *gb],
                           ["evaluate", f, SMALL_CLUSTER, *gb, "--tp", "2", "--pp", "2"],
                           ["validate", f]])
    if family == "chip":
        return rng.choice([["plan", "llama3-8b", f"{f}:1x8", *gb, "--time-limit", "5"],
                           ["evaluate", "llama3-8b", f"{f}:1x8", *gb],
                           ["plan", "llama3-8b", f"{f}:1x8+a100-sxm4-80g:1x8", *gb, "--time-limit", "3"],
                           ["validate", f]])
    if family == "topology":
        return rng.choice([["plan", "llama3-8b", f, "--global-batch", "128", "--time-limit", "3"],
                           ["evaluate", "llama3-8b", f],
                           ["validate", f]])
    if family == "hf":
        return rng.choice([["plan", f, SMALL_CLUSTER, *gb, "--time-limit", "5"],
                           ["evaluate", f, SMALL_CLUSTER, *gb],
                           ["validate", f]])
    if family == "runs":
        return rng.choice([["backtest", f], ["backtest", f, "--format", "json"], ["validate", f]])
    if family == "plan":
        return rng.choice([["explain", f], ["evaluate", "--plan", f], ["check", f, "--baseline", base_plan],
                           ["check", base_plan, "--baseline", f], ["diff", f, base_plan], ["export", f],
                           ["export", f, "--to", rng.choice(["megatron", "deepspeed", "torchtitan", "paddle",
                                                              "flagscale", "hostfile"])],
                           ["validate", f]])
    if family == "profile":
        return rng.choice([["plan", "llama3-8b", "h100-sxm5-80g:1x8", *gb, "--seq-len", "8192", "--profile", f,
                            "--time-limit", "5"],
                           ["evaluate", "llama3-8b", "h100-sxm5-80g:1x8", *gb, "--seq-len", "8192", "--profile", f],
                           ["validate", f]])
    if family == "raw":
        return ["profile", "--refit", f, "--out", "refit.yaml"]
    raise ValueError(family)


# -- mutations --------------------------------------------------------------------------------------

WEIRD = [0, -1, 1, 2, 3, 7, 13, -(2 ** 63), 2 ** 63, 2 ** 64 + 1, 10 ** 30, 99999999, 1_000_000_000, 1.5, -0.0,
         1e308, -1e308, 1e-320, math.nan, math.inf, -math.inf, "", " ", "x", "1", "1e30", "0x10", "ﬁ", "層",
         "\u202egnp.", "\x00", "a" * 5000, None, True, False, [], {}, [1, 2], {"a": 1}, [[[[1]]]], [None],
         "../../../etc/passwd", "/dev/zero", "llama3-8b", "a100-sxm4-80g", "NaN", "null", [math.nan, 1],
         {"value": math.inf, "sources": ["x"]}]


def _paths(doc, limit: int = 4000) -> list[tuple]:
    out, stack = [], [((), doc)]
    while stack and len(out) < limit:
        path, node = stack.pop()
        if path:
            out.append(path)
        if isinstance(node, dict):
            stack.extend((path + (k,), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((path + (i,), v) for i, v in enumerate(node))
    out.sort(key=repr)
    return out


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def mutate_tree(doc, rng: random.Random):
    doc = copy.deepcopy(doc)
    paths = _paths(doc)
    if not paths:
        return rng.choice(WEIRD)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        paths = _paths(doc)
        if not paths:
            break
        path = rng.choice(paths)
        parent, key = _get(doc, path[:-1]), path[-1]
        op = rng.choice(("delete", "weird", "weird", "weird", "unknown", "wrap", "scale", "swap", "grow", "empty"))
        if op == "delete":
            del parent[key]
        elif op == "weird":
            parent[key] = copy.deepcopy(rng.choice(WEIRD))
        elif op == "unknown":
            target = parent if isinstance(parent, dict) else doc
            if isinstance(target, dict):
                target[rng.choice(("unknown_key", "Layers", "schema2", "ζ", "", "1"))] = rng.choice(WEIRD[:20])
        elif op == "wrap":
            parent[key] = [parent[key]]
        elif op == "scale":
            v = parent[key]
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                parent[key] = rng.choice((v * 10 ** rng.randint(3, 30), -v, v + 1, v - 1, v / 3, int(v) * 1024))
            else:
                parent[key] = rng.choice(WEIRD)
        elif op == "swap":
            v = parent[key]
            parent[key] = (list(v.values()) if isinstance(v, dict) else
                           {str(i): x for i, x in enumerate(v)} if isinstance(v, list) else str(v))
        elif op == "grow":
            v = parent[key]
            if isinstance(v, list) and v:
                parent[key] = v * rng.choice((2, 10, 200))
            elif isinstance(v, str):
                parent[key] = v * 1000
        elif op == "empty":
            v = parent[key]
            parent[key] = type(v)() if isinstance(v, (list, dict, str)) else None
    return doc


def dump(doc, as_json: bool, rng: random.Random) -> bytes:
    if as_json:
        text = json.dumps(doc, indent=rng.choice((None, 1)), ensure_ascii=rng.random() < 0.5)
    else:
        text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=rng.choice((80, 10 ** 6)))
    return text.encode("utf-8")


BOMB = (b'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
        b"b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        b"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
        b"f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
        b"h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\ni: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n")

NUMBERS = ["1e30", "0x10", "0o17", "1_000", "1:30", ".inf", "-.inf", ".nan", ".NaN", "9" * 5000, "-0", "+7",
           "1.0e+400", "0b101", "~", "!!float 12", "!!int 3.5", "!!str 8", "1e-400", "0.", "08"]


def mutate_text(data: bytes, rng: random.Random, as_json: bool) -> bytes:
    op = rng.choice(("truncate", "garbage", "dupline", "number", "number", "bom", "utf16", "latin1", "multidoc",
                     "tag", "complexkey", "alias", "bomb", "recursive", "deep", "deepblock", "nul", "crlf"))
    text = data.decode("utf-8", "replace")
    lines = text.splitlines(keepends=True) or [""]
    if op == "truncate":
        return data[:rng.randint(0, max(0, len(data) - 1))]
    if op == "garbage":
        i = rng.randint(0, len(data))
        return data[:i] + bytes(rng.randrange(256) for _ in range(rng.choice((1, 8, 64)))) + data[i:]
    if op == "dupline":
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        return "".join(lines).encode()
    if op == "number":
        nums = list(re.finditer(r"(?<![\w.])\d+(\.\d+)?(?![\w.])", text))
        if not nums:
            return data
        m = rng.choice(nums)
        return (text[:m.start()] + rng.choice(NUMBERS) + text[m.end():]).encode()
    if op == "bom":
        return b"\xef\xbb\xbf" + data
    if op == "utf16":
        return text.encode("utf-16")
    if op == "latin1":
        return data.replace(b"a", b"\xe9", 1)
    if op == "multidoc":
        return data + b"\n---\nschema: x\n"
    if op == "nul":
        i = rng.randint(0, len(data))
        return data[:i] + b"\x00" + data[i:]
    if op == "crlf":
        return data.replace(b"\n", b"\r\n")
    if as_json:
        if op in ("deep", "deepblock", "bomb", "recursive"):
            depth = rng.choice((100, 1000, 100000))
            return data.replace(b"{", b'{"deep": ' + b"[" * depth + b"]" * depth + b", ", 1)
        return data
    # YAML-only attacks, at the top level of a mapping document
    tail = {
        "tag": rng.choice(["t: !!binary aGVsbG8=\n", "t: !!set {a, b}\n", "t: !!python/object/apply:os.system [ls]\n",
                           "t: !!timestamp 2001-12-14\n", "t: 2001-12-14\n", "t: !!omap [a: 1]\n", "t: !custom 1\n"]),
        "complexkey": rng.choice(["? [a, b]\n: 1\n", "? {a: 1}\n: 2\n", "[x]: 1\n", "1: one\n", "null: x\n",
                                  "on: true\n", "1.5: x\n"]),
        "alias": "x: &x {a: 1}\ny: *x\n<<: *x\n",
        "bomb": BOMB.decode(),
        "recursive": "r: &r [*r]\n",
        "deep": "d: " + "[" * rng.choice((60, 200, 2000)) + "]" * 2000 + "\n",
        "deepblock": _deep_block(rng.choice((70, 300))),
    }[op]
    if rng.random() < 0.5 or op in ("bomb", "recursive"):
        return data + b"\n" + tail.encode()
    # replace a random value line "key: value" with the attack's value
    cands = [i for i, ln in enumerate(lines) if re.match(r"^\s*[A-Za-z_]+: \S", ln)]
    if not cands or op in ("complexkey", "deepblock"):
        return data + b"\n" + tail.encode()
    i = rng.choice(cands)
    ind = re.match(r"^(\s*[A-Za-z_]+: )", lines[i]).group(1)
    val = tail.split(": ", 1)[1] if ": " in tail else tail
    if op == "alias":
        val = "*nowhere\n"
    lines[i] = ind + val if val.endswith("\n") else ind + val + "\n"
    return "".join(lines).encode()


def _deep_block(depth: int) -> str:
    """A mapping nested `depth` levels by indentation."""
    return "d:\n" + "".join(" " * (i + 1) + f"k{i}:\n" for i in range(depth)) + " " * (depth + 1) + "v: 1\n"


GARBAGE_FILES = [b"", b" \n\t\n", b"null\n", b"[]\n", b"42\n", b"---\n", b"--- \n...\n", b"\x00\x01\x02\xff\xfe",
                 b'"just a string"', b"{", b"schema: baige-plan/model/v1\n", b"schema: baige-plan/plan/v1\n",
                 b"schema: baige-plan/chip/v1\n", b"schema: baige-plan/topology/v1\n", b"rows: []\n",
                 b"rows: [1, 2]\n", b'{"model_type": "llama"}', b'{"model_type": 5}', b"model_type: llama\n",
                 b"schema: [1]\n", b"schema: {a: 1}\n", BOMB, b"r: &r [*r]\nschema: baige-plan/model/v1\n",
                 b"[" * 5000 + b"]" * 5000, b"a:\n  a:\n   a:\n" * 3, b"\xef\xbb\xbf{}", b"%YAML 1.2\n---\na: 1\n",
                 b"%TAG ! tag:x,2000:\n---\na: !foo 1\n", b"&a a: 1\n", b"? ? ? a\n"]

SPECIALS = [("dir",), ("fifo",), ("devnull",), ("devzero",), ("symloop",), ("dangling",), ("missing",),
            ("longname",), ("emptydir-json",)]

SPECIAL_COMMANDS = [
    lambda f: ["plan", f, SMALL_CLUSTER, "--global-batch", "16", "--time-limit", "5"],
    lambda f: ["evaluate", "llama3-8b", f],
    lambda f: ["evaluate", "--plan", f],
    lambda f: ["explain", f], lambda f: ["export", f], lambda f: ["backtest", f], lambda f: ["validate", f],
    lambda f: ["diff", f, f], lambda f: ["check", f, "--baseline", f],
    lambda f: ["plan", "llama3-8b", f"{f}:1x8", "--time-limit", "5"],
    lambda f: ["plan", "llama3-8b", SMALL_CLUSTER, "--global-batch", "16", "--profile", f, "--time-limit", "5"],
    lambda f: ["plan", "llama3-8b", SMALL_CLUSTER, "--global-batch", "16", "--out", f, "--time-limit", "5"],
    lambda f: ["export", "PLAN", "--out-dir", f],
    lambda f: ["catalog", "chips", "--catalog", f],
    lambda f: ["profile", "--refit", f, "--out", "refit.yaml"],
    lambda f: ["profile", "--refit", str(REPO / "chips/measured/h100-sxm5-80g-profiled.raw.json"), "--out", f],
]

# -- CLI values ----------------------------------------------------------------------------------------

VALUES = ["0", "-1", "-0", "1", "2", "3", "nan", "NaN", "inf", "-inf", "1e3", "abc", "", "99999999999999999999999",
          "1000000000", "99999999", "2.5", " 8", "0x10", "1_000", "٣", "+4", "\u200b4", "-", "--", "1e-300",
          "0.0", "1.0", "4294967296", "-2147483649", "16777217", "1048577"]

INT_OPTS = {
    "plan": ["--global-batch", "--seq-len", "--top", "--max-tp", "--max-pp", "--max-cp", "--max-micro-batch",
             "--tp", "--pp", "--dp", "--cp", "--ep", "--etp", "--zero", "--micro-batch", "--vpp"],
    "evaluate": ["--global-batch", "--seq-len", "--tp", "--pp", "--dp", "--cp", "--ep", "--etp", "--zero",
                 "--micro-batch", "--vpp", "--first-stage-layers", "--last-stage-layers"],
}
FLOAT_OPTS = {"plan": ["--time-limit", "--max-memory-frac"], "evaluate": ["--max-memory-frac"],
              "check": ["--tolerance"]}
ENUM_OPTS = {"--precision": ["bf16", "fp8", "fp4", "fp32", "tf32", "int4", "BF16", ""],
             "--format": ["table", "json", "yaml", "xml", ""], "--runtime": ["megatron", "deepspeed", "torchtitan",
                                                                           "paddle", "flagscale", "pytorch", "jax"],
             "--recompute": ["none", "full", "partial"], "--attention": ["flash", "standard", "sparse"]}

CLUSTERS = ["a100-sxm4-80g:99999999x8", "a100-sxm4-80g:1x99999999", "a100-sxm4-80g:0x8", "a100-sxm4-80g:8x0",
            "a100-sxm4-80g:1x8+", "+", ":", "a100-sxm4-80g:", "a100-sxm4-80g:1x8x8", "a100-sxm4-80g:١x٨",
            "nochip:1x8", "a100-sxm4-80g:1x8+" * 300 + "a100-sxm4-80g:1x8", "a100-sxm4-80g:131072x8",
            "a100-sxm4-80g:1048576x1", "a100-sxm4-80g:1024x1024", "a100-sxm4-80g:00001x0008",
            "a100-sxm4-80g:1x" + "9" * 5000, "../chips/a100-sxm4-80g:1x8", "a100-sxm4-80g:1x8+a100-sxm4-80g:1x8",
            "a100-sxm4-80g:1x8+ascend-910b:1x8+v100-sxm2-32g:1x8+mi300x:1x8+gaudi2:1x8", "/dev/zero:1x8",
            "a100-sxm4-80g:3x7", "a100-sxm4-80g:1x1", "kunlun-p800:1x8", "h100-sxm5-80g:2x8", "", " ", "-",
            "a100-sxm4-80g :1x8", "A100-SXM4-80G:1x8", "tpu-v5p:1x4", "a100-sxm4-80g:1x8+" + "ascend-910b:1x8"]
MODELS = ["", "-", "nonexistent", "../models/llama3-8b", "llama3-8b.yaml", "models", "/", ".", "a" * 300,
          "gpt-1t", "llama3-405b", "qwen3-235b-a22b", "opt-350m", "LLAMA3-8B", "llama3-8b\n", "config.json"]


LISTS = ["1", "1,2", "", ",", "0", "-1", "a,b", "1,,2", "99999999", "1.5", " 2 ", "٣", ",".join(["1"] * 100),
         "none,selective", "full", "partial", "1e3"]


def cli_case(rng: random.Random) -> tuple[list[str], dict[str, str]]:
    kind = rng.choice(("plan", "plan", "evaluate", "evaluate", "check", "enum", "cluster", "model", "env",
                       "misc", "profile"))
    env: dict[str, str] = {}
    if kind == "profile":
        args = ["profile", "--model", rng.choice(["llama3-8b", "mixtral-8x7b", "nonexistent", ""]), "--chip",
                rng.choice(["h100-sxm5-80g", "a100-sxm4-80g", "nochip", "kunlun-p800"]), "--analytical",
                "--out", "prof.yaml"]
        for o in rng.sample(["--tp", "--micro-batch", "--recompute", "--seq-len", "--precision", "--reps", "--name"],
                            rng.choice((1, 2))):
            args += [o, rng.choice(LISTS if o in ("--tp", "--micro-batch", "--recompute") else
                                   ["bf16", "fp8", "xx", ""] if o == "--precision" else VALUES)]
        return args, env
    if kind in ("plan", "evaluate"):
        cluster = rng.choice([SMALL_CLUSTER, SMALL_CLUSTER, "a100-sxm4-80g:4x8", HETERO_CLUSTER])
        model = rng.choice(["llama3-8b", "llama3-8b", "mixtral-8x7b", "gpt3-175b"])
        args = [kind, model, cluster]
        if kind == "plan":
            args += ["--time-limit", "3"]
        opts = rng.sample(INT_OPTS[kind] + FLOAT_OPTS[kind], rng.choice((1, 1, 2, 3)))
        for o in opts:
            v = rng.choice(VALUES)
            if o in args:
                i = args.index(o)
                del args[i:i + 2]
            args += [o, v] if rng.random() < 0.9 else [f"{o}={v}"]
        return args, env
    if kind == "check":
        return ["check", "PLAN", "--baseline", "PLAN", "--tolerance", rng.choice(VALUES)], env
    if kind == "enum":
        cmd = rng.choice(("plan", "evaluate"))
        o = rng.choice(list(ENUM_OPTS))
        args = [cmd, "llama3-8b", rng.choice([SMALL_CLUSTER, HETERO_CLUSTER]), o, rng.choice(ENUM_OPTS[o])]
        return args + (["--time-limit", "3"] if cmd == "plan" else []), env
    if kind == "cluster":
        cmd = rng.choice(("plan", "evaluate", "plan"))
        args = [cmd, "llama3-8b", rng.choice(CLUSTERS)]
        if rng.random() < 0.5:
            args += ["--global-batch", rng.choice(["16", "1000000000", "16777216", "1024"])]
        return args + (["--time-limit", "3"] if cmd == "plan" else []), env
    if kind == "model":
        cmd = rng.choice(("plan", "evaluate"))
        return [cmd, rng.choice(MODELS), SMALL_CLUSTER] + (["--time-limit", "3"] if cmd == "plan" else []), env
    if kind == "env":
        env["BAIGE_PLAN_CATALOG"] = rng.choice(["/nonexistent", "/dev/null", "", "::", "/etc/passwd", ".",
                                                "/nonexistent:/also-not", "CATDIR"])
        return rng.choice([["plan", "llama3-8b", SMALL_CLUSTER, "--time-limit", "3"], ["catalog", "chips"],
                           ["validate", "PLAN"], ["explain", "PLAN"], ["evaluate", "llama3-8b", SMALL_CLUSTER],
                           ["catalog", "models", "llama3-8b"], ["backtest", "nofile.yaml"]]), env
    return rng.choice([
        ["catalog", rng.choice(["chips", "models", "topologies", "chip", "", "CHIPS"]),
         rng.choice(["a100-sxm4-80g", "llama3-8b", "nonexistent", "../../etc/passwd", "", "mixed-a100-910b-128"])],
        ["catalog", "chips", "--catalog", rng.choice(["/nonexistent", "/dev/null", "CATDIR", "/"])],
        ["catalog", "models", "--format", rng.choice(["json", "yaml", "csv"])],
        ["plan"], ["evaluate"], ["evaluate", "llama3-8b"], ["plan", "llama3-8b"], ["validate"], ["check", "PLAN"],
        ["export", "PLAN", "--to", rng.choice(["megatron", "jax", "hostfile", ""])],
        ["export", "PLAN", "--out-dir", rng.choice(["/dev/null", "/proc/self", "out", "PLAN"])],
        ["plan", "llama3-8b", SMALL_CLUSTER, "--out", rng.choice(["/dev/null", "x.txt", "nodir/x.yaml", ".", "x.yml",
                                                                  "x.JSON", "/proc/version"]), "--time-limit", "3"],
        ["backtest", "RUNS", "--format", rng.choice(["json", "table", "csv", ""])],
        ["--version"], ["--help"], ["plan", "--help"], ["nosuchcommand"], ["plan", "--bogus"],
        ["evaluate", "llama3-8b", SMALL_CLUSTER, "--tp"], ["evaluate", "llama3-8b", SMALL_CLUSTER, "extra-arg"],
        ["validate", "PLAN", "PLAN", "RUNS"],
    ]), env


# -- every other command and option (issue 19): replan, whatif, profile, plan's money options, explain's
# pictures, check's baseline update, backtest's gates, export's folders. Values known to be invalid carry
# must_reject: the command has to refuse them (exit 2), not run with them.

HUGE = "9" * 5000
BAD_INTS = ["0", "-1", "1e3", "nan", "²", "٣x", HUGE, "99999999999999999999", "", " ", "1.5", "\x1b[31m1"]
BAD_FLOATS = ["nan", "NaN", "inf", "-inf", "-1", "1e308", "-1e308", "", "abc", HUGE, "1e999"]
ESC = "\x1b[31mRED\x1b[0m\x07"
G = "a100-sxm4-80g"          # the group of PLAN's cluster (SMALL_CLUSTER)


def cmd_case(rng: random.Random) -> tuple[list[str], dict[str, object], str | None]:
    """(args, files, must_reject) for a command or option the file families do not reach."""
    cmd = rng.choice(("replan", "replan", "replan", "whatif", "whatif", "profile", "plan-money", "explain",
                      "check", "backtest", "export", "catalog", "diff", "evaluate"))
    files: dict[str, object] = {}
    if cmd == "replan":
        base = ["replan", "PLAN"]
        kind = rng.choice(("drop", "drop", "count", "add", "bridge", "loss", "time", "ok", "esc", "format"))
        if kind == "drop":
            v = rng.choice([f"{G}:{HUGE}", f"{G}:99999999", f"{G}:-1", f"{G}:1-0", f"{G}:²", f"{G}:0-{HUGE}",
                            "nogroup:0", f"{G}:", ":", "", f"{G}:0", f"{G}", f"{G}:0-0", ESC + ":0"])
            bad = None if v in (f"{G}:0", f"{G}", f"{G}:0-0") else f"--drop {v[:40]!r}"
            return base + ["--drop", v, "--time-limit", "3"], files, bad
        if kind == "count":
            v = rng.choice([f"{G}:²", f"{G}:0", f"{G}:-1", f"{G}:{HUGE}", f"{G}:99", f"{G}:٣", f"{G}:1", "x:1"])
            return base + ["--drop-count", v, "--time-limit", "3"], files, None if v == f"{G}:1" else f"--drop-count {v[:40]!r}"
        if kind == "add":
            v = rng.choice([f"{G}:99999999x8", f"{G}:1x99999999", f"{G}:{HUGE}x8", f"{G}:0x8", f"{G}:1x0",
                            f"{G}:131000x8", "nochip:1x8", "h100:1x8", f"{G}:1x8", "ascend-910b:1x8", f"{G}:1x8x8"])
            ok = v in (f"{G}:1x8", "ascend-910b:1x8", f"{G}:131000x8")    # 131,000 x 8 + 8: under the limit
            return base + ["--add", v, "--time-limit", "3"] + ([] if ok else []), files, None if ok else f"--add {v[:40]!r}"
        if kind == "bridge":
            return base + ["--drop-bridge", rng.choice([f"{G}:{G}", "a:b", "", ":", ESC]), "--time-limit", "3"], files, \
                "--drop-bridge on a one-group cluster"
        if kind == "loss":
            v = rng.choice(["nan", "inf", "-1", "1", "100%", "150%", "-3%", "", "x", "1e308", "3%", "0.05", "0"])
            ok = v in ("3%", "0.05", "0")
            return base + ["--drop-count", f"{G}:1", "--max-loss", v, "--time-limit", "3"], files, \
                None if ok else f"--max-loss {v!r}"
        if kind == "time":
            v = rng.choice(BAD_FLOATS + ["0", "1"])
            return base + ["--drop-count", f"{G}:1", "--time-limit", v], files, None if v == "1" else f"--time-limit {v[:20]!r}"
        if kind == "format":
            v = rng.choice(["json", "yaml", "table", "xml", ""])
            return base + ["--drop-count", f"{G}:1", "--format", v, "--time-limit", "3"], files, \
                None if v in ("json", "yaml", "table") else f"--format {v!r}"
        if kind == "esc":
            return base + ["--drop", f"{G}:0", "--out", rng.choice(["new.yaml", ESC + ".yaml", "nodir/x.yaml",
                                                                    "/dev/null", ".", ""]), "--time-limit", "3"], files, None
        return base + ["--drop", f"{G}:0", "--time-limit", "3", "--out", "new.yaml"], files, None
    if cmd == "whatif":
        args = ["whatif", "llama3-8b", "--global-batch", "16", "--tokens", "1e9", "--time-limit", "1"]
        kind = rng.choice(("pool", "pool", "tokens", "deadline", "budget", "ok", "model"))
        if kind == "pool":
            v = rng.choice([f"{G}:0", f"{G}:-1", f"{G}:{HUGE}", f"{G}:²", f"{G}:8:1e308", f"{G}:8:-1", f"{G}:8:nan",
                            f"{G}:8:inf", "nochip:8", "h100:8", f"{G}", f"{G}:8:1:2", f"{G}:99999999", ESC + ":8"])
            return args + ["--pool", v, "--deadline", "100"], files, f"--pool {v[:40]!r}"
        if kind in ("tokens", "deadline", "budget"):
            v = rng.choice(BAD_FLOATS + ["0"])
            a = [x for x in args if True]
            if kind == "tokens":
                i = a.index("--tokens")
                a[i + 1] = v
                a += ["--deadline", "100"]
            else:
                a += [f"--{kind}", v]
            return a + ["--pool", f"{G}:8"], files, f"--{kind} {v[:20]!r}"
        if kind == "model":
            return ["whatif", rng.choice(["nonexistent", "llama-8b", ESC, ""]), "--pool", f"{G}:8", "--global-batch",
                    "16", "--tokens", "1e9", "--deadline", "100"], files, "unknown model"
        return args + ["--pool", f"{G}:8", "--pool", "h100-sxm5-80g:8:4.5", rng.choice(["--deadline", "--budget"]),
                       rng.choice(["100", "1e6"]), "--format", rng.choice(["json", "table", "yaml"])], files, None
    if cmd == "profile":
        args = ["profile", "--model", "llama3-8b", "--chip", "h100-sxm5-80g", "--analytical"]
        kind = rng.choice(("out", "out", "name", "reps", "list", "seq", "chip", "model", "refit-out"))
        if kind == "out":
            v = rng.choice(["FIFO", "DIR", "nodir/p.yaml", "/dev/null", "/proc/version", "n" * 300 + ".yaml",
                            ESC + ".yaml", "p.yaml", "RO/p.yaml", ""])
            if v == "FIFO":
                files["fifo.yaml"] = ("fifo",)
                v = "fifo.yaml"
            elif v == "DIR":
                files["adir"] = ("dir",)
                v = "adir"
            elif v == "RO/p.yaml":
                files["ro"] = ("readonly",)
            return args + ["--out", v], files, None
        if kind == "name":
            v = rng.choice(["n" * 300, ESC, "../../x", "/", "a/b", "", "ok-name", "\u202egnp.x"])
            if rng.random() < 0.5:
                files["llama3-8b@h100-sxm5-80g-bf16-analytical.profile.yaml"] = ("fifo",)
            return args + ["--name", v], files, None
        if kind == "reps":
            v = rng.choice(BAD_INTS)
            return args + ["--reps", v, "--out", "p.yaml"], files, f"--reps {v[:20]!r}"
        if kind == "list":
            o = rng.choice(["--tp", "--micro-batch"])
            v = rng.choice(["0", "-1", "1,0", HUGE, "²", "nan", "1,,2", ""])
            return args + [o, v, "--out", "p.yaml"], files, f"{o} {v[:20]!r}"
        if kind == "seq":
            v = rng.choice(BAD_INTS)
            return args + ["--seq-len", v, "--out", "p.yaml"], files, f"--seq-len {v[:20]!r}"
        if kind == "chip":
            v = rng.choice(["nochip", "h100", ESC, "", "../../etc/passwd"])
            return ["profile", "--model", "llama3-8b", "--chip", v, "--analytical", "--out", "p.yaml"], files, \
                f"--chip {v!r}"
        if kind == "model":
            v = rng.choice(["nonexistent", "llama-8b", ESC, "", "/dev/zero"])
            return ["profile", "--model", v, "--chip", "h100-sxm5-80g", "--analytical", "--out", "p.yaml"], files, \
                f"--model {v!r}"
        return ["profile", "--refit", str(REPO / "chips/measured/h100-sxm5-80g-profiled.raw.json"), "--out",
                rng.choice(["nodir/x.yaml", ESC + ".yaml", "/dev/null", "n" * 300 + ".yaml"])], files, None
    if cmd == "plan-money":
        args = ["plan", "llama3-8b", "a100-sxm4-80g:1x8", "--global-batch", "16", "--time-limit", "3"]
        kind = rng.choice(("price", "tokens", "objective", "exclude", "ok"))
        if kind == "price":
            v = rng.choice([f"{G}=1e308", f"{G}=-1", f"{G}=nan", f"{G}=inf", f"{G}=", "=3", "nochip=3", f"{G}=3",
                            f"{G}={HUGE}", f"{G}=1e7"])
            return args + ["--tokens", "1e12", "--price", v, "--format", "json"], files, \
                None if v == f"{G}=3" else f"--price {v[:30]!r}"
        if kind == "tokens":
            v = rng.choice(BAD_FLOATS + ["0", "1e19"])
            return args + ["--tokens", v], files, f"--tokens {v[:20]!r}"
        if kind == "objective":
            return args + ["--objective", rng.choice(["cost", "time", "money", ""])], files, None
        if kind == "exclude":
            v = rng.choice([f"{G}:{HUGE}", f"{G}:0-{HUGE}", f"{G}:²", f"{G}:99", f"{G}:-1", "x:0", f"{G}:0", ESC])
            return args + ["--exclude", v], files, None if v == f"{G}:0" else f"--exclude {v[:30]!r}"
        return args + ["--tokens", "1e12", "--price", f"{G}=2.5", "--objective", "cost", "--format", "json"], files, None
    if cmd == "explain":
        o = rng.choice(["--svg", "--png", "--format"])
        if o == "--format":
            v = rng.choice(["json", "yaml", "table", "xml"])
            return ["explain", "PLAN", o, v], files, None if v != "xml" else "--format xml"
        v = rng.choice(["x.svg", "x.png", "nodir/x.svg", "/dev/null", ".", "x.txt", ESC + ".svg", "FIFO"])
        if v == "FIFO":
            files["f.svg"] = ("fifo",)
            v = "f.svg"
        return ["explain", "PLAN", o, v], files, None
    if cmd == "check":
        kind = rng.choice(("tol", "update", "format"))
        if kind == "tol":
            v = rng.choice(BAD_FLOATS)
            return ["check", "PLAN", "--baseline", "PLAN", "--tolerance", v], files, f"--tolerance {v[:20]!r}"
        if kind == "update":
            files["base.yaml"] = b"schema: x\n"
            files["fifo.yaml"] = ("fifo",)
            return ["check", "PLAN", "--baseline", rng.choice(["base.yaml", "missing.yaml", "/dev/null", "fifo.yaml"]),
                    "--update-baseline"], files, None
        return ["check", "PLAN", "--baseline", "PLAN", "--format", rng.choice(["json", "yaml", "csv"])], files, None
    if cmd == "backtest":
        o = rng.choice(["--fail-above-median", "--fail-above-p90", "--plot", "--tables", "--bands"])
        if o.startswith("--fail"):
            v = rng.choice(BAD_FLOATS + ["5", "5%"])
            return ["backtest", "RUNS", o, v], files, None if v in ("5", "5%") else f"{o} {v[:20]!r}"
        if o == "--plot":
            return ["backtest", "RUNS", o, rng.choice(["x.svg", "x.txt", "nodir/x.svg", "/dev/null", ESC + ".svg"])], files, None
        return ["backtest", "RUNS", "--loso", o, rng.choice(["out", "/dev/null", "nodir/x/y", ""])], files, None
    if cmd == "export":
        v = rng.choice(["", " ", "/proc/x", "/proc/version/x", "/dev/null", "nodir/a/b", "n" * 300, ESC, "ok",
                        "FILE"])
        if v == "FILE":
            files["afile"] = b"x"
            v = "afile/sub"
        return ["export", "PLAN", "--out-dir", v], files, "--out-dir ''" if not v.strip() else None
    if cmd == "catalog":
        return ["catalog", rng.choice(["chips", "models", "topologies"]),
                rng.choice(["h100", "llama-8b", "mixed", ESC, "a100-sxm4-80g", "tpu-v5p", "kunlun-p800", ""]),
                "--format", rng.choice(["json", "table", "yaml"])], files, None
    if cmd == "diff":
        return ["diff", "PLAN", rng.choice(["PLAN", "PLAN_MOE", "missing.yaml"]), "--format",
                rng.choice(["json", "table", "yaml"])], files, None
    return ["evaluate", "llama3-8b", rng.choice(["a100-sxm4-80g:2x8", "h100:1x8", ESC + ":1x8"]), "--exclude",
            rng.choice([f"{G}:{HUGE}", f"{G}:0", f"{G}:²", f"{G}:5"])], files, None


# numeric fields of the valid documents and the values that are certainly invalid there
BADNUM_FIELDS = {
    "model": [("layers",), ("hidden",), ("heads",), ("vocab",), ("ffn_hidden",), ("seq_len",)],
    "chip": [("memory", "capacity_GB", "value"), ("memory", "hbm_GBps", "value"),
             ("peak_tflops", "bf16", "value"), ("scaleup", "GBps_per_dir", "value"),
             ("price", "usd_per_device_hour", "value")],
    "topology": [("groups", 0, "nodes"), ("groups", 0, "devices_per_node")],
    "hf": [("num_hidden_layers",), ("hidden_size",), ("num_attention_heads",), ("vocab_size",),
           ("intermediate_size",)],
}
# 1e-320: a positive subnormal that passed "> 0" checks and divided to infinity (2026-11-27 fuzz pass)
BADNUM_VALUES = [0, -1, -8, math.nan, math.inf, -math.inf, 1e308, 10 ** 30, 10 ** 8 + 0.5, 1e-320]


def badnum_case(cid: str, rng: random.Random, bases, fixtures) -> Case:
    """A valid file with one number made certainly invalid: the command must refuse it (exit 2)."""
    fam = rng.choice(list(BADNUM_FIELDS))
    name, doc = rng.choice(bases[fam])
    doc = copy.deepcopy(doc)
    paths = [p for p in BADNUM_FIELDS[fam] if _has(doc, p)]
    path = rng.choice(paths)
    v = rng.choice(BADNUM_VALUES)
    if fam == "chip" and path[0] == "price" and v in (10 ** 8 + 0.5, 0, 1e-320):   # a price of 0 is valid (owned)
        v = 1e308
    if fam == "topology" and path[-1] == "devices_per_node" and v == 10 ** 8 + 0.5:
        v = 10 ** 8
    _get(doc, path[:-1])[path[-1]] = v
    as_json = name.endswith(".json")
    data = dump(doc, as_json, rng) if not (isinstance(v, float) and not math.isfinite(v) and as_json) else \
        json.dumps(doc).encode()
    f = "hf/config.json" if fam == "hf" else "chip.yaml" if fam == "chip" else name.split("/")[-1]
    return Case(cid, f"badnum-{fam}", commands_for(fam, f, fixtures, rng), {f: data}, validate=f,
                kind=KINDS.get(fam), must_reject=f"{'.'.join(map(str, path))} = {v!r}")


def _has(doc, path) -> bool:
    try:
        _get(doc, path)
        return True
    except (KeyError, IndexError, TypeError):
        return False


# -- generation -----------------------------------------------------------------------------------

KINDS = {"model": "model", "chip": "chip", "topology": "topology", "hf": "hf-config", "runs": "runs",
         "plan": "plan", "profile": "profile"}
FAMILIES = ("model", "chip", "topology", "hf", "runs", "plan", "profile", "text", "garbage", "special", "cli",
            "cli", "cli", "catalog", "raw", "cmd", "cmd", "badnum", "cmd", "badnum")


def generate(seed: int, n: int, fixtures: dict[str, Path], start: int = 0) -> list[Case]:
    bases = base_documents(fixtures)
    cases = []
    for i in range(start, start + n):
        rng = random.Random(f"{seed}:{i}")
        fam = FAMILIES[i % len(FAMILIES)]
        cid = f"{seed}-{i}-{fam}"
        cases.append(_one(cid, fam, rng, bases, fixtures))
    return cases


def _subst(args: list[str], fixtures: dict[str, Path]) -> list[str]:
    rep = {"PLAN": str(fixtures["plan.yaml"]), "PLAN_MOE": str(fixtures["plan-moe.json"]),
           "RUNS": str(REPO / "tests/data/published_calibration.yaml")}
    return [rep.get(a, a) for a in args]


def _one(cid: str, fam: str, rng: random.Random, bases, fixtures) -> Case:
    if fam in ("model", "chip", "topology", "hf", "runs", "plan", "profile", "text", "raw"):
        doc_fam = fam if fam != "text" else rng.choice(("model", "chip", "topology", "hf", "runs", "plan", "profile",
                                                        "raw"))
        name, doc = rng.choice(bases[doc_fam])
        as_json = name.endswith(".json")
        if fam == "text":
            data = mutate_text(dump(doc, as_json, rng), rng, as_json)
        else:
            data = dump(mutate_tree(doc, rng), as_json, rng)
            if rng.random() < 0.15:
                data = mutate_text(data, rng, as_json)
        f = ("hf/config.json" if doc_fam == "hf" else
             "chip.yaml" if doc_fam == "chip" else name.split("/")[-1])
        return Case(cid, fam if fam != "text" else f"text-{doc_fam}", commands_for(doc_fam, f, fixtures, rng),
                    {f: data}, validate=f if doc_fam != "raw" else None, kind=KINDS.get(doc_fam))
    if fam == "garbage":
        data = rng.choice(GARBAGE_FILES)
        doc_fam = rng.choice(("model", "chip", "topology", "hf", "runs", "plan", "profile"))
        f = {"hf": "hf/config.json", "chip": "chip.yaml", "plan": rng.choice(("p.yaml", "p.json"))}.get(
            doc_fam, rng.choice(("f.yaml", "f.json", "f.yml")))
        return Case(cid, "garbage", commands_for(doc_fam, f, fixtures, rng), {f: data}, validate=f,
                    kind=KINDS[doc_fam])
    if fam == "special":
        kind = rng.choice(SPECIALS)
        f = {"longname": "n" * 300 + ".yaml", "missing": "missing.yaml", "emptydir-json": "d.json"}.get(kind[0],
                                                                                                         "sp.yaml")
        cmd = _subst(rng.choice(SPECIAL_COMMANDS)(f), fixtures)
        files = {} if kind[0] in ("missing", "longname") else {f: kind}
        return Case(cid, f"special-{kind[0]}", cmd, files)
    if fam == "catalog":
        # a user catalog folder holding a mutated chip, model and topology
        chip_name, chip = rng.choice(bases["chip"])
        model_name, model = rng.choice(bases["model"])
        files = {"cat/chips/mychip.yaml": dump(mutate_tree(chip, rng) if rng.random() < 0.7 else chip, False, rng),
                 "cat/models/mymodel.yaml": dump(mutate_tree(model, rng) if rng.random() < 0.7 else model, False, rng),
                 "cat/topologies/mytopo.yaml": dump({"schema": "baige-plan/topology/v1", "name": "mytopo",
                                                     "groups": [{"name": "g", "chip": "mychip", "nodes": 1,
                                                                 "devices_per_node": 8}]}, False, rng)}
        if rng.random() < 0.3:
            files["cat/chips/broken.yaml"] = rng.choice(GARBAGE_FILES)
        cmd = rng.choice([["catalog", "chips"], ["catalog", "models"], ["catalog", "topologies"],
                          ["catalog", "chips", "mychip"], ["catalog", "models", "mymodel"],
                          ["plan", "mymodel", "mychip:1x8", "--global-batch", "16", "--time-limit", "5"],
                          ["evaluate", "mymodel", "mytopo"], ["plan", "llama3-8b", "mytopo", "--time-limit", "5"]])
        if rng.random() < 0.5:
            return Case(cid, "catalog", cmd + ["--catalog", "cat"], files)
        return Case(cid, "catalog-env", cmd, files, env={"BAIGE_PLAN_CATALOG": "cat"})
    if fam == "cmd":
        args, files, reject = cmd_case(rng)
        return Case(cid, f"cmd-{args[0]}", _subst(args, fixtures), files, must_reject=reject)
    if fam == "badnum":
        return badnum_case(cid, rng, bases, fixtures)
    if fam == "cli":
        args, env = cli_case(rng)
        files = {}
        if env.get("BAIGE_PLAN_CATALOG") == "CATDIR" or "CATDIR" in args:
            files["catdir/chips/x.yaml"] = b"schema: nope\n"
            env = {k: ("catdir" if v == "CATDIR" else v) for k, v in env.items()}
            args = ["catdir" if a == "CATDIR" else a for a in args]
        return Case(cid, "cli", _subst(args, fixtures), files, env=env)
    raise ValueError(fam)


# -- running ----------------------------------------------------------------------------------------

def materialize(case: Case, root: Path) -> Path:
    d = root / re.sub(r"[^\w.-]", "_", case.id)
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    for name, content in case.files.items():
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
            continue
        kind = content[0]
        if kind in ("dir", "emptydir-json"):
            p.mkdir()
        elif kind == "fifo":
            os.mkfifo(p)
        elif kind == "devnull":
            p.symlink_to("/dev/null")
        elif kind == "devzero":
            p.symlink_to("/dev/zero")
        elif kind == "symloop":
            p.symlink_to(p.name)
        elif kind == "dangling":
            p.symlink_to("does-not-exist.yaml")
        elif kind == "readonly":
            p.mkdir()
            p.chmod(0o555)
        else:
            raise ValueError(kind)
    return d


def _worker(conn, mem_limit: int) -> None:
    import resource

    if mem_limit:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (mem_limit, hard))
    from typer.testing import CliRunner

    from baige_plan.cli.app import app
    from baige_plan.errors import InputError, SpecError

    runner = CliRunner()
    while True:
        msg = conn.recv()
        if msg is None:
            return
        cwd, args, env = msg
        os.chdir(cwd)
        full_env = {"BAIGE_PLAN_CATALOG": None, "BAIGE_PLAN_DEBUG": None, "COLUMNS": "120"}
        full_env.update(env)
        t = time.monotonic()
        r = runner.invoke(app, args, env=full_env, catch_exceptions=True)
        exc = r.exception
        if exc is None or isinstance(exc, SystemExit):
            code, text = r.exit_code, ""
        elif isinstance(exc, (InputError, SpecError)):      # main() prints these as one line, exit 2
            code, text = 2, ""
        else:                                                # main() prints "internal error", exit 70
            code, text = 70, f"{type(exc).__name__}: {str(exc)[:300]} [at {_where(exc)}]"
        try:
            out, err = r.stdout, r.stderr
        except ValueError:
            out, err = r.output, ""
        conn.send((code, out[-4000:], err[-4000:], text, time.monotonic() - t))


def _where(exc: BaseException) -> str:
    """The innermost frame inside baige_plan: 'io/chips.py:_check_sources' (names the owning file)."""
    import traceback
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/baige_plan/" in f.filename.replace("\\", "/")]
    if not frames:
        return "?"
    f = frames[-1]
    return f"{f.filename.replace(chr(92), '/').split('/baige_plan/')[-1]}:{f.name}"


# Crashes whose cause lies in a file this fuzzer's author could not change; each names the owner and the
# input. They are reported apart ("known") and do not fail the run; remove an entry once it is fixed.
# Empty since issue 12's fixes (chip sources, raw profiles, runners-up, plan pipelines and strategy values,
# stage layers, topology bridges): every crash fails the run again.
KNOWN: dict[str, str] = {}      # innermost frame inside baige_plan -> owner and cause


def known(r: Result) -> str | None:
    if r.code == -1 and any(a.count("+") >= 3 for a in r.case.args):
        return ("search/hetero.py: --time-limit is not applied while the pipeline templates of a cluster of 4+ "
                "chip groups are solved (~10 s for --time-limit 3)")
    m = re.match(r"(\w+): .*\[at (.+)\]$", r.exception, re.S)
    if m and m.group(2) in KNOWN:
        return KNOWN[m.group(2)]
    errs = _error_lines(r.stderr)
    for pattern, why in KNOWN_MESSAGES:
        if r.code == 2 and errs and re.search(pattern, errs[-1]):
            return why
    return None


# exit-2 messages that show Python's text, from files owned elsewhere: (regex on the message, owner and cause)
KNOWN_MESSAGES: list[tuple[str, str]] = []


# Python's own error texts: an exit-2 message that shows one names no field, only a crash caught too broadly
PYTHON_TEXT = re.compile(r"unsupported operand|object has no attribute|not subscriptable|object is not iterable|"
                         r"invalid literal for|could not convert|unhashable type|NoneType|argument must be|"
                         r"positional argument|unexpected keyword|object of type|not supported between instances|"
                         r"can only concatenate|must be str, not|object cannot be interpreted|Errno \d+|"
                         r"list index out of range|KeyError|division by zero|math domain error")


class Pool:
    """Forked workers with the package imported once; a worker that overruns its case is killed."""

    def __init__(self, n: int, mem_limit: int):
        import multiprocessing as mp

        import baige_plan.cli.app  # noqa: F401 - import once, before forking

        self.ctx = mp.get_context("fork")
        self.n, self.mem_limit = n, mem_limit
        self.workers = [self._spawn() for _ in range(n)]

    def _spawn(self):
        a, b = self.ctx.Pipe()
        p = self.ctx.Process(target=_worker, args=(b, self.mem_limit), daemon=True)
        p.start()
        b.close()
        return p, a

    def run(self, cases: list[Case], root: Path, progress=None) -> list[Result]:
        results: dict[int, Result] = {}
        todo = list(enumerate(cases))[::-1]
        busy: dict[int, tuple[int, float]] = {}        # worker index -> (case index, deadline)
        while todo or busy:
            for w in range(self.n):
                if w not in busy and todo:
                    ci, case = todo.pop()
                    d = materialize(case, root)
                    self.workers[w][1].send((str(d), case.args, case.env))
                    busy[w] = (ci, time.monotonic() + case.timeout)
            conns = {self.workers[w][1]: w for w in busy}
            wait_s = max(0.0, min(dl for _, dl in busy.values()) - time.monotonic())
            ready = connection.wait(list(conns), timeout=min(wait_s, 1.0))
            now = time.monotonic()
            for c in ready:
                w = conns[c]
                ci, _ = busy.pop(w)
                try:
                    code, out, err, exc, secs = c.recv()
                    results[ci] = Result(cases[ci], code, out, err, exc, secs)
                except (EOFError, OSError):          # the worker died (e.g. out of memory in C code)
                    results[ci] = Result(cases[ci], -9, exception="worker died")
                    self._restart(w)
                if progress:
                    progress(len(results), len(cases))
            for w, (ci, dl) in list(busy.items()):
                if now > dl:
                    busy.pop(w)
                    results[ci] = Result(cases[ci], -1, exception=f"timeout after {cases[ci].timeout:.0f} s",
                                         seconds=cases[ci].timeout)
                    self._restart(w)
                    if progress:
                        progress(len(results), len(cases))
        return [results[i] for i in range(len(cases))]

    def _restart(self, w: int) -> None:
        p, c = self.workers[w]
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.join(5)
        c.close()
        self.workers[w] = self._spawn()

    def close(self) -> None:
        for p, c in self.workers:
            try:
                c.send(None)
            except OSError:
                pass
            p.join(2)
            if p.is_alive():
                p.kill()


# -- judging ----------------------------------------------------------------------------------------

def _error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("note:")]


def violations(r: Result, validated: Result | None = None) -> list[str]:
    out = []
    ok_codes = ({0, 2, 3} if r.case.command == "check" else {0, 1, 2, 3} if r.case.command == "backtest" and
                any(a.startswith("--fail-above") for a in r.case.args) else {0, 1, 2})
    if r.code == -1:
        return [r.exception]
    if r.code == -9:
        return ["worker died (crash or memory limit)"]
    if r.code not in ok_codes:
        out.append(f"exit {r.code}" + (f" ({r.exception})" if r.exception else ""))
    if "Traceback" in r.stdout + r.stderr:
        out.append("traceback in output")
    if re.search(r"\w+Warning: ", r.stderr):        # e.g. numpy's RuntimeWarning: a value nothing checked
        out.append("a Python warning on stderr")
    if "\x1b" in r.stdout + r.stderr or "\x07" in r.stdout + r.stderr:   # no terminal here: rich adds no styles
        out.append("a raw terminal control code in the output")
    if re.search(r"(?<![\w-])(Infinity|NaN)(?![\w-])", r.stdout) and "--format" in r.case.args \
            and r.case.args[r.case.args.index("--format") + 1:][:1] == ["json"]:
        out.append("bare Infinity/NaN in JSON output")
    if r.case.must_reject and r.code not in (2, -1, -9, 70):
        out.append(f"invalid value accepted (exit {r.code}): {r.case.must_reject}")
    if r.code == 2 and r.case.args not in (["plan"], ["evaluate"], ["validate"], ["check"]) and "--help" not in r.case.args:
        errs = _error_lines(r.stderr)
        if len(errs) != 1:
            out.append(f"exit 2 with {len(errs)} error lines")
        if r.stdout.strip() and r.case.command != "validate":     # validate prints "ok" for the good files
            out.append("exit 2 but output on stdout")
        if errs and PYTHON_TEXT.search(errs[-1]):
            out.append(f"error names no field, only Python's text: {errs[-1][:160]}")
        if errs and not re.match(r"^baige-plan: ([^:]+: \S|.*(--[\w-]+|'[^']+'))", errs[-1]):
            out.append(f"error does not name its file/option and field: {errs[-1][:160]}")
    if validated is not None and r.case.command != "validate":
        v = validated.code
        said = re.search(r"^ok\s+.*\((\S+)\)\s*$", validated.stdout, re.M)
        if v == 0 and said and said.group(1) != r.case.kind:
            return out          # validate read it as another kind of file (e.g. a plan that became a runs file)
        if r.code == 1 and v != 0:
            out.append(f"exit 1 (infeasible) on a file validate rejects (validate exit {v})")
        if v == 2 and r.code not in (2,):
            out.append(f"validate rejects the file but {r.case.command} exits {r.code}")
        if v == 0 and r.code == 2 and not (r.case.command == "export" and "--to" in r.case.args):
            # (export --to another runtime may refuse what the plan's own runtime runs: not a file error)
            f = r.case.validate or ""
            errs = _error_lines(r.stderr)
            if errs and (f"{f}:" in errs[0] or f"{f} (" in errs[0]):
                out.append(f"validate passes the file but {r.case.command} rejects it: {errs[0][:200]}")
    return out


def validate_cases(results: list[Result]) -> list[Case]:
    """The `validate FILE` companion of every case that read a mutated file with another command."""
    return [Case(r.case.id + "-validate", r.case.family, ["validate", r.case.validate], r.case.files,
                 kind=r.case.kind) for r in results if r.case.validate and r.case.command != "validate"]


def run_all(cases: list[Case], workers: int, root: Path | None = None, mem_limit: int = 6 << 30,
            progress=None, retry: bool = True) -> tuple[list[Result], dict[str, Result]]:
    own = root is None
    root = Path(tempfile.mkdtemp(prefix="baige-fuzz-")) if own else root
    pool = Pool(workers, mem_limit)
    try:
        results = pool.run(cases, root / "cases", progress)
        # a timeout on a loaded machine is not a hang: each one runs again alone, with 3x the time
        late = [i for i, r in enumerate(results) if r.code == -1] if retry else []
        if late:
            pool.close()
            pool = Pool(1, mem_limit)
            again = [Case(**{**results[i].case.__dict__, "timeout": results[i].case.timeout * 3}) for i in late]
            for i, r in zip(late, pool.run(again, root / "retry"), strict=True):
                r.case = results[i].case
                results[i] = r
        vcases = validate_cases(results)
        vres = pool.run(vcases, root / "validate", progress)
    finally:
        pool.close()
        if own:
            shutil.rmtree(root, ignore_errors=True)
    by_id = {v.case.id[:-len("-validate")]: v for v in vres}
    return results, by_id


def report(results: list[Result], validated: dict[str, Result]) -> tuple[str, list[tuple[Result, list[str]]]]:
    bad, known_bad = [], []
    codes = Counter()
    fam_codes: dict[str, Counter] = {}
    for r in results:
        codes[r.code] += 1
        fam_codes.setdefault(r.case.family.split("-")[0], Counter())[r.code] += 1
        v = violations(r, validated.get(r.case.id))
        if v and known(r):
            known_bad.append((r, [known(r)]))
        elif v:
            bad.append((r, v))
    name = {-1: "timeout", -9: "died", 70: "internal"}
    lines = [f"inputs run: {len(results)} (+ {len(validated)} validate cross-checks)",
             "by exit code: " + ", ".join(f"{name.get(c, c)}: {n}" for c, n in sorted(codes.items()))]
    for fam, c in sorted(fam_codes.items()):
        lines.append(f"  {fam:10s} " + ", ".join(f"{name.get(k, k)}: {n}" for k, n in sorted(c.items())))
    slow = sorted(results, key=lambda r: -r.seconds)[:3]
    lines.append("slowest: " + ", ".join(f"{r.seconds:.1f} s ({r.case.id})" for r in slow))
    kinds = Counter(v.split(" (")[0].split(":")[0] for _, vs in bad for v in vs)
    lines.append(f"cases violating the contract: {len(bad)}" + (" (" + ", ".join(f"{k}: {n}" for k, n in
                                                                                kinds.most_common()) + ")" if bad else ""))
    if known_bad:
        lines.append(f"known crashes owned elsewhere (not failing): {len(known_bad)}")
        for why, n in Counter(v[0] for _, v in known_bad).most_common():
            lines.append(f"  {n} x {why}")
    return "\n".join(lines), bad


def describe(r: Result, v: list[str]) -> str:
    args = " ".join(a if len(a) < 80 else a[:60] + f"...({len(a)} chars)" for a in r.case.args)
    files = ", ".join(f"{k} ({len(c) if isinstance(c, bytes) else c[0]})" for k, c in r.case.files.items())
    err = (r.stderr.strip().splitlines() or [""])[-1][:300]
    return (f"[{r.case.id}] {'; '.join(v)}\n    baige-plan {args}" + (f"\n    env {r.case.env}" if r.case.env else "")
            + (f"\n    files: {files}" if files else "") + (f"\n    stderr: {err}" if err else ""))
