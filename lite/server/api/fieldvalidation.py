"""`fieldValidation` for request bodies: wrong JSON types, unknown fields and duplicate keys, as upstream.

Role: the HTTP layer calls `check_body` (create, update) and `check_patch` (every patch type) with the
decoded body, its raw bytes and the request's `fieldValidation` directive. They raise upstream's errors and
return the warnings to send:
- a value of the wrong JSON type (or a bad quantity/timestamp) is always an error: on create/update 400
  `<Kind> in version "<v>" cannot be handled as a <Kind>: json: cannot unmarshal ...`; in a JSON, merge or
  strategic patch 422 Invalid on field `patch`; in an apply patch 400 `failed to create typed patch object`;
- unknown and duplicate fields: `Strict` fails the request (400 `... strict decoding error: unknown field
  "spec.replica"`; for JSON/merge/strategic patches a 422 on `patch`), `Warn` (upstream's default when the
  parameter is absent) returns one warning per field, `Ignore` says nothing; both drop unknown fields from
  the body, as upstream's typed decoding does. Apply patches with unknown fields always fail, whatever the
  directive (upstream's typed patch conversion refuses them; upstream answers that with a 500, lite with 400).

Invariants:
- Only built-in kinds with an upstream schema are type-checked; custom resources get unknown fields (from
  their CRD's structural schema) and duplicate keys here, their types stay with `strategies/crschema.py`.
- Duplicate detection runs only for Strict and Warn and costs a few byte counts when there is none.
- Subresource bodies are checked against their own type (`body_kind`: Scale, Binding, Eviction, TokenRequest).
- The body is mutated only to drop unknown fields (it is freshly decoded and owned by the request).
"""

from __future__ import annotations

from typing import Any

import orjson

from lite import errors
from lite.errors import ApiError
from lite.kinds import Kind
from lite.server.api.builtin_schemas import BuiltinSchemas
from lite.server.api.dupkeys import json_duplicates, yaml_duplicates
from lite.server.api.specmemo import BODY_SPEC
from lite.server.api.typecheck import ANY, STRUCT, Node, Report, at_pointer, check, ssa_path

STRICT, WARN, IGNORE = "Strict", "Warn", "Ignore"

# Subresources whose bodies are another type than the parent kind: (group, version, kind).
_BODY_TYPES = {"scale": ("autoscaling", "v1", "Scale"), "binding": ("", "v1", "Binding"),
               "eviction": ("policy", "v1", "Eviction"), "token": ("authentication.k8s.io", "v1", "TokenRequest")}


def body_kind(kind: Kind, subresource: str, body: Any = None) -> Kind:
    """The type a request body has: the parent kind, or a subresource's own type (the body's apiVersion
    decides between versions, e.g. an Eviction in policy/v1beta1 is not checked against policy/v1)."""
    known = _BODY_TYPES.get(subresource)
    if known is None:
        return kind
    group, version, name = known
    av = body.get("apiVersion") if isinstance(body, dict) else None
    if isinstance(av, str) and av:
        group, _, version = av.rpartition("/")
    return Kind(group, version, name, "", kind.namespaced)


def directive(value: str) -> str:
    """The effective directive: upstream treats an absent one as Warn."""
    return value or WARN


_TOO_DEEP = "json: exceeded max depth"
_YAML_ERRORS = "error converting YAML to JSON: yaml: unmarshal errors:\n  "


def _duplicates(raw: bytes | None, decoded: Any, content_type: str, *, as_yaml: bool = False,
                keys: int = -1) -> tuple[list[str], bool]:
    """The duplicate keys of a body: (problems, whether they are YAML errors). JSON bodies name fields
    (`duplicate field "spec.replicas"`); YAML bodies, and apply patches (which upstream reads with a YAML
    parser even when they are JSON), name lines (`line 4: key "replicas" already set in map`)."""
    if raw is None:
        return [], False
    if raw.lstrip()[:1] in (b"{", b"["):
        found = json_duplicates(raw, decoded, keys)
        if found and as_yaml:
            return yaml_duplicates(raw), True
        return [f'duplicate field "{p}"' for p in found], False
    if "yaml" in content_type:
        lines = yaml_duplicates(raw)
        return lines, bool(lines)
    return [], False


