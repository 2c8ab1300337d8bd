"""Opaque CEL types (Quantity, IP, CIDR, URL, Format, ...) as one-field protobuf messages.

cel-expr-python cannot return abstract types from Python functions, but it handles protobuf messages natively:
each opaque type is a message `<name>` with a single string field `v` holding the value's canonical text, so
equality (`quantity('1Gi') == quantity('1024Mi')`) is equality of canonical forms and overloads resolve on the
message type at compile time. Callers may register more opaque types (the admission-policy evaluator adds
`kubernetes.authorization.Authorizer` and friends) through `OpaqueTypes(extra)`.

Invariant: one descriptor pool per `OpaqueTypes` instance; no module-level mutable state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cel_expr_python import cel
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

BUILTIN = ("kubernetes.Quantity", "net.IP", "net.CIDR", "kubernetes.URL", "kubernetes.NamedFormat",
           "kubernetes.Semver")


class OpaqueTypes:
    """A descriptor pool holding one message per opaque type name (`package.Name`)."""

    def __init__(self, extra: Iterable[str] = (), files: Iterable[Any] = ()) -> None:
        """`files`: more `FileDescriptorProto`s for the pool (declared message types, see schematypes.py)."""
        names = list(dict.fromkeys([*BUILTIN, *extra]))
        self.pool = descriptor_pool.DescriptorPool()
        for fdp in files:
            self.pool.Add(fdp)
        by_package: dict[str, list[str]] = {}
        for name in names:
            package, _, short = name.rpartition(".")
            by_package.setdefault(package, []).append(short)
        for i, (package, shorts) in enumerate(sorted(by_package.items())):
            fdp = descriptor_pb2.FileDescriptorProto(name=f"lite_cel_{i}.proto", package=package, syntax="proto3")
            for short in shorts:
                msg = fdp.message_type.add(name=short)
                msg.field.add(name="v", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                              label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
            self.pool.Add(fdp)
        self._classes: dict[str, Any] = {
            n: message_factory.GetMessageClass(self.pool.FindMessageTypeByName(n)) for n in names}
        self._types = {n: cel.Type(n) for n in names}

    def type(self, name: str) -> cel.Type:
        return self._types[name]

    def make(self, name: str, value: str) -> Any:
        """A value of opaque type `name` carrying `value` (its canonical text)."""
        return self._classes[name](v=value)

    def names(self) -> list[str]:
        return list(self._types)
