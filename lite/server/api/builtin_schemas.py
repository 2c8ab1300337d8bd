"""Upstream's Kubernetes 1.32 OpenAPI v3 schemas for the built-in kinds, loaded from package data.

Role: one `BuiltinSchemas` per server (built once, shared by the HTTP layer and `Resources`). It reads
`openapi_v1_32.json.gz` (made by `tools/gen_openapi_schemas.py` from upstream's `api/openapi-spec/v3`
documents; see that script) on first use and offers:
- `node(kind)`: the compiled type-check tree (`lite.server.api.typecheck.Node`) of a built-in kind;
- `schema_name(kind)`, `openapi_data()`: the raw component schemas and parameter objects that
  `/openapi/v3` serves (so `kubectl explain` prints upstream's descriptions).

Invariants:
- Loading and compiling happen once per instance, lazily (start-up does not pay for them; the first write
  does, a few tens of milliseconds); only the compiled trees stay in memory (under 1 MB); everything handed
  out is shared and must not be mutated.
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
from lite.server.api.specmemo import Bounded
from lite.server.api.typecheck import STRING, STRUCT, Compiler, Node

DATA_FILE = "openapi_v1_32.json.gz"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_CRD_CACHE = 256


class BuiltinSchemas:
    """See the module docstring."""

    def __init__(self) -> None:
        self._kinds: dict[str, str] | None = None  # "group/version/Kind" -> schema name
        self._nodes: dict[str, Node] = {}
        self._object_meta: Node | None = None
        self._crd: dict[int, tuple[object, Node]] = {}
        # (spec node, spec encoding) -> object keys in it, for specs that type-checked clean (`fieldvalidation`)
        self.clean_specs: Bounded[tuple[int, bytes], int] = Bounded(256)

    @staticmethod
    def _read() -> dict[str, Any]:
        raw = importlib.resources.files("lite.server.api").joinpath(DATA_FILE).read_bytes()
        data: dict[str, Any] = orjson.loads(gzip.decompress(raw))
        return data

    def _compiled(self) -> dict[str, str]:
        """Compile every published kind once; the schemas themselves (~3 MB as Python objects, mostly
        descriptions) are not kept: `openapi_data` reads them again when documents are built."""
        if self._kinds is None:
            data = self._read()
            compiler = Compiler(data["schemas"], go_types=data.get("gotypes"))
            self._nodes = {key: compiler.named(name) for key, name in data["kinds"].items()}
            self._object_meta = compiler.named(OBJECT_META)
            self._kinds = data["kinds"]
        return self._kinds

    def schema_name(self, kind: Kind) -> str:
        """Upstream's component name for a built-in kind ("" for custom or unpublished kinds)."""
        if kind.crd:  # virtual kinds with an upstream schema (the reviews) publish it; metrics have none
            return ""
        return self._compiled().get(f"{kind.group}/{kind.version}/{kind.kind}", "")

    def node(self, kind: Kind) -> Node | None:
        """The compiled type-check tree of `kind`, or None when it is not a published built-in kind."""
        if kind.crd:
            return None
        return self.node_for(kind.group, kind.version, kind.kind)

    def node_for(self, group: str, version: str, kind_name: str) -> Node | None:
        """The compiled tree of any published type (a subresource body such as autoscaling/v1 Scale)."""
        self._compiled()
        return self._nodes.get(f"{group}/{version}/{kind_name}")

    def openapi_data(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(all component schemas by name, upstream's parameter objects by name), freshly read."""
        data = self._read()
        return data["schemas"], data["params"]

    def object_meta(self) -> Node | None:
        """The compiled tree of upstream's ObjectMeta."""
        self._compiled()
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
