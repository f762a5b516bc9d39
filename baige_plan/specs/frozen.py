"""`hash_once`: a frozen dataclass whose hash is computed once per instance.

A dataclass's generated __hash__ rehashes every field on every call, recursively (a ModelSpec's 40-odd fields, a
link's measured curves and all their points). The search uses such values as memo keys thousands of times a plan
(cost/estimate.py stage contexts, cost/collectives.py `_op_curves`, cost/memory.py's memoised helpers), so the
hash is kept on the instance after its first use. Same value as the dataclass's own hash (it is that function's
result); frozen instances never change, so it never goes stale. Copies made by pickling (search/forked.py) or
`copy` carry the fields only (not this, nor other answers a class keeps on its instances, e.g. LinkCurves.pick)
and compute their own; `dataclasses.replace` builds a new instance through __init__. Only for classes whose code
never reads or copies the instance `__dict__` wholesale (it holds the kept hash).
"""

from __future__ import annotations

from dataclasses import fields

_KEY = "_hash_once"


def hash_once(cls: type) -> type:
    """Class decorator, outside @dataclass(frozen=True): keep the dataclass's hash on each instance (module
    docstring)."""
    computed = cls.__hash__
    if computed is None:
        raise TypeError(f"{cls.__name__} is not hashable")

    def __hash__(self) -> int:
        try:
            return self.__dict__[_KEY]
        except KeyError:
            h = computed(self)
            object.__setattr__(self, _KEY, h)
            return h

    names = tuple(f.name for f in fields(cls))

    def __getstate__(self) -> dict:
        return {k: self.__dict__[k] for k in names}

    cls.__hash__ = __hash__
    cls.__getstate__ = __getstate__
    return cls
