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

Run: python3 tools/gen_openapi_schemas.py DIR [OUT]
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

KEEP = {"description", "type", "format", "properties", "items", "additionalProperties", "$ref", "allOf", "oneOf",
        "required"}
DROP_EXT = {"x-kubernetes-unions"}


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


def documents(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.json") if "apis" in p.parts or "api" in p.parts
                  or p.name.startswith(("api__", "apis__")))


def main() -> None:
    root = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else \
        Path(__file__).resolve().parent.parent / "lite" / "server" / "api" / "openapi_v1_32.json.gz"
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
    data = {"version": "v1.32", "schemas": dict(sorted(schemas.items())), "params": dict(sorted(params.items())),
            "kinds": dict(sorted(kinds.items()))}
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    out.write_bytes(gzip.compress(raw, 9, mtime=0))
    print(f"{len(schemas)} schemas, {len(params)} parameters, {len(kinds)} kinds: "
          f"{len(raw)} bytes JSON, {out.stat().st_size} bytes gzip -> {out}")


if __name__ == "__main__":
    main()
