"""Admission plugins scoped to some kinds (`Plugin.kinds`) are not run for the others (`Strategies.admission_for`),
which is only right when their hooks do nothing for the others: checked here on the real plugins, for every
built-in kind outside each scope and every operation, as a node, an ordinary user and no user at all."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lite.kinds import KindRegistry
from lite.server.admission import AdmissionPlugins, build_admission
from lite.server.admission.plugins import ORDER
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.api.strategies.base import Admission, Strategies
from lite.server.authz.chain import AuthorizerChain
from lite.server.authz.index import PolicyIndex
from lite.server.requestuser import CURRENT_USER, UserInfo
from lite.server.store import Store


def test_admission_for_keeps_order_and_scopes() -> None:
    s = Strategies()
    calls: list[str] = []

    def hook(name: str) -> Any:
        async def h(_: Admission) -> None:
            calls.append(name)
        h.__name__ = name
        return h

    s.add_admission(hook("any1"))
    s.add_admission(hook("pods"), frozenset({"Pod"}))
    s.add_admission(hook("svc"), frozenset({"Service", "Pod"}))
    assert [h.__name__ for h in s.admission_for("Pod")] == ["any1", "pods", "svc"]
    assert [h.__name__ for h in s.admission_for("ConfigMap")] == ["any1"]
    s.add_admission(hook("any2"))  # a hook added later is seen by kinds already asked for
    assert [h.__name__ for h in s.admission_for("ConfigMap")] == ["any1", "any2"]
    assert [h.__name__ for h in s.admission_for("Service")] == ["any1", "svc", "any2"]


@pytest.fixture
async def plugins(tmp_path: Path) -> AsyncIterator[tuple[AdmissionPlugins, KindRegistry]]:
    store = await Store.open(str(tmp_path / "lite.db"))
    try:
        kinds = KindRegistry()
        resources = Resources(store, kinds, default_strategies())
        built = build_admission(resources, kinds, resources.strategies, authorizer=AuthorizerChain(PolicyIndex()),
                                enable=frozenset(ORDER) - {"ServiceIPAllocation"})
        await resources.start()
        yield built, kinds
    finally:
        await store.close()


USERS = [None, UserInfo("system:node:n1", ("system:nodes", "system:authenticated")),
         UserInfo("alice", ("system:authenticated",))]


async def test_scoped_hooks_do_nothing_for_other_kinds(plugins: tuple[AdmissionPlugins, KindRegistry]) -> None:
    built, kinds = plugins
    scoped = [p for p in built.plugins if p.kinds is not None]
    assert {p.name for p in scoped} >= {"ServiceAccount", "Priority", "RuntimeClass", "NodeRestriction",
                                        "DefaultStorageClass", "CertificateSubjectRestriction",
                                        "DefaultIngressClass", "RBACEscalation"}
    body: dict[str, Any] = {"metadata": {"name": "x", "namespace": "default"},
                            "spec": {"containers": [{"name": "c", "image": "i"}], "signerName":
                                     "kubernetes.io/kube-apiserver-client"},
                            "rules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                            "roleRef": {"kind": "ClusterRole", "name": "cluster-admin", "apiGroup": ""}}
    for user in USERS:
        token = CURRENT_USER.set(user)
        try:
            for p in scoped:
                assert p.kinds is not None
                for kind in kinds:
                    if kind.gk in p.kinds or kind.virtual:
                        continue
                    for op in ("CREATE", "UPDATE", "DELETE"):
                        obj = copy.deepcopy(body) if op != "DELETE" else None
                        old = copy.deepcopy(body) if op != "CREATE" else None
                        review = Admission(op, kind, "default" if kind.namespaced else "", "x", obj, old)
                        for hook in (p.mutate, p.validate):
                            if hook is not None:
                                await hook(review)  # raises nothing
                        assert obj == (body if op != "DELETE" else None), (p.name, kind.gk, op)
                        assert not review.undo, (p.name, kind.gk, op)
        finally:
            CURRENT_USER.reset(token)
