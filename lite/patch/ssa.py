"""Server-side apply (`application/apply-patch+yaml`): merge an intent and track field ownership.

Role: `apply` merges a manager's full intent into the live object (keyed lists by their list-map keys,
sets as unions, atomic lists and maps replaced), records the manager's `Apply` entry in
`metadata.managedFields` (FieldsV1), removes fields the manager applied before and dropped now (unless
another manager also owns them), and refuses (409 Conflict, causes FieldManagerConflict) to change a
field another manager owns unless `force`, which transfers ownership. `record_update` records an
`Update` entry for ordinary writes (create/update/patch), taking over the fields they changed.

Invariants:
- Pure: `live` and `intent` are never mutated; the result is a new dict.
- A manager is identified by (manager, operation, subresource), and an Update one by its apiVersion too (upstream
  BuildManagerIdentifier); an Apply entry's set is replaced on every Apply.
- Each entry keeps the apiVersion it was written with and its fields in that version's shape; with `versions`,
  what a write changes (conflicts, fields taken over, fields pruned) is judged in each entry's own version.
- Paths stripped by the server (apiVersion, kind, name, namespace, uid, resourceVersion, ...) and, unless
  asked otherwise, `status` are never owned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lite import errors
from lite.objects import deep_copy
from lite.patch.fieldset import (
    MISSING,
    FieldPath,
    diff_fields,
    extract_items,
    from_fields_v1,
    get_path,
    object_fields,
    object_fields_v1,
    path_string,
    remove_path,
    to_fields_v1,
)
from lite.patch.jsonpatch import json_equal
from lite.patch.schema import Path, Schema
from lite.records import dataclass

Entry = dict[str, Any]


@dataclass(frozen=True)
class Versions:
    """The API versions one object is served in, for managedFields entries written through another version than
    the request's (a built-in kind with views: autoscaling v1/v2 HPAs, core/events.k8s.io Events). As upstream,
    each entry keeps its own apiVersion and its field set in that version's shape; what a write changes is seen,
    for each entry, in the entry's version. `convert(obj, from, to)`: `obj` (in apiVersion `from`) as `to`
    presents it, None when `to` is not a version of this object; `schema(api_version)`: that version's schema."""

    convert: Callable[[dict[str, Any], str, str], dict[str, Any] | None]
    schema: Callable[[str], Schema]


