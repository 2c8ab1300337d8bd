"""RFC 6902 JSON Patch (`application/json-patch+json`) and RFC 7386 JSON Merge Patch.

Invariants:
- Neither function mutates its inputs: JSON patch works on a deep copy, so a failing operation leaves
  the caller's document untouched (no partial application).
- As the API server: a body that is not a list of objects raises 400 BadRequest, more than 10000
  operations 413, and any operation that cannot be applied (unknown op, missing `path`/`value`/`from`,
  missing target, failed `test`, index out of range) 422 Invalid.
- Bounded growth: `copy` operations may add at most `MAX_COPY_BYTES` (the JSON size of what they copy,
  summed over the patch; 3 MiB as kube-apiserver's JSONPatchMaxCopyBytes), else 422 before the copy is
  made. Without it a 1.5 KB patch of copies doubling the document exhausts memory in seconds.
"""

from __future__ import annotations

from typing import Any

import orjson

from lite import errors
from lite.objects import deep_copy

_OPS = ("add", "remove", "replace", "move", "copy", "test")
MAX_OPERATIONS = 10000
MAX_COPY_BYTES = 3 * 1024 * 1024


def _unprocessable(message: str) -> errors.ApiError:
    return errors.ApiError(message, 422, "Invalid")


def parse_pointer(pointer: str) -> list[str]:
    """Split a JSON pointer into unescaped reference tokens (`~1` is `/`, `~0` is `~`)."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise _unprocessable(f'JSON pointer must be empty or start with a "/": "{pointer}"')
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def json_equal(a: Any, b: Any) -> bool:
    """JSON value equality (unlike `==`, `true` is not `1` and `1` is `1.0`)."""
    ta = type(a)
    if ta is str:  # the common case (merge keys, field values), decided before the isinstance chain
        return type(b) is str and a == b
    if ta is dict and type(b) is dict:
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def _index(container: list[Any], token: str, path: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise _unprocessable(f"invalid array index {token!r} in path {path!r}")
    i = int(token)
    limit = len(container) if for_add else len(container) - 1
    if i > limit:
        raise _unprocessable(f"array index {i} out of bounds in path {path!r}")
    return i


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    cur = doc
    for tok in tokens[:-1]:
        if isinstance(cur, dict):
            if tok not in cur:
                raise _unprocessable(f"doc is missing path: {path!r}: missing value")
            cur = cur[tok]
        elif isinstance(cur, list):
            cur = cur[_index(cur, tok, path, for_add=False)]
        else:
            raise _unprocessable(f"doc is missing path: {path!r}: missing value")
    return cur


def _get(doc: Any, path: str) -> Any:
    tokens = parse_pointer(path)
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _unprocessable(f"doc is missing path: {path!r}: missing value")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, path, for_add=False)]
    raise _unprocessable(f"doc is missing path: {path!r}: missing value")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = parse_pointer(path)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, for_add=True), value)
    else:
        raise _unprocessable(f"doc is missing path: {path!r}: missing value")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    tokens = parse_pointer(path)
    if not tokens:
        raise _unprocessable("unable to remove the whole document")
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _unprocessable(f"unable to remove nonexistent key: {last}: missing value")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, path, for_add=False))
    raise _unprocessable(f"doc is missing path: {path!r}: missing value")


def _field(op: dict[str, Any], name: str) -> Any:
    if name not in op:
        raise _unprocessable(f"json patch operation {op.get('op')!r} is missing {name!r}")
    return op[name]


def _copy_size(value: Any) -> int:
    try:
        return len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):  # not plain JSON (e.g. from YAML): a Python-side estimate
        return len(repr(value))


def _apply_one(doc: Any, op: dict[str, Any], budget: list[int]) -> Any:
    kind, path = op.get("op"), _field(op, "path")
    if not isinstance(path, str):
        raise _unprocessable(f"json patch path must be a string, not {path!r}")
    if kind == "add":
        return _add(doc, path, deep_copy({"v": _field(op, "value")})["v"])
    if kind == "remove":
        return _remove(doc, path)[0]
    if kind == "replace":
        _get(doc, path)  # replace requires the target to exist
        doc, _ = _remove(doc, path) if parse_pointer(path) else (doc, None)
        return _add(doc, path, deep_copy({"v": _field(op, "value")})["v"])
    if kind == "test":
        if not json_equal(_get(doc, path), _field(op, "value")):
            raise _unprocessable(f"testing value {path} failed: test failed")
        return doc
    src = _field(op, "from")
    if kind == "copy":
        value = _get(doc, src)
        budget[0] += _copy_size(value)
        if budget[0] > budget[1]:
            raise _unprocessable(f"Unable to complete the copy, the accumulated size increase of copy is "
                                 f"{budget[0]}, exceeding the limit {budget[1]}")
        return _add(doc, path, deep_copy({"v": value})["v"])
    # move
    if path != src and path.startswith(src + "/"):
        raise _unprocessable(f"move operation cannot move {src!r} into its own child {path!r}")
    doc, value = _remove(doc, src)
    return _add(doc, path, value)


def json_patch(doc: dict[str, Any], ops: Any, *, max_copy_bytes: int = MAX_COPY_BYTES) -> Any:
    """Apply an RFC 6902 patch to a copy of `doc` and return the result."""
    if not isinstance(ops, list):
        raise errors.bad_request("json patch must be a list of operations")
    if any(not isinstance(op, dict) for op in ops):
        raise errors.bad_request("json patch operations must be objects")
    if len(ops) > MAX_OPERATIONS:
        raise errors.too_large(f"The allowed maximum operations in a JSON patch is {MAX_OPERATIONS}, "
                               f"got {len(ops)}")
    out: Any = deep_copy(doc)
    budget = [0, max_copy_bytes]  # bytes copied so far, limit
    for op in ops:
        if op.get("op") not in _OPS:
            raise _unprocessable(f"Unexpected kind: {op.get('op')}")
        out = _apply_one(out, op, budget)
    return out


def merge_patch(doc: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` deletes, everything else (lists too) replaces."""
    copied = deep_copy({"d": doc, "p": patch})
    return _merge(copied["d"], copied["p"])


def _merge(doc: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    out: dict[str, Any] = doc if isinstance(doc, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out
