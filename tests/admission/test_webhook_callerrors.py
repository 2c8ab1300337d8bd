"""Pure parts of upstream-shaped webhook calls: the plain reasons of failed calls (`callerrors`), the *Options
object of a CONNECT (`connectoptions`) and the optional `service.path` rules."""

from __future__ import annotations

import errno
import ssl
from typing import Any

import aiohttp
import pytest
from multidict import MultiDict

from lite.server.admission.callerrors import reason, status_reason
from lite.server.admission.webhookconfig import client_config_causes
from lite.server.api.connectoptions import connect_options


class _Key:
    host, port, ssl = "10.1.2.3", 8443, True


def _connector(err: OSError) -> aiohttp.ClientConnectorError:
    return aiohttp.ClientConnectorError(_Key(), err)  # type: ignore[arg-type]


@pytest.mark.parametrize("exc, want", [
    (_connector(ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed")),
     "dial tcp hooks.ns.svc:443: connect: connection refused"),
    (_connector(OSError(errno.EHOSTUNREACH, "No route to host")),
     "dial tcp hooks.ns.svc:443: connect: no route to host"),
    (ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"),
     "tls: failed to verify certificate: x509: certificate signed by unknown authority"),
    (aiohttp.ServerDisconnectedError(), "EOF"),
])
def test_transport_failures_are_worded_as_go_words_them(exc: BaseException, want: str) -> None:
    got = reason(exc, "hooks.ns.svc:443")
    assert got == want and "10.1.2.3" not in got


@pytest.mark.parametrize("code, body, want", [
    (500, b"webhook broke", 'an error on the server ("webhook broke") has prevented the request from succeeding'),
    (502, b"", 'an error on the server ("unknown") has prevented the request from succeeding'),
    (404, b"404 page not found", "the server could not find the requested resource"),
    (403, b'{"kind":"Status","message":"nope"}', "nope"),
    (418, b"teapot", "the server responded with the status code 418 but did not return more information"),
])
def test_non_200_answers_read_as_client_go_reads_them(code: int, body: bytes, want: str) -> None:
    assert status_reason(code, body) == want


@pytest.mark.parametrize("kind, sub, query, subpath, want", [
    ("Pod", "exec", MultiDict([("command", "sh"), ("command", "-c"), ("stdout", "true"), ("stdin", "1"),
                               ("tty", "false"), ("container", "c")]), "",
     {"kind": "PodExecOptions", "apiVersion": "v1", "stdin": True, "stdout": True, "container": "c",
      "command": ["sh", "-c"]}),
    ("Pod", "exec", MultiDict(), "", {"kind": "PodExecOptions", "apiVersion": "v1", "command": []}),
    ("Pod", "attach", MultiDict([("stderr", "true")]), "", {"kind": "PodAttachOptions", "apiVersion": "v1",
                                                            "stderr": True}),
    ("Pod", "portforward", MultiDict([("ports", "80"), ("ports", "8080,9090")]), "",
     {"kind": "PodPortForwardOptions", "apiVersion": "v1", "ports": [80, 8080, 9090]}),
    ("Pod", "proxy", MultiDict(), "/a/b", {"kind": "PodProxyOptions", "apiVersion": "v1", "path": "/a/b"}),
    ("Pod", "proxy", MultiDict(), "", {"kind": "PodProxyOptions", "apiVersion": "v1"}),
    ("Service", "proxy", MultiDict(), "/", {"kind": "ServiceProxyOptions", "apiVersion": "v1", "path": "/"}),
    ("Node", "proxy", MultiDict(), "/stats", {"kind": "NodeProxyOptions", "apiVersion": "v1", "path": "/stats"}),
    ("Pod", "log", MultiDict(), "", None),
])
def test_connect_options(kind: str, sub: str, query: Any, subpath: str, want: Any) -> None:
    assert connect_options(kind, sub, query, subpath) == want


@pytest.mark.parametrize("path, messages", [
    (None, []), ("", []), ("/", []), ("/validate", []), ("/a/b.c/", []),
    ("//", ["segment[0] may not be empty"]),
    ("validate", ["must start with a '/'"]),
    ("/a//b", ["segment[1] may not be empty"]),
    ("/Upper", ["segment[0]: a lowercase RFC 1123 subdomain"]),
])
def test_service_path(path: str | None, messages: list[str]) -> None:
    svc: dict[str, Any] = {"namespace": "ns", "name": "hooks"}
    if path is not None:
        svc["path"] = path
    causes = client_config_causes({"service": svc}, "webhooks[0].clientConfig")
    assert len(causes) == len(messages)
    for cause, fragment in zip(causes, messages, strict=True):
        assert cause.field == "webhooks[0].clientConfig.service.path" and fragment in cause.message
