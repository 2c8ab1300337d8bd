"""Impersonation headers: lite does not implement impersonation, so it refuses them instead of ignoring them.

Role: upstream's impersonation filter acts as the user named in `Impersonate-User` (with the groups, uid
and extras of `Impersonate-Group`, `Impersonate-Uid`, `Impersonate-Extra-*`). Serving such a request as
the caller would silently do something else than the client asked for, so until lite has impersonation
(with its RBAC `impersonate` verb) `refusal` turns any of these headers into the error upstream gives a
caller that may not impersonate: 403 Forbidden, or 400 BadRequest for groups/uid/extras without a user
(upstream's "without impersonating a user").

Invariants: pure; a request without impersonation headers is never refused here.
"""

from __future__ import annotations

from collections.abc import Mapping

from lite import errors
from lite.errors import ApiError

USER = "impersonate-user"
_OTHERS = ("impersonate-group", "impersonate-uid")
_EXTRA = "impersonate-extra-"


def refusal(headers: Mapping[str, str], caller: str) -> ApiError | None:
    """The error for a request carrying impersonation headers (None when there are none)."""
    names = {k.lower(): v for k, v in headers.items()}
    others = sorted(k for k in names if k in _OTHERS or k.startswith(_EXTRA))
    if USER not in names:
        if not others:
            return None
        return errors.bad_request(f"requested impersonation ({', '.join(others)}) without impersonating a user")
    target = names[USER]
    return ApiError(f'users "{target}" is forbidden: User "{caller}" cannot impersonate resource "users" in API '
                    'group "" at the cluster scope: impersonation is not supported by this server', 403, "Forbidden",
                    name=target, kind="users")
