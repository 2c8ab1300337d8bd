"""`lite.records.dataclass` behaves as `dataclasses.dataclass` does: each case defines the same class with both
decorators and compares what the generated methods do (repr, equality, hash, frozen errors, qualnames), and
that the shared methods really replaced the compiled ones."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import field
from typing import Any

import pytest

from lite import records

Decorator = Callable[..., Any]


def define(deco: Decorator, case: str) -> tuple[type, type | None]:
    """(class, subclass or None) for `case`, decorated by `deco` (the standard or lite's)."""
    if case == "plain":
        @deco
        class A:
            x: int
            y: str = "s"
        return A, None
    if case == "frozen":
        @deco(frozen=True)
        class B:
            x: int
            y: list[int] = field(default_factory=list)
        return B, None
    if case == "flags":
        @deco(frozen=True)
        class C:
            shown: int
            hidden: int = field(default=0, repr=False)
            ignored: int = field(default=0, compare=False)
            unhashed: int = field(default=0, hash=False)
            hashed_only: int = field(default=0, compare=False, hash=True)
        return C, None
    if case == "one":
        @deco(frozen=True)
        class D:
            x: float
        return D, None
    if case == "none":
        @deco(frozen=True)
        class E:
            pass
        return E, None
    if case == "unsafe_hash":
        @deco(unsafe_hash=True)
        class F:
            x: int
        return F, None
    if case == "eq_off":
        @deco(eq=False)
        class G:
            x: int
        return G, None
    if case == "own_methods":
        @deco(frozen=True)
        class H:
            x: int

            def __repr__(self) -> str:
                return "mine"

            def __eq__(self, other: object) -> bool:
                return True

            def __hash__(self) -> int:
                return 7
        return H, None
    if case == "inherit":
        @deco(frozen=True)
        class Base:
            x: int

        class Plain(Base):  # not a dataclass: inherits the frozen methods
            pass
        return Base, Plain
    if case == "sub_dataclass":
        @deco(frozen=True)
        class Base2:
            x: int

        @deco(frozen=True)
        class Sub(Base2):
            y: int = 0
        return Base2, Sub
    if case == "order":
        @deco(order=True)
        class Ordered:
            x: int
        return Ordered, None
    raise AssertionError(case)


CASES = ["plain", "frozen", "flags", "one", "none", "unsafe_hash", "eq_off", "own_methods", "inherit",
         "sub_dataclass", "order"]


def outcome(fn: Callable[[], Any]) -> Any:
    try:
        return ("ok", fn())
    except Exception as e:  # the same exception type and message
        return (type(e).__name__, str(e))


def behaviour(cls: type, sub: type | None) -> list[Any]:
    names = [f.name for f in dataclasses.fields(cls)]
    args = [1, 2, 3, 4, 5][: len([f for f in dataclasses.fields(cls) if f.init and f.default is dataclasses.MISSING
                                  and f.default_factory is dataclasses.MISSING])]
    a, b, c = cls(*args), cls(*args), cls(*([9] * len(args)))
    seen: list[Any] = [names, repr(a).replace(cls.__qualname__, "<Q>"), a == b, a == c, a != b, a == object(),
                       outcome(lambda: hash(a) == hash(b)), outcome(lambda: type(hash(a)).__name__),
                       outcome(lambda: setattr(a, names[0] if names else "x", 5)),
                       outcome(lambda: delattr(a, names[0] if names else "x")),
                       outcome(lambda: setattr(a, "other", 1)),
                       [getattr(cls.__dict__.get(m), "__qualname__", None) for m in
                        ("__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")]]
    seen = [s.replace(cls.__qualname__, "<Q>") if isinstance(s, str) else s for s in seen]
    seen[-1] = [q.replace(cls.__qualname__, "<Q>") if q else q for q in seen[-1]]
    if "flags" in cls.__qualname__ or cls.__name__ == "C":
        d = cls(1, hidden=5, ignored=6, unhashed=7, hashed_only=8)
        seen += [a == d, outcome(lambda: hash(a) == hash(cls(1, hashed_only=8)))]
    if sub is not None:
        same_fields = sub.__dataclass_fields__.keys() == cls.__dataclass_fields__.keys()
        s1 = sub(*args) if same_fields else sub(*args, 2)
        seen += [repr(s1).replace(sub.__qualname__, "<S>"), s1 == a, outcome(lambda: setattr(s1, "extra", 1)),
                 outcome(lambda: setattr(s1, "x", 1)), outcome(lambda: hash(s1) == hash(sub(*args)))]
    return seen


@pytest.mark.parametrize("case", CASES)
def test_lite_dataclass_behaves_as_the_standard_one(case: str) -> None:
    std = behaviour(*define(dataclasses.dataclass, case))
    lite = behaviour(*define(records.dataclass, case))
    assert lite == std


def test_nan_fields_compare_as_in_a_tuple_and_repr_guards_recursion() -> None:
    for deco in (dataclasses.dataclass, records.dataclass):
        cls, _ = define(deco, "one")
        nan = cls(math.nan)
        assert nan == nan and cls(float("nan")) != cls(float("nan"))
        box, _ = define(deco, "frozen")
        loop = box(1)
        loop.y.append(loop)  # type: ignore[arg-type]
        assert repr(loop).endswith("y=[...])")
        flags, _ = define(deco, "flags")  # hashed: shown, hidden (compare=True) and hashed_only (hash=True)
        assert hash(flags(1, unhashed=7, hashed_only=8)) == hash((1, 0, 8))


def test_the_generated_methods_are_replaced_by_shared_ones() -> None:
    cls, _ = define(records.dataclass, "frozen")
    other, _ = define(records.dataclass, "plain")
    for name in ("__eq__", "__hash__", "__setattr__", "__delattr__"):
        fn = cls.__dict__[name]
        assert fn.__code__.co_filename != "<string>", name  # not compiled per class
    assert cls.__dict__["__eq__"].__code__ is other.__dict__["__eq__"].__code__  # one code object for all
    assert "__init__" in cls.__dict__ and cls.__dict__["__init__"].__code__.co_filename == "<string>"
