"""The *Options object of a CONNECT request (exec, attach, portforward, proxy), as upstream's connect handler
decodes it from the query (and the proxy sub-path) and hands it to admission: admission webhooks receive it as
the AdmissionReview's `object`, with its kind as the review's `kind`. Pure.

Field shapes follow the v1 types: bools and strings are omitted when empty (`omitempty`), except
`PodExecOptions.command`, which is always present; `ports` are integers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lite.server.api.params import query_bool

Obj = dict[str, Any]

# (kind of the object, subresource) -> the options kind upstream decodes for that CONNECT
CONNECT_KINDS = {
    ("Pod", "exec"): "PodExecOptions",
    ("Pod", "attach"): "PodAttachOptions",
    ("Pod", "portforward"): "PodPortForwardOptions",
    ("Pod", "proxy"): "PodProxyOptions",
    ("Service", "proxy"): "ServiceProxyOptions",
    ("Node", "proxy"): "NodeProxyOptions",
}


def connect_options(kind: str, subresource: str, query: Any, subpath: str = "") -> Obj | None:
    """The options object for a CONNECT of `kind`/`subresource` (None when that is not a CONNECT, e.g.
    pods/log, a plain GET). `query` is the request's multi-valued query; `subpath` what follows `/proxy`."""
    options_kind = CONNECT_KINDS.get((kind, subresource))
    if options_kind is None:
        return None
    out: Obj = {"kind": options_kind, "apiVersion": "v1"}
    if subresource in ("exec", "attach"):
        for name in ("stdin", "stdout", "stderr", "tty"):
            if query_bool(query, name):
                out[name] = True
        if query.get("container"):
            out["container"] = str(query["container"])
        if subresource == "exec":
            out["command"] = [str(c) for c in _all(query, "command")]
    elif subresource == "portforward":
        ports = [int(p) for p in _all(query, "ports") for p in str(p).split(",") if p.strip().isdigit()]
        if ports:
            out["ports"] = ports
    elif subpath or query.get("path"):
        out["path"] = proxy_path(subpath) if subpath else str(query["path"])
    return out


def proxy_path(subpath: str) -> str:
    """The sub-path after `/proxy` as upstream records it: a leading '/' when non-empty."""
    return subpath if not subpath or subpath.startswith("/") else "/" + subpath


def _all(query: Any, name: str) -> list[Any]:
    getall = getattr(query, "getall", None)
    if getall is not None:
        return list(getall(name, ()))
    value = query.get(name) if isinstance(query, Mapping) else None
    return [] if value is None else [value]
