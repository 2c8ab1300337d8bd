"""Hostile input, semantics part: bad query parameters, malformed bodies and the exact-semantics list of issue 7.

Every case runs against the real stack (`build_api_app` -> `Resources` -> SQLite `Store` in tmp_path) and
checks, besides the code and reason upstream's apiserver answers:
- no 5xx, and every error body is a `Status` whose `code` equals the HTTP status;
- nothing stored or deleted wrongly: the ConfigMap `victim` is unchanged after every refused request, and a
  refused create stores nothing;
- every accepted create is returned by a following GET exactly as the create answered it.

Upstream references (kubernetes 1.32): query parameters go through the ParameterCodec (`strconv.ParseInt`
for integers, "absent, 0 or false means false, anything else true" for booleans) and a decoding error is
400 BadRequest; Create/Update/Patch/DeleteOptions are then validated (422 Invalid of kind
`XOptions.meta.k8s.io`); a DeleteOptions body that does not decode is 400; resourceVersions are parsed with
`strconv.ParseUint` ("invalid resource version", 400); continue tokens carry a positive int64 revision and a
non-empty start key ("invalid continue token", 400); YAML goes through sigs.k8s.io/yaml, which turns
integer, float and boolean keys into strings, `!!binary` into the decoded text and timestamps into strings.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lite.kinds import KindRegistry
from lite.server.api.http import build_api_app
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.store import Store

TOKEN = "Bearer t0ken"
NS = "/api/v1/namespaces/default"
CM = f"{NS}/configmaps"
VICTIM = f"{CM}/victim"
SECRETS = f"{NS}/secrets"
APPS = "/apis/apps/v1/namespaces/default"
YAML = "application/yaml"
MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"


def _auth(request: web.Request) -> str | None:
    return "admin" if request.headers.get("Authorization") == TOKEN else None


@contextlib.asynccontextmanager
async def _stack(tmp_path: Path) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    store = await Store.open(str(tmp_path / "lite.db"))
    try:
        kinds = KindRegistry()
        resources = Resources(store, kinds, default_strategies())
        await resources.start()
        app = build_api_app(resources, kinds, _auth, max_body_bytes=256 * 1024)
        async with TestClient(TestServer(app)) as client:
            yield client
    finally:
        await store.close()


def j(obj: Any) -> bytes:
    return orjson.dumps(obj)


def cm(name: str, **extra: Any) -> bytes:
    return j({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **extra})


def cont(token: Any) -> str:
    """A continue token holding `token` (JSON), base64url as upstream encodes them."""
    raw = token if isinstance(token, bytes) else json.dumps(token).encode()  # json: orjson refuses huge ints
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@dataclass(frozen=True)
class Case:
    id: str
    method: str
    path: str
    code: int
    reason: str = ""  # the Status reason for error codes
    message: str = ""  # a substring the Status message must contain
    body: bytes | None = None
    ctype: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    victim: str = "same"  # "same" | "gone" | "any": what must have become of the ConfigMap "victim"
    created: str = ""  # the path a successful create made, GET there must return the create's answer
    expect: dict[str, Any] = field(default_factory=dict)  # dotted path -> value in the 2xx answer
    stream: bool = False  # a watch answer (lines of events) rather than one JSON document


BAD = 400
INVALID = 422


def bad(id: str, method: str, path: str, message: str = "", **kw: Any) -> Case:
    return Case(id, method, path, BAD, "BadRequest", message, **kw)


def invalid(id: str, method: str, path: str, message: str = "", **kw: Any) -> Case:
    return Case(id, method, path, INVALID, "Invalid", message, **kw)


def ok(id: str, method: str, path: str, code: int = 200, **kw: Any) -> Case:
    return Case(id, method, path, code, **kw)


QUERY_CASES = [
    # limit: strconv.ParseInt(s, 10, 64), no underscores, spaces, exponents or non-ASCII digits
    bad("limit-underscore", "GET", f"{CM}?limit=1_0", 'strconv.ParseInt: parsing "1_0": invalid syntax'),
    bad("limit-word", "GET", f"{CM}?limit=abc", "invalid syntax"),
    bad("limit-space", "GET", f"{CM}?limit=%207", "invalid syntax"),
    bad("limit-exponent", "GET", f"{CM}?limit=1e3", "invalid syntax"),
    bad("limit-float", "GET", f"{CM}?limit=1.0", "invalid syntax"),
    bad("limit-arabic-digits", "GET", f"{CM}?limit=%D9%A3", "invalid syntax"),
    bad("limit-overflow", "GET", f"{CM}?limit=99999999999999999999", "value out of range"),
    bad("limit-empty", "GET", f"{CM}?limit=", 'parsing "": invalid syntax'),
    ok("limit-plus-sign", "GET", f"{CM}?limit=%2B5", expect={"kind": "ConfigMapList"}),
    ok("limit-negative-means-none", "GET", f"{CM}?limit=-1", expect={"kind": "ConfigMapList"}),
    ok("limit-zero", "GET", f"{CM}?limit=0", expect={"kind": "ConfigMapList"}),
    # resourceVersion: strconv.ParseUint(s, 10, 64)
    bad("list-rv-space", "GET", f"{CM}?resourceVersion=%207", "invalid resource version"),
    bad("list-rv-word", "GET", f"{CM}?resourceVersion=abc", "invalid resource version"),
    bad("list-rv-negative", "GET", f"{CM}?resourceVersion=-1", "invalid resource version"),
    bad("list-rv-underscore", "GET", f"{CM}?resourceVersion=1_0", "invalid resource version"),
    bad("list-rv-overflow", "GET", f"{CM}?resourceVersion=99999999999999999999999", "value out of range"),
    bad("list-rv-limit-word", "GET", f"{CM}?resourceVersion=abc&limit=5", "invalid resource version"),
    ok("list-rv-zero", "GET", f"{CM}?resourceVersion=0", expect={"kind": "ConfigMapList"}),
    ok("list-rv-empty", "GET", f"{CM}?resourceVersion=", expect={"kind": "ConfigMapList"}),
    bad("get-rv-word", "GET", f"{VICTIM}?resourceVersion=abc", "invalid resource version"),
    bad("get-rv-space", "GET", f"{VICTIM}?resourceVersion=%207", "invalid resource version"),
    bad("get-rv-negative", "GET", f"{VICTIM}?resourceVersion=-3", "invalid resource version"),
    ok("get-rv-zero", "GET", f"{VICTIM}?resourceVersion=0", expect={"metadata.name": "victim"}),
    ok("get-rv-one", "GET", f"{VICTIM}?resourceVersion=1", expect={"metadata.name": "victim"}),
    invalid("rv-match-bogus", "GET", f"{CM}?resourceVersion=1&resourceVersionMatch=Bogus", "Unsupported value"),
    invalid("rv-match-without-rv", "GET", f"{CM}?resourceVersionMatch=NotOlderThan", "resourceVersionMatch"),
    # continue tokens: base64url JSON {"v": "meta.k8s.io/v1", "rv": int64 > 0, "start": non-empty}
    bad("continue-garbage", "GET", f"{CM}?limit=1&continue=%%%", "invalid continue token"),
    bad("continue-not-json", "GET", f"{CM}?limit=1&continue=" + base64.urlsafe_b64encode(b"nope").decode(),
        "invalid continue token"),
    bad("continue-list", "GET", f"{CM}?limit=1&continue={cont([1, 2])}", "invalid continue token"),
    bad("continue-huge-rv", "GET",
        f"{CM}?limit=1&continue={cont({'v': 'meta.k8s.io/v1', 'rv': 10**30, 'start': 'core/configmaps/default/a'})}",
        "invalid continue token"),
    bad("continue-2p63-rv", "GET",
        f"{CM}?limit=1&continue={cont({'v': 'meta.k8s.io/v1', 'rv': 2**63, 'start': 'core/configmaps/default/a'})}",
        "invalid continue token"),
    bad("continue-float-rv", "GET",
        f"{CM}?limit=1&continue={cont({'v': 'meta.k8s.io/v1', 'rv': 1.5, 'start': 'core/configmaps/default/a'})}",
        "invalid continue token"),
    bad("continue-string-rv", "GET",
        f"{CM}?limit=1&continue={cont({'v': 'meta.k8s.io/v1', 'rv': '5', 'start': 'core/configmaps/default/a'})}",
        "invalid continue token"),
    bad("continue-zero-rv", "GET",
        f"{CM}?limit=1&continue={cont({'v': 'meta.k8s.io/v1', 'rv': 0, 'start': 'core/configmaps/default/a'})}",
        "incorrect encoded start resourceVersion"),
    # a negative revision is upstream's "go on from the current state" (what an expired token's Status offers)
    ok("continue-negative-rv", "GET",
       f"{CM}?limit=1&continue={cont({'v': 'meta.k8s.io/v1', 'rv': -4, 'start': 'core/configmaps/default/a'})}",
       expect={"items.0.metadata.name": "victim"}),
    bad("continue-below-int64-rv", "GET",
        f"{CM}?limit=1&continue="
        f"{cont({'v': 'meta.k8s.io/v1', 'rv': -2**63 - 1, 'start': 'core/configmaps/default/a'})}",
        "malformed revision"),
    bad("continue-empty-start", "GET", f"{CM}?limit=1&continue={cont({'v': 'meta.k8s.io/v1', 'rv': 1, 'start': ''})}",
        "encoded start key empty"),
    bad("continue-other-version", "GET",
        f"{CM}?limit=1&continue={cont({'v': 'meta.k8s.io/v2', 'rv': 1, 'start': 'core/configmaps/default/a'})}",
        "does not recognize this encoded version"),
    bad("continue-other-prefix", "GET",
        f"{CM}?limit=1&continue={cont({'v': 'meta.k8s.io/v1', 'rv': 1, 'start': 'core/secrets/default/a'})}",
        "invalid continue token"),
    bad("continue-with-rv", "GET",
        f"{CM}?limit=1&resourceVersion=5&continue={cont({'v': 'meta.k8s.io/v1', 'rv': 1, 'start': 'x'})}",
        "specifying resource version is not allowed when using continue"),
    # selectors
    bad("label-selector-paren", "GET", f"{CM}?labelSelector=a%3D(b"),
    bad("label-selector-in-no-parens", "GET", f"{CM}?labelSelector=a%20in%20b"),
    bad("label-selector-bang", "GET", f"{CM}?labelSelector=!"),
    bad("label-selector-bad-key", "GET", f"{CM}?labelSelector=-a%3Db"),
    bad("label-selector-bad-value", "GET", f"{CM}?labelSelector=a%3D-b-"),
    ok("label-selector-ok", "GET", f"{CM}?labelSelector=a%3Db,c!%3Dd,e,!f,g%20in%20(h,i)",
       expect={"kind": "ConfigMapList"}),
    bad("field-selector-unknown", "GET", f"{CM}?fieldSelector=spec.foo%3Dbar", "spec.foo"),
    bad("field-selector-no-operator", "GET", f"{CM}?fieldSelector=metadata.name"),
    bad("field-selector-set-operator", "GET", f"{CM}?fieldSelector=metadata.name%20in%20(a)"),
    ok("field-selector-ok", "GET", f"{CM}?fieldSelector=metadata.name%3Dvictim,metadata.namespace!%3Dx",
       expect={"items.0.metadata.name": "victim"}),
    # booleans: absent, "0" or "false" (any case) are false, anything else true
    ok("watch-maybe-is-a-watch", "GET", f"{CM}?watch=maybe&timeoutSeconds=1", stream=True),
    ok("watch-empty-is-a-watch", "GET", f"{CM}?watch=&timeoutSeconds=1", stream=True),
    ok("watch-FALSE-is-a-list", "GET", f"{CM}?watch=FALSE", expect={"kind": "ConfigMapList"}),
    ok("watch-0-is-a-list", "GET", f"{CM}?watch=0", expect={"kind": "ConfigMapList"}),
    ok("bookmarks-yes", "GET", f"{CM}?watch=1&allowWatchBookmarks=yes&timeoutSeconds=1", stream=True),
    bad("watch-timeout-word", "GET", f"{CM}?watch=true&timeoutSeconds=soon", "invalid syntax"),
    bad("watch-timeout-underscore", "GET", f"{CM}?watch=true&timeoutSeconds=1_0", "invalid syntax"),
    bad("watch-rv-word", "GET", f"{CM}?watch=true&resourceVersion=abc&timeoutSeconds=1", "invalid resource version"),
    invalid("list-send-initial-events", "GET", f"{CM}?sendInitialEvents=true",
            "sendInitialEvents is forbidden for list"),
    ok("pretty-anything", "GET", f"{CM}?pretty=maybe", expect={"kind": "ConfigMapList"}),
    ok("unknown-parameter", "GET", f"{CM}?bogus=1", expect={"kind": "ConfigMapList"}),
]

DELETE_CASES = [
    bad("delete-dryrun-string", "DELETE", VICTIM, "DeleteOptions.dryRun", body=j({"dryRun": "All"})),
    ok("delete-dryrun-list", "DELETE", VICTIM, body=j({"dryRun": ["All"]})),
    invalid("delete-dryrun-bogus", "DELETE", VICTIM, "dryRun: Unsupported value", body=j({"dryRun": ["Bogus"]})),
    bad("delete-dryrun-number", "DELETE", VICTIM, "DeleteOptions.dryRun", body=j({"dryRun": 1})),
    bad("delete-dryrun-list-of-numbers", "DELETE", VICTIM, "DeleteOptions.dryRun", body=j({"dryRun": [1]})),
    bad("delete-grace-string", "DELETE", VICTIM, "DeleteOptions.gracePeriodSeconds",
        body=j({"gracePeriodSeconds": "5"})),
    bad("delete-grace-float", "DELETE", VICTIM, "DeleteOptions.gracePeriodSeconds",
        body=j({"gracePeriodSeconds": 1.5})),
    bad("delete-grace-bool", "DELETE", VICTIM, "DeleteOptions.gracePeriodSeconds",
        body=j({"gracePeriodSeconds": True})),
    bad("delete-grace-huge", "DELETE", VICTIM, "DeleteOptions.gracePeriodSeconds",
        body=b'{"gracePeriodSeconds": 1e30}'),
    bad("delete-policy-number", "DELETE", VICTIM, "DeleteOptions.propagationPolicy",
        body=j({"propagationPolicy": 5})),
    invalid("delete-policy-bogus", "DELETE", VICTIM, "propagationPolicy: Unsupported value",
            body=j({"propagationPolicy": "Bogus"})),
    bad("delete-orphan-string", "DELETE", VICTIM, "DeleteOptions.orphanDependents",
        body=j({"orphanDependents": "yes"})),
    invalid("delete-orphan-and-policy", "DELETE", VICTIM, "orphanDependents and deletionPropagation cannot be both set",
            body=j({"orphanDependents": True, "propagationPolicy": "Background"})),
    bad("delete-preconditions-string", "DELETE", VICTIM, "DeleteOptions.preconditions",
        body=j({"preconditions": "x"})),
    bad("delete-preconditions-uid-number", "DELETE", VICTIM, "DeleteOptions.preconditions.uid",
        body=j({"preconditions": {"uid": 5}})),
    Case("delete-preconditions-rv-mismatch", "DELETE", VICTIM, 409, "Conflict", "precondition",
         body=j({"preconditions": {"resourceVersion": "1"}})),
    bad("delete-body-list", "DELETE", VICTIM, body=b"[1, 2]"),
    bad("delete-body-string", "DELETE", VICTIM, body=b'"All"'),
    bad("delete-body-truncated", "DELETE", VICTIM, body=b'{"dryRun": ["All"'),
    bad("delete-body-other-kind", "DELETE", VICTIM, body=j({"kind": "Pod", "apiVersion": "v1"})),
    bad("delete-body-kind-number", "DELETE", VICTIM, body=j({"kind": 5})),
    bad("delete-body-yaml-garbage", "DELETE", VICTIM, body=b"a: [", ctype=YAML),
    ok("delete-body-legacy-kind", "DELETE", VICTIM, victim="gone",
       body=j({"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": []})),
    ok("delete-body-meta-kind", "DELETE", VICTIM, victim="gone",
       body=j({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"})),
    ok("delete-body-unknown-field", "DELETE", VICTIM, victim="gone", body=j({"bogus": 1})),
    ok("delete-body-null", "DELETE", VICTIM, victim="gone", body=b"null"),
    invalid("delete-query-policy-bogus", "DELETE", f"{VICTIM}?propagationPolicy=Bogus",
            "propagationPolicy: Unsupported value"),
    bad("delete-query-grace-word", "DELETE", f"{VICTIM}?gracePeriodSeconds=abc", "invalid syntax"),
    bad("delete-query-grace-underscore", "DELETE", f"{VICTIM}?gracePeriodSeconds=1_0", "invalid syntax"),
    invalid("delete-query-dryrun-bogus", "DELETE", f"{VICTIM}?dryRun=Bogus", "dryRun: Unsupported value"),
    invalid("delete-query-dryrun-mixed", "DELETE", f"{VICTIM}?dryRun=All&dryRun=Bogus", "dryRun: Unsupported value"),
    ok("delete-query-dryrun-all", "DELETE", f"{VICTIM}?dryRun=All"),
    ok("delete-query-orphan-maybe", "DELETE", f"{VICTIM}?orphanDependents=maybe", victim="any"),
    bad("deletecollection-dryrun-string", "DELETE", CM, "DeleteOptions.dryRun", body=j({"dryRun": "All"})),
    bad("deletecollection-label-selector", "DELETE", f"{CM}?labelSelector=a%3D(b"),
    bad("deletecollection-field-selector", "DELETE", f"{CM}?fieldSelector=spec.x%3Dy", "spec.x"),
    bad("deletecollection-limit", "DELETE", f"{CM}?limit=1_0", "invalid syntax"),
    invalid("deletecollection-policy-bogus", "DELETE", f"{CM}?propagationPolicy=Bogus",
            "propagationPolicy: Unsupported value"),
    ok("deletecollection-dryrun", "DELETE", f"{CM}?dryRun=All"),
    bad("deletecollection-timeout", "DELETE", f"{CM}?timeoutSeconds=x", "invalid syntax"),
    bad("deletecollection-rv", "DELETE", f"{CM}?resourceVersion=abc", "invalid resource version"),
    bad("evict-dryrun-string", "POST", f"{NS}/pods/victim/eviction", "deleteOptions.dryRun of type []string",
        body=j({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "victim"},
                "deleteOptions": {"dryRun": "All"}})),
    bad("evict-grace-string", "POST", f"{NS}/pods/victim/eviction", "deleteOptions.gracePeriodSeconds",
        body=j({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "victim"},
                "deleteOptions": {"gracePeriodSeconds": "x"}})),
    invalid("evict-policy-bogus", "POST", f"{NS}/pods/victim/eviction", "propagationPolicy",
            body=j({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "victim"},
                    "deleteOptions": {"propagationPolicy": "Bogus"}})),
]

LONG_MANAGER = "m" * 129
WRITE_OPTION_CASES = [
    invalid("create-dryrun-bogus", "POST", f"{CM}?dryRun=Bogus", 'CreateOptions.meta.k8s.io "" is invalid',
            body=cm("w1")),
    ok("create-dryrun-all", "POST", f"{CM}?dryRun=All", 201, body=cm("w2"), expect={"metadata.name": "w2"}),
    invalid("create-field-validation-bogus", "POST", f"{CM}?fieldValidation=Bogus",
            'fieldValidation: Unsupported value: "Bogus"', body=cm("w3")),
    invalid("create-field-manager-long", "POST", f"{CM}?fieldManager={LONG_MANAGER}", "fieldManager: Too long",
            body=cm("w4")),
    invalid("create-field-manager-control", "POST", f"{CM}?fieldManager=a%01b",
            "fieldManager: Invalid value", body=cm("w5")),
    invalid("update-dryrun-bogus", "PUT", f"{VICTIM}?dryRun=Bogus", 'UpdateOptions.meta.k8s.io "" is invalid',
            body=cm("victim", data={"x": "y"})),
    invalid("update-field-validation-bogus", "PUT", f"{VICTIM}?fieldValidation=strict",
            "fieldValidation: Unsupported value", body=cm("victim", data={"x": "y"})),
    invalid("patch-dryrun-bogus", "PATCH", f"{VICTIM}?dryRun=Bogus", 'PatchOptions.meta.k8s.io "" is invalid',
            body=j({"data": {"x": "y"}}), ctype=MERGE),
    invalid("patch-merge-force-true", "PATCH", f"{VICTIM}?force=true", "force: Forbidden", body=j({"data": {"x": "y"}}),
            ctype=MERGE),
    invalid("patch-merge-force-false", "PATCH", f"{VICTIM}?force=false", "force: Forbidden",
            body=j({"data": {"x": "y"}}), ctype=MERGE),
    invalid("apply-without-manager", "PATCH", VICTIM, "fieldManager: Required value",
            body=cm("victim", data={"x": "y"}), ctype=APPLY),
    ok("apply-force-maybe", "PATCH", f"{CM}/w6?fieldManager=t&force=maybe", 201, body=cm("w6", data={"a": "b"}),
       ctype=APPLY, created=f"{CM}/w6", expect={"data.a": "b"}),
    bad("patch-empty-body", "PATCH", VICTIM, body=b"", ctype=MERGE),
    bad("patch-merge-list", "PATCH", VICTIM, body=b"[]", ctype=MERGE),
    bad("patch-json-object", "PATCH", VICTIM, body=b"{}", ctype="application/json-patch+json"),
    bad("patch-json-truncated", "PATCH", VICTIM, body=b'[{"op": "add"', ctype="application/json-patch+json"),
    Case("patch-unknown-media-type", "PATCH", VICTIM, 415, "UnsupportedMediaType", body=b"{}", ctype="text/plain"),
    invalid("patch-json-unknown-op", "PATCH", VICTIM, body=b'[{"op": "bogus", "path": "/data/x"}]',
            ctype="application/json-patch+json"),
    invalid("patch-json-missing-path", "PATCH", VICTIM, body=b'[{"op": "add", "value": 1}]',
            ctype="application/json-patch+json"),
    invalid("patch-json-remove-missing", "PATCH", VICTIM, body=b'[{"op": "remove", "path": "/data/nope"}]',
            ctype="application/json-patch+json"),
    invalid("patch-json-test-fails", "PATCH", VICTIM, body=b'[{"op": "test", "path": "/data/v", "value": "2"}]',
            ctype="application/json-patch+json"),
    bad("patch-smp-bad-directive", "PATCH", VICTIM, body=b'{"$patch": "bogus"}',
        ctype="application/strategic-merge-patch+json"),
    bad("put-body-list", "PUT", VICTIM, body=b"[]"),
    bad("put-body-truncated", "PUT", VICTIM, body=b'{"metadata": {"name": "victim"'),
    bad("put-metadata-string", "PUT", VICTIM, body=j({"metadata": "victim"})),
    bad("put-name-mismatch", "PUT", VICTIM, "does not match the name on the URL", body=cm("other")),
    bad("put-kind-mismatch", "PUT", VICTIM,
        body=j({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "victim"}})),
    bad("put-api-version-mismatch", "PUT", VICTIM, body=j({"apiVersion": "v2", "kind": "ConfigMap",
                                                          "metadata": {"name": "victim"}})),
    Case("put-rv-mismatch", "PUT", VICTIM, 409, "Conflict",
         body=j({"metadata": {"name": "victim", "resourceVersion": "1"}})),
    bad("put-rv-word", "PUT", VICTIM, 'resourceVersion: Invalid value: "abc"',
        body=j({"metadata": {"name": "victim", "resourceVersion": "abc"}})),
    bad("put-rv-space", "PUT", VICTIM, "strconv.ParseUint",
        body=j({"metadata": {"name": "victim", "resourceVersion": " 7"}})),
    bad("put-rv-number", "PUT", VICTIM, "ObjectMeta.metadata.resourceVersion",
        body=j({"metadata": {"name": "victim", "resourceVersion": 7}})),
    ok("put-rv-zero-is-unconditional", "PUT", VICTIM, victim="any", expect={"data.v": "0"},
       body=j({"metadata": {"name": "victim", "resourceVersion": "0"}, "data": {"v": "0"}})),
    bad("patch-rv-word", "PATCH", VICTIM, 'resourceVersion: Invalid value: "x"',
        body=j({"metadata": {"resourceVersion": "x"}}), ctype=MERGE),
    Case("put-missing-object", "PUT", f"{CM}/absent", 404, "NotFound", body=cm("absent")),
    Case("put-yaml-body", "PUT", VICTIM, 200, body=b"metadata: {name: victim}\ndata: {v: '2'}\n", ctype=YAML,
         victim="any", expect={"data.v": "2"}),
]

BODY_CASES = [
    bad("body-truncated", "POST", CM, body=b'{"metadata": {"name": "b1"'),
    bad("body-empty", "POST", CM, body=b""),
    bad("body-list", "POST", CM, body=b"[]"),
    bad("body-null", "POST", CM, body=b"null"),
    bad("body-string", "POST", CM, body=b'"configmap"'),
    bad("body-number", "POST", CM, body=b"123"),
    bad("body-nan", "POST", CM, body=b'{"metadata": {"name": "b2"}, "data": {"a": NaN}}'),
    bad("body-not-utf8", "POST", CM, body=b'{"metadata": {"name": "b\xff\xfe"}}'),
    bad("body-metadata-string", "POST", CM, body=j({"metadata": "b4"})),
    bad("body-metadata-list", "POST", CM, body=j({"metadata": ["b4"]})),
    bad("body-name-number", "POST", CM, body=j({"metadata": {"name": 5}})),
    bad("body-rv-number", "POST", CM, body=j({"metadata": {"name": "b12", "resourceVersion": 12}})),
    bad("body-api-version-number", "POST", CM, body=j({"apiVersion": 5, "metadata": {"name": "b15"}})),
    bad("body-kind-list", "POST", CM, body=j({"kind": ["x"], "metadata": {"name": "b16"}})),
    bad("body-other-kind", "POST", CM, body=j({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b17"}})),
    bad("body-spec-string", "POST", f"{APPS}/deployments", body=j({"metadata": {"name": "b18"}, "spec": "x"})),
    Case("body-unknown-media-type", "POST", CM, 415, "UnsupportedMediaType", body=cm("b19"), ctype="text/plain"),
    # metadata.resourceVersion on create: a positive integer is refused, anything else is cleared
    bad("create-rv-positive", "POST", CM, "resourceVersion should not be set on objects to be created",
        body=j({"metadata": {"name": "r1", "resourceVersion": "12"}})),
    ok("create-rv-word-cleared", "POST", CM, 201, body=j({"metadata": {"name": "r2", "resourceVersion": "abc"}}),
       created=f"{CM}/r2"),
    ok("create-rv-zero-cleared", "POST", CM, 201, body=j({"metadata": {"name": "r3", "resourceVersion": "0"}}),
       created=f"{CM}/r3"),
    ok("create-rv-negative-cleared", "POST", CM, 201, body=j({"metadata": {"name": "r4", "resourceVersion": "-5"}}),
       created=f"{CM}/r4"),
    ok("create-rv-space-cleared", "POST", CM, 201, body=j({"metadata": {"name": "r5", "resourceVersion": " 7"}}),
       created=f"{CM}/r5"),
    ok("create-rv-empty", "POST", CM, 201, body=j({"metadata": {"name": "r6", "resourceVersion": ""}}),
       created=f"{CM}/r6"),
]

YAML_CASES = [
    ok("yaml-int-key", "POST", CM, 201, body=b"metadata: {name: y1}\ndata:\n  1: one\n", ctype=YAML,
       created=f"{CM}/y1", expect={"data.1": "one"}),
    ok("yaml-float-and-bool-keys", "POST", CM, 201, body=b"metadata: {name: y2}\ndata:\n  1.5: a\n  true: b\n",
       ctype=YAML, created=f"{CM}/y2", expect={"data.1.5": "a", "data.true": "b"}),
    ok("yaml-binary", "POST", CM, 201, body=b"metadata: {name: y3}\ndata:\n  k: !!binary aGVsbG8=\n", ctype=YAML,
       created=f"{CM}/y3", expect={"data.k": "hello"}),
    ok("yaml-timestamp-kept-as-text", "POST", CM, 201,
       body=b"metadata:\n  name: y4\n  annotations:\n    at: 2001-12-14t21:59:43.10-05:00\n    day: 2002-12-14\n",
       ctype=YAML, created=f"{CM}/y4",
       expect={"metadata.annotations.at": "2001-12-14t21:59:43.10-05:00", "metadata.annotations.day": "2002-12-14"}),
    bad("yaml-null-key", "POST", CM, body=b"metadata: {name: y8}\ndata:\n  ~: x\n", ctype=YAML),
    bad("yaml-inf", "POST", CM, body=b"metadata: {name: y9}\ndata:\n  k: .inf\n", ctype=YAML),
    bad("yaml-nan", "POST", CM, body=b"metadata: {name: y10}\ndata:\n  k: .nan\n", ctype=YAML),
    bad("yaml-syntax", "POST", CM, body=b"metadata: [\n", ctype=YAML),
    bad("yaml-list", "POST", CM, body=b"- a\n- b\n", ctype=YAML),
    bad("yaml-scalar", "POST", CM, body=b"just text\n", ctype=YAML),
    bad("yaml-python-tag", "POST", CM, body=b"metadata: !!python/object:os.system {}\n", ctype=YAML),
    bad("yaml-nested-too-deep", "POST", CM, body=b"metadata: {name: y13}\ndata: " + b"[" * 600 + b"]" * 600,
        ctype=YAML),
    bad("yaml-binary-not-base64", "POST", CM, body=b"metadata: {name: y11}\ndata:\n  k: !!binary '%%%'\n", ctype=YAML),
    ok("yaml-apply-int-key", "PATCH", f"{CM}/y12?fieldManager=t", 201, ctype=APPLY, created=f"{CM}/y12",
       body=b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: y12}\ndata:\n  7: seven\n", expect={"data.7": "seven"}),
]

SECRET = {"apiVersion": "v1", "kind": "Secret"}
SECRET_CASES = [
    ok("secret-base64-newlines", "POST", SECRETS, 201, created=f"{SECRETS}/s1",
       body=j({**SECRET, "metadata": {"name": "s1"}, "data": {"k": "aGVs\nbG8="}}), expect={"data.k": "aGVsbG8="}),
    ok("secret-base64-crlf", "POST", SECRETS, 201, created=f"{SECRETS}/s2",
       body=j({**SECRET, "metadata": {"name": "s2"}, "data": {"k": "aGVsbG8g\r\nd29ybGQ=\r\n"}}),
       expect={"data.k": "aGVsbG8gd29ybGQ="}),
    bad("secret-base64-space", "POST", SECRETS, "illegal base64 data",
        body=j({**SECRET, "metadata": {"name": "s3"}, "data": {"k": "aGVs bG8="}})),
    bad("secret-base64-bad-char", "POST", SECRETS, "illegal base64 data",
        body=j({**SECRET, "metadata": {"name": "s4"}, "data": {"k": "aGVs*G8="}})),
    bad("secret-base64-bad-padding", "POST", SECRETS, "illegal base64 data",
        body=j({**SECRET, "metadata": {"name": "s5"}, "data": {"k": "aGVsbG8"}})),
    ok("configmap-binary-newlines", "POST", CM, 201, created=f"{CM}/c1",
       body=cm("c1", binaryData={"k": "aGVs\nbG8="}), expect={"binaryData.k": "aGVsbG8="}),
]

_SPEC_TEMPLATE = {"selector": {"matchLabels": {"a": "b"}},
                  "template": {"metadata": {"labels": {"a": "b"}},
                               "spec": {"containers": [{"name": "c", "image": "i"}]}}}
STATUS_CASES = [
    ok("status-ints-daemonset", "POST", f"{APPS}/daemonsets", 201, created=f"{APPS}/daemonsets/d1",
       body=j({"metadata": {"name": "d1"}, "spec": _SPEC_TEMPLATE}),
       expect={"status": {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                          "numberReady": 0}}),
    ok("status-ints-replicaset", "POST", f"{APPS}/replicasets", 201, created=f"{APPS}/replicasets/d2",
       body=j({"metadata": {"name": "d2"}, "spec": _SPEC_TEMPLATE}), expect={"status": {"replicas": 0}}),
    ok("status-ints-statefulset", "POST", f"{APPS}/statefulsets", 201, created=f"{APPS}/statefulsets/d3",
       body=j({"metadata": {"name": "d3"}, "spec": {**_SPEC_TEMPLATE, "serviceName": "s"}}),
       expect={"status": {"replicas": 0, "availableReplicas": 0}}),
    ok("status-ints-rc", "POST", f"{NS}/replicationcontrollers", 201, created=f"{NS}/replicationcontrollers/d4",
       body=j({"metadata": {"name": "d4"}, "spec": {"selector": {"a": "b"}, "template": _SPEC_TEMPLATE["template"]}}),
       expect={"status": {"replicas": 0}}),
    ok("status-ints-hpa", "POST", "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers", 201,
       created="/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers/d5",
       body=j({"metadata": {"name": "d5"}, "spec": {"maxReplicas": 3, "scaleTargetRef": {
           "apiVersion": "apps/v1", "kind": "Deployment", "name": "x"}}, "status": {"currentReplicas": 7}}),
       expect={"status": {"desiredReplicas": 0}}),
    ok("status-ints-pdb", "POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", 201,
       created="/apis/policy/v1/namespaces/default/poddisruptionbudgets/d6",
       body=j({"metadata": {"name": "d6"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}}}),
       expect={"status": {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}}),
    ok("deployment-generation-1", "POST", f"{APPS}/deployments", 201, created=f"{APPS}/deployments/d7",
       body=j({"metadata": {"name": "d7"}, "spec": _SPEC_TEMPLATE}), expect={"metadata.generation": 1}),
]

MISC_CASES = [
    ok("version-trailing-slash", "GET", "/version/", expect={"major": "1"}),
    ok("version", "GET", "/version", expect={"major": "1"}),
    Case("impersonate-user-get", "GET", VICTIM, 403, "Forbidden", "impersonate",
         headers={"Impersonate-User": "system:admin"}),
    Case("impersonate-user-create", "POST", CM, 403, "Forbidden", "impersonate", body=cm("i1"),
         headers={"Impersonate-User": "alice"}),
    Case("impersonate-user-delete", "DELETE", VICTIM, 403, "Forbidden", "impersonate",
         headers={"Impersonate-User": "alice", "Impersonate-Group": "system:masters"}),
    Case("impersonate-uid", "GET", CM, 403, "Forbidden", "impersonate",
         headers={"Impersonate-User": "alice", "Impersonate-Uid": "1234"}),
    bad("impersonate-group-without-user", "GET", CM, "without impersonating a user",
        headers={"Impersonate-Group": "system:masters"}),
    bad("impersonate-extra-without-user", "GET", CM, "without impersonating a user",
        headers={"Impersonate-Extra-Scopes": "view"}),
]

ALL = QUERY_CASES + DELETE_CASES + WRITE_OPTION_CASES + BODY_CASES + YAML_CASES + SECRET_CASES + STATUS_CASES \
    + MISC_CASES


def test_the_table_is_big_and_unique() -> None:
    assert len(ALL) >= 100
    assert len({c.id for c in ALL}) == len(ALL)


def _dig(obj: Any, dotted: str) -> Any:
    """`a.b.0.c` -> obj["a"]["b"][0]["c"]; keys holding dots ("1.5") are matched greedily."""
    parts = dotted.split(".")
    while parts:
        for n in range(len(parts), 0, -1):
            key = ".".join(parts[:n])
            if isinstance(obj, dict) and key in obj:
                obj, parts = obj[key], parts[n:]
                break
            if isinstance(obj, list) and n == 1 and key.isdigit() and int(key) < len(obj):
                obj, parts = obj[int(key)], parts[1:]
                break
        else:
            raise KeyError(dotted)
    return obj


async def _count(client: TestClient[web.Request, web.Application]) -> tuple[int, dict[str, Any]]:
    r = await client.get(CM, headers={"Authorization": TOKEN})
    assert r.status == 200
    listed = await r.json()
    victim = next((i for i in listed["items"] if i["metadata"]["name"] == "victim"), None)
    return len(listed["items"]), victim or {}


@pytest.mark.parametrize("case", ALL, ids=[c.id for c in ALL])
async def test_hostile_semantics(tmp_path: Path, case: Case) -> None:
    async with _stack(tmp_path) as client:
        auth = {"Authorization": TOKEN}
        r = await client.post(CM, data=cm("victim", data={"v": "1"}),
                              headers={**auth, "Content-Type": "application/json"})
        assert r.status == 201
        before_count, victim = await _count(client)

        headers = {**auth, **case.headers}
        if case.body is not None:
            headers["Content-Type"] = case.ctype
        r = await client.request(case.method, case.path, data=case.body, headers=headers)
        raw = await r.read()
        assert r.status < 500, raw
        assert r.status == case.code, raw
        if case.stream:
            first = orjson.loads(raw.splitlines()[0])
            assert first["type"] == "ADDED" and first["object"]["metadata"]["name"] == "victim"
        else:
            answer = orjson.loads(raw)
        if case.code >= 400:
            assert answer["kind"] == "Status" and answer["code"] == r.status, answer
            assert answer["reason"] == case.reason, answer
            assert case.message in answer["message"], answer
        for dotted, want in case.expect.items():
            got = _dig(answer, dotted)
            if isinstance(want, dict):
                assert {k: got.get(k) for k in want} == want, got
            else:
                assert got == want, answer

        if case.created:
            g = await client.get(case.created, headers=auth)
            assert g.status == 200
            assert orjson.loads(await g.read()) == answer
        after_count, after_victim = await _count(client)
        if case.victim == "same":
            assert after_victim == victim
        elif case.victim == "gone":
            assert after_victim == {}
        if (r.status >= 400 or "dryRun=All" in case.path) and case.method == "POST":
            assert after_count == before_count
