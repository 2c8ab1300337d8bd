"""Upstream's Kubernetes 1.32 OpenAPI v3 schemas for the built-in kinds, loaded from package data.

Role: one `BuiltinSchemas` per server (built once, shared by the HTTP layer and `Resources`). It reads
`openapi_v1_32.json.gz` (made by `tools/gen_openapi_schemas.py` from upstream's `api/openapi-spec/v3`
documents; see that script) and its lean copy `typecheck_v1_32.json.gz` (same script: only what the type checks
read) on first use and offers:
- `node(kind)`: the compiled type-check tree (`lite.server.api.typecheck.Node`) of a built-in kind;
- `schema_name(kind)`, `openapi_data()`: the raw component schemas and parameter objects that
  `/openapi/v3` serves (so `kubectl explain` prints upstream's descriptions).

Invariants:
- Trees are compiled per kind, from the lean copy, on the first use of that kind (start-up does not pay for
  them; the first write of a kind does, a few milliseconds), each named schema once per instance (trees share
  their common parts, such as ObjectMeta and PodSpec). The lean copy is read for that compile (0.6 ms) and
  dropped, texts and parsed schemas alike (~0.3 MB held otherwise); only the compiled trees, the kind -> schema
  name map and the Go type names stay in memory. The full data (with
  upstream's descriptions, ~16 MB at its peak to parse) is read only to build `/openapi/v3` documents.
  Everything handed out is shared and must not be mutated.
- Kinds upstream does not publish have no node. Custom resources get `crd_node`: their CRD's structural
  schema compiled for unknown fields only (their types are the CRD validation's business), with upstream's
  ObjectMeta for `metadata`; it is cached per schema object (a CRD update brings a new one).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from lite.kinds import Kind
from lite.server.api.specmemo import Bounded
from lite.server.api.typecheck import STRING, STRUCT, Compiler, Node

DATA_FILE = "openapi_v1_32.json.gz"
LEAN_FILE = "typecheck_v1_32.json.gz"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_CRD_CACHE = 256


class _Decoding(Mapping[str, Any]):
    """Schema name -> schema, decoded from its JSON text when asked (the compiler asks once per name); `texts`
    is set for the time of one compile and emptied after it."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def __getitem__(self, name: str) -> Any:
        return orjson.loads(self.texts[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self.texts)

    def __len__(self) -> int:
        return len(self.texts)


class BuiltinSchemas:
    """See the module docstring."""

    def __init__(self) -> None:
        self._kinds: dict[str, str] | None = None  # "group/version/Kind" -> schema name
        self._nodes: dict[str, Node] = {}  # "group/version/Kind" -> compiled tree (kinds used so far)
        self._compiler: Compiler | None = None  # keeps every tree compiled so far
        self._lean = _Decoding()  # the lean schemas, during a compile only
        self._object_meta: Node | None = None
        self._crd: dict[int, tuple[object, Node]] = {}
        # (spec node, spec encoding) -> object keys in it, for specs that type-checked clean (`fieldvalidation`)
        self.clean_specs: Bounded[tuple[int, bytes], int] = Bounded(256)
        # (body node, encoding of the body less its spec, name blanked) -> object keys in it, the same way
        self.clean_rests: Bounded[tuple[int, bytes], int] = Bounded(256)

    @staticmethod
    def _read(name: str = DATA_FILE) -> dict[str, Any]:
        # next to this module (where the wheel and the PyInstaller build put package data); read directly, as
        # importlib.resources would load zipfile and its readers (~0.3 MB) for a plain directory
        raw = (Path(__file__).resolve().parent / name).read_bytes()
        data: dict[str, Any] = orjson.loads(gzip.decompress(raw))
        return data

    def _kind_names(self) -> dict[str, str]:
        if self._kinds is None:
            data = self._read(LEAN_FILE)
            self._kinds = data["kinds"]
            self._compiler = Compiler(self._lean, go_types=data.get("gotypes") or {})
        return self._kinds

    def _compile(self, name: str) -> Node:
        """The tree of one named schema (compiled on first use, with what it refers to)."""
        self._kind_names()
        assert self._compiler is not None
        if self._compiler.has(name):
            return self._compiler.named(name)
        self._lean.texts = self._read(LEAN_FILE)["schemas"]
        try:
            return self._compiler.named(name)
        finally:
            self._lean.texts = {}

    def schema_name(self, kind: Kind) -> str:
        """Upstream's component name for a built-in kind ("" for custom or unpublished kinds)."""
        if kind.crd:  # virtual kinds with an upstream schema (the reviews) publish it; metrics have none
            return ""
        return self._kind_names().get(f"{kind.group}/{kind.version}/{kind.kind}", "")

    def node(self, kind: Kind) -> Node | None:
        """The compiled type-check tree of `kind`, or None when it is not a published built-in kind."""
        if kind.crd:
            return None
        return self.node_for(kind.group, kind.version, kind.kind)

    def node_for(self, group: str, version: str, kind_name: str) -> Node | None:
        """The compiled tree of any published type (a subresource body such as autoscaling/v1 Scale)."""
        key = f"{group}/{version}/{kind_name}"
        node = self._nodes.get(key)
        if node is None:
            name = self._kind_names().get(key)
            if name is None:
                return None
            node = self._nodes[key] = self._compile(name)
        return node

    def openapi_data(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(all component schemas by name, upstream's parameter objects by name), freshly read."""
        data = self._read(DATA_FILE)
        return data["schemas"], data["params"]

    def object_meta(self) -> Node | None:
        """The compiled tree of upstream's ObjectMeta."""
        if self._object_meta is None:
            self._object_meta = self._compile(OBJECT_META)
        return self._object_meta

    def crd_node(self, kind: Kind) -> Node | None:
        """The unknown-field tree of a custom resource's structural schema (None without a schema)."""
        schema = kind.schema
        if not kind.crd or not schema:
            return None
        held = self._crd.get(id(schema))
        if held is not None and held[0] is schema:
            return held[1]
        node = Compiler({}, structural=True).inline(schema)
        meta = self.object_meta()
        if node.tag == STRUCT and meta is not None:
            node.props = {**node.props, "apiVersion": Node(STRING, "string"), "kind": Node(STRING, "string"),
                          "metadata": meta}
        if len(self._crd) >= _CRD_CACHE:
            self._crd.clear()
        self._crd[id(schema)] = (schema, node)
        return node
