"""Admission webhooks: the MutatingAdmissionWebhook and ValidatingAdmissionWebhook plugins of kube-apiserver.

`WebhookAdmission` keeps both configuration kinds in informers (the set of webhooks is read from memory,
never from the store per request) and offers two admission hooks:

- `mutate`: every matching mutating webhook in order (configurations by name, then as listed), one at a
  time; a JSONPatch answer is applied (lite's RFC 6902) to the object being admitted. Webhooks with
  `reinvocationPolicy: IfNeeded` are called once more when a later webhook changed the object. If the
  object changed, ObjectMeta and the kind's strategy validation run again on it (422 as for a body). A patch
  may not change what names the object (apiVersion, kind, metadata name/namespace/uid/resourceVersion;
  400): the registry already chose the stored key from them.
- `validate`: every matching validating webhook, in parallel; the first refusal (in webhook order) wins.
Each webhook sees the request in the version its rules matched (`equivalent.py`): for a kind with views
(HPAs, Events) or a CRD's versions (through its conversion webhook, if it has one) the object is converted to that
version, and a
mutating webhook's patch, applied there, is converted back.

A call is an AdmissionReview v1 POST over HTTPS to `clientConfig.url`, or to `clientConfig.service` resolved
to a ready endpoint of the Service (as the aggregator resolves APIServices; the Service's clusterIP when it
has no endpoints), checked against `caBundle` (system trust without one) with the name the URL carries or
`<service>.<namespace>.svc`. A call that fails (connection, timeout after `timeoutSeconds`, non-200, a
malformed answer) fails the request with upstream's 500 `failed calling webhook` under failurePolicy Fail
and is logged and skipped under Ignore. A dry-run request refuses webhooks whose sideEffects are not None
or NoneOnDryRun (400, as upstream). Warnings from answers become `Warning` headers of the API response.

Invariants:
- Requests on admissionregistration.k8s.io objects are never sent to webhooks (so a broken webhook can
  always be removed), as upstream.
- No write is admitted against a half-loaded webhook set: until an informer has listed, the hooks read the
  configurations from the registry itself.
- The HTTP session and TLS contexts belong to the instance and are closed when `run` ends.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import ssl
import uuid
from contextlib import suppress
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from lite import errors
from lite.client import Client
from lite.errors import ApiError
from lite.informer import Informer
from lite.kinds import Kind, KindRegistry
from lite.objects import deep_copy
from lite.patch import json_equal
from lite.patch.jsonpatch import json_patch
from lite.records import dataclass
from lite.selectors import LabelSelector
from lite.server.admission import callerrors, equivalent, matching, review, versioned
from lite.server.admission.matching import Attributes
from lite.server.admission.namespaces import NamespaceLabels
from lite.server.aggregator.resolve import Backend, backend
from lite.server.api.admissionwarnings import add_warning
from lite.server.api.conversion import Converter
from lite.server.api.strategies import Admission, Strategies, crschema
from lite.server.requestuser import current_user
from lite.validation import validate_object_meta

log = logging.getLogger("lite.admission")
Obj = dict[str, Any]
GROUP = "admissionregistration.k8s.io"


class CallError(Exception):
    """A webhook could not be called or did not answer usably; the text is upstream-like detail."""


@dataclass(frozen=True)
class Target:
    url: str  # what is dialled (a Service's endpoint)
    server_name: str | None
    ca_pem: bytes
    shown: str = ""  # what errors name, as upstream: the configured URL or https://<svc>.<ns>.svc:<port><path>


class WebhookAdmission:
    """See the module docstring. `client` is the in-process registry."""

    def __init__(self, client: Client, kinds: KindRegistry, strategies: Strategies,
                 namespaces: NamespaceLabels, converter: Converter | None = None) -> None:
        """`converter`: the API server's CRD conversion webhooks, for custom objects shown in another version."""
        self.client = client
        self.converter = converter
        self.strategies = strategies
        self.namespaces = namespaces
        self.validating = Informer(client, _kind(kinds, "validatingwebhookconfigurations"))
        self.mutating = Informer(client, _kind(kinds, "mutatingwebhookconfigurations"))
        self.svc_kind = _core(kinds, "services")
        self.ep_kind = _core(kinds, "endpoints")
        self._session: aiohttp.ClientSession | None = None
        self._tls: dict[bytes, ssl.SSLContext] = {}
        self._selectors: dict[bytes, LabelSelector | None] = {}
        self.kinds = kinds
        self.families = equivalent.families(kinds)

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self.validating.run())
                tg.create_task(self.mutating.run())
                tg.create_task(self.namespaces.run())
        finally:
            if self._session is not None:
                await self._session.close()
                self._session = None

    # ---- the hooks ---------------------------------------------------------------------------------

    async def mutate(self, adm: Admission) -> None:
        if adm.kind.group == GROUP or self._none(self.mutating):
            return
        hooks = matching.ordered_webhooks(await self._configs(self.mutating))
        if not hooks:
            return
        a = attributes(adm)
        labels = _Lazy(self.namespaces, a.namespace)
        family = equivalent.family_of(self.families, self.kinds, adm.request_kind)
        chosen = [(wh, k) for _, wh in hooks if (k := await self._matches(wh, a, adm, labels, family)) is not None]
        if not chosen:
            return
        before = deep_copy(adm.obj) if adm.obj is not None else None
        reinvoke: list[tuple[Obj, Kind]] = []
        for i, (wh, k) in enumerate(chosen):
            if await self._mutate_one(wh, a, adm, k):
                reinvoke += [c for c in chosen[:i] if c[0].get("reinvocationPolicy") == "IfNeeded"
                             and c not in reinvoke]
        for wh, k in reinvoke:
            await self._mutate_one(wh, a, adm, k)
        if adm.obj is not None and before is not None and not json_equal(adm.obj, before) \
                and adm.operation != "CONNECT":
            self._revalidate(adm)

    async def validate(self, adm: Admission) -> None:
        if adm.kind.group == GROUP or self._none(self.validating):
            return
        hooks = matching.ordered_webhooks(await self._configs(self.validating))
        if not hooks:
            return
        a = attributes(adm)
        labels = _Lazy(self.namespaces, a.namespace)
        family = equivalent.family_of(self.families, self.kinds, adm.request_kind)
        chosen = [(wh, k) for _, wh in hooks if (k := await self._matches(wh, a, adm, labels, family)) is not None]
        results = await asyncio.gather(*(self._call(wh, a, adm, k) for wh, k in chosen), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    async def connect(self, adm: Admission) -> None:
        """CONNECT (exec, attach, portforward, proxy): the matching mutating, then validating webhooks, as
        upstream's connect handler admits it; `adm.obj` is the request's *Options object (PodExecOptions...)."""
        await self.mutate(adm)
        await self.validate(adm)

    @staticmethod
    def _none(informer: Informer) -> bool:
        """No configuration at all, known from the informer's cache (the usual case: nothing to match, no list)."""
        return informer.has_synced and not len(informer)

    async def _configs(self, informer: Informer) -> list[Obj]:
        """The configurations from the informer's cache; until its first list (writes made while the server
        starts, before the informers run) straight from the registry."""
        if informer.has_synced:
            return informer.list()
        listed = await self.client.list(informer.kind)
        return [o for o in listed.get("items") or [] if isinstance(o, dict)]

    # ---- one webhook -------------------------------------------------------------------------------

    async def _mutate_one(self, wh: Obj, a: Attributes, adm: Admission, seen: Kind) -> bool:
        """Call one mutating webhook (which sees the request in `seen`'s version); True when its patch changed
        the object. The patch applies to the object in that version, which is then converted back."""
        if adm.obj is None:
            await self._call(wh, a, adm, seen)
            return False
        shown = await versioned.present(self.converter, adm.kind, seen, adm.obj)
        assert shown is not None
        verdict = await self._call(wh, a, adm, seen, shown)
        if verdict is None or not verdict.patch:
            return False
        name = str(wh.get("name", ""))
        try:
            patched = json_patch(deep_copy(shown), verdict.patch)
        except ApiError as e:
            raise review.call_failed(name, f"JSON patch could not be applied: {e.message}") from e
        if not isinstance(patched, dict) or json_equal(patched, shown):
            return False
        changed = review.identity_changes(shown, patched)
        if changed:
            raise errors.bad_request(f'admission webhook "{name}" may not change {", ".join(changed)} of the object')
        patched = await versioned.take_back(self.converter, adm.kind, seen, patched)
        adm.obj.clear()
        adm.obj.update(patched)
        return True

    async def _call(self, wh: Obj, a: Attributes, adm: Admission, seen: Kind,
                    shown: Obj | None = None) -> review.Verdict | None:
        """POST the review of the request as seen in `seen`'s version (`shown`: the object already converted
        to it); the verdict when allowed, None when a failure was ignored; raises on refusal."""
        name = str(wh.get("name", ""))
        if adm.dry_run and wh.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise errors.bad_request(f'admission webhook "{name}" does not support dry run')
        uid = str(uuid.uuid4())
        user = current_user()
        info = review.user_info(user.name, user.groups, user.uid) if user is not None \
            else review.user_info("system:apiserver", ("system:masters",), "")
        # a CONNECT's review is of its options object (kind PodExecOptions, ...), as upstream's
        kind = str((adm.obj or {}).get("kind") or "") if adm.operation == "CONNECT" else seen.kind
        obj = shown if shown is not None else await versioned.present(self.converter, adm.kind, seen, adm.obj)
        old = await versioned.present(self.converter, adm.kind, seen, adm.old)
        body = review.review_request(uid, equivalent.seen_as(a, seen), kind, obj, old, info, adm.dry_run,
                                     requested=None if adm.operation == "CONNECT" else (a, adm.request_kind.kind))
        try:
            raw = await self._post(wh, body)
            verdict = review.read_response(raw, uid)
        except (CallError, review.BadResponse) as e:
            if wh.get("failurePolicy") == "Ignore":
                log.warning("failed calling webhook %s, failing open: %s", name, e)
                return None
            raise review.call_failed(name, str(e)) from e
        for w in verdict.warnings:
            add_warning(w)
        if not verdict.allowed:
            raise review.denied(name, verdict.status)
        return verdict

    async def _post(self, wh: Obj, body: Obj) -> bytes:
        timeout = wh.get("timeoutSeconds") or 10
        target = await self._target(wh, timeout)
        try:
            tls = self._tls_for(target.ca_pem)
        except (ssl.SSLError, ValueError) as e:
            raise CallError(f"failed to call webhook: invalid caBundle: {e}") from e
        try:
            async with self._client().post(
                    target.url, data=orjson.dumps(body), ssl=tls, server_hostname=target.server_name,
                    headers={"Content-Type": "application/json", "Accept": "application/json"},
                    timeout=aiohttp.ClientTimeout(total=float(timeout))) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise CallError(f"failed to call webhook: {callerrors.status_reason(resp.status, raw)}")
                return raw
        except TimeoutError as e:
            raise CallError(f'failed to call webhook: Post "{target.shown}": context deadline exceeded') from e
        except (aiohttp.ClientError, OSError, ssl.SSLError) as e:
            why = callerrors.reason(e, _authority(target.shown))
            raise CallError(f'failed to call webhook: Post "{target.shown}": {why}') from e

    async def _target(self, wh: Obj, seconds: int) -> Target:
        """Where to send the review. Upstream tells the webhook its deadline in the URL (`?timeout=10s`);
        configurations carry no query."""
        cc = wh.get("clientConfig") or {}
        ca = _ca(cc)
        query = f"timeout={seconds}s"
        if cc.get("url"):
            url = f"{cc['url']}{'&' if '?' in str(cc['url']) else '?'}{query}"
            return Target(url, None, ca, url)
        ref = cc.get("service") or {}
        ns, svc_name = str(ref.get("namespace") or ""), str(ref.get("name") or "")
        path = str(ref.get("path") or "")
        shown = f"https://{svc_name}.{ns}.svc:{ref.get('port') or 443}{path or '/'}?{query}"
        service = await self._get(self.svc_kind, ns, svc_name)
        endpoints = await self._get(self.ep_kind, ns, svc_name)
        found = backend({"spec": {"service": {**ref, "port": ref.get("port") or 443}}}, service, endpoints)
        if isinstance(found, Backend):
            host, port = found.host, found.port
        else:
            cluster_ip = str(((service or {}).get("spec") or {}).get("clusterIP") or "")
            if service is None:
                raise CallError(f'failed to call webhook: Post "{shown}": service "{svc_name}" not found')
            if cluster_ip in ("", "None"):
                raise CallError(f'failed to call webhook: Post "{shown}": no endpoints available for service '
                                f'"{svc_name}"')
            host, port = cluster_ip, int(ref.get("port") or 443)
        dialled = f"[{host}]" if ":" in host else host
        return Target(f"https://{dialled}:{port}{path}?{query}", f"{svc_name}.{ns}.svc", ca, shown)

    async def _get(self, kind: Kind, ns: str, name: str) -> Obj | None:
        try:
            return await self.client.get(kind, ns, name)
        except ApiError as e:
            if e.code == 404:
                return None
            raise

    async def _matches(self, wh: Obj, a: Attributes, adm: Admission, namespace: _Lazy,
                       family: equivalent.Family) -> Kind | None:
        """The kind whose version the webhook sees the request in, or None when it does not match."""
        seen = equivalent.webhook_kind(wh, a, adm.request_kind, family)
        if seen is None:
            return None
        parse = self._parse
        labels = await namespace.get() if matching.needs_namespace_labels(wh, a, parse) else None
        ok = matching.namespace_matches(wh, a, labels, adm.obj, adm.old, parse) and \
            matching.object_matches(wh, adm.obj, adm.old, parse)
        return seen if ok else None

    def _parse(self, d: Any) -> LabelSelector | None:
        """`matching.parse_selector`, remembered by the selector's JSON (configurations change rarely; parsing
        validates every key and value)."""
        if d is None or d == {}:
            return matching.parse_selector(d)
        try:
            key = orjson.dumps(d, option=orjson.OPT_SORT_KEYS)
        except TypeError:
            return None
        if key not in self._selectors:
            if len(self._selectors) >= 1024:  # selectors come from API objects: keep the memo bounded
                self._selectors.clear()
            self._selectors[key] = matching.parse_selector(d)
        return self._selectors[key]

    def _revalidate(self, adm: Admission) -> None:
        """A mutated object is defaulted again (upstream decodes a webhook's result, which runs the defaulting
        functions, and prunes and defaults custom objects by their schema), then validated again."""
        if adm.obj is None:
            return
        strategy = self.strategies.for_kind(adm.kind)
        schema = adm.kind.schema if adm.kind.crd else None
        if schema:
            crschema.prune_and_default(adm.obj, schema)
        strategy.default(adm.obj)
        causes = validate_object_meta(adm.obj.get("metadata"), namespaced=adm.kind.namespaced,
                                      name_fn=strategy.name_fn)
        causes += strategy.validate(adm.obj) + (crschema.validate(adm.obj, schema) if schema else [])
        if causes:
            raise errors.invalid(adm.kind.kind, adm.name, causes, adm.kind.group)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    def _tls_for(self, ca_pem: bytes) -> ssl.SSLContext:
        ctx = self._tls.get(ca_pem)
        if ctx is None:
            if len(self._tls) > 64:  # caBundles come from API objects: keep the cache bounded
                self._tls.clear()
            ctx = ssl.create_default_context(cadata=ca_pem.decode("latin-1") if ca_pem else None)
            self._tls[ca_pem] = ctx
        return ctx


class _Lazy:
    """The request namespace's labels, looked up at most once per admission."""

    def __init__(self, namespaces: NamespaceLabels, name: str) -> None:
        self.namespaces, self.name = namespaces, name
        self.done = False
        self.labels: dict[str, Any] | None = None

    async def get(self) -> dict[str, Any]:
        if not self.done:
            self.labels, self.done = await self.namespaces.get(self.name), True
        return self.labels or {}


def attributes(adm: Admission) -> Attributes:
    """The request as the client made it (through a view: in the view's group and version)."""
    k = adm.request_kind
    return Attributes(adm.operation, k.group, k.version, k.plural, adm.subresource, k.namespaced,
                      adm.namespace if k.namespaced else "", adm.name)


def _authority(url: str) -> str:
    """host:port of a URL (443 when it names none), for the `dial tcp <addr>` of an error."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port or 443
    except ValueError:
        port = 443
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _ca(cc: Obj) -> bytes:
    raw = cc.get("caBundle")
    if not raw:
        return b""
    with suppress(binascii.Error, ValueError):
        return base64.b64decode(str(raw), validate=True)
    return b""


def _kind(kinds: KindRegistry, plural: str) -> Kind:
    k = kinds.by_resource(GROUP, "v1", plural)
    if k is None:
        raise RuntimeError(f"{plural}.{GROUP} is not registered")
    return k


def _core(kinds: KindRegistry, plural: str) -> Kind:
    k = kinds.by_resource("", "v1", plural)
    if k is None:
        raise RuntimeError(f"{plural} is not registered")
    return k
