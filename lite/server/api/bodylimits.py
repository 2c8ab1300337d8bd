"""Bounds on the work one request body may cause: nesting depth, YAML alias expansion, stored-object size.

Role: the checks that keep a small hostile body from costing the server unbounded memory or CPU. The
request body itself is capped at 3 MiB by the HTTP layer; these bound what the body *turns into*:

- Nesting depth: a decoded body may nest at most `MAX_DEPTH` containers. Deeper values would end in a
  RecursionError or in orjson's own limit (254 levels) somewhere after validation, as a 500; lists,
  Tables, watch events and managedFields wrap an object in up to ~8 more levels, hence the margin.
  Refused as 400 BadRequest at decoding, like upstream's decoder refuses "exceeded max depth".
- YAML aliases: a few hundred bytes of nested anchors and aliases ("billion laughs") expand to
  gigabytes once copied or encoded. The composed node graph is measured *before* anything is built,
  counting every alias as fully expanded (this also bounds `<<` merge keys, whose flattening copies
  the merged pairs). A document whose expansion exceeds `MAX_YAML_EXPANSION` bytes is refused with
  go-yaml's message ("document contains excessive aliasing", 400), as is an anchor containing itself.
- Stored size: no object whose JSON encoding exceeds `MAX_OBJECT_BYTES` (1.5 MiB, etcd's default
  `--max-request-bytes`) is written, however it was produced (create, update, any patch type,
  subresource); refused as 413 RequestEntityTooLarge with etcd's words, which is what kube-apiserver
  answers when etcd refuses the write. An object already over it (stored before the cap) may shrink.

Invariants: pure functions, no I/O, no recursion over the input (a hostile document cannot exhaust the
Python stack here); every refusal is an `ApiError` naming the limit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from lite.errors import ApiError, bad_request

if TYPE_CHECKING:  # PyYAML is loaded by the first YAML body (yamlbody), never by a server that gets none
    import yaml

MAX_DEPTH = 128
MAX_YAML_EXPANSION = 3 * 1024 * 1024
MAX_OBJECT_BYTES = 1536 * 1024  # 1.5 MiB, etcd's default request limit
# orjson refuses to encode values nested deeper than this many containers.
_ORJSON_DEPTH = 254


def too_deep(limit: int = MAX_DEPTH) -> ApiError:
    return bad_request(f"error decoding request body: the document nests deeper than the maximum depth of {limit}")


def depth(value: Any) -> int:
    """Nesting depth in containers (a scalar is 0, `[]` is 1, `{"a": []}` is 2), without recursion."""
    best = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            stack.extend((c, d + 1) for c in v.values())
            best = max(best, d + 1)
        elif isinstance(v, list):
            stack.extend((c, d + 1) for c in v)
            best = max(best, d + 1)
    return best


def check_depth(value: Any, limit: int = MAX_DEPTH, *, raw: bytes | None = None) -> None:
    """400 BadRequest when `value` nests more than `limit` containers.

    Fast path: fewer opening brackets in the raw body than the limit cannot nest deeper; otherwise
    orjson measures (in C) by encoding the value wrapped in `254 - limit` lists, which fails exactly
    when the value nests deeper than `limit`. Values orjson cannot encode are walked in Python.
    """
    if raw is not None and raw.count(b"[") + raw.count(b"{") <= limit:
        return
    wrapped = value
    for _ in range(_ORJSON_DEPTH - limit):
        wrapped = [wrapped]
    try:
        orjson.dumps(wrapped, option=orjson.OPT_NON_STR_KEYS)
        return
    except orjson.JSONEncodeError as e:
        if "Recursion" not in str(e) and depth(value) <= limit:
            return
    raise too_deep(limit)


# ---- YAML ------------------------------------------------------------------------------------------


def excessive_aliasing() -> ApiError:
    return bad_request("error converting YAML to JSON: yaml: document contains excessive aliasing")


def measure_yaml(root: yaml.Node) -> tuple[int, int, bool]:
    """(expanded JSON size estimate in bytes, nesting depth, whether any node is reached twice) of a
    composed YAML node graph, every alias counted as a full copy. Memoised per node, so the cost is the
    number of distinct nodes, whatever the expansion. Raises 400 when an anchor contains itself.
    """
    import yaml

    size: dict[int, int] = {}
    deep: dict[int, int] = {}
    open_: set[int] = set()
    shared = False
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            open_.discard(nid)
            kids = _children(node)
            size[nid] = 2 + sum(size[id(k)] + 1 for k in kids)
            deep[nid] = 1 + max((deep[id(k)] for k in kids), default=0)
            continue
        if nid in size:
            shared = True
            continue
        if nid in open_:
            anchor = getattr(node, "anchor", None) or "?"
            raise bad_request(f"error converting YAML to JSON: yaml: anchor '{anchor}' value contains itself")
        if isinstance(node, yaml.ScalarNode):
            size[nid], deep[nid] = len(str(node.value)) + 2, 0
            continue
        open_.add(nid)
        stack.append((node, True))
        stack.extend((kid, False) for kid in _children(node))
    return size[id(root)], deep[id(root)], shared


def _children(node: yaml.Node) -> list[yaml.Node]:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def load_yaml(body: bytes, loader_cls: Any, *, max_expansion: int = MAX_YAML_EXPANSION,
              max_depth: int = MAX_DEPTH) -> Any:
    """One YAML document, built only after its node graph passed the alias and depth bounds."""
    loader = loader_cls(body)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded, nesting, shared = measure_yaml(node)
        if shared and expanded > max_expansion:
            raise excessive_aliasing()
        if nesting > max_depth:
            raise too_deep(max_depth)
        return loader.construct_document(node)
    finally:
        loader.dispose()


# ---- stored objects --------------------------------------------------------------------------------


def object_too_large(size: int, limit: int = MAX_OBJECT_BYTES) -> ApiError:
    return ApiError(f"Request entity too large: etcdserver: request is too large (the object is {size} bytes "
                    f"encoded; at most {limit} bytes are stored)", 413, "RequestEntityTooLarge")


def _encoded_size(obj: Any) -> int | None:
    try:
        # without OPT_NON_STR_KEYS first: that option takes orjson's slow path (~3x the time for a pod)
        return len(orjson.dumps(obj))
    except orjson.JSONEncodeError:
        pass
    try:  # keys that are not strings (from YAML) are written as strings, as the store will write them
        return len(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS))
    except orjson.JSONEncodeError:  # not JSON at all: the shape checks after this one refuse it
        return None


def check_object_size(obj: Any, limit: int = MAX_OBJECT_BYTES, *, old: Any = None) -> None:
    """413 when the JSON encoding of `obj` is over `limit` bytes (what the store would write).

    With `old` (an update), an object already over the limit (stored before the cap existed) may still be
    written as long as it does not grow: its finalizers and status must stay writable, or it could never go.
    """
    size = _encoded_size(obj)
    if size is None or size <= limit:
        return
    if old is not None:
        before = _encoded_size(old)
        if before is not None and size <= before:
            return
    raise object_too_large(size, limit)
