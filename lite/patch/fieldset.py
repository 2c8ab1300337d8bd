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

from collections.abc import Iterable, Mapping
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
    _walk(obj, schema, (), (), out, ignore_status)
    return {p for p in out if not _ignored(p, ignore_status)}


def _ignored(p: FieldPath, ignore_status: bool) -> bool:
    return p[:1] in IGNORED or p[:2] in IGNORED or (ignore_status and p[:1] == ("f:status",))


def _walk(value: Any, schema: Schema, spath: Path, fpath: FieldPath, out: set[FieldPath],
          ignore_status: bool = False) -> None:
    if isinstance(value, dict):
        if spath and schema.is_atomic_map(spath):
            out.add(fpath)
            return
        for k, v in value.items():
            child = (*fpath, f"f:{k}")
            if len(child) <= 2 and _ignored(child, ignore_status):  # (managedFields, status: never walked)
                continue
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


def diff_fields(old: Any, new: Any, schema: Schema, *,
                ignore_status: bool = True) -> tuple[set[FieldPath], set[FieldPath]]:
    """(changed, removed) from `old` to `new`: `changed` are the paths of `object_fields(new)` whose value
    differs from `old`'s at the same path (absent there included): a leaf whose value changed, a keyed item or
    set member that is new or whose content changed; `removed` are the paths of `object_fields(old)` that
    `new` no longer has. One walk of both objects side by side, skipping subtrees whose encodings are equal,
    so an update costs about what its change does (looking each path up in both would cost that per path)."""
    changed: set[FieldPath] = set()
    removed: set[FieldPath] = set()
    _diff(old, new, schema, (), (), changed, removed, ignore_status)
    removed -= changed
    return ({p for p in changed if not _ignored(p, ignore_status)},
            {p for p in removed if not _ignored(p, ignore_status)})


def _same_bytes(a: Any, b: Any) -> bool:
    """Equal encodings (a fast, strict test: equal values whose keys are ordered differently, or 1 and 1.0,
    are left to the slow walk)."""
    try:
        return orjson.dumps(a) == orjson.dumps(b)
    except (TypeError, orjson.JSONEncodeError):
        return False


def _walk_value(v: Any, schema: Schema, spath: Path, fpath: FieldPath, out: set[FieldPath]) -> None:
    """`_walk` of a map entry's value: `null` and `{}` are leaves themselves."""
    if v is None or v == {}:
        out.add(fpath)
    _walk(v, schema, spath, fpath, out)


