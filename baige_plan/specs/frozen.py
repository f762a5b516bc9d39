"""Frozen dataclasses the search builds and hashes thousands of times a plan: `hash_once` (a hash computed once per
instance) and `make` (an instance built without the generated __init__'s per-field object.__setattr__).

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

from dataclasses import MISSING, fields
from functools import cache

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


_REQUIRED = object()        # a field with no default in `_template`
_FACTORY = object()         # a field whose default comes from its default_factory


@cache      # one entry per class (a handful)
def _template(cls: type) -> tuple[dict, tuple, frozenset, tuple, object]:
    """(every field name -> its default, or a marker), the field names in order, the fields without a default, the
    default-factory fields, cls.__post_init__ or None."""
    tmpl, factories = {}, []
    for f in fields(cls):
        if not f.init:
            raise TypeError(f"make({cls.__name__}): field {f.name} is not an __init__ argument")
        if f.default is not MISSING:
            tmpl[f.name] = f.default
        elif f.default_factory is not MISSING:
            tmpl[f.name] = _FACTORY
            factories.append(f)
        else:
            tmpl[f.name] = _REQUIRED
    required = frozenset(k for k, v in tmpl.items() if v is _REQUIRED)
    return tmpl, tuple(tmpl), required, tuple(factories), getattr(cls, "__post_init__", None)


def make(cls: type, /, **values):
    """cls(**values) for a frozen dataclass (keyword arguments only), the same instance its __init__ builds: every
    field set, given or its default (or default_factory), in field order, then __post_init__ when the class has one.
    The generated __init__ of a frozen dataclass sets each field through object.__setattr__, which for the cost
    model's records (StageCost's 24 fields, StrategySpec's 45) costs more than computing them; this fills the
    instance dict at once. TypeError for an unknown or missing field, as __init__ raises."""
    tmpl, names, required, factories, post = _template(cls)
    obj = object.__new__(cls)
    d = obj.__dict__
    if len(values) == len(names) and tuple(values) == names:
        d.update(values)        # every field given, in field order (stage_cost's StageCost): as they are
    else:
        if not values.keys() >= required:
            raise TypeError(f"{cls.__name__}: missing field(s) {sorted(required - values.keys())}")
        d.update(tmpl)
        d.update(values)
        if len(d) != len(tmpl):
            raise TypeError(f"{cls.__name__}: unexpected field(s) {sorted(set(values) - set(tmpl))}")
        for f in factories:
            if d[f.name] is _FACTORY:
                d[f.name] = f.default_factory()
    if post is not None:
        post(obj)
    return obj
