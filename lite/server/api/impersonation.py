"""Impersonation headers: `Impersonate-User`, `-Group`, `-Uid`, `-Extra-<key>` (upstream's impersonation filter).

Role: `impersonate(headers, caller, authorize)` checks, for each thing asked, that the caller holds the
`impersonate` verb on it — `users/<name>`, `serviceaccounts/<name>` in the account's namespace (for a user
named `system:serviceaccount:<ns>:<name>`), `groups/<name>`, `userextras/<key>` with the value as name and
`uids/<uid>` (the last two in API group `authentication.k8s.io`) — and returns the user to act as: the named
user with exactly the groups asked (a ServiceAccount without asked groups gets `system:serviceaccounts` and
`system:serviceaccounts:<ns>`), plus `system:authenticated` unless `system:authenticated` or
`system:unauthenticated` is among them (`system:anonymous` gets `system:unauthenticated` instead). The first
refused check is a 403 with upstream's message (`users "x" is forbidden: User "y" cannot impersonate resource
"users" in API group "" at the cluster scope`). Groups, uid or extras without a user are a 400. The extras asked
become the user's `extra` (keys lowercased and percent-decoded, values in header order), as upstream carries them
into authorization, access reviews, admission webhooks and `kubectl auth whoami`.

`refusal(headers, caller)` is for an API app built without an authorizer (tests of the bare HTTP stack): it
refuses any impersonation rather than silently serving the caller.

Invariants: pure apart from calling `authorize`; a request without impersonation headers is returned as is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from urllib.parse import unquote

from multidict import CIMultiDictProxy

from lite import errors
from lite.errors import ApiError
from lite.server.requestuser import AUTHENTICATED, UserInfo

USER = "impersonate-user"
_OTHERS = ("impersonate-group", "impersonate-uid")
_EXTRA = "impersonate-extra-"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
_SA_PREFIX = "system:serviceaccount:"
AUTHN_GROUP = "authentication.k8s.io"


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


# (api group, resource, subresource, namespace, name) of one `impersonate` check.
Check = tuple[str, str, str, str, str]
# Returns None when allowed, else the ApiError to answer with.
Authorize = Callable[[UserInfo, Check], "ApiError | None"]


def split_sa_username(name: str) -> tuple[str, str] | None:
    """(namespace, name) of `system:serviceaccount:<ns>:<name>`, else None."""
    if not name.startswith(_SA_PREFIX):
        return None
    ns, sep, sa = name[len(_SA_PREFIX):].partition(":")
    if not sep or not ns or not sa or ":" in sa:
        return None
    return ns, sa


def requested(headers: CIMultiDictProxy[str]) -> bool:
    for k in headers:  # asked on every request: only a name starting "impersonate-" is looked at further
        if k[:12].lower() == "impersonate-":
            low = k.lower()
            if low == USER or low in _OTHERS or low.startswith(_EXTRA):
                return True
    return False


def impersonate(headers: CIMultiDictProxy[str], caller: UserInfo, authorize: Authorize) -> UserInfo:
    """The user to serve the request as (see the module doc); `caller` when nothing is asked."""
    user = headers.get("Impersonate-User", "")
    groups_asked = headers.getall("Impersonate-Group", [])
    uid = headers.get("Impersonate-Uid", "")
    extras: list[tuple[str, str]] = []
    for key in headers:
        if key.lower().startswith(_EXTRA):
            extra_key = unquote(key[len(_EXTRA):].lower())
            extras += [(extra_key, v) for v in headers.getall(key)]
    if not user:
        if groups_asked or uid or extras:
            asked = [f"Group {g}" for g in groups_asked] + [f"UserExtra {k}={v}" for k, v in extras]
            asked += [f"UID {uid}"] if uid else []
            raise errors.bad_request(f"requested [{', '.join(asked)}] without impersonating a user")
        return caller
    checks: list[Check] = []
    groups: list[str] = []
    sa = split_sa_username(user)
    if sa is not None:
        checks.append(("", "serviceaccounts", "", sa[0], sa[1]))
        if not groups_asked:
            groups = ["system:serviceaccounts", f"system:serviceaccounts:{sa[0]}"]
    else:
        checks.append(("", "users", "", "", user))
    for g in groups_asked:
        checks.append(("", "groups", "", "", g))
        groups.append(g)
    for k, v in extras:
        checks.append((AUTHN_GROUP, "userextras", k, "", v))
    if uid:
        checks.append((AUTHN_GROUP, "uids", "", "", uid))
    for check in checks:
        refused = authorize(caller, check)
        if refused is not None:
            raise refused
    if user != ANONYMOUS:
        if AUTHENTICATED not in groups and UNAUTHENTICATED not in groups:
            groups.append(AUTHENTICATED)
    elif UNAUTHENTICATED not in groups:
        groups.append(UNAUTHENTICATED)
    return UserInfo(user, tuple(groups), uid, extra_of(extras))


def extra_of(extras: list[tuple[str, str]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Upstream's `extra` map from (key, value) pairs: values grouped by key in the order asked, keys sorted."""
    grouped: dict[str, list[str]] = {}
    for k, v in extras:
        grouped.setdefault(k, []).append(v)
    return tuple((k, tuple(grouped[k])) for k in sorted(grouped))
