"""Strategic merge patch (`application/strategic-merge-patch+json`), as the API server applies it.

Follows apimachinery `strategicpatch.StrategicMergeMapPatch` with MergeParallelList and
IgnoreUnmatchedNulls: maps merge, `null` deletes, lists merge by the schema's merge key (or as sets of
primitives, or are replaced when atomic), plus the directives `$patch` (replace/delete/merge),
`$setElementOrder/<list>`, `$retainKeys` and `$deleteFromPrimitiveList/<list>`.

Invariants:
- Inputs are never mutated (both are deep-copied first); no `$` directive key survives in the result.
- Element order follows upstream: items named in the patch take the patch's (or `$setElementOrder`'s)
  order, server-only items keep their live order and are interleaved by their live position.
- Malformed patches raise 400 BadRequest with the upstream `mergepatch` messages.
"""

from __future__ import annotations

from typing import Any

from lite import errors
from lite.objects import deep_copy
from lite.patch.jsonpatch import json_equal
from lite.patch.schema import ListRule, Path, Schema

DIRECTIVE = "$patch"
RETAIN_KEYS = "$retainKeys"
SET_ORDER = "$setElementOrder/"
DELETE_PRIMITIVES = "$deleteFromPrimitiveList/"


def strategic_merge(doc: dict[str, Any], patch: dict[str, Any], schema: Schema) -> dict[str, Any]:
    """Apply a strategic merge patch to a copy of `doc` and return the result."""
    if not isinstance(patch, dict):
        raise errors.bad_request("invalid JSON document: a strategic merge patch must be an object")
    copied = deep_copy({"d": doc, "p": patch})
    return _merge_map(copied["d"], copied["p"], schema, ())


def _merge_map(original: dict[str, Any] | None, patch: dict[str, Any], schema: Schema,
               path: Path) -> dict[str, Any]:
    directive = patch.pop(DIRECTIVE, None)
    if directive == "replace":
        return _merge_map({}, patch, schema, path)  # strips nested directives of the replacement
    if directive == "delete":
        return {}
    if directive not in (None, "merge"):
        raise errors.bad_request(f"unknown patch type: {directive} in map: {patch}")
    out = original if isinstance(original, dict) else {}
    if not any(key[:1] == "$" for key in patch):  # no directive here (nearly every map): merge the keys
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif isinstance(value, dict | list):
                out[key] = _merge_value(out.get(key), value, schema, (*path, key))
            else:
                out[key] = value
        return out
    _retain_keys(out, patch)
    _set_element_orders(out, patch, schema, path)
    for key, value in patch.items():
        if key.startswith(DELETE_PRIMITIVES):
            _delete_from_primitive_list(out, key[len(DELETE_PRIMITIVES):], value)
            continue
        if key.startswith("$"):
            continue  # unknown directives are dropped, never stored
        if value is None:
            out.pop(key, None)
            continue
        out[key] = _merge_value(out.get(key), value, schema, (*path, key))
    return out


def _merge_value(original: Any, patch: Any, schema: Schema, path: Path) -> Any:
    if isinstance(patch, dict):
        if schema.is_atomic_map(path):
            return _merge_map({}, patch, schema, path)
        return _merge_map(original if isinstance(original, dict) else None, patch, schema, path)
    if isinstance(patch, list):
        return _merge_list(original if isinstance(original, list) else [], patch, schema, path)
    return patch


def _retain_keys(out: dict[str, Any], patch: dict[str, Any]) -> None:
    if RETAIN_KEYS not in patch:
        return
    keep = patch.pop(RETAIN_KEYS)
    if not isinstance(keep, list):
        raise errors.bad_request("invalid patch format of retainKeys")
    for k, v in patch.items():
        if v is not None and not k.startswith("$") and k not in keep:
            raise errors.ApiError("The patch content doesn't match retainKeys list", 422, "Invalid")
    for k in [k for k in out if k not in keep]:
        del out[k]


def _delete_from_primitive_list(out: dict[str, Any], key: str, values: Any) -> None:
    if not isinstance(values, list):
        raise errors.bad_request("invalid patch format of primitive list")
    if isinstance(out.get(key), list):
        out[key] = [v for v in out[key] if not any(json_equal(v, d) for d in values)]


def _set_element_orders(out: dict[str, Any], patch: dict[str, Any], schema: Schema, path: Path) -> None:
    """Merge each list that has a `$setElementOrder` now, then impose that order (upstream precedence:
    $setElementOrder > order in the patch list > order in the live list)."""
    for key in [k for k in patch if k.startswith(SET_ORDER)]:
        order = patch.pop(key)
        name = key[len(SET_ORDER):]
        if not isinstance(order, list):
            raise errors.bad_request("invalid patch format of setElementOrder list")
        rule = schema.list_rule((*path, name))
        live = out.get(name) if isinstance(out.get(name), list) else None
        plist = patch.pop(name, None) if isinstance(patch.get(name), list) else None
        if live is None and plist is None:
            continue
        _check_order_list(plist or [], order, rule)
        if live is not None and plist is not None:
            merged = _merge_list(live, plist, schema, (*path, name))
        else:
            merged = _merge_list([], plist, schema, (*path, name)) if plist is not None else live or []
        ident = _identity(rule)
        where = _Index(order, ident)
        in_order = [x for x in merged if where.find(ident(x)) >= 0]
        server_only = [x for x in merged if where.find(ident(x)) < 0]
        out[name] = _normalize(in_order, server_only, order, live or [], ident)


def _identity(rule: ListRule) -> Any:
    if rule.strategy == "merge":
        return lambda item: item.get(rule.merge_key) if isinstance(item, dict) else None
    return lambda item: item


