"""Hostile bodies that try to make one request cost unbounded work (issue 7, item 2: "limits").

Over the real stack (`build_api_app` → `Resources` → SQLite `Store`, the default 3 MiB body cap): JSON
patch copy bombs, YAML alias bombs (billion laughs, the CVE-2019-11253 body, merge keys, self-reference),
objects over etcd's 1.5 MiB request limit made by create, update and every patch type, and bodies nested
deeper than the decoder's limit. Each case checks upstream's code and reason, that the Status names the
problem, that nothing was stored (the object reads back unchanged or absent), and that the server still
serves a normal write afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient
from apistack import api_client

from lite.kinds import KindRegistry
from lite.server.api import bodylimits
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store

TOKEN = "Bearer hostile"
CM = "/api/v1/namespaces/default/configmaps"
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"
MIB = 1024 * 1024
JSON = "application/json"
JSON_PATCH = "application/json-patch+json"
MERGE = "application/merge-patch+json"
SMP = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
YAML = "application/yaml"



@dataclass
class Api:
    client: TestClient[web.Request, web.Application]

    async def call(self, method: str, path: str, data: bytes | None = None,
                   content_type: str = JSON) -> tuple[int, Any]:
        headers = {"Authorization": TOKEN, "Content-Type": content_type}
        r = await self.client.request(method, path, data=data, headers=headers)
        raw = await r.read()
        return r.status, orjson.loads(raw) if raw else None


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with api_client(tmp_path, TOKEN) as (client, _store):
        yield Api(client)


def configmap(name: str, **data: str) -> bytes:
    return orjson.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})


def widget(name: str, extra: Any = None) -> bytes:
    return orjson.dumps({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name},
                         "spec": {"size": 1, "extra": extra or {}}})


WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "widgets", "kind": "Widget"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "properties": {"spec": {"type": "object", "properties": {
                     "size": {"type": "integer"},
                     "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}}}]}}


# ---- the bombs ---------------------------------------------------------------------------------------


def copy_bomb(ops: int = 40) -> bytes:
    """Each copy doubles metadata.annotations: 40 of them would make a terabyte from one kilobyte."""
    return orjson.dumps([{"op": "add", "path": "/metadata/annotations", "value": {"a": "x" * 1000}}] + [
        {"op": "copy", "from": "/metadata/annotations", "path": f"/metadata/annotations/c{i}"} for i in range(ops)])


# The body of CVE-2019-11253 (kubernetes#83253): nine levels of nine aliases, ~10^9 strings when expanded.
CVE_2019_11253 = b"""apiVersion: v1
data:
  a: &a ["web","web","web","web","web","web","web","web","web"]
  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
  f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
  g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
  h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
  i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
kind: ConfigMap
metadata:
  name: yaml-bomb
  namespace: default
