"""Request attributes: what an HTTP request asks to do, in upstream's `RequestInfo` terms.

Role: `request_info(method, path, query)` turns a request line into the verb, API group and version,
resource, subresource, namespace and name an authorizer judges, or a non-resource path; `Attributes` adds
the user. Mirrors apiserver's `RequestInfoFactory`:
- only `/api/<v>/...` and `/apis/<g>/<v>/...` with a resource are resource requests; everything else (also
  `/api`, `/api/v1`, `/apis/apps`) is a non-resource request whose verb is the lower-cased HTTP method
  (GET → get, POST → post, ...);
- `/watch/` and `/proxy/` path prefixes set the verb; POST → create, PUT → update, PATCH → patch,
  DELETE → delete, GET/HEAD → get; a GET without a name is list, or watch when `watch` is set (anything but
  "false"/"0"), and a `metadata.name=` field selector then names the object; a DELETE without a name is
  deletecollection;
- `/namespaces/<ns>/<resource>/...` sets the namespace, except `namespaces/<ns>/status|finalize`, which are
  subresources of the namespace itself.

Invariants: pure, no I/O; never raises on odd paths (they become non-resource or partial requests that
no rule matches unless it says `*`).
"""

from __future__ import annotations

from collections.abc import Mapping
from sys import intern

from lite.records import dataclass
from lite.server.requestuser import UserInfo

_SPECIAL_VERBS = frozenset({"proxy", "watch"})
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch",
                 "DELETE": "delete"}


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """Upstream's `request.RequestInfo` (the fields authorization reads). The RBAC verdict cache keeps one per
    distinct request (every pod's own status path: thousands), so it has slots and its words are interned."""

    resource_request: bool
    path: str
    verb: str
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""


@dataclass(frozen=True)
class Attributes:
    """A user and what they ask to do: upstream's `authorizer.Attributes`."""

    user: UserInfo
    info: RequestInfo

    @property
    def verb(self) -> str:
        return self.info.verb


def request_info(method: str, path: str, query: Mapping[str, str]) -> RequestInfo:
    """The RequestInfo of one request (see the module doc)."""
    method = method.upper()
    non_resource = RequestInfo(False, path, method.lower())
    parts = path.strip("/").split("/") if path.strip("/") else []
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    group = ""
    rest = parts[1:]
    if parts[0] == "apis":
        if len(rest) < 3:
            return non_resource
        group, rest = rest[0], rest[1:]
    version, rest = rest[0], rest[1:]
    if rest[0] in _SPECIAL_VERBS:
        if len(rest) < 2:
            return non_resource  # upstream: "unable to determine kind and namespace" for e.g. /api/v1/watch
        verb, rest = rest[0], rest[1:]
        by_method = False
    else:
        verb, by_method = _METHOD_VERBS.get(method, ""), True
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) >= 2 else ""
    sub = rest[2] if len(rest) >= 3 and verb != "proxy" else ""
    if by_method and not name and verb == "get":
        verb = "watch" if _truthy(query.get("watch")) else "list"
        name = _name_from_field_selector(query.get("fieldSelector", ""))
    if by_method and not name and verb == "delete":
        verb = "deletecollection"
    return RequestInfo(True, path, verb, intern(group), intern(version), intern(resource), intern(sub),
                       intern(namespace), name)


class RequestInfos:
    """`request_info` remembered per (method, path) where the query cannot change it: every method but GET and
    HEAD (only those read `watch` and `fieldSelector`). A server sees the same create and update paths over and
    over; a RequestInfo is frozen, so one is shared by all their requests. At most `size` entries, the oldest
    dropped first."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._known: dict[tuple[str, str], RequestInfo] = {}

    def __len__(self) -> int:
        return len(self._known)

    def get(self, method: str, path: str, query: Mapping[str, str]) -> RequestInfo:
        if method in ("GET", "HEAD"):
            return request_info(method, path, query)
        key = (method, path)
        known = self._known
        info = known.get(key)
        if info is None:
            info = request_info(method, path, query)
            if len(known) >= self.size:
                del known[next(iter(known))]  # dicts keep insertion order: the oldest goes
            known[key] = info
        return info


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() not in ("false", "0")


def _name_from_field_selector(selector: str) -> str:
    """The name a `metadata.name=x` (or `==`) requirement of a field selector fixes, else ""."""
    for term in selector.split(","):
        term = term.strip()
        for op in ("==", "="):
            key, sep, value = term.partition(op)
            if sep and key.strip() == "metadata.name" and not key.endswith("!"):
                value = value.strip()
                return value if value and "/" not in value and value not in (".", "..") and "%" not in value \
                    else ""
    return ""
