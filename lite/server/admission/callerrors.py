"""Plain reasons for a failed webhook call, worded as Go's HTTP client and client-go's REST client word them
(what upstream puts after `failed calling webhook "<name>": failed to call webhook: `), instead of a Python
exception's text. Pure.

- `reason(exc, addr)`: the transport failure (`dial tcp 127.0.0.1:9: connect: connection refused`,
  `tls: failed to verify certificate: x509: certificate signed by unknown authority`, `EOF`, ...). `addr` is
  the host:port of the URL errors name (`<svc>.<ns>.svc:443` for a Service): the endpoint address lite
  dialled is never shown.
- `status_reason(code, body)`: a non-200 answer, as client-go reads one: the message of a `Status` body,
  else its generic sentence for the code.
"""

from __future__ import annotations

import errno
import ssl
from typing import Any

import aiohttp
import orjson

_ERRNO = {
    errno.ECONNREFUSED: "connect: connection refused",
    errno.EHOSTUNREACH: "connect: no route to host",
    errno.ENETUNREACH: "connect: network is unreachable",
    errno.ETIMEDOUT: "i/o timeout",
    errno.ECONNRESET: "read: connection reset by peer",
    errno.EPIPE: "write: broken pipe",
}

_GENERIC = {  # client-go's NewGenericServerResponse, by code
    400: "the server rejected our request for an unknown reason",
    401: "the server has asked for the client to provide credentials",
    403: "forbidden",
    404: "the server could not find the requested resource",
    405: "the server does not allow this method on the requested resource",
    406: "the server was unable to respond with a content type that the client supports",
    409: "the server reported a conflict",
    413: "the server has rejected the request because the request is too large",
    415: "the server was unable to process the request because the media type is unsupported",
    422: "the server rejected our request due to an error in our request",
    429: "the server has received too many requests and has asked us to try again later",
    503: "the server is currently unable to handle the request",
    504: "the server was unable to return a response in the time allotted, but may still be processing the request",
}


def reason(exc: BaseException, addr: str) -> str:
    """The Go-worded reason of a transport failure (see the module docstring)."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return _certificate(exc.certificate_error)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return _certificate(exc)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"dial tcp {addr}: {_os_reason(exc.os_error)}"
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError):
        return "remote error: tls: handshake failure"
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return "EOF"
    if isinstance(exc, OSError):
        return _os_reason(exc)
    return "unexpected error"


def status_reason(code: int, body: bytes) -> str:
    """What client-go reports for a non-2xx answer with `body` (see the module docstring)."""
    try:
        doc: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and doc.get("kind") == "Status" and isinstance(doc.get("message"), str) \
            and doc["message"]:
        return str(doc["message"])
    if code in _GENERIC:
        return _GENERIC[code]
    if code >= 500:
        text = body.decode("utf-8", "replace").strip()[:256] or "unknown"
        return f"an error on the server ({_go_quote(text)}) has prevented the request from succeeding"
    return f"the server responded with the status code {code} but did not return more information"


def _certificate(err: BaseException) -> str:
    message = str(getattr(err, "verify_message", "") or err)
    if "hostname" in message or "IP address mismatch" in message:
        detail = "x509: certificate is not valid for the name the webhook was called by"
    elif "expired" in message:
        detail = "x509: certificate has expired or is not yet valid"
    else:
        detail = "x509: certificate signed by unknown authority"
    return f"tls: failed to verify certificate: {detail}"


def _os_reason(err: OSError | None) -> str:
    if err is None or err.errno is None:
        return "connect: connection refused" if err is None else "connect: " + (err.strerror or "failed").lower()
    return _ERRNO.get(err.errno, "connect: " + (err.strerror or errno.errorcode.get(err.errno, "error")).lower())


def _go_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