"""


def laughs(levels: int = 10, width: int = 10, name: str = "laughs") -> bytes:
    """The classic billion laughs, as mapping values and as a ConfigMap with a string leaf."""
    lines = ["apiVersion: v1", "kind: ConfigMap", f"metadata: {{name: {name}}}", "x:", '  l0: &l0 "lol"']
    for n in range(1, levels):
        lines.append(f"  l{n}: &l{n} [" + ",".join([f"*l{n - 1}"] * width) + "]")
    return ("\n".join(lines) + "\n").encode()


def merge_key_bomb(levels: int = 9, name: str = "merge") -> bytes:
    """Merge keys flatten by copying pairs: each level merges the one below ten times."""
    lines = ["apiVersion: v1", "kind: ConfigMap", f"metadata: {{name: {name}}}", "x:", "  m0: &m0 {a: 1, b: 2}"]
    for n in range(1, levels):
        lines.append(f"  m{n}: &m{n} {{<<: [" + ", ".join([f"*m{n - 1}"] * 10) + f"], k{n}: {n}}}")
    return ("\n".join(lines) + "\n").encode()


def nested_json(levels: int) -> bytes:
    return b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep"},"x":' + b"[" * levels + \
        b"]" * levels + b"}"


def nested_yaml(levels: int) -> bytes:
    body = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\nx:\n"
    body += "".join(" " * (i + 1) + f"k{i}:\n" for i in range(levels)) + " " * (levels + 1) + "v\n"
    return body.encode()


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str
    content_type: str
    body: Callable[[], bytes]
    code: tuple[int, ...]
    reason: tuple[str, ...]
    says: str  # a phrase the Status message must contain
    check: str  # the object whose state must be unchanged afterwards (a path under /api or /apis)
    setup: tuple[tuple[str, bytes], ...] = ()  # (path to POST, body) before the case


BIG = "x" * (2 * MIB)  # over 1.5 MiB once stored, under the 3 MiB body cap
HALF = "y" * (900 * 1024)
STORE_413 = ((413,), ("RequestEntityTooLarge",), "request is too large")
# A ConfigMap over 1 MiB is also invalid upstream (422, data too long): either refusal is upstream's.
CM_TOO_BIG = ((413, 422), ("RequestEntityTooLarge", "Invalid"), "")

CASES = [
    Case("json patch copy bomb", "PATCH", f"{CM}/base", JSON_PATCH, copy_bomb, (422,), ("Invalid",),
         "accumulated size increase of copy", f"{CM}/base"),
    Case("json patch copy bomb on a custom object", "PATCH", f"{WIDGETS}/w", JSON_PATCH,
         lambda: orjson.dumps([{"op": "copy", "from": "/spec", "path": f"/spec/extra/c{i}"} for i in range(40)]),
         (422,), ("Invalid",), "accumulated size increase of copy", f"{WIDGETS}/w"),
    Case("json patch copies grow past 1.5 MiB within the copy budget", "PATCH", f"{WIDGETS}/w", JSON_PATCH,
         lambda: orjson.dumps([{"op": "add", "path": "/spec/extra/a", "value": "z" * (600 * 1024)},
                               {"op": "copy", "from": "/spec/extra/a", "path": "/spec/extra/b"},
                               {"op": "copy", "from": "/spec/extra/a", "path": "/spec/extra/c"}]),
         *STORE_413, f"{WIDGETS}/w"),
    Case("yaml CVE-2019-11253 create", "POST", CM, YAML, lambda: CVE_2019_11253, (400,), ("BadRequest",),
         "excessive aliasing", f"{CM}/yaml-bomb"),
    Case("yaml billion laughs create", "POST", CM, YAML, laughs, (400,), ("BadRequest",), "excessive aliasing",
         f"{CM}/laughs"),
    Case("yaml billion laughs as an apply patch", "PATCH", f"{CM}/base?fieldManager=t", APPLY,
         lambda: laughs(name="base"), (400,), ("BadRequest",), "excessive aliasing", f"{CM}/base"),
    Case("yaml billion laughs as update", "PUT", f"{CM}/base", YAML, lambda: laughs(name="base"),
         (400,), ("BadRequest",), "excessive aliasing", f"{CM}/base"),
    Case("yaml merge key bomb", "POST", CM, YAML, merge_key_bomb, (400,), ("BadRequest",), "excessive aliasing",
         f"{CM}/merge"),
    Case("yaml anchor containing itself", "POST", CM, YAML,
         lambda: b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: loop}\nx: &a [1, *a]\n",
         (400,), ("BadRequest",), "contains itself", f"{CM}/loop"),
    Case("yaml recursive mapping apply", "PATCH", f"{CM}/base?fieldManager=t", APPLY,
         lambda: b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: base}\ndata: &d {a: *d}\n",
         (400,), ("BadRequest",), "contains itself", f"{CM}/base"),
    Case("8 MB configmap by update", "PUT", f"{CM}/base", JSON, lambda: configmap("base", a="x" * (8 * MIB)),
         (413,), ("RequestEntityTooLarge",), "limit is 3145728", f"{CM}/base"),
    Case("8 MB configmap by merge patch", "PATCH", f"{CM}/base", MERGE,
         lambda: orjson.dumps({"data": {"a": "x" * (8 * MIB)}}), (413,), ("RequestEntityTooLarge",),
         "limit is 3145728", f"{CM}/base"),
    Case("8 MB configmap by strategic merge patch", "PATCH", f"{CM}/base", SMP,
         lambda: orjson.dumps({"data": {"a": "x" * (8 * MIB)}}), (413,), ("RequestEntityTooLarge",),
         "limit is 3145728", f"{CM}/base"),
    Case("8 MB configmap by json patch", "PATCH", f"{CM}/base", JSON_PATCH,
         lambda: orjson.dumps([{"op": "add", "path": "/data/a", "value": "x" * (8 * MIB)}]), (413,),
         ("RequestEntityTooLarge",), "limit is 3145728", f"{CM}/base"),
    Case("8 MB configmap by apply", "PATCH", f"{CM}/base?fieldManager=t", APPLY,
         lambda: configmap("base", a="x" * (8 * MIB)), (413,), ("RequestEntityTooLarge",), "limit is 3145728",
         f"{CM}/base"),
    Case("8 MB configmap by create", "POST", CM, JSON, lambda: configmap("huge", a="x" * (8 * MIB)), (413,),
         ("RequestEntityTooLarge",), "limit is 3145728", f"{CM}/huge"),
    Case("configmap grown past 1.5 MiB by a second json patch", "PATCH", f"{CM}/grown", JSON_PATCH,
         lambda: orjson.dumps([{"op": "add", "path": "/data/b", "value": "x" * MIB}]), *CM_TOO_BIG, f"{CM}/grown",
         setup=((CM, configmap("grown", a="x" * (700 * 1024))),)),
    Case("2 MiB configmap by create", "POST", CM, JSON, lambda: configmap("big", a=BIG), *CM_TOO_BIG, f"{CM}/big"),
    Case("2 MiB configmap by update", "PUT", f"{CM}/base", JSON, lambda: configmap("base", a=BIG), *CM_TOO_BIG,
         f"{CM}/base"),
    Case("2 MiB configmap by merge patch", "PATCH", f"{CM}/base", MERGE,
         lambda: orjson.dumps({"data": {"b": BIG}}), *CM_TOO_BIG, f"{CM}/base"),
    Case("2 MiB configmap by strategic merge patch", "PATCH", f"{CM}/base", SMP,
         lambda: orjson.dumps({"data": {"b": BIG}}), *CM_TOO_BIG, f"{CM}/base"),
    Case("2 MiB configmap by json patch", "PATCH", f"{CM}/base", JSON_PATCH,
         lambda: orjson.dumps([{"op": "add", "path": "/data/b", "value": BIG}]), *CM_TOO_BIG, f"{CM}/base"),
    Case("2 MiB configmap by apply", "PATCH", f"{CM}/base?fieldManager=t&force=true", APPLY,
         lambda: configmap("base", b=BIG), *CM_TOO_BIG, f"{CM}/base"),
    Case("2 MiB configmap by apply create", "PATCH", f"{CM}/applied?fieldManager=t", APPLY,
         lambda: configmap("applied", b=BIG), *CM_TOO_BIG, f"{CM}/applied"),
    Case("2 MiB configmap by dry-run create", "POST", f"{CM}?dryRun=All", JSON, lambda: configmap("dry", a=BIG),
         *CM_TOO_BIG, f"{CM}/dry"),
    Case("second 900 KiB merge patch grows a configmap past 1.5 MiB", "PATCH", f"{CM}/half", MERGE,
         lambda: orjson.dumps({"data": {"b": HALF}}), *CM_TOO_BIG, f"{CM}/half",
         setup=((CM, configmap("half", a=HALF)),)),
    Case("2 MiB custom object by create", "POST", WIDGETS, JSON, lambda: widget("big", {"a": BIG}), *STORE_413,
         f"{WIDGETS}/big"),
    Case("2 MiB custom object by merge patch", "PATCH", f"{WIDGETS}/w", MERGE,
         lambda: orjson.dumps({"spec": {"extra": {"a": BIG}}}), *STORE_413, f"{WIDGETS}/w"),
    Case("custom object grown by two patches", "PATCH", f"{WIDGETS}/w2", MERGE,
         lambda: orjson.dumps({"spec": {"extra": {"b": "b" * (800 * 1024)}}}), *STORE_413, f"{WIDGETS}/w2",
         setup=((WIDGETS, widget("w2", {"a": "a" * (800 * 1024)})),)),
    Case("2 MiB custom object with a label change", "PATCH", f"{WIDGETS}/w", MERGE,
         lambda: orjson.dumps({"metadata": {"labels": {"a": "b"}}, "spec": {"extra": {"x": [BIG]}}}),
         *STORE_413, f"{WIDGETS}/w"),
    Case("json nested 200 deep", "POST", CM, JSON, lambda: nested_json(200), (400,), ("BadRequest",),
         "maximum depth", f"{CM}/deep"),
    Case("json nested 1000 deep", "POST", CM, JSON, lambda: nested_json(1000), (400,), ("BadRequest",),
         "maximum depth", f"{CM}/deep"),
    Case("json nested 100000 deep", "POST", CM, JSON, lambda: nested_json(100_000), (400,), ("BadRequest",),
         "", f"{CM}/deep"),
    Case("yaml flow nested 300 deep", "POST", CM, YAML,
         lambda: b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\nx: " + b"[" * 300 + b"]" * 300 + b"\n",
         (400,), ("BadRequest",), "maximum depth", f"{CM}/deep"),
    Case("yaml block nested 600 deep", "POST", CM, YAML, lambda: nested_yaml(600), (400,), ("BadRequest",),
         "maximum depth", f"{CM}/deep"),
    Case("yaml block nested 1500 deep", "POST", CM, YAML, lambda: nested_yaml(1500), (400,), ("BadRequest",),
         "", f"{CM}/deep"),
    Case("deep json merge patch", "PATCH", f"{CM}/base", MERGE,
         lambda: b'{"metadata":{"annotations":{"a":"b"}},"x":' + b'{"a":' * 300 + b"1" + b"}" * 301,
         (400,), ("BadRequest",), "maximum depth", f"{CM}/base"),
    Case("deep json patch value", "PATCH", f"{CM}/base", JSON_PATCH,
         lambda: b'[{"op":"add","path":"/x","value":' + b"[" * 300 + b"]" * 300 + b"}]",
         (400,), ("BadRequest",), "maximum depth", f"{CM}/base"),
    Case("deep apply patch", "PATCH", f"{CM}/base?fieldManager=t", APPLY, lambda: nested_json(400),
         (400,), ("BadRequest",), "maximum depth", f"{CM}/base"),
    Case("too many json patch operations", "PATCH", f"{CM}/base", JSON_PATCH,
         lambda: orjson.dumps([{"op": "test", "path": "/kind", "value": "ConfigMap"}] * 10001),
         (413,), ("RequestEntityTooLarge",), "maximum operations", f"{CM}/base"),
]


async def _state(api: Api, path: str) -> Any:
    code, body = await api.call("GET", path)
    if code == 404:
        return None
    assert code == 200, body
    return body


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_hostile_body_refused(api: Api, case: Case) -> None:
    code, _ = await api.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                             orjson.dumps(WIDGET_CRD))
    assert code == 201
    for path, body in (*case.setup, (CM, configmap("base", a="1", b="2")),
                       (WIDGETS, widget("w", {"a": "small"}))):
        code, out = await api.call("POST", path, body)
        assert code == 201, out
    before = await _state(api, case.check)

    code, status = await api.call(case.method, case.path, case.body(), case.content_type)

    assert code in case.code, (code, status)
    assert status["kind"] == "Status" and status["code"] == code and status["status"] == "Failure"
    assert status["reason"] in case.reason, status
    assert case.says in status["message"], status["message"]
    assert await _state(api, case.check) == before  # nothing stored, nothing changed
    code, out = await api.call("POST", CM, configmap("after", ok="yes"))
    assert code == 201 and out["data"] == {"ok": "yes"}  # still serving writes


# ---- the bounds themselves, table-tested -------------------------------------------------------------


def _node(text: bytes) -> yaml.Node:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        assert node is not None
        return node
    finally:
        loader.dispose()


@pytest.mark.parametrize(("text", "shared", "depth"), [
    (b"a", False, 0),
    (b"[]", False, 1),
    (b"{a: [1, {b: c}]}", False, 3),
    (b"{a: &x [1, 2], b: *x, c: *x}", True, 2),
    (CVE_2019_11253, True, 11),
])
def test_measure_yaml(text: bytes, shared: bool, depth: int) -> None:
    size, got_depth, got_shared = bodylimits.measure_yaml(_node(text))
    assert (got_shared, got_depth) == (shared, depth)
    expanded = orjson.dumps(yaml.safe_load(text)) if len(text) < 1000 else b""
    if expanded:  # the estimate is an upper bound of the JSON encoding
        assert size >= len(expanded)


def test_measure_cve_counts_every_alias() -> None:
    size, _, _ = bodylimits.measure_yaml(_node(CVE_2019_11253))
    assert size > 9 ** 9 * 5  # nine levels of nine: 387 million "web"s of 5 bytes and more


@pytest.mark.parametrize("levels", [1, 5, 127, 128, 129, 200, 254, 300, 1023])
def test_check_depth_matches_a_plain_walk(levels: int) -> None:
    value: Any = 1
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    assert bodylimits.depth(value) == levels
    raw = orjson.dumps(value) if levels < 254 else None
    if levels <= bodylimits.MAX_DEPTH:
        bodylimits.check_depth(value, raw=raw)
    else:
        with pytest.raises(Exception, match="maximum depth"):
            bodylimits.check_depth(value, raw=raw)


def test_check_depth_on_values_orjson_cannot_encode() -> None:
    bodylimits.check_depth({1: {"a": [2**70]}})  # int keys and huge ints are the decoders' business
    deep: Any = 2**70
    for _ in range(200):
        deep = [deep]
    with pytest.raises(Exception, match="maximum depth"):
        bodylimits.check_depth(deep)


def test_object_size_counts_keys_that_are_not_strings() -> None:
    """An object with integer keys (from YAML) is measured as the store writes it, keys as strings."""
    bodylimits.check_object_size({1: "x" * 10}, limit=18)  # {"1":"xxxxxxxxxx"}: 18 bytes
    with pytest.raises(Exception, match="Request entity too large") as got:
        bodylimits.check_object_size({10: "x" * 10}, limit=18)  # 19 bytes
    assert "19 bytes" in str(got.value)


async def test_object_stored_over_the_cap_before_it_existed_may_shrink_not_grow(tmp_path: Path) -> None:
    """An object written before the 1.5 MiB cap (here: straight into the store) keeps its finalizers and
    metadata writable so it can be deleted, but no write may make it bigger."""
    from lite.errors import ApiError

    store = await Store.open(str(tmp_path / "lite.db"))
    try:
        kinds = KindRegistry()
        res = Resources(store, kinds, default_strategies())
        await res.start()
        cm = kinds.by_resource("", "v1", "configmaps")
        assert cm is not None
        await store.create("core/configmaps/default/old", {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "old", "namespace": "default", "uid": "u1", "finalizers": ["example.com/keep"],
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "data": {"a": "x" * (2 * MIB)}})
        with pytest.raises(ApiError) as e:
            await res.patch(cm, "default", "old", {"metadata": {"labels": {"grow": "yes"}}})
        assert (e.value.code, e.value.reason) == (413, "RequestEntityTooLarge")
        out = await res.patch(cm, "default", "old", {"metadata": {"finalizers": None}})
        assert "finalizers" not in out["metadata"]
        await res.delete(cm, "default", "old")
        with pytest.raises(ApiError) as e:
            await res.get(cm, "default", "old")
        assert e.value.code == 404
    finally:
        await store.close()
