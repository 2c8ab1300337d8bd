"""Read-only JSON objects: the checking mode of the shared-object invariant.

Informers share one decoded object per revision with every handler and reader (see `lite.informer`), so
nobody may change one in place. `freeze(obj)` returns an equal object built of `FrozenDict` and `FrozenList`,
whose every in-place change raises `SharedObjectMutated`; informers built with `read_only=True` cache such
objects, which is how tests prove that handlers and reconcilers keep the invariant. (Production informers
cache plain dicts: freezing costs a deep copy per event.)

Both types are real `dict`/`list` subclasses, so reading, `isinstance`, `==`, `orjson.dumps`, `dict(x)`,
`list(x)` and `{**x}` work as on plain values; `copy.copy`, `copy.deepcopy` and `thaw` give plain, mutable
values. A shallow copy keeps frozen children: changing one of those in place is the same bug and raises too.
"""

from __future__ import annotations

from typing import Any, NoReturn, SupportsIndex

import orjson


class SharedObjectMutated(TypeError):
    """An in-place change of a shared, read-only object (copy it first: `lite.objects.deep_copy`)."""


def _refuse(self: object, *args: Any, **kwargs: Any) -> NoReturn:
    raise SharedObjectMutated(f"{type(self).__name__} is shared and read-only: deep-copy it before changing it")


class FrozenDict(dict[str, Any]):
    """A dict whose in-place changes raise `SharedObjectMutated`."""

    __slots__ = ()
    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    update = _refuse

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key in self:  # a read
            return self[key]
        _refuse(self)

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        out: dict[str, Any] = thaw(self)
        return out


class FrozenList(list[Any]):
    """A list whose in-place changes raise `SharedObjectMutated`."""

    __slots__ = ()
    __setitem__ = _refuse
    __delitem__ = _refuse
    __iadd__ = _refuse
    __imul__ = _refuse
    append = _refuse
    extend = _refuse
    insert = _refuse
    remove = _refuse
    clear = _refuse
    reverse = _refuse

    def pop(self, index: SupportsIndex = -1) -> NoReturn:
        _refuse(self)

    def sort(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        out: list[Any] = thaw(self)
        return out


def freeze(v: Any) -> Any:
    """An equal value in which every dict and list is read-only (scalars are immutable already)."""
    if isinstance(v, dict):
        return FrozenDict((k, freeze(x)) for k, x in v.items())
    if isinstance(v, list):
        return FrozenList(freeze(x) for x in v)
    return v


def thaw(v: Any) -> Any:
    """A plain, mutable deep copy of a JSON value (frozen or not)."""
    return orjson.loads(orjson.dumps(v))