def _diff(old: Any, new: Any, schema: Schema, spath: Path, fpath: FieldPath, changed: set[FieldPath],
          removed: set[FieldPath], ignore_status: bool = False) -> bool:
    """Add to `changed` the paths under `fpath` (in `_walk`'s terms) whose value differs and to `removed` the
    old paths there (those still present are taken out by the caller); True when anything there differs (so a
    keyed item holding a change counts as changed, as its whole value does)."""
    if old is _MISSING:
        _walk(new, schema, spath, fpath, changed)
        return True
    if isinstance(new, dict | list) and type(old) is type(new) and _same_bytes(old, new):
        return False
    if isinstance(new, dict):
        if (spath and schema.is_atomic_map(spath)) or not isinstance(old, dict):
            return _replaced(old, new, schema, spath, fpath, changed, removed)
        differs = False
        for k, ov in old.items():
            if k not in new:
                _walk_value(ov, schema, (*spath, k), (*fpath, f"f:{k}"), removed)
                differs = True
        for k, v in new.items():
            child = (*fpath, f"f:{k}")
            if len(child) <= 2 and _ignored(child, ignore_status):  # never owned: not compared
                continue
            ov = old.get(k, _MISSING)
            if v is None or v == {}:
                if ov is _MISSING or not json_equal(ov, v):
                    changed.add(child)
                    if ov is not _MISSING:
                        _walk(ov, schema, (*spath, k), child, removed)
                    differs = True
                continue
            if ov is None or ov == {}:
                removed.add(child)  # a `null` or `{}` leaf that now holds something
            differs = _diff(ov, v, schema, (*spath, k), child, changed, removed) or differs
        return differs
    if isinstance(new, list):
        rule = schema.list_rule(spath)
        atomic = rule.strategy == "atomic" or (rule.strategy == "merge" and not all(isinstance(i, dict) for i in new))
        if atomic or not isinstance(old, list):
            return _replaced(old, new, schema, spath, fpath, changed, removed)
        if rule.strategy == "merge" and not all(isinstance(i, dict) for i in old):
            _walk(old, schema, spath, fpath, removed)  # old was atomic here (a leaf), new is keyed
        differs = len(old) != len(new)
        if rule.strategy == "set":
            for item in new:
                if not any(json_equal(item, x) for x in old):
                    changed.add((*fpath, "v:" + _json(item)))
                    differs = True
            for x in old:
                if not any(json_equal(item, x) for item in new):
                    removed.add((*fpath, "v:" + _json(x)))
                    differs = True
            return differs or not all(json_equal(a, b) for a, b in zip(old, new, strict=False))
        old_keys: list[dict[str, Any] | None] = [rule.key_of(x) if isinstance(x, dict) else None for x in old]
        new_keys = [rule.key_of(item) for item in new]
        for item, key in zip(new, new_keys, strict=True):
            at = next((i for i, k in enumerate(old_keys) if k is not None and json_equal(k, key)), -1)
            member = (*fpath, key_element(rule, item))
            if _diff(old[at] if at >= 0 else _MISSING, item, schema, spath, member, changed, removed):
                changed.add(member)
                differs = True
        for x, gone in zip(old, old_keys, strict=True):
            if gone is not None and not any(json_equal(gone, k) for k in new_keys):
                member = (*fpath, key_element(rule, x))
                removed.add(member)
                _walk(x, schema, spath, member, removed)
                differs = True
        # same members with the same contents: only their order can differ
        return differs or any(k is None or not json_equal(k, nk) for k, nk in zip(old_keys, new_keys, strict=False))
    if new is None:
        return not json_equal(old, new)
    if json_equal(old, new):
        return False
    changed.add(fpath)
    if isinstance(old, dict | list):
        _walk(old, schema, spath, fpath, removed)
    return True


def _replaced(old: Any, new: Any, schema: Schema, spath: Path, fpath: FieldPath, changed: set[FieldPath],
              removed: set[FieldPath]) -> bool:
    """A value replaced whole (atomic, or of another type): all of new's paths changed, all of old's gone."""
    if json_equal(old, new):
        return False
    _walk(new, schema, spath, fpath, changed)
    _walk(old, schema, spath, fpath, removed)
    return True


def _order(key: str) -> tuple[int, str]:
    return ({".": 0, "f": 1, "k": 2, "v": 3, "i": 4}.get(key[:1], 5), key)


def to_fields_v1(paths: Iterable[FieldPath]) -> dict[str, Any]:
    """Encode a set of paths as a FieldsV1 object (children sorted as structured-merge-diff writes them).

    With only `f:`, `k:` and `v:` elements (all lite writes), plain string order is that order, so the
    paths are inserted sorted and every map comes out in order without sorting each one again."""
    ordered = sorted(set(paths))
    tree: dict[str, Any] = {}
    marked: list[dict[str, Any]] = []
    for p in ordered:
        node = tree
        for pe in p:
            child = node.get(pe)
            if child is None:
                if pe[:2] not in _PLAIN_ORDER:
                    return _to_fields_v1_sorted(ordered)
                child = node[pe] = {}
            node = child
        node["."] = {}  # first key of a member's map: dropped below unless it has children too
        marked.append(node)
    for node in marked:
        if len(node) == 1:
            node.clear()
    return tree


