"""Reduce upstream's Kubernetes 1.32 OpenAPI v3 documents to the data lite serves and checks against.

Input: a directory holding upstream's `api/openapi-spec/v3` documents for release-1.32, laid out as
`api/v1.json` and `apis/<group>/<version>.json` (the layout kubernetes-sigs/kubectl-validate keeps them in
under `pkg/openapiclient/builtins/1.32/`; upstream names the same files `api__v1_openapi.json` and
`apis__<group>__<version>_openapi.json`, and both layouts are read).

Output: `lite/server/api/openapi_v1_32.json.gz`, gzip of one JSON object:
- `schemas`: every component schema of those documents, keeping only what lite uses (description, type,
  format, properties, items, additionalProperties, $ref/allOf, oneOf, required, x-kubernetes-* extensions);
  `default`s and union discriminators are dropped.
- `params`: upstream's query/path parameter objects by name (their descriptions are what kubectl shows).
- `kinds`: "group/version/Kind" -> schema name, from x-kubernetes-group-version-kind.

- `gotypes`: schema name -> {property: Go type as Go's decoder names it in errors} for the properties whose
  Go type is a named non-struct type (`[]v1.FinalizerName`, `v1.PullPolicy`, `v1.ResourceList`, `types.UID`),
  which the OpenAPI types alone cannot tell. Read from the Go sources when GO_DIR is given: a directory with
  kubernetes/api's `<group>/<version>/types.go` under `api/` and kubernetes/apimachinery's
  `pkg/apis/meta/v1/types.go` under `apimachinery/` (tag v0.32.9, matching 1.32).

Second output, next to the first: `typecheck_v1_32.json.gz`, the lean copy the type checks compile from
(`lean`): `schemas`, each one a JSON text (decoded only when it is compiled) with only the keys
`typecheck.Compiler` reads (no descriptions, no `required`/`oneOf`), plus `kinds` and `gotypes`. A server
compiles its trees per kind from it, so a write never parses the descriptions nor the schemas it does not use.

Run: python3 tools/gen_openapi_schemas.py DIR [OUT] [GO_DIR]
     python3 tools/gen_openapi_schemas.py --lean [FULL]   (only rewrite the lean copy from the full data)
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

KEEP = {"description", "type", "format", "properties", "items", "additionalProperties", "$ref", "allOf", "oneOf",
        "required"}
DROP_EXT = {"x-kubernetes-unions"}
LEAN_FILE = "typecheck_v1_32.json.gz"
# what `lite.server.api.typecheck.Compiler` reads of a schema
LEAN_KEEP = {"type", "format", "properties", "items", "additionalProperties", "$ref", "allOf",
             "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string",
             "x-kubernetes-list-map-keys", "x-kubernetes-list-type"}


def reduce(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in DROP_EXT or not (key in KEEP or key.startswith("x-kubernetes-")):
            continue
        if key == "properties":
            out[key] = {name: reduce(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = reduce(value)
        elif key in ("allOf", "oneOf"):
            out[key] = [reduce(v) for v in value]
        else:
            out[key] = value
    return out


def lean_schema(schema: Any) -> Any:
    """A reduced schema with only what the type checks read (`LEAN_KEEP`), recursively."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key not in LEAN_KEEP:
            continue
        if key == "properties":
            value = {name: lean_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            value = lean_schema(value)
        elif key == "allOf":
            value = [lean_schema(v) for v in value]
        out[key] = value
    return out


def lean(data: dict[str, Any]) -> bytes:
    """The lean copy (see the module docstring) of the full data, as JSON."""
    small = {"schemas": {name: json.dumps(lean_schema(s), separators=(",", ":"), sort_keys=True)
                         for name, s in data["schemas"].items()}, "kinds": data["kinds"],
             "gotypes": data.get("gotypes") or {}}
    return json.dumps(small, separators=(",", ":"), sort_keys=True).encode()


def write_lean(data: dict[str, Any], full: Path) -> None:
    out = full.with_name(LEAN_FILE)
    raw = lean(data)
    out.write_bytes(gzip.compress(raw, 9, mtime=0))
    print(f"lean copy: {len(raw)} bytes JSON, {out.stat().st_size} bytes gzip -> {out}")


_IMPORT = re.compile(r'^\s*(\w+\s+)?"([\w./-]+)"', re.M)
_TYPE = re.compile(r"^type (\w+) (.+?)\s*(\{|$)", re.M)
_FIELD = re.compile(r'^\t(\w+)?\s*([\w.\[\]*]+)\s+`json:"([^",]*)[^`]*`', re.M)
_BUILTIN = {"string", "bool", "int", "int32", "int64", "float32", "float64", "byte", "uint8", "uint32", "uint64"}


class GoPackage:
    """The struct fields and named types of one Go package's types.go."""

    def __init__(self, source: str, name: str) -> None:
        self.name = name
        self.aliases = {(m.group(1) or "").strip() or m.group(2).rsplit("/", 1)[-1]: m.group(2).rsplit("/", 1)[-1]
                        for m in _IMPORT.finditer(source.split(")", 1)[0])}
        self.kinds: dict[str, str] = {m.group(1): m.group(2).strip() for m in _TYPE.finditer(source)}
        self.fields: dict[str, list[tuple[str, str]]] = {}  # struct -> [(json name or "" for inline, type)]
        for block in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", source, re.M | re.S):
            self.fields[block.group(1)] = [(f.group(3), f.group(2)) for f in _FIELD.finditer(block.group(2))]

    def go_name(self, expr: str) -> str:
        """A Go type expression as reflect prints it (pointers dropped: the decoder reports the element)."""
        expr = expr.lstrip("*")
        if expr.startswith("[]"):
            return "[]" + ("uint8" if expr == "[]byte" else self.go_name(expr[2:]))
        if expr.startswith("map["):
            key, value = expr[4:].split("]", 1)
            return f"map[{self.go_name(key)}]{self.go_name(value)}"
        if expr in _BUILTIN:
            return expr
        if "." in expr:
            alias, name = expr.split(".", 1)
            return f"{self.aliases.get(alias, alias)}.{name}"
        return f"{self.name}.{expr}"

    def is_named_scalar(self, expr: str) -> bool:
        """Whether a type expression involves a named type of this package that is not a struct."""
        base = expr.lstrip("*[]")
        if base.startswith("map["):
            return True
        if base in _BUILTIN or "." in base:
            return base in ("types.UID",)
        return base in self.kinds and not self.kinds[base].startswith("struct")


def go_types(go_dir: Path, schemas: dict[str, Any]) -> dict[str, dict[str, str]]:
    packages: dict[str, GoPackage] = {}
    for path in sorted((go_dir / "api").rglob("types.go")):
        rel = path.parent.relative_to(go_dir / "api")
        packages[f"io.k8s.api.{'.'.join(rel.parts)}"] = GoPackage(path.read_text(), rel.parts[-1])
    meta = go_dir / "apimachinery" / "pkg" / "apis" / "meta" / "v1" / "types.go"
    if meta.exists():
        packages["io.k8s.apimachinery.pkg.apis.meta.v1"] = GoPackage(meta.read_text(), "v1")
    out: dict[str, dict[str, str]] = {}
    for name, schema in schemas.items():
        prefix, _, struct = name.rpartition(".")
        pkg = packages.get(prefix)
        if pkg is None or struct not in pkg.fields:
            continue
        found: dict[str, str] = {}
        todo = [struct]
        while todo:  # inline (embedded) structs add their fields to the outer one
            for json_name, expr in pkg.fields.get(todo.pop(), []):
                if not json_name:
                    todo.append(expr.lstrip("*"))
                elif json_name in schema.get("properties", {}) and pkg.is_named_scalar(expr):
                    found[json_name] = pkg.go_name(expr)
        if found:
            out[name] = dict(sorted(found.items()))
    return out


def documents(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.json") if "apis" in p.parts or "api" in p.parts
                  or p.name.startswith(("api__", "apis__")))


def main() -> None:
    default = Path(__file__).resolve().parent.parent / "lite" / "server" / "api" / "openapi_v1_32.json.gz"
    if sys.argv[1] == "--lean":
        full = Path(sys.argv[2]) if len(sys.argv) > 2 else default
        write_lean(json.loads(gzip.decompress(full.read_bytes())), full)
        return
    root = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else default
    schemas: dict[str, Any] = {}
    params: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    for path in documents(root):
        doc = json.loads(path.read_text())
        for name, schema in doc.get("components", {}).get("schemas", {}).items():
            schemas[name] = reduce(schema)
            for gvk in schema.get("x-kubernetes-group-version-kind", []):
                key = f"{gvk['group']}/{gvk['version']}/{gvk['kind']}"
                # Shared meta types (DeleteOptions, WatchEvent) list every group; the first owner wins.
                if name.startswith("io.k8s.apimachinery.pkg.apis.meta") and gvk["kind"] in (
                        "DeleteOptions", "WatchEvent", "Status", "APIResourceList", "APIGroup", "APIGroupList",
                        "APIVersions"):
                    continue
                kinds.setdefault(key, name)
        for item in doc.get("paths", {}).values():
            for op in [item, *[v for v in item.values() if isinstance(v, dict)]]:
                for p in op.get("parameters", []) if isinstance(op, dict) else []:
                    if isinstance(p, dict) and "name" in p:
                        params.setdefault(p["name"], p)
    gotypes = go_types(Path(sys.argv[3]), schemas) if len(sys.argv) > 3 else {}
    data = {"version": "v1.32", "schemas": dict(sorted(schemas.items())), "params": dict(sorted(params.items())),
            "kinds": dict(sorted(kinds.items())), "gotypes": gotypes}
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    out.write_bytes(gzip.compress(raw, 9, mtime=0))
    print(f"{len(schemas)} schemas, {len(params)} parameters, {len(kinds)} kinds, {len(gotypes)} with Go types: "
          f"{len(raw)} bytes JSON, {out.stat().st_size} bytes gzip -> {out}")
    write_lean(data, out)


if __name__ == "__main__":
    main()
