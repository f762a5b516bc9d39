"""The runtimes a plan can target, one module each: its execution semantics as data (RuntimeSpec: its
space, refusal rules, how it executes and allocates, pinned version), which the cost model and the search
read. Each runtime's export and launch code is in baige_plan/exports/NAME.py, above the search. Adding a
runtime is adding a module here (and its exporter there) and a line in `NAMES`.

DEFAULT is Megatron-LM/Megatron-core (see specs/runtimes/megatron.py for why); plans on clusters of several
chip groups default to FlagScale, the heterogeneous runtime (specs/runtimes/flagscale.py).
"""

from __future__ import annotations

from functools import cache
from importlib import import_module
from types import ModuleType

from baige_plan.errors import SpecError
from baige_plan.specs.runtime import RuntimeSpec

# what `plan` offers; "megatron-local": Megatron-core without Transformer Engine (specs/runtimes/megatron_local.py)
NAMES = ("megatron", "deepspeed", "torchtitan", "paddle", "flagscale", "megatron-local")
BACKTEST_ONLY = ("pytorch", "automodel")   # costs measured runs, never planned: benchmarks/real/harness.py loops;
# NeMo Automodel (no export)
DEFAULT = "megatron"
DEFAULT_HETEROGENEOUS = "flagscale"

# What users and published runs call their stack -> the runtime module that costs it as it executes, and why
# (`--runtime` / `--framework`, a runs file's `parallel.runtime`). Only stacks that execute as that runtime does
# are here: MaxText (JAX/XLA), nanotron and Colossal-AI have their own schedules and are not aliased to anything.
ALIASES: dict[str, tuple[str, str]] = {
    **dict.fromkeys(("megatron-lm", "megatron-core", "mcore"), ("megatron", "Megatron-LM is Megatron-core")),
    **dict.fromkeys(("nemo", "nemo2", "nemo-framework", "nemo-megatron"),
                    ("megatron", "NeMo trains its LLMs through Megatron-core")),
    **dict.fromkeys(("megatron-bridge", "mbridge"), ("megatron", "Megatron-Bridge runs Megatron-core")),
    **dict.fromkeys(("mindspeed", "mindspeed-llm"),
                    ("megatron", "MindSpeed-LLM is Megatron-LM with Ascend kernels (its corpus runs are costed so)")),
    "megatron-deepspeed": ("deepspeed", "Megatron-DeepSpeed runs DeepSpeed's engine and pipeline"),
    "gpt-neox": ("deepspeed", "GPT-NeoX runs DeepSpeed's engine and pipeline with Megatron tensor parallelism"),
    **dict.fromkeys(("fsdp", "fsdp1", "fsdp2", "pytorch-fsdp", "torch-fsdp"),
                    ("torchtitan", "PyTorch FSDP training loops, as torchtitan runs FSDP")),
    **dict.fromkeys(("llm-foundry", "llmfoundry", "composer"),
                    ("torchtitan", "LLM Foundry trains with PyTorch FSDP (Composer)")),
    "fms-fsdp": ("torchtitan", "IBM fms-fsdp trains with PyTorch FSDP"),
    **dict.fromkeys(("paddleformers", "paddlenlp", "paddlepaddle"), ("paddle", "PaddleFormers' Trainer")),
    "nemo-automodel": ("automodel", "NeMo Automodel: PyTorch FSDP2 on bf16 parameters"),
}


def _key(name) -> str:
    return str(name).strip().lower().replace("_", "-")


def canonical(name: str) -> str:
    """The runtime that `name` names: a runtime (NAMES, BACKTEST_ONLY) or a framework alias (ALIASES), in any case,
    '_' read as '-'. SpecError naming both lists otherwise."""
    key = _key(name)
    if key in NAMES + BACKTEST_ONLY:
        return key
    if key in ALIASES:
        return ALIASES[key][0]
    raise SpecError("runtime", f"unknown runtime {name!r}: runtimes {', '.join(NAMES + BACKTEST_ONLY)}; framework "
                    f"names {', '.join(sorted(ALIASES))}")


def alias_note(name: str) -> str | None:
    """'NAME: costed as RUNTIME (why)' when `name` is a framework alias, None for a runtime's own name."""
    key = _key(name)
    if key in ALIASES:
        rt, why = ALIASES[key]
        return f"{name}: costed as {rt} ({why})"
    return None


@cache
def module(name: str) -> ModuleType:
    """The runtime's module (imported on first use; the lookup is memoised: the search asks it per stage)."""
    if name not in NAMES + BACKTEST_ONLY:
        raise SpecError("runtime", f"unknown runtime {name!r} (one of {', '.join(NAMES)})")
    return import_module(f"baige_plan.specs.runtimes.{name.replace('-', '_')}")   # megatron-local: megatron_local.py


def get(name: str) -> RuntimeSpec:
    return module(name).RUNTIME


def knobs(name: str) -> dict:
    """StrategySpec fields a runtime sets: whose semantics the cost follows and how it executes."""
    rt = get(name)
    return {"runtime": name, "execution": rt.execution, "zero3_impl": rt.zero3_impl,
            "tp_comm_overlap": rt.tp_comm_overlap, "balanced_partition": rt.balanced_partition,
            "fp8_param_gather": rt.fp8_param_gather}
