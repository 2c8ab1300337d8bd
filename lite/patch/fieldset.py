"""Field sets for server-side apply: the paths an object sets, and their FieldsV1 encoding.

A field path is a tuple of structured-merge-diff path elements written as FieldsV1 keys:
`f:<field>` for a map key, `k:{"name":"x"}` for an item of a keyed list (key fields sorted, compact JSON),
`v:<json>` for a member of a set of primitives.

Invariants:
- `object_fields` follows structured-merge-diff `toFieldSet`: scalars, atomic lists/maps, `null` and empty
  maps are leaves; keyed list items and set members are members themselves; empty non-atomic lists and
  non-empty maps are not (only their leaves are).
- `to_fields_v1(from_fields_v1(x)) == x` for well-formed FieldsV1; `.` marks a member that also has children.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from lite.patch.jsonpatch import json_equal
from lite.patch.schema import ListRule, Path, Schema

FieldPath = tuple[str, ...]

# Fields the API server never records as owned (structured-merge-diff "strip" set).
IGNORED: frozenset[FieldPath] = frozenset({
    ("f:apiVersion",), ("f:kind",),
    *(("f:metadata", f"f:{f}") for f in ("name", "namespace", "uid", "resourceVersion", "generation",
                                          "creationTimestamp", "managedFields", "selfLink",
                                          "deletionTimestamp", "deletionGracePeriodSeconds")),
})


def _json(v: Any) -> str:
    return orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode()


def key_element(rule: ListRule, item: dict[str, Any]) -> str:
    return "k:" + _json(rule.key_of(item))


def object_fields(obj: Any, schema: Schema, *, ignore_status: bool = True) -> set[FieldPath]:
    """The set of field paths `obj` specifies (its apply intent), minus server-owned metadata."""
    out: set[FieldPath] = set()
    _walk(obj, schema, (), (), out)
    return {p for p in out if not _ignored(p, ignore_status)}


def _ignored(p: FieldPath, ignore_status: bool) -> bool:
    return p[:1] in IGNORED or p[:2] in IGNORED or (ignore_status and p[:1] == ("f:status",))


def _walk(value: Any, schema: Schema, spath: Path, fpath: FieldPath, out: set[FieldPath]) -> None:
    if isinstance(value, dict):
        if spath and schema.is_atomic_map(spath):
            out.add(fpath)
            return
        for k, v in value.items():
            child = (*fpath, f"f:{k}")
            if v is None or v == {}:
                out.add(child)
            _walk(v, schema, (*spath, k), child, out)
    elif isinstance(value, list):
        rule = schema.list_rule(spath)
        if rule.strategy == "atomic" or (rule.strategy == "merge" and not all(isinstance(i, dict) for i in value)):
            out.add(fpath)
            return
        for item in value:
            if rule.strategy == "set":
                out.add((*fpath, "v:" + _json(item)))
            else:
                member = (*fpath, key_element(rule, item))
                out.add(member)
                _walk(item, schema, spath, member, out)
    elif value is not None:
        out.add(fpath)


def _order(key: str) -> tuple[int, str]:
    return ({".": 0, "f": 1, "k": 2, "v": 3, "i": 4}.get(key[:1], 5), key)


def to_fields_v1(paths: Iterable[FieldPath]) -> dict[str, Any]:
    """Encode a set of paths as a FieldsV1 object (children sorted as structured-merge-diff writes them)."""
    tree: dict[str, Any] = {}
    members = set(paths)
    for p in members:
        node = tree
        for pe in p:
            node = node.setdefault(pe, {})
    for p in members:
        node = tree
        for pe in p:
            node = node[pe]
        if node and "." not in node:
            node["."] = {}
    return _sorted(tree)


def _sorted(node: dict[str, Any]) -> dict[str, Any]:
    return {k: _sorted(node[k]) for k in sorted(node, key=_order)}


def from_fields_v1(fields: Any) -> set[FieldPath]:
    """Decode a FieldsV1 object into the set of member paths."""
    out: set[FieldPath] = set()

    def walk(node: Any, prefix: FieldPath) -> None:
        if not isinstance(node, dict):
            return
        for k, child in node.items():
            if k == ".":
                out.add(prefix)
            elif not child:
                out.add((*prefix, k))
            else:
                walk(child, (*prefix, k))

    walk(fields, ())
    return out


def path_string(p: FieldPath) -> str:
    """Structured-merge-diff's printed form: `.spec.containers[name="web"].image`, `.metadata.finalizers[="x"]`."""
    out = ""
    for pe in p:
        kind, body = pe[:1], pe[2:]
        if kind == "f":
            out += "." + body
        elif kind == "k":
            key = orjson.loads(body)
            out += "[" + ",".join(f"{k}={_json(v)}" for k, v in key.items()) + "]"
        elif kind == "v":
            out += f"[={body}]"
        else:
            out += f"[{body}]"
    return out


def _find_item(items: list[Any], pe: str, rule: ListRule) -> int:
    kind, body = pe[:1], pe[2:]
    target = orjson.loads(body)
    for i, item in enumerate(items):
        if kind == "k" and isinstance(item, dict) and json_equal(rule.key_of(item), target):
            return i
        if kind == "v" and json_equal(item, target):
            return i
    return -1


_MISSING = object()


def get_path(obj: Any, p: FieldPath, schema: Schema) -> Any:
    """The value at a field path, or `MISSING`."""
    cur: Any = obj
    spath: Path = ()
    for pe in p:
        if pe.startswith("f:"):
            if not isinstance(cur, dict) or pe[2:] not in cur:
                return _MISSING
            cur, spath = cur[pe[2:]], (*spath, pe[2:])
        else:
            if not isinstance(cur, list):
                return _MISSING
            i = _find_item(cur, pe, schema.list_rule(spath))
            if i < 0:
                return _MISSING
            cur = cur[i]
    return cur


MISSING = _MISSING


def remove_path(obj: Any, p: FieldPath, schema: Schema) -> None:
    """Delete the field, list item or set member at `p` from `obj` in place (no-op if absent)."""
    if not p:
        return
    parent_path, last = p[:-1], p[-1]
    parent = get_path(obj, parent_path, schema)
    if last.startswith("f:"):
        if isinstance(parent, dict):
            parent.pop(last[2:], None)
        return
    if isinstance(parent, list):
        spath = tuple(pe[2:] for pe in parent_path if pe.startswith("f:"))
        i = _find_item(parent, last, schema.list_rule(spath))
        if i >= 0:
            parent.pop(i)