def apply(live: dict[str, Any] | None, intent: dict[str, Any], *, manager: str, force: bool,
          api_version: str, now: str, schema: Schema, ignore_status: bool = True,
          subresource: str = "", versions: Versions | None = None) -> dict[str, Any]:
    """The object after `manager` applies `intent` to `live` (None when creating). An apply through a
    subresource (`status`, `scale`: `intent` then in the parent's terms) is the entry
    `{manager, Apply, subresource}`, apart from the same manager's apply of the object itself."""
    if not isinstance(intent, dict):
        raise errors.bad_request("apply patch must be an object")
    if not manager:
        raise errors.bad_request("PATCH requests with apply patch type require a field manager")
    base: dict[str, Any] = deep_copy(live) if live is not None else {}
    want = _drop_nulls(deep_copy(intent))
    want.get("metadata", {}).pop("managedFields", None)
    entries = [(e, from_fields_v1(e.get("fieldsV1"))) for e in managed_entries(base)]
    mine = [i for i, (e, _) in enumerate(entries) if _is(e, manager, "Apply", subresource)]
    previous = entries[mine[0]][1] if mine else set()
    owned = object_fields(want, schema, ignore_status=ignore_status)

    result: dict[str, Any] = _merge(deep_copy(base), want, schema, ())
    seen = _InVersions(versions, api_version)
    conflicts = _conflicts(base, result, owned, entries, manager, schema, subresource, seen)
    if conflicts and not force:
        raise _conflict_error(conflicts, entries)
    taken: dict[int, set[FieldPath]] = {}
    for i, p in conflicts:
        taken.setdefault(i, set()).add(p)
    others = [(e, s - taken.get(i, set())) for i, (e, s) in enumerate(entries) if i not in mine]
    pruned = None
    if mine and any(seen.other(e) for e, _ in [entries[mine[0]], *others]):
        pruned = _prune_across(result, entries[mine[0]], owned, others, seen, schema)
    if pruned is not None:
        result = pruned
    else:
        still_owned = set().union(*(s for _, s in others)) if others else set()
        removed: list[FieldPath] = []
        for p in sorted(previous - owned, key=len):  # ancestors first: removing an item removes its fields
            if any(p[:len(r)] == r for r in removed) or _owned_below(p, still_owned | owned):
                continue
            remove_path(result, p, schema)
            removed.append(p)

    new_entry = {"manager": manager, "operation": "Apply", "apiVersion": api_version, "time": now,
                 "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(owned)}
    if subresource:
        new_entry["subresource"] = subresource
    _store_entries(result, [*_reencode(others), new_entry] if owned else _reencode(others))
    return result


def record_update(old: dict[str, Any] | None, new: dict[str, Any], *, manager: str, api_version: str,
                  now: str, schema: Schema, ignore_status: bool = True, subresource: str = "",
                  in_place: bool = False, versions: Versions | None = None,
                  known: Mapping[str, dict[str, Any]] | None = None,
                  fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """`new` with managedFields updated for a non-apply write by `manager` (upstream Update operation):
    fields that changed from `old` become the manager's, and other managers lose them. A write through a
    subresource (`status`, `scale`) is its own manager entry, `{manager, Update, subresource}`, as upstream
    records it, so that a later apply of the same fields conflicts with it. `in_place`: a caller that owns
    `new` lets it be updated instead of copied (the registry, on every write). `known` (creates only): the
    FieldsV1 subtrees of top-level fields already computed for equal values (see `object_fields_v1`); `fields`
    (creates only): the whole FieldsV1 already computed for an object of the same field set, used as it is (shared:
    the caller decides whether it may be)."""
    if in_place:  # only metadata.managedFields is written: a metadata map shared with `old` stays untouched
        out = new
        out["metadata"] = dict(out.get("metadata") or {})
    else:
        out = deep_copy(new)
    if not old:  # a create: the manager owns all the object sets
        if fields is None:
            fields = object_fields_v1(out, schema, ignore_status=ignore_status, known=known)
        entry0: Entry = {"manager": manager, "operation": "Update", "apiVersion": api_version, "time": now,
                         "fieldsType": "FieldsV1", "fieldsV1": fields}
        if subresource:
            entry0["subresource"] = subresource
        _store_entries(out, [entry0] if fields else [])
        return out
    changed, removed = diff_fields(old, out, schema, ignore_status=ignore_status)
    seen = _InVersions(versions, api_version)
    kept: list[Entry] = []
    mine: set[FieldPath] = set()
    was: Entry | None = None
    for e in managed_entries(old):
        s = from_fields_v1(e.get("fieldsV1"))
        if _is(e, manager, "Update", subresource) and (e.get("apiVersion") or api_version) == api_version:
            mine |= s
            was = e
            continue
        other = seen.other(e)
        c, r = (changed, removed) if not other else seen.diff(old, out, other, ignore_status, (changed, removed))
        left = s - c - r  # fields this write ignores (status) stay owned
        if left == s:
            kept.append(e)  # untouched: its FieldsV1 as it was
        elif left:
            kept.append({**e, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(left)})
    before = set(mine)
    mine = (mine | changed) - removed
    if mine:
        # the same fields again (a write repeating itself): its FieldsV1 as it was, only the time moves
        encoded = was["fieldsV1"] if was is not None and mine == before and isinstance(was.get("fieldsV1"), dict) \
            else to_fields_v1(mine)
        entry: Entry = {"manager": manager, "operation": "Update", "apiVersion": api_version, "time": now,
                        "fieldsType": "FieldsV1", "fieldsV1": encoded}
        if subresource:
            entry["subresource"] = subresource
        kept.append(entry)
    _store_entries(out, kept)
    return out


def managed_entries(obj: dict[str, Any]) -> list[Entry]:
    entries: list[Entry] = (obj.get("metadata") or {}).get("managedFields") or []
    return entries


def _is(e: Entry, manager: str, operation: str, subresource: str = "") -> bool:
    return e.get("manager") == manager and e.get("operation") == operation and \
        (e.get("subresource") or "") == subresource


def _drop_nulls(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _drop_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_drop_nulls(x) for x in v]
    return v


def _owned_below(p: FieldPath, owned: set[FieldPath]) -> bool:
    return any(q[:len(p)] == p for q in owned)


class _InVersions:
    """The objects of one write as the other versions of its entries see them (converted once per version)."""

    def __init__(self, versions: Versions | None, api_version: str) -> None:
        self.versions, self.api_version = versions, api_version
        self._seen: dict[tuple[int, str], dict[str, Any] | None] = {}

    def other(self, e: Entry) -> str:
        """The entry's apiVersion when it is another version of this object than the request's, else ''."""
        v = str(e.get("apiVersion") or "")
        return v if self.versions is not None and v and v != self.api_version else ""

    def see(self, obj: dict[str, Any], version: str) -> dict[str, Any] | None:
        key = (id(obj), version)
        if key not in self._seen:
            assert self.versions is not None
            self._seen[key] = self.versions.convert(obj, self.api_version, version)
        return self._seen[key]

    def schema(self, version: str) -> Schema:
        assert self.versions is not None
        return self.versions.schema(version)

    def diff(self, old: dict[str, Any], new: dict[str, Any], version: str, ignore_status: bool,
             fallback: tuple[set[FieldPath], set[FieldPath]]) -> tuple[set[FieldPath], set[FieldPath]]:
        a, b = self.see(old, version), self.see(new, version)
        if a is None or b is None:
            return fallback
        return diff_fields(a, b, self.schema(version), ignore_status=ignore_status)


def _conflicts(live: dict[str, Any], merged: dict[str, Any], owned: set[FieldPath],
               entries: list[tuple[Entry, set[FieldPath]]], manager: str,
               schema: Schema, subresource: str = "", seen: _InVersions | None = None) -> list[tuple[int, FieldPath]]:
    """(entry index, path) for every path the intent names that another manager owns and that the merge
    changed (upstream compares the merged object with the live one, so equal values are shared). An entry of
    another version conflicts on each of its fields whose value differs between the two objects as that
    version presents them (upstream converts both to the entry's version)."""
    out: list[tuple[int, FieldPath]] = []
    for i, (e, s) in enumerate(entries):
        if _is(e, manager, "Apply", subresource):
            continue
        other = seen.other(e) if seen is not None else ""
        if other:
            assert seen is not None
            a, b = seen.see(live, other), seen.see(merged, other)
            if a is not None and b is not None:
                in_schema = seen.schema(other)
                for p in sorted(s):
                    if p[-1].startswith(("k:", "v:")):
                        continue
                    x, y = get_path(a, p, in_schema), get_path(b, p, in_schema)
                    if (x is MISSING) != (y is MISSING) or (x is not MISSING and not json_equal(x, y)):
                        out.append((i, p))
                continue
        for p in sorted(s & owned):
            if p[-1].startswith(("k:", "v:")):
                continue  # list membership is shared, never a conflicting value
            current = get_path(live, p, schema)
            if current is MISSING or not json_equal(current, get_path(merged, p, schema)):
                out.append((i, p))
    return out


def _prune_across(merged: dict[str, Any], previous: tuple[Entry, set[FieldPath]], owned: set[FieldPath],
                  others: list[tuple[Entry, set[FieldPath]]], seen: _InVersions,
                  schema: Schema) -> dict[str, Any] | None:
    """upstream's prune when versions differ: in the version of the applier's previous set, remove everything
    that set named, then add back, in each owner's version, what each owner's set names of the merged object
    (the applier's new set first); the result in the request's version. None when a version cannot be seen."""
    request = seen.api_version
    steps = [(seen.other(previous[0]) or request, previous[1], True), (request, owned, False),
             *[(seen.other(e) or request, s, False) for e, s in others]]
    cur: dict[str, Any] | None = deep_copy(merged)
    at = request
    for version, fields, remove in steps:
        if cur is None:
            return None
        if version != at:
            cur, at = seen.versions.convert(cur, at, version) if seen.versions else None, version
            if cur is None:
                return None
        in_schema = schema if version == request else seen.schema(version)
        if remove:
            for p in sorted(fields, key=len, reverse=True):
                remove_path(cur, p, in_schema)
            continue
        source = merged if version == request else seen.see(merged, version)
        if source is None:
            return None
        cur = _merge(cur, extract_items(source, fields, in_schema), in_schema, ())
    if cur is not None and at != request:
        cur = seen.versions.convert(cur, at, request) if seen.versions else None
    return cur


def _describe(e: Entry) -> str:
    who = f'"{e.get("manager", "")}"'
    if e.get("subresource"):
        who += f' with subresource "{e["subresource"]}"'
    if e.get("operation") == "Update":
        who += f" using {e.get('apiVersion', '')}"
        if e.get("time"):
            who += f" at {e['time']}"
    return who


def _conflict_error(conflicts: list[tuple[int, FieldPath]], entries: list[tuple[Entry, Any]]) -> errors.ApiError:
    causes = [errors.Cause("FieldManagerConflict", f"conflict with {_describe(entries[i][0])}", path_string(p))
              for i, p in conflicts]
    if len(conflicts) == 1:
        (i, p), = conflicts
        msg = f"Apply failed with 1 conflict: conflict with {_describe(entries[i][0])}: {path_string(p)}"
    else:
        lines: list[str] = []
        for who in sorted({_describe(entries[i][0]) for i, _ in conflicts}):
            lines.append(f"conflicts with {who}:")
            lines += [f"- {path_string(p)}" for i, p in conflicts if _describe(entries[i][0]) == who]
        msg = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return errors.ApiError(msg, 409, "Conflict", causes=causes)


def _merge(live: Any, want: Any, schema: Schema, path: Path) -> Any:
    """Merge an apply intent into live: maps field by field, lists by the schema, scalars replaced."""
    if isinstance(want, dict):
        if not isinstance(live, dict) or (path and schema.is_atomic_map(path)):
            return want
        for k, v in want.items():
            live[k] = _merge(live.get(k), v, schema, (*path, k))
        return live
    if isinstance(want, list) and isinstance(live, list):
        rule = schema.list_rule(path)
        if rule.strategy == "set":
            return live + [v for v in want if not any(json_equal(v, x) for x in live)]
        if rule.strategy == "merge" and all(isinstance(x, dict) for x in want + live):
            return _merge_keyed(live, want, schema, path)
    return want


def _merge_keyed(live: list[Any], want: list[Any], schema: Schema, path: Path) -> list[Any]:
    """Live items keep their positions (merged with their intent twin); new intent items are appended."""
    rule = schema.list_rule(path)
    out = list(live)
    for item in want:
        key = rule.key_of(item)
        i = next((j for j, x in enumerate(out) if json_equal(rule.key_of(x), key)), -1)
        if i >= 0:
            out[i] = _merge(out[i], item, schema, path)
        else:
            out.append(item)
    return out


def _reencode(entries: list[tuple[Entry, set[FieldPath]]]) -> list[Entry]:
    out = []
    for e, s in entries:
        if s:
            out.append({**e, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(s)})
    return out


def _store_entries(obj: dict[str, Any], entries: list[Entry]) -> None:
    # Upstream order: by operation (Apply before Update), then time, manager, apiVersion, subresource.
    entries = sorted(entries, key=lambda e: (e.get("operation", ""), e.get("time") or "", e.get("manager", ""),
                                             e.get("apiVersion", ""), e.get("subresource", "")))
    meta = obj.setdefault("metadata", {})
    if entries:
        meta["managedFields"] = entries
    else:
        meta.pop("managedFields", None)
