"""Time and money to train N tokens (issue 12): `plan --tokens N [--objective time|cost]` and `whatif`.

Definitions (docs/COST_MODEL.md "Time and cost to train"):

    tokens per step   = global batch x sequence length
    steps             = N / tokens per step              (fractional: N is many steps)
    hours             = steps x step time / 3600          (= N / tokens per second / 3600)
    USD               = hours x sum over the devices the plan USES of their price per device-hour

Idle devices: `usd` counts only the devices the plan runs on -- the devices a plan leaves idle
(a group the cost objective drops, devices that do not divide into whole replicas) are taken to be
released or used by someone else. What a cluster rented whole would pay for the same hours is
reported beside it (`cluster_usd`). `whatif` rents the devices of each mix it tries, so there every
device of the mix is paid (search/whatif.py).

Prices, first found wins: `--price KEY=USD` (KEY a group name or a chip id), the topology group's
`price_usd_per_device_hour`, the chip file's `price.usd_per_device_hour` (a sourced list price with
its date; docs/CATALOG.md). A price nobody gives is unknown (None): the reports say so, and
`--objective cost` refuses to rank without it (exit 2 naming the chip and the field).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from baige_plan.errors import InputError
from baige_plan.limits import MAX_PRICE_USD
from baige_plan.specs.topology import ClusterSpec, GroupSpec

PAYS_FOR = ("usd: the devices the plan uses, for the hours it runs (idle devices released); "
            "cluster_usd: every device of the cluster for the same hours (a cluster rented whole)")
PRICE_FIELD = "price.usd_per_device_hour"


@dataclass(frozen=True)
class Price:
    usd_per_device_hour: float | None
    origin: str                     # where it came from: "--price", "topology group", "chip file (DATE)", "unknown"


def parse_price_options(opts: list[str] | None, flag: str = "--price") -> dict[str, float]:
    """`--price KEY=USD` values -> {KEY: USD}; InputError naming the option and the value otherwise."""
    out: dict[str, float] = {}
    for raw in opts or []:
        key, sep, val = raw.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(flag, raw, "expected CHIP=USD_PER_DEVICE_HOUR (a chip id or a group name), e.g. "
                             "a100-sxm4-80g=3.43")
        try:
            usd = float(val)
        except ValueError:
            raise InputError(flag, raw, f"{val!r} is not a number (USD per device-hour)") from None
        if not math.isfinite(usd) or not 0 <= usd <= MAX_PRICE_USD:
            raise InputError(flag, raw, f"USD per device-hour must be a number from 0 to {MAX_PRICE_USD:,.0f}, "
                             f"got {val}")
        if key in out:
            raise InputError(flag, raw, f"{key} is priced twice")
        out[key] = usd
    return out


def check_price_keys(cluster: ClusterSpec, overrides: dict[str, float], flag: str = "--price") -> None:
    """Every --price key names a group or a chip of the cluster (a typo must not pass silently)."""
    known = {g.name for g in cluster.groups} | {g.chip.id for g in cluster.groups}
    for k in overrides:
        if k not in known:
            raise InputError(flag, k, f"names no group or chip of the cluster (groups and chips: "
                             f"{', '.join(sorted(known))})")


def group_price(g: GroupSpec, overrides: dict[str, float] | None = None) -> Price:
    ov = overrides or {}
    if g.name in ov:
        return Price(ov[g.name], "--price")
    if g.chip.id in ov:
        return Price(ov[g.chip.id], "--price")
    if g.price_usd_per_device_hour is not None:
        return Price(g.price_usd_per_device_hour, "topology group")
    if g.chip.price_usd_per_device_hour is not None:
        return Price(g.chip.price_usd_per_device_hour, f"chip file ({g.chip.price_date})")
    return Price(None, "unknown")


def prices(cluster: ClusterSpec, overrides: dict[str, float] | None = None) -> dict[str, Price]:
    """{group name: Price} for every group of the cluster."""
    return {g.name: group_price(g, overrides) for g in cluster.groups}


def require_prices(cluster: ClusterSpec, p: dict[str, Price], groups: list[str] | None = None,
                   why: str = "--objective cost") -> None:
    """InputError (exit 2) naming the first chip whose price is unknown among `groups` (default: all)."""
    for g in cluster.groups:
        if (groups is None or g.name in groups) and p[g.name].usd_per_device_hour is None:
            raise InputError(f"chip {g.chip.id}", PRICE_FIELD,
                             f"unknown (group {g.name!r}: no price in the chip file or the topology); {why} needs "
                             f"it: give --price {g.chip.id}=USD_PER_DEVICE_HOUR or add a price: block to the chip "
                             "file (docs/CATALOG.md)")


@dataclass(frozen=True)
class TrainingCost:
    tokens: float
    tokens_per_step: int
    steps: float
    step_time_s: float
    hours: float
    devices_used: dict[str, int]          # group -> devices the plan runs on
    devices_cluster: dict[str, int]       # group -> devices of the cluster
    price: dict[str, Price]               # group -> price per device-hour
    usd_per_hour: float | None            # sum over used devices of their price (None: a used price unknown)
    usd: float | None
    cluster_usd: float | None             # every device of the cluster for the same hours

    @property
    def devices_paid(self) -> int:
        return sum(self.devices_used.values())


def training_cost(tokens: float, global_batch: int, seq_len: int, step_time_s: float, devices_used: dict[str, int],
                  devices_cluster: dict[str, int], price: dict[str, Price]) -> TrainingCost:
    tps = global_batch * seq_len
    steps = tokens / tps
    hours = steps * step_time_s / 3600.0

    def rate(devs: dict[str, int]) -> float | None:
        total = 0.0
        for g, n in devs.items():
            if n <= 0:
                continue
            p = price[g].usd_per_device_hour
            if p is None:
                return None
            total += n * p
        return total

    used_rate, all_rate = rate(devices_used), rate(devices_cluster)
    return TrainingCost(tokens=tokens, tokens_per_step=tps, steps=steps, step_time_s=step_time_s, hours=hours,
                        devices_used=dict(devices_used), devices_cluster=dict(devices_cluster), price=dict(price),
                        usd_per_hour=used_rate, usd=None if used_rate is None else hours * used_rate,
                        cluster_usd=None if all_rate is None else hours * all_rate)


def training_dict(tc: TrainingCost, objective: str, rnd) -> dict:
    """The `training` key added to an estimate (plan output and plan files) when --tokens is given."""
    def r(x):
        return None if x is None else rnd(x)
    return {
        "objective": objective,
        "tokens": rnd(tc.tokens),
        "tokens_per_step": tc.tokens_per_step,
        "steps": rnd(tc.steps),
        "hours": rnd(tc.hours),
        "days": rnd(tc.hours / 24.0),
        "devices_paid": tc.devices_paid,
        "devices_cluster": sum(tc.devices_cluster.values()),
        "usd_per_device_hour": {g: r(p.usd_per_device_hour) for g, p in sorted(tc.price.items())},
        "price_origin": {g: p.origin for g, p in sorted(tc.price.items())},
        "usd_per_hour": r(tc.usd_per_hour),
        "usd": r(tc.usd),
        "cluster_usd": r(tc.cluster_usd),
        "pays_for": PAYS_FOR,
    }


def fmt_usd(x: float | None) -> str:
    if x is None:
        return "unknown"
    if x >= 1e6:
        return f"${x / 1e6:,.2f}M"
    return f"${x:,.0f}" if x >= 100 else f"${x:,.2f}"


def fmt_hours(h: float) -> str:
    return f"{h:,.1f} h ({h / 24:,.1f} days)" if h >= 48 else f"{h:,.2f} h"


def summary_line(tc: TrainingCost) -> str:
    """One line for stderr: time and money to train, and what is paid for."""
    used, total = tc.devices_paid, sum(tc.devices_cluster.values())
    unknown = sorted(g for g, n in tc.devices_used.items() if n > 0 and tc.price[g].usd_per_device_hour is None)
    money = (f"{fmt_usd(tc.usd)} for the {used} devices it uses"
             if tc.usd is not None else f"cost unknown (no price for group {', '.join(unknown)}; give --price)")
    whole = (f"; the whole cluster ({total} devices) rented for the same time: {fmt_usd(tc.cluster_usd)}"
             if used != total and tc.cluster_usd is not None else "")
    return (f"training {tc.tokens:,.0f} tokens = {tc.steps:,.0f} steps of {tc.tokens_per_step:,} tokens: "
            f"{fmt_hours(tc.hours)}, {money} (idle devices not paid){whole}")
