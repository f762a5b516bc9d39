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