def _cannot_handle(kind: Kind, detail: str) -> ApiError:
    return errors.bad_request(f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: {detail}')


def check_body(schemas: BuiltinSchemas, kind: Kind, obj: Any, mode: str, raw: bytes | None = None,
               content_type: str = "") -> list[str]:
    """Create/update body; returns the warnings (see the module docstring)."""
    try:
        return _check_body(schemas, kind, obj, directive(mode), raw, content_type)
    except RecursionError:  # a recursive schema (CRD validation schemas) nested beyond the interpreter's stack
        raise _cannot_handle(kind, _TOO_DEEP) from None


def _check_body(schemas: BuiltinSchemas, kind: Kind, obj: Any, mode: str, raw: bytes | None,
                content_type: str) -> list[str]:
    node, types = _node(schemas, kind)
    if kind.crd and isinstance(obj, dict):
        _drop_malformed_meta(schemas, obj)
    report = _check_object(schemas, node, obj, mode != STRICT, types) if node is not None else Report()
    if report.type_error:
        raise _cannot_handle(kind, report.type_error)
    if mode == IGNORE:
        return []
    dups, from_yaml = _duplicates(raw, obj, content_type, keys=report.keys)
    if from_yaml and mode == STRICT:  # upstream's YAML-to-JSON step fails before the fields are looked at
        raise _cannot_handle(kind, "strict decoding error: " + _YAML_ERRORS + "\n  ".join(dups))
    problems = [f'unknown field "{p}"' for p in report.unknown] + dups
    if problems and mode == STRICT:
        raise _cannot_handle(kind, "strict decoding error: " + ", ".join(problems))
    return problems


def _check_object(schemas: BuiltinSchemas, node: Node, obj: Any, prune: bool, types: bool) -> Report:
    """`check(node, obj)` of a whole body, where a `spec` found clean before (no unknown field, no type error:
    `schemas.clean_specs`, keyed by its encoding) is not walked again: controllers and bulk clients send the same
    spec over and over, and it is most of a pod's body. Only a clean spec is remembered, so every report of an
    error or an unknown field comes from a full walk, in its order."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    spec_node = node.props.get("spec") if types and node.tag == STRUCT else None
    if spec_node is None or spec_node.tag != STRUCT or not isinstance(spec, dict) or not spec:
        return check(node, obj, prune=prune, types=types)
    try:
        key = (id(spec_node), orjson.dumps(spec))
    except TypeError:  # YAML values orjson cannot encode (dates, non-string keys): walk it all
        return check(node, obj, prune=prune, types=types)
    inner = schemas.clean_specs.get(key)
    if inner is None:
        # the spec on its own, as the whole walk would reach it (struct, Go path, strict path)
        alone = check(spec_node, spec, types=types, at=(node.go.rpartition(".")[2], "spec", "spec"))
        if alone.type_error or alone.unknown:
            return check(node, obj, prune=prune, types=types)
        inner = alone.keys
        schemas.clean_specs.put(key, inner)
    BODY_SPEC.set((spec, key[1]))  # clean, so untouched: create defaulting keys its memo by these bytes
    rest = {k: v for k, v in obj.items() if k != "spec"}
    # The rest (apiVersion, kind, metadata) found clean before, but for the name: a string field, so any string
    # checks alike (only its JSON type is looked at) and objects that differ only by name share the entry.
    rest_key = _rest_key(node, rest)
    seen = schemas.clean_rests.get(rest_key) if rest_key is not None else None
    if seen is not None:
        return Report(keys=seen + 1 + inner)
    report = check(node, rest, prune=prune, types=types)
    if report.type_error is None:
        for k in [k for k in obj if k != "spec" and k not in rest]:  # pruned as unknown
            del obj[k]
        if rest_key is not None and not report.unknown:
            schemas.clean_rests.put(rest_key, report.keys)
        report.keys += 1 + inner  # the `spec` key and the keys inside it
    return report


def _rest_key(node: Node, rest: dict[str, Any]) -> tuple[int, bytes] | None:
    """The memo key of a body less its spec (`_check_object`): the body's node and the encoding with
    `metadata.name` blanked when that is a string; None when not plain JSON."""
    meta = rest.get("metadata")
    if type(meta) is dict and type(meta.get("name")) is str:
        rest = {**rest, "metadata": {**meta, "name": ""}}
    try:
        return id(node), orjson.dumps(rest)
    except TypeError:
        return None


def check_patch(schemas: BuiltinSchemas, kind: Kind, patch: Any, patch_type: str, mode: str, *,
                raw: bytes | None = None, content_type: str = "", namespace: str = "", name: str = "") -> list[str]:
    """A patch body of any type; returns the warnings (see the module docstring)."""
    try:
        return _check_patch(schemas, kind, patch, patch_type, directive(mode), raw, content_type, namespace, name)
    except RecursionError:
        raise _cannot_handle(kind, _TOO_DEEP) from None


def _check_patch(schemas: BuiltinSchemas, kind: Kind, patch: Any, patch_type: str, mode: str, raw: bytes | None,
                 content_type: str, namespace: str, name: str) -> list[str]:
    node, types = _node(schemas, kind)
    dups = _duplicates(raw, patch, content_type, as_yaml=patch_type == "apply")[0] if mode != IGNORE else []
    if patch_type == "apply":
        return _check_apply(node, kind, patch, mode, dups, namespace, name, types)
    if node is None:
        report = Report()
    elif patch_type == "json":
        report = _check_json_patch(node, patch, prune=mode != STRICT, types=types)
    else:
        report = check(node, patch, prune=mode != STRICT, directives=True, types=types)
    def shown() -> str:  # the patch as upstream prints it in the error (rendered only for an error)
        return go_repr(patch) if patch_type == "strategic" else orjson.dumps(patch).decode()

    if report.type_error:
        raise errors.invalid("", "", [errors.field_invalid("patch", shown(), report.type_error)])
    if mode == IGNORE:
        return []
    problems = [f'unknown field "{p}"' for p in report.unknown] + dups
    if problems and mode == STRICT:
        detail = "strict decoding error: " + ", ".join(problems)
        raise errors.invalid("", "", [errors.field_invalid("patch", shown(), detail)])
    return problems


def _node(schemas: BuiltinSchemas, kind: Kind) -> tuple[Node | None, bool]:
    """The tree to check `kind` against, and whether types are checked (not for custom resources)."""
    if kind.crd:
        return schemas.crd_node(kind), False
    return schemas.node(kind), True


def _drop_malformed_meta(schemas: BuiltinSchemas, obj: dict[str, Any]) -> None:
    """Custom resources: metadata fields of the wrong type are dropped, one by one, as upstream's
    GetObjectMetaWithOptions(DropMalformedFields) does, so a bad annotation never reaches the store."""
    meta = obj.get("metadata")
    node = schemas.object_meta()
    if not isinstance(meta, dict) or node is None:
        return
    for key in [k for k, v in meta.items() if v is not None and k in node.props]:
        if check(node, {key: meta[key]}).type_error:
            del meta[key]


def _check_apply(node: Node | None, kind: Kind, patch: Any, mode: str, dups: list[str], namespace: str,
                 name: str, types: bool) -> list[str]:
    if node is not None:
        report = check(node, patch, types=types)
        where = f"{namespace}/{name}" if namespace else name
        prefix = f"failed to create typed patch object ({where}; {kind.api_version}, Kind={kind.kind}): "
        if report.type_error:
            raise errors.bad_request(prefix + report.type_error)
        if report.unknown:
            raise errors.bad_request(prefix + ", ".join(f"{ssa_path(node, patch, p)}: field not declared in schema"
                                                        for p in report.unknown))
    if dups and mode == STRICT:
        raise errors.bad_request("error strict decoding YAML: " + _YAML_ERRORS + "\n  ".join(dups))
    return dups


def _check_json_patch(node: Node, ops: Any, *, prune: bool, types: bool) -> Report:
    """Each value a JSON patch writes is checked against the schema at its path (`-` appends to a list)."""
    out = Report()
    if not isinstance(ops, list):
        return out
    for op in ops:
        if not isinstance(op, dict) or op.get("op") not in ("add", "replace") or not isinstance(op.get("path"), str):
            continue
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        target, at = at_pointer(node, tokens)
        if target is None:
            out.unknown.append(at[2])
            continue
        if target.tag == ANY:
            continue
        got = check(target, op.get("value"), prune=prune, at=at, types=types)
        out.unknown += got.unknown
        if got.type_error:
            out.type_error = got.type_error
            return out
    if prune and out.unknown:  # an op that writes an unknown field is dropped, as the typed decode drops it
        ops[:] = [op for op in ops if not (isinstance(op, dict) and _names_unknown(node, op))]
    return out


def _names_unknown(node: Node, op: dict[str, Any]) -> bool:
    if op.get("op") not in ("add", "replace") or not isinstance(op.get("path"), str):
        return False
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
    return at_pointer(node, tokens)[0] is None


_WARNINGS_TOTAL = 4 * 1024  # upstream's warning recorder: total runes before it starts truncating
_WARNING_ITEM = 256  # and the runes each warning keeps once it does


def warning_headers(texts: list[str]) -> list[str]:
    """`Warning` header values for warnings, bounded as upstream's recorder bounds them: duplicates once;
    when all of them exceed 4 Ki characters, each is cut to 256 and they stop once 4 Ki are written. Line
    breaks become spaces (as Go's HTTP server writes header values), quotes and backslashes are escaped."""
    unique = list(dict.fromkeys(texts))
    if sum(len(t) for t in unique) > _WARNINGS_TOTAL:
        cut, written = [], 0
        for t in unique:
            if written >= _WARNINGS_TOTAL:
                break
            cut.append(t[:_WARNING_ITEM])
            written += len(cut[-1])
        unique = cut
    out = []
    for t in unique:
        t = t.replace("\r", " ").replace("\n", " ").replace("\\", "\\\\").replace('"', '\\"')
        out.append(f'299 - "{t}"')
    return out


def go_repr(value: Any) -> str:
    """A decoded JSON value as Go's `%+v` prints a map[string]interface{} (how upstream shows a strategic
    merge patch in its errors): `map[spec:map[replicas:3]]`."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_repr(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_repr(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
