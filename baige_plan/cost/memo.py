"""Values one search computes again and again, kept in its memo (a plain dict the caller owns: one search's) by the
identity of the objects they are computed from.

`kept(memo, objs, key, compute)` is compute(), kept under `key` + the ids of `objs`. The entry holds the objects
themselves, so while it exists their ids cannot name other objects; a hit is checked to be them all the same. Used
where hashing the objects by value would cost more than the computation (a group's links, a chip's rates, a
strategy's first stage): the same objects give the same value, the same floats as computing it again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def kept(memo: dict | None, objs: tuple, key: tuple, compute: Callable[[], T]) -> T:
    """compute(), kept in `memo` by `key` and the identity of `objs` (module docstring); memo None: computed."""
    if memo is None:
        return compute()
    k = (*key, *map(id, objs))
    hit = memo.get(k)
    if hit is None or any(a is not b for a, b in zip(hit[0], objs, strict=True)):
        hit = memo[k] = (objs, compute())
    return hit[1]
