"""Impersonation (`impersonation.impersonate`) over a real chain: which checks run, the user produced, and
upstream's refusals."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from lite.errors import ApiError
from lite.server.api import impersonation
from lite.server.authz.chain import AuthorizerChain
from lite.server.authz.index import PolicyIndex, binding_from
from lite.server.authz.rules import Rule
from lite.server.requestuser import UserInfo


def headers(*pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


@pytest.fixture
def chain() -> AuthorizerChain:
    index = PolicyIndex()
    index.put_cluster_role("imp", (Rule(("impersonate",), ("",), ("users", "groups", "serviceaccounts")),
                                   Rule(("impersonate",), ("authentication.k8s.io",), ("uids", "userextras/scopes"))))
    index.put_cluster_role("imp-alice", (Rule(("impersonate",), ("",), ("users",), ("alice",)),))
    index.put_binding(binding_from({"metadata": {"name": "a"}, "roleRef": {"kind": "ClusterRole", "name": "imp"},
                                    "subjects": [{"kind": "User", "name": "ops"}]}))
    index.put_binding(binding_from({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "imp-alice"},
                                    "subjects": [{"kind": "User", "name": "helper"}]}))
    index.ready.set()
    return AuthorizerChain(index)


OPS = UserInfo("ops", ("system:authenticated",))
HELPER = UserInfo("helper", ("system:authenticated",))


def test_user_and_groups(chain: AuthorizerChain) -> None:
    got = impersonation.impersonate(headers(("Impersonate-User", "dev-user"), ("Impersonate-Group", "dev"),
                                            ("Impersonate-Group", "qa")), OPS, chain.impersonation_refusal)
    assert got == UserInfo("dev-user", ("dev", "qa", "system:authenticated"))


def test_service_account_gets_its_groups(chain: AuthorizerChain) -> None:
    got = impersonation.impersonate(headers(("Impersonate-User", "system:serviceaccount:ci:bot")), OPS,
                                    chain.impersonation_refusal)
    assert got.groups == ("system:serviceaccounts", "system:serviceaccounts:ci", "system:authenticated")


def test_anonymous_gets_unauthenticated(chain: AuthorizerChain) -> None:
    got = impersonation.impersonate(headers(("Impersonate-User", "system:anonymous")), OPS,
                                    chain.impersonation_refusal)
    assert got.groups == ("system:unauthenticated",)


def test_uid_and_extras_are_checked(chain: AuthorizerChain) -> None:
    got = impersonation.impersonate(headers(("Impersonate-User", "x"), ("Impersonate-Uid", "42"),
                                            ("Impersonate-Extra-Scopes", "s1"), ("Impersonate-Extra-Scopes", "s2")),
                                    OPS, chain.impersonation_refusal)
    assert got.uid == "42"
    assert got.extra == (("scopes", ("s1", "s2")),)
    with pytest.raises(ApiError) as e:
        impersonation.impersonate(headers(("Impersonate-User", "x"), ("Impersonate-Extra-Other", "v")), OPS,
                                  chain.impersonation_refusal)
    assert e.value.code == 403 and 'cannot impersonate resource "userextras/other" in API group ' \
                                   '"authentication.k8s.io"' in e.value.message


def test_resource_names_limit_whom(chain: AuthorizerChain) -> None:
    assert impersonation.impersonate(headers(("Impersonate-User", "alice")), HELPER,
                                     chain.impersonation_refusal).name == "alice"
    with pytest.raises(ApiError) as e:
        impersonation.impersonate(headers(("Impersonate-User", "bob")), HELPER, chain.impersonation_refusal)
    assert e.value.message == ('users "bob" is forbidden: User "helper" cannot impersonate resource "users" in API '
                               'group "" at the cluster scope')
    with pytest.raises(ApiError) as e:
        impersonation.impersonate(headers(("Impersonate-User", "alice"), ("Impersonate-Group", "system:masters")),
                                  HELPER, chain.impersonation_refusal)
    assert e.value.message.startswith('groups "system:masters" is forbidden')


def test_groups_without_user_is_400(chain: AuthorizerChain) -> None:
    with pytest.raises(ApiError) as e:
        impersonation.impersonate(headers(("Impersonate-Group", "dev")), OPS, chain.impersonation_refusal)
    assert e.value.code == 400 and "without impersonating a user" in e.value.message


def test_nothing_asked_is_the_caller(chain: AuthorizerChain) -> None:
    assert impersonation.impersonate(headers(), HELPER, chain.impersonation_refusal) is HELPER


@pytest.mark.parametrize(("names", "asked"), [
    ((), False),
    (("Authorization", "Content-Type", "Accept"), False),
    (("Impersonate-User",), True),
    (("impersonate-group",), True),
    (("IMPERSONATE-UID",), True),
    (("Impersonate-Extra-Scopes",), True),
    (("Impersonate-Extra-",), True),
    (("Impersonate-Someone",), False),  # not one of upstream's headers
    (("Impersonate",), False),
    (("X-Impersonate-User",), False),
])
def test_which_headers_ask_for_impersonation(names: tuple[str, ...], asked: bool) -> None:
    assert impersonation.requested(headers(*((n, "x") for n in names))) is asked