def _find(items: list[Any], value: Any, ident: Any) -> int:
    for i, item in enumerate(items):
        if json_equal(ident(item), value):
            return i
    return -1


class _Index:
    """`_find` over one list, answered from a dict when every identity in it is a string (merge keys
    nearly always are): a string identity then equals exactly the same strings, and nothing else."""

    __slots__ = ("ident", "items", "pos")

    def __init__(self, items: list[Any], ident: Any) -> None:
        self.items, self.ident = items, ident
        self.pos: dict[str, int] | None = {}
        for i in range(len(items)):
            self.add(i)

    def add(self, i: int) -> None:
        """Take in `items[i]` (appended since, or at construction)."""
        if self.pos is not None:
            k = self.ident(self.items[i])
            if type(k) is str:
                self.pos.setdefault(k, i)
            else:
                self.pos = None

    def find(self, value: Any) -> int:
        if self.pos is not None:
            return self.pos.get(value, -1) if type(value) is str else -1
        return _find(self.items, value, self.ident)


def _check_order_list(plist: list[Any], order: list[Any], rule: ListRule) -> None:
    ident = _identity(rule)
    where = _Index(order, ident)
    last = -1
    for item in plist:
        if isinstance(item, dict) and item.get(DIRECTIVE) is not None:
            continue
        pos = where.find(ident(item))
        if pos < last:
            raise errors.bad_request(f"The order in patch list:\n{plist}\n doesn't match {SET_ORDER} list:\n"
                                     f"{order}\n")
        last = max(last, pos)


def _merge_list(original: list[Any], patch: list[Any], schema: Schema, path: Path) -> list[Any]:
    rule = schema.list_rule(path)
    if rule.strategy == "atomic":
        return [_clean(v, schema, path) for v in patch]
    if not original and not patch:
        return original
    if not original and rule.strategy == "merge" and _distinct_plain(patch, rule.merge_key):
        return [_merge_map({}, item, schema, path) for item in patch]  # what the general merge below gives
    if rule.strategy == "set" or not all(isinstance(v, dict) for v in patch + original):
        merged: list[Any] = []
        for v in original + patch:
            if not any(json_equal(v, m) for m in merged):
                merged.append(v)
        ident = _identity(ListRule("set"))
    else:
        original, patch = _special_elements(original, patch, rule)
        merged = _merge_keyed(original, patch, rule, schema, path)
        ident = _identity(rule)
    where = _Index(patch, ident)
    in_patch = [x for x in merged if where.find(ident(x)) >= 0]
    server_only = [x for x in merged if where.find(ident(x)) < 0]
    return _normalize(in_patch, server_only, patch, original, ident)


def _distinct_plain(items: list[Any], key: str) -> bool:
    """Every item a map with a string merge key of its own and no `$patch` directive: merged into an empty
    list they are each their own element, in the patch's order."""
    seen: set[str] = set()
    for item in items:
        if not isinstance(item, dict) or DIRECTIVE in item:
            return False
        k = item.get(key)
        if type(k) is not str or k in seen:
            return False
        seen.add(k)
    return True


def _special_elements(original: list[Any], patch: list[Any], rule: ListRule) -> tuple[list[Any], list[Any]]:
    """Handle `{"$patch": "delete", key: v}` and `{"$patch": "replace"}` list elements."""
    plain: list[Any] = []
    replace = False
    for item in patch:
        directive = item.get(DIRECTIVE)
        if directive is None:
            plain.append(item)
        elif directive == "delete":
            if rule.merge_key not in item:
                raise errors.bad_request(f"map: {item} does not contain declared merge key: {rule.merge_key}")
            original = [o for o in original if not json_equal(o.get(rule.merge_key), item[rule.merge_key])]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise errors.bad_request("merging lists cannot yet be specified in the patch")
        else:
            raise errors.bad_request(f"unknown patch type: {directive} in map: {item}")
    if replace:
        return plain, []
    return original, plain


def _merge_keyed(original: list[Any], patch: list[Any], rule: ListRule, schema: Schema,
                 path: Path) -> list[Any]:
    out = list(original)
    key = rule.merge_key
    where = _Index(out, lambda o: o.get(key))
    for item in patch:
        if key not in item:
            raise errors.bad_request(f"map: {item} does not contain declared merge key: {key}")
        i = where.find(item[key])
        if i >= 0:
            out[i] = _merge_map(out[i], item, schema, path)  # the same merge key: the index stays true
        else:
            out.append(_merge_map({}, item, schema, path))
            where.add(len(out) - 1)
    return out


def _clean(value: Any, schema: Schema, path: Path) -> Any:
    """A new value with directives processed against nothing (so none is stored)."""
    if isinstance(value, dict):
        return _merge_map({}, value, schema, path)
    return value


def _normalize(patch_items: list[Any], server_only: list[Any], patch_order: list[Any],
               server_order: list[Any], ident: Any) -> list[Any]:
    """Upstream `normalizeElementOrder`: sort each part, then interleave server-only items by live order."""
    server_at, patch_at = _Index(server_order, ident), _Index(patch_order, ident)

    def by(where: _Index) -> Any:
        return lambda x: (where.find(ident(x)) + 1) or len(where.items) + 1

    left = sorted(server_only, key=by(server_at))
    right = sorted(patch_items, key=by(patch_at))
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if j >= len(right):
            out.append(left[i])
            i += 1
        elif i >= len(left):
            out.append(right[j])
            j += 1
        else:
            li, ri = server_at.find(ident(left[i])), server_at.find(ident(right[j]))
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out
