"""Who is making the current API request, for the few places upstream reads it from the request context.

Role: a leaf module of lite.server (it imports nothing of lite.server, so every tier may read it). The HTTP
layer sets `CURRENT_USER` once it has authenticated a request; code that upstream runs with the request's
user info (the CertificateSigningRequest strategy fills spec.username/groups from it, the
aggregation proxy passes it on as X-Remote-User/X-Remote-Group) reads it with `current_user()`.

Invariants:
- `CURRENT_USER` is a `ContextVar`: each aiohttp request runs in its own task and so sees only its own
  value; in-process callers (controllers) see None. It is the only module-level object here and holds no
  state of its own.
- Groups follow upstream's conventions for the users lite's authenticator knows: the admin is in
  `system:masters`; the join token's "node" has no group (agents then use their node certificate);
  every authenticated user is in `system:authenticated`.
"""

from __future__ import annotations

from contextvars import ContextVar

from lite.records import dataclass

AUTHENTICATED = "system:authenticated"
_GROUPS = {"admin": ("system:masters",)}  # the join token's "node" is in no group: it only bootstraps


@dataclass(frozen=True)
class UserInfo:
    """An authenticated user as upstream's `user.Info` describes one."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    # Upstream's `extra` map as sorted (key, values) pairs (hashable; ServiceAccount tokens set pod and node).
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


CURRENT_USER: ContextVar[UserInfo | None] = ContextVar("lite_current_user", default=None)


def user_info(user: str | UserInfo) -> UserInfo:
    """The UserInfo of what an authenticator returned: a `UserInfo` as it is (with `system:authenticated` added
    when missing), or a bare user name with the groups lite's built-in users have."""
    if isinstance(user, UserInfo):
        if AUTHENTICATED in user.groups:
            return user
        return UserInfo(user.name, (*user.groups, AUTHENTICATED), user.uid, user.extra)
    return UserInfo(user, (*_GROUPS.get(user, ()), AUTHENTICATED))


def current_user() -> UserInfo | None:
    return CURRENT_USER.get()
