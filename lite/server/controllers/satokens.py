"""Tokens controller: fills `kubernetes.io/service-account-token` Secrets with a legacy token (upstream
`pkg/controller/serviceaccount` TokensController, for the Secrets users still create by hand since 1.24).

reconcile(namespace/secret): a Secret of that type naming a ServiceAccount (annotation
`kubernetes.io/service-account.name`) gets `data.token` (a non-expiring JWT naming the ServiceAccount and the
Secret, made by `make_token`), `data["ca.crt"]`, `data.namespace` and the `kubernetes.io/service-account.uid`
annotation. A Secret whose ServiceAccount is gone, or was recreated (uid annotation differs), is deleted,
as upstream does. Handlers: such a Secret added or changed → its key; a ServiceAccount deleted → its Secrets.

Invariants: a Secret already holding all three keys for the current ServiceAccount uid is left alone (a token
once issued is never rotated, as upstream); the API decides validity (`lite.server.authn` checks the Secret
still holds exactly that token).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import SharedInformers
from lite.objects import deep_copy, is_deleting, name_of, namespace_of
from lite.server.controllers.runtime import Controller, builtin

Obj = dict[str, Any]
SA_TOKEN_TYPE = "kubernetes.io/service-account-token"
NAME_KEY = "kubernetes.io/service-account.name"
UID_KEY = "kubernetes.io/service-account.uid"
# make_token(namespace, service account name, service account uid, secret name) -> JWT
MakeToken = Callable[[str, str, str, str], str]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def plan(secret: Obj, sa: Obj | None, ca_pem: str, make_token: MakeToken) -> tuple[str, Obj | None]:
    """("delete" | "update" | "", the Secret to write) for one token Secret and its ServiceAccount."""
    meta = secret.get("metadata") or {}
    notes = meta.get("annotations") or {}
    if sa is None:
        return "delete", None
    sa_uid = str((sa.get("metadata") or {}).get("uid", ""))
    if notes.get(UID_KEY) and notes[UID_KEY] != sa_uid:
        return "delete", None
    data = secret.get("data") or {}
    if notes.get(UID_KEY) == sa_uid and all(data.get(k) for k in ("token", "ca.crt", "namespace")):
        return "", None
    ns = str(meta.get("namespace", ""))
    out = deep_copy(secret)
    out["metadata"].setdefault("annotations", {})[UID_KEY] = sa_uid
    new = out.setdefault("data", {})
    if not new.get("token"):
        new["token"] = _b64(make_token(ns, str(notes.get(NAME_KEY, "")), sa_uid, str(meta.get("name", ""))))
    new["ca.crt"] = _b64(ca_pem)
    new["namespace"] = _b64(ns)
    return "update", out


class TokensController(Controller):
    name: ClassVar[str] = "serviceaccount-token"

    def __init__(self, client: Client, informers: SharedInformers, ca_pem: bytes, make_token: MakeToken,
                 recorder: EventRecorder | None = None) -> None:
        super().__init__(client, informers, recorder)
        self.ca_pem, self.make_token = ca_pem.decode(), make_token
        self.secret_kind = builtin("", "Secret")
        self.sa_kind = builtin("", "ServiceAccount")
        self.secrets = self.informer(self.secret_kind, primary=True)
        self.accounts = self.informer(self.sa_kind)
        self.secrets.add_handlers(on_add=self._secret, on_update=lambda old, new: self._secret(new))
        self.accounts.add_handlers(on_delete=self._account_gone)

    def initial_keys(self) -> list[str]:
        return [f"{namespace_of(s)}/{name_of(s)}" for s in self.secrets.list() if s.get("type") == SA_TOKEN_TYPE]

    def _secret(self, secret: Obj) -> None:
        if secret.get("type") == SA_TOKEN_TYPE:
            self.enqueue(secret)

    def _account_gone(self, sa: Obj) -> None:
        for s in self.secrets.list():
            if (s.get("type") == SA_TOKEN_TYPE and namespace_of(s) == namespace_of(sa)
                    and ((s.get("metadata") or {}).get("annotations") or {}).get(NAME_KEY) == name_of(sa)):
                self.enqueue(s)

    async def reconcile(self, key: str) -> float | None:
        secret = self.secrets.get(key)
        if secret is None or secret.get("type") != SA_TOKEN_TYPE or is_deleting(secret):
            return None
        ns, name = namespace_of(secret), name_of(secret)
        sa_name = ((secret.get("metadata") or {}).get("annotations") or {}).get(NAME_KEY)
        if not sa_name:
            return None
        sa = self.accounts.get(f"{ns}/{sa_name}")
        if sa is None:  # the cache may be behind a create: ask the API before deleting anything
            try:
                sa = await self.client.get(self.sa_kind, ns, str(sa_name))
            except ApiError as e:
                if e.code != 404:
                    raise
        action, want = plan(secret, sa, self.ca_pem, self.make_token)
        try:
            if action == "delete":
                await self.client.delete(self.secret_kind, ns, name)
            elif want is not None:
                await self.client.update(self.secret_kind, ns, name, want)
        except ApiError as e:
            if e.code == 409:
                return 0.2
            if e.code != 404:
                raise
        return None
