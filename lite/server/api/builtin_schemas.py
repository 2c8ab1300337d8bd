"""Upstream's Kubernetes 1.32 OpenAPI v3 schemas for the built-in kinds, loaded from package data.

Role: one `BuiltinSchemas` per server (built once, shared by the HTTP layer and `Resources`). It reads
`openapi_v1_32.json.gz` (made by `tools/gen_openapi_schemas.py` from upstream's `api/openapi-spec/v3`
documents; see that script) on first use and offers:
- `node(kind)`: the compiled type-check tree (`lite.server.api.typecheck.Node`) of a built-in kind;
- `schema_name(kind)`, `schemas()`, `params()`: the raw component schemas and parameter objects that
  `/openapi/v3` serves (so `kubectl explain` prints upstream's descriptions).

Invariants:
- Loading and compiling happen once per instance, lazily (start-up does not pay for them; the first write
  does, a few tens of milliseconds); everything handed out is shared and must not be mutated.
- Kinds upstream does not publish have no node. Custom resources get `crd_node`: their CRD's structural
  schema compiled for unknown fields only (their types are the CRD validation's business), with upstream's
  ObjectMeta for `metadata`; it is cached per schema object (a CRD update brings a new one).
"""

from __future__ import annotations

import gzip
import importlib.resources
from typing import Any

import orjson

from lite.kinds import Kind
from lite.server.api.typecheck import STRING, STRUCT, Compiler, Node

DATA_FILE = "openapi_v1_32.json.gz"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_CRD_CACHE = 256


class BuiltinSchemas:
    """See the module docstring."""

    def __init__(self) -> None:
        self._data: dict[str, Any] | None = None
        self._compiler: Compiler | None = None
        self._nodes: dict[str, Node | None] = {}
        self._crd: dict[int, tuple[object, Node]] = {}

    def _load(self) -> dict[str, Any]:
        if self._data is None:
            raw = importlib.resources.files("lite.server.api").joinpath(DATA_FILE).read_bytes()
            self._data = orjson.loads(gzip.decompress(raw))
            self._compiler = Compiler(self._data["schemas"], go_types=self._data.get("gotypes"))
        return self._data

    def schema_name(self, kind: Kind) -> str:
        """Upstream's component name for a built-in kind ("" for custom or unpublished kinds)."""
        if kind.crd or kind.virtual:
            return ""
        name: str = self._load()["kinds"].get(f"{kind.group}/{kind.version}/{kind.kind}", "")
        return name

    def node(self, kind: Kind) -> Node | None:
        """The compiled type-check tree of `kind`, or None when it is not a published built-in kind."""
        if kind.crd:
            return None
        return self.node_for(kind.group, kind.version, kind.kind)

    def node_for(self, group: str, version: str, kind_name: str) -> Node | None:
        """The compiled tree of any published type (a subresource body such as autoscaling/v1 Scale)."""
        key = f"{group}/{version}/{kind_name}"
        if key in self._nodes:
            return self._nodes[key]
        name: str = self._load()["kinds"].get(key, "")
        node = None
        if name:
            self._load()
            assert self._compiler is not None
            node = self._compiler.named(name)
        self._nodes[key] = node
        return node

    def schemas(self) -> dict[str, Any]:
        """All component schemas by name (shared: do not mutate)."""
        out: dict[str, Any] = self._load()["schemas"]
        return out

    def params(self) -> dict[str, Any]:
        """Upstream's parameter objects by name (shared: do not mutate)."""
        out: dict[str, Any] = self._load()["params"]
        return out

    def object_meta(self) -> Node | None:
        """The compiled tree of upstream's ObjectMeta."""
        self._load()
        assert self._compiler is not None
        return self._compiler.named(OBJECT_META)

    def crd_node(self, kind: Kind) -> Node | None:
        """The unknown-field tree of a custom resource's structural schema (None without a schema)."""
        schema = kind.schema
        if not kind.crd or not schema:
            return None
        held = self._crd.get(id(schema))
        if held is not None and held[0] is schema:
            return held[1]
        self._load()
        assert self._compiler is not None
        node = Compiler({}, structural=True).inline(schema)
        if node.tag == STRUCT:
            node.props = {**node.props, "apiVersion": Node(STRING, "string"), "kind": Node(STRING, "string"),
                          "metadata": self._compiler.named(OBJECT_META)}
        if len(self._crd) >= _CRD_CACHE:
            self._crd.clear()
        self._crd[id(schema)] = (schema, node)
        return node