def object_fields_v1(obj: Any, schema: Schema, *, ignore_status: bool = True,
                     known: Mapping[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """`to_fields_v1(object_fields(obj))` in one walk of the object (what a create records): maps are built in
    structured-merge-diff's order as they are walked. The schema's facts per path (list rule, atomic map) come
    from its `PathNode` tree, built once per schema, so the walk builds no path tuples and looks up no patterns
    (it was a third of a pod create's CPU)."""
    root = path_root(schema)
    if not isinstance(obj, dict):
        return _list_tree(obj, root) if isinstance(obj, list) else {}
    skip = _TOP_IGNORED_STATUS if ignore_status else _TOP_IGNORED
    if not known:
        return _map_tree(obj, root, skip)
    # `known`: the children of some top-level non-empty, non-atomic maps, computed before for an equal value
    # (`lite.server.api.specmemo`); such a map is in the result exactly when it has children
    usable = {k: sub for k, sub in known.items() if k not in skip and isinstance(obj.get(k), dict) and obj[k]
              and not root.child(k).atomic_map}
    out = _map_tree(obj, root, skip | usable.keys())
    for k, sub in usable.items():
        if sub:
            out["f:" + k] = sub
    return {k: out[k] for k in sorted(out)}


class PathNode:
    """The schema's facts at one path (map keys from the root; list items share their list's node): its list
    rule, whether it is an atomic map, and the FieldsV1 key prefix of its list items. Children are made on
    first use and kept, at most `PATH_NODES` per schema (paths come from request bodies: past that, children are
    made afresh each time, never kept). Immutable once made but for the children memo."""

    __slots__ = ("_budget", "_kids", "_path", "_schema", "atomic_map", "defaults", "item_keys", "one_key", "rule")

    def __init__(self, schema: Schema, path: Path, budget: list[int]) -> None:
        self._schema, self._path, self._budget = schema, path, budget
        self._kids: dict[str, PathNode] = {}
        self.atomic_map = bool(path) and schema.is_atomic_map(path)
        self.rule = schema.list_rule(path)
        self.item_keys = self.rule.keys or (self.rule.merge_key,)
        self.defaults = dict(self.rule.defaults)
        # A list keyed by one field without a default: its item keys are `k:{"<field>":<json value>}`.
        self.one_key = f"k:{{{_json(self.item_keys[0])}:" if len(self.item_keys) == 1 and not self.defaults else ""

    def child(self, key: str) -> PathNode:
        node = self._kids.get(key)
        if node is None:
            node = PathNode(self._schema, (*self._path, key), self._budget)
            if self._budget[0] > 0:
                self._budget[0] -= 1
                self._kids[key] = node
        return node

    def item_key(self, item: dict[str, Any]) -> str:
        """`key_element(self.rule, item)`."""
        if self.one_key:
            field = self.item_keys[0]
            if field in item:
                return self.one_key + orjson.dumps(item[field], option=orjson.OPT_SORT_KEYS).decode() + "}"
            return "k:{}"
        dflt = self.defaults
        return "k:" + _json({k: item.get(k, dflt.get(k)) for k in self.item_keys if k in item or k in dflt})


PATH_NODES = 4096


def path_root(schema: Schema) -> PathNode:
    """The schema's `PathNode` tree (made on first use and kept on the schema: schemas are immutable)."""
    root = schema.__dict__.get("_path_root")
    if root is None:
        root = PathNode(schema, (), [PATH_NODES])
        object.__setattr__(schema, "_path_root", root)  # a frozen dataclass: its fields stay as they are
    assert isinstance(root, PathNode)
    return root


_META_IGNORED = frozenset(p[1][2:] for p in IGNORED if len(p) == 2)
_TOP_IGNORED = frozenset({"apiVersion", "kind"})
_TOP_IGNORED_STATUS = frozenset({"apiVersion", "kind", "status"})
_NOTHING: frozenset[str] = frozenset()


def _map_tree(value: dict[str, Any], node: PathNode, skip: frozenset[str]) -> dict[str, Any]:
    """The FieldsV1 children of a non-atomic map (`skip`: keys never owned there); mirrors `_walk`: `null`, `{}`,
    scalars, atomic maps and atomic lists are leaves, an empty non-atomic list or a map owning nothing is left
    out."""
    out: dict[str, Any] = {}
    for k in sorted(value):
        if k in skip:
            continue
        v = value[k]
        if v is None:
            out["f:" + k] = {}
        elif isinstance(v, dict):
            if not v:
                out["f:" + k] = {}
                continue
            c = node.child(k)
            if c.atomic_map:
                out["f:" + k] = {}
                continue
            sub = _map_tree(v, c, _META_IGNORED if k == "metadata" and skip is not _NOTHING and not node._path
                            else _NOTHING)
            if sub:
                out["f:" + k] = sub
        elif isinstance(v, list):
            c = node.child(k)
            strategy = c.rule.strategy
            if strategy == "atomic" or (strategy == "merge" and not all(isinstance(i, dict) for i in v)):
                out["f:" + k] = {}
                continue
            sub = _list_tree(v, c)
            if sub:
                out["f:" + k] = sub
        else:
            out["f:" + k] = {}
    return out


def _list_tree(value: list[Any], node: PathNode) -> dict[str, Any]:
    """The FieldsV1 children of a non-atomic list: its set members, or its keyed items (sorted by key; the
    last of equal keys wins) with what they own."""
    if node.rule.strategy == "set":
        return {pe: {} for pe in sorted("v:" + _json(item) for item in value)}
    if node.rule.strategy != "merge":
        return {}
    out: dict[str, Any] = {}
    for pe, item in sorted(((node.item_key(item), item) for item in value), key=_first):
        inner = _map_tree(item, node, _NOTHING)
        out[pe] = {".": {}, **inner} if inner else {}
    return out


def _first(member: tuple[str, Any]) -> str:
    return member[0]


_PLAIN_ORDER = frozenset({"f:", "k:", "v:"})


def _to_fields_v1_sorted(members: list[FieldPath]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
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


def extract_items(obj: dict[str, Any], keep: set[FieldPath], schema: Schema) -> dict[str, Any]:
    """The part of `obj` the field set `keep` names (upstream ExtractItems): the value at a kept path whole, a
    kept list item with its key fields and its kept children, parents only as far as needed; plus apiVersion,
    kind and metadata name and namespace (no set names them), so that the result still converts as an object.
    `obj` is not changed; the result shares nothing with it."""
    prefixes = {q[:i] for q in keep for i in range(len(q))}
    got = _extract(obj, keep, prefixes, schema, (), ())
    out: dict[str, Any] = got if isinstance(got, dict) else {}
    for k in ("apiVersion", "kind"):
        if k in obj:
            out[k] = obj[k]
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        ident = {k: meta[k] for k in ("name", "namespace") if k in meta}
        if ident:
            out["metadata"] = {**(out.get("metadata") or {}), **ident}
    return out


def _extract(v: Any, keep: set[FieldPath], prefixes: set[FieldPath], schema: Schema, spath: Path,
             fpath: FieldPath) -> Any:
    if fpath in keep and not isinstance(v, list) and not (isinstance(v, dict) and fpath in prefixes):
        return orjson.loads(orjson.dumps(v))
    if fpath not in prefixes and fpath not in keep:
        return _MISSING
    if isinstance(v, dict):
        out: dict[str, Any] = {}
        for k, x in v.items():
            got = _extract(x, keep, prefixes, schema, (*spath, k), (*fpath, f"f:{k}"))
            if got is not _MISSING:
                out[k] = got
        return out
    if isinstance(v, list):
        if fpath in keep:  # an atomic list (or one walked whole): the value
            return orjson.loads(orjson.dumps(v))
        rule = schema.list_rule(spath)
        items: list[Any] = []
        for item in v:
            if rule.strategy == "set":
                if (*fpath, "v:" + _json(item)) in keep:
                    items.append(orjson.loads(orjson.dumps(item)))
                continue
            if not isinstance(item, dict):
                continue
            member = (*fpath, key_element(rule, item))
            got = _extract(item, keep, prefixes, schema, spath, member) if member in prefixes else _MISSING
            if member in keep or got is not _MISSING:
                keyed = {k: item[k] for k in (rule.keys or (rule.merge_key,)) if k in item}
                items.append({**orjson.loads(orjson.dumps(keyed)), **(got if isinstance(got, dict) else {})})
        return items
    return orjson.loads(orjson.dumps(v))


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
