"""Kubernetes API errors as exceptions that render to `Status` objects.

Invariants:
- Every error carries the HTTP code and the StatusReason that Kubernetes uses for that case; `status()`
  renders the one `Status` dict that the API layer sends (and that the in-process client raises), so the
  same error looks identical over HTTP and in process.
- `code` always equals the HTTP status the server answers with.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from lite.records import dataclass


@dataclass(frozen=True)
class Cause:
    """One field-level cause inside `details.causes` (reason like FieldValueInvalid)."""

    reason: str
    message: str
    field: str = ""

    def as_dict(self) -> dict[str, str]:
        # Go's StatusCause omits an empty reason or field (`omitempty`); the admission-policy refusal has neither
        d = {"reason": self.reason, "message": self.message} if self.reason else {"message": self.message}
        if self.field:
            d["field"] = self.field
        return d


@dataclass
class ApiError(Exception):
    """Base of all API errors. Subclasses fix `code` and `reason`."""

    message: str
    code: int = 500
    reason: str = "InternalError"
    name: str = ""
    group: str = ""
    kind: str = ""  # the resource plural in details.kind, as upstream does
    causes: list[Cause] = field(default_factory=list)
    retry_after: int | None = None
    uid: str = ""
    list_continue: str = ""  # metadata.continue: the token an expired continue token can go on with (410)

    def __post_init__(self) -> None:
        Exception.__init__(self, self.message)

    def __str__(self) -> str:
        return f"{self.reason} ({self.code}): {self.message}"

    def status(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.uid:
            details["uid"] = self.uid
        if self.causes:
            details["causes"] = [c.as_dict() for c in self.causes]
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {"continue": self.list_continue} if self.list_continue else {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if details:
            out["details"] = details
        out["code"] = self.code  # Go's field order: details comes before code
        return out


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def bad_request(message: str) -> ApiError:
    return ApiError(message, 400, "BadRequest")


def unauthorized(message: str = "Unauthorized") -> ApiError:
    return ApiError(message, 401, "Unauthorized")


def forbidden(message: str, resource: str = "", group: str = "", name: str = "") -> ApiError:
    return ApiError(message, 403, "Forbidden", name=name, group=group, kind=resource)


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(f'{_qualified(resource, group)} "{name}" not found', 404, "NotFound",
                    name=name, group=group, kind=resource)


def path_not_found(message: str = "the server could not find the requested resource") -> ApiError:
    return ApiError(message, 404, "NotFound")


def method_not_allowed(message: str) -> ApiError:
    return ApiError(message, 405, "MethodNotAllowed")


def not_acceptable(message: str) -> ApiError:
    return ApiError(message, 406, "NotAcceptable")


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(f'{_qualified(resource, group)} "{name}" already exists', 409, "AlreadyExists",
                    name=name, group=group, kind=resource)


def conflict(resource: str, name: str, group: str = "", detail: str = "") -> ApiError:
    detail = detail or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {detail}',
                    409, "Conflict", name=name, group=group, kind=resource)


def gone(message: str) -> ApiError:
    return ApiError(message, 410, "Gone")


def expired(message: str) -> ApiError:
    return ApiError(message, 410, "Expired")


def too_large(message: str = "Request entity too large") -> ApiError:
    return ApiError(message, 413, "RequestEntityTooLarge")


def unsupported_media_type(message: str) -> ApiError:
    return ApiError(message, 415, "UnsupportedMediaType")


def invalid(kind: str, name: str, causes: list[Cause], group: str = "") -> ApiError:
    """422 Invalid. `kind` here is the Kind (e.g. "Pod"), as upstream puts in the message and details."""
    summary = ", ".join(f"{c.field}: {c.message}" if c.field else c.message for c in causes)
    msg = f'{kind}.{group} "{name}" is invalid: {summary}' if group else f'{kind} "{name}" is invalid: {summary}'
    return ApiError(msg, 422, "Invalid", name=name, group=group, kind=kind, causes=list(causes))


def too_many_requests(message: str, retry_after: int = 1) -> ApiError:
    return ApiError(message, 429, "TooManyRequests", retry_after=retry_after)


def internal(message: str) -> ApiError:
    return ApiError(message, 500, "InternalError")


def service_unavailable(message: str) -> ApiError:
    return ApiError(message, 503, "ServiceUnavailable")


def field_required(path: str, message: str = "Required value") -> Cause:
    return Cause("FieldValueRequired", message, path)


def field_invalid(path: str, value: Any, detail: str) -> Cause:
    return Cause("FieldValueInvalid", f"Invalid value: {_show(value)}: {detail}", path)


def field_forbidden(path: str, detail: str) -> Cause:
    return Cause("FieldValueForbidden", f"Forbidden: {detail}", path)


def field_not_supported(path: str, value: Any, allowed: list[str]) -> Cause:
    shown = ", ".join(f'"{a}"' for a in allowed)
    return Cause("FieldValueNotSupported", f"Unsupported value: {_show(value)}: supported values: {shown}", path)


def field_duplicate(path: str, value: Any) -> Cause:
    return Cause("FieldValueDuplicate", f"Duplicate value: {_show(value)}", path)


def field_too_long(path: str, value: Any, limit: int) -> Cause:
    return Cause("FieldValueTooLong", f"Too long: may not be more than {limit} bytes", path)


def _show(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def from_status(status: dict[str, Any]) -> ApiError:
    """Rebuild an ApiError from a Status dict (the HTTP client uses this)."""
    details = status.get("details") or {}
    causes = [Cause(c.get("reason", ""), c.get("message", ""), c.get("field", ""))
              for c in details.get("causes") or []]
    return ApiError(
        str(status.get("message", "")),
        int(status.get("code", 500)),
        str(status.get("reason", "")),
        name=str(details.get("name", "")),
        group=str(details.get("group", "")),
        kind=str(details.get("kind", "")),
        causes=causes,
        retry_after=details.get("retryAfterSeconds"),
        list_continue=str((status.get("metadata") or {}).get("continue") or ""),
    )
