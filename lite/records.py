"""`dataclass`: the standard decorator, with the methods it writes for each class shared instead of compiled.

Why: CPython 3.11's `dataclasses` writes the source of every generated method and compiles it, per class: a
frozen dataclass carries about 11 KB of code objects, functions and line tables (a plain class under 1 KB).
lite defines about 240 dataclasses, all of them loaded by a running server with its agent: 1.2 MB of memory
held for `__repr__`, `__eq__`, `__hash__` and a frozen class's `__setattr__`/`__delattr__` alone. `dataclass`
here runs the standard decorator, then replaces those generated methods with closures over one shared code
object each (a function object per class and method, about 0.15 KB).

Invariants (the replacement behaves exactly as the generated method it replaces):
- Only methods the decorator generated for this class are replaced (compiled from "<string>", in the class's
  own `__dict__`): methods a class defines itself, inherited ones, `__init__`, the ordering methods and every
  method of a `slots=True` class stay as the standard decorator left them.
- The same fields, in the same order: `__repr__` over the fields with `repr=True`, `__eq__` over those with
  `compare=True`, `__hash__` over those with `hash=True` (or `hash=None` and `compare=True`), the frozen
  methods over all of them. `__eq__` compares tuples of the fields (so an identical NaN compares equal, as in a
  tuple) and only with an object of the very same class, else NotImplemented; `__hash__` hashes that tuple;
  `__repr__` is `Qualname(a=..., b=...)` with "..." on recursion (per object and thread); a frozen class raises
  `FrozenInstanceError` with the standard messages. The methods' `__qualname__`s are the generated ones'.
- `dataclasses.fields`, `replace`, `asdict` and `is_dataclass` see a plain dataclass; type checkers see one
  too (`dataclass_transform`).
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable
from dataclasses import Field, FrozenInstanceError, field, fields
from dataclasses import dataclass as _dataclass
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["dataclass"]

T = TypeVar("T")
Key = Callable[[Any], tuple[Any, ...]]


@overload
@dataclass_transform(field_specifiers=(field, Field))
def dataclass(cls: type[T], /) -> type[T]: ...


@overload
def dataclass(*, init: bool = True, repr: bool = True, eq: bool = True, order: bool = False,
              unsafe_hash: bool = False, frozen: bool = False, match_args: bool = True, kw_only: bool = False,
              slots: bool = False, weakref_slot: bool = False) -> Callable[[type[T]], type[T]]: ...


def dataclass(cls: type[T] | None = None, /, **options: Any) -> Any:
    """`dataclasses.dataclass(cls, **options)` with its generated methods shared (see the module docstring)."""

    def wrap(c: type[T]) -> type[T]:
        made: type[T] = _dataclass(c, **options)
        if not options.get("slots"):
            share_generated_methods(made)
        return made

    return wrap if cls is None else wrap(cls)


def share_generated_methods(cls: type) -> None:
    """Replace the methods `dataclasses.dataclass` generated for `cls` (see the module docstring)."""
    all_fields = fields(cls)
    if _generated(cls, "__repr__"):
        _put(cls, "__repr__", _repr(tuple(f.name for f in all_fields if f.repr)))
    if _generated(cls, "__eq__"):
        _put(cls, "__eq__", _eq(_key(tuple(f.name for f in all_fields if f.compare))))
    if _generated(cls, "__hash__"):
        hashed = tuple(f.name for f in all_fields if (f.compare if f.hash is None else f.hash))
        _put(cls, "__hash__", _hash(_key(hashed)))
    if _generated(cls, "__setattr__") and _generated(cls, "__delattr__"):
        setter, deleter = _frozen(cls, tuple(f.name for f in all_fields))
        _put(cls, "__setattr__", setter)
        _put(cls, "__delattr__", deleter)


def _generated(cls: type, name: str) -> bool:
    fn = cls.__dict__.get(name)
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    return code is not None and code.co_filename == "<string>" and code.co_name == name


def _put(cls: type, name: str, fn: Callable[..., Any]) -> None:
    fn.__qualname__ = f"{cls.__qualname__}.{name}"
    setattr(cls, name, fn)


def _key(names: tuple[str, ...]) -> Key:
    """The tuple of the named attributes, as the generated methods build it (`(self.a, self.b,)`)."""
    if len(names) >= 2:
        return attrgetter(*names)
    if len(names) == 1:
        get = attrgetter(names[0])

        def one(obj: Any) -> tuple[Any, ...]:
            return (get(obj),)

        return one

    def none(obj: Any) -> tuple[Any, ...]:
        return ()

    return none


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    @reprlib.recursive_repr(fillvalue="...")
    def __repr__(self: Any) -> str:
        qualname: str = self.__class__.__qualname__
        return qualname + "(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in names) + ")"

    return __repr__


def _eq(key: Key) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return key(self) == key(other)
        return NotImplemented

    return __eq__


def _hash(key: Key) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(key(self))

    return __hash__


Setter = Callable[[Any, str, Any], None]
Deleter = Callable[[Any, str], None]


def _frozen(cls: type[Any], names: tuple[str, ...]) -> tuple[Setter, Deleter]:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__
