"""Shared state and small helpers of the generic registry (`Resources` is built on this class).

Role: store keys, reading one object, decoding store bytes, strategy lookup, admission, and the final
removal of an object (used both by DELETE and by an update that removes the last finalizer).

Invariants:
- Store keys are `"{group or 'core'}/{plural}/{namespace}/{name}"` (namespaced) or
  `"{group or 'core'}/{plural}/{name}"`; prefixes end with `/` (docs/internals.md).
- Objects handed out are fresh dicts decoded from the store's bytes (or the dict just written); they are
  never kept here, so callers may do what they like with them.
- Custom objects are stored with their storage version's apiVersion; `decode` presents them in the
  version asked for (conversion strategy None).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from types import TracebackType
from typing import TYPE_CHECKING, Any

import orjson

from lite import errors
from lite.errors import ApiError, Cause
from lite.kinds import Kind, KindRegistry
from lite.patch import ListRule, Schema, schema_for
from lite.patch.schema import Path
from lite.server.api.conversion import Converter
from lite.server.api.specmemo import CreateDefaults, CreateFields, SpecMemo
from lite.server.api.strategies import Admission, Strategies, Strategy, crschema
from lite.server.api.uids import Uids
from lite.server.store import KeyNotFound, RevMismatch, StoreLike
from lite.server.store.packing import unpack

if TYPE_CHECKING:
    from lite.server.api.strategies import crcel

log = logging.getLogger(__name__)
Obj = dict[str, Any]
EvictionCheck = Callable[[Obj, Obj], Awaitable[None]]
CRD_GK = "CustomResourceDefinition.apiextensions.k8s.io"
# Subresources whose writes replace only the status (the strategy's `prepare_subresource` narrows further:
# a CertificateSigningRequest's `approval` keeps all but status.conditions).
STATUS_LIKE = ("status", "approval")


class Written:
    """The store's JSON of the object a write just returned, for the HTTP layer to answer with instead of
    encoding the object again: a request that wants it puts a fresh `Written` in `WRITTEN` before the write (the
    HTTP layer's create and update); the write fills it (`note_written`); `written_encoded` takes it once, for
    that very object only. Built-in kinds only (custom objects are stored in their storage version)."""

    __slots__ = ("obj", "raw")

    def __init__(self) -> None:
        self.obj: Obj | None = None
        self.raw: bytes | None = None

    def take(self, obj: Obj) -> bytes | None:
        """The bytes written for `obj` (this object, not an equal one), once; None otherwise."""
        raw = self.raw if self.obj is obj else None
        self.obj = self.raw = None
        return raw


# The current request's `Written` (None outside a request that asked for one: in-process writers keep nothing).
WRITTEN: ContextVar[Written | None] = ContextVar("lite_written", default=None)


def note_written(kind: Kind, obj: Obj, raw: bytes) -> None:
    """`obj` was just written as `raw` (its exact JSON, resourceVersion included): kept for the request's answer
    when it asked for it (see `Written`)."""
    slot = WRITTEN.get()
    if slot is not None and not (kind.crd or kind.storage or kind.converts_by_webhook):
        slot.obj, slot.raw = obj, raw


class RetryWrite(Exception):
    """Internal: the object changed under a read-modify-write without a client precondition; redo it."""


class RegistryBase:
    """State shared by the registry's parts; see `lite.server.api.resources.Resources`."""

    def __init__(self, store: StoreLike, kinds: KindRegistry, strategies: Strategies, *,
                 bookmark_interval: float = 60.0, eviction_check: EvictionCheck | None = None) -> None:
        self.store = store
        self.kinds = kinds
        self.strategies = strategies
        self.bookmark_interval = bookmark_interval
        self.eviction_check = eviction_check
        # Signs TokenRequests (`serviceaccounts/<sa>/token`): (namespace, service account, validated spec) ->
        # (token, expiry in epoch seconds). None: random opaque tokens that nothing accepts.
        self.token_issuer: Callable[[str, Obj, Obj], tuple[str, int]] | None = None
        # Stored objects that every pod create reads (PriorityClasses, its ServiceAccount), decoded once per
        # revision: a revision names one immutable value, so an entry can never go stale. Read-only for its users.
        self.decoded_by_rev: dict[int, Obj] = {}
        # (the store's stamp of the PriorityClasses, the global default among them) (`default_priority_class`)
        self._default_class: tuple[object, Obj | None] | None = None
        self._stamp: tuple[int, str] = (-1, "")
        self._schemas: dict[tuple[str, str], MemoSchema] = {}
        self.spec_memo = SpecMemo()  # validation and FieldsV1 of recently created specs (`specmemo`)
        self.create_defaults = CreateDefaults()  # create defaulting of recently created specs (`specmemo`)
        self.create_fields = CreateFields()  # whole FieldsV1 of recent creates with a manager (`specmemo`)
        self.uids = Uids()  # metadata.uid of creates (`writing.Uids`)
        self.converter = Converter(self._lookup_core)  # CRD conversion webhooks
        # Compiled x-kubernetes-validations per served CRD version: (the Kind's schema dict, its rules). Kinds
        # are rebuilt on every write of their CRD, so the identity of the schema names one CRD revision.
        self._cel_rules: dict[tuple[str, str, str], tuple[Obj, crcel.Node | None]] = {}
        self._cel_env: Any = None

    def _lookup_core(self, plural: str, namespace: str, name: str) -> Obj | None:
        got = self.store.get(f"core/{plural}/{namespace}/{name}")
        return orjson.loads(got[1]) if got is not None else None

    def cel_rules(self, kind: Kind) -> crcel.Node | None:
        """The kind's CEL validation rules, compiled once per CRD revision (None: the schema has none)."""
        key = (kind.group, kind.version, kind.plural)
        got = self._cel_rules.get(key)
        if got is not None and got[0] is kind.schema:
            return got[1]
        node = None
        if crschema.has_rules(kind.schema):  # the CEL runtime is loaded only for kinds with rules
            from lite.server.api.strategies import crcel

            if self._cel_env is None:
                self._cel_env = crcel.environment()
            node = crcel.build(kind.schema, self._cel_env)
        self._cel_rules[key] = (kind.schema, node)
        return node

    def schema_causes(self, kind: Kind, obj: Obj, old: Obj | None) -> list[Cause]:
        """A custom object against its CRD's structural schema, then its CEL rules (skipped, with upstream's
        cause, when the object has type errors the rules could not sensibly see)."""
        if not kind.crd or not kind.schema:
            return []
        causes = crschema.validate(obj, kind.schema)
        rules = self.cel_rules(kind)
        if rules is None:
            return causes
        if any(c.reason == "FieldValueNotSupported" or "in body must be of type" in c.message for c in causes):
            return [*causes, errors.field_invalid("<nil>", "null", "some validation rules were not checked because "
                                                  "the object was invalid; correct the existing errors to complete "
                                                  "validation")]
        return causes + rules.validate(obj, old)

    def schema(self, kind: Kind) -> MemoSchema:
        """`lite.patch.schema_for` of the kind, built once (it is immutable, and every patch needs it)."""
        key = (kind.kind, kind.group)
        schema = self._schemas.get(key)
        if schema is None:
            base = schema_for(kind.kind, kind.group)
            schema = self._schemas[key] = MemoSchema(base.rules, base.atomic_maps)
        return schema

    def decoded_once(self, rev: int, raw: bytes) -> Obj:
        """The decoded value of revision `rev` (bytes `raw`, plain or as the store packs them: unpacked only
        when not decoded before), shared: callers must not mutate it."""
        obj = self.decoded_by_rev.get(rev)
        if obj is None:
            if len(self.decoded_by_rev) >= 256:  # classes are few; a bound keeps churn from growing it
                self.decoded_by_rev.clear()
            obj = self.decoded_by_rev[rev] = orjson.loads(unpack(raw))
        return obj

    def now_rfc3339(self) -> str:
        """`lite.objects.rfc3339()` of the current second, formatted once per second."""
        sec = int(time.time())
        if sec != self._stamp[0]:
            self._stamp = (sec, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(sec)))
        return self._stamp[1]

    # ---- keys --------------------------------------------------------------------------------------

    @staticmethod
    def scoped(kind: Kind, namespace: str) -> str:
        return namespace if kind.namespaced else ""

    @staticmethod
    def key(kind: Kind, namespace: str, name: str) -> str:
        group = kind.group or "core"
        if kind.namespaced:
            return f"{group}/{kind.plural}/{namespace}/{name}"
        return f"{group}/{kind.plural}/{name}"

    @staticmethod
    def prefix(kind: Kind, namespace: str = "") -> str:
        group = kind.group or "core"
        if kind.namespaced and namespace:
            return f"{group}/{kind.plural}/{namespace}/"
        return f"{group}/{kind.plural}/"

    # ---- reading -----------------------------------------------------------------------------------

    def decode(self, kind: Kind, raw: bytes) -> Obj:
        """A stored object as the kind presents it. Custom objects are read as upstream's storage decoder reads
        them: in the kind's version, pruned and defaulted by its schema (a `default` added to a CRD after an
        object was written shows on every read, without a write-back)."""
        obj: Obj = orjson.loads(raw)
        if kind.crd and not kind.converts_by_webhook:  # those keep their stored version until `present`
            if obj.get("apiVersion") != kind.api_version:
                obj["apiVersion"] = kind.api_version
            if kind.schema:
                crschema.prune_and_default(obj, kind.schema)
        return obj

    async def present(self, kind: Kind, objs: list[Obj]) -> list[Obj]:
        """Decoded objects of a kind converted by webhook, in the kind's version (one review for all that
        need it), pruned and defaulted by its schema; other kinds' objects are returned as they are."""
        if not kind.converts_by_webhook or not objs:
            return objs
        need = [i for i, o in enumerate(objs) if o.get("apiVersion") != kind.api_version]
        if need:
            done = await self.converter.convert(kind, [objs[i] for i in need])
            for i, obj in zip(need, done, strict=True):
                objs[i] = obj
        if kind.schema:
            for obj in objs:
                crschema.prune_and_default(obj, kind.schema)
        return objs

    def read(self, kind: Kind, namespace: str, name: str) -> tuple[int, Obj]:
        """(mod revision, object) or 404 NotFound."""
        got = self.store.get(self.key(kind, self.scoped(kind, namespace), name))
        if got is None:
            raise errors.not_found(kind.plural, name, kind.group)
        return got[0], self.decode(kind, got[1])

    def strategy(self, kind: Kind) -> Strategy:
        return self.strategies.for_kind(kind)

    def check_stored(self, kind: Kind) -> None:
        if kind.virtual:
            raise errors.method_not_allowed(f"{kind.resource} is served by a metrics provider, not stored")

    def core_kind(self, plural: str, group: str = "", version: str = "v1") -> Kind:
        k = self.kinds.by_resource(group, version, plural)
        if k is None:
            raise errors.internal(f"kind {plural}.{group} is not registered")
        return k

    # ---- admission and removal ---------------------------------------------------------------------

    async def admit(self, review: Admission) -> None:
        """Run every hook; if one refuses, what the earlier ones took is given back (`review.undo`)."""
        try:
            for hook in self.strategies.admission_for(review.kind.gk):
                await hook(review)
        except Exception:
            await review.rollback()
            raise

    async def admit_connect(self, kind: Kind, namespace: str, name: str, subresource: str, options: Obj) -> None:
        """Admission of a CONNECT (exec, attach, portforward, proxy) before any stream is opened: `options` is
        the request's *Options object; a hook refuses by raising."""
        review = Admission("CONNECT", kind, self.scoped(kind, namespace), name, options, None, subresource)
        for hook in self.strategies.connect:
            await hook(review)

    async def remove(self, kind: Kind, key: str, final: Obj, rev: int, dry_run: bool) -> Obj:
        """Delete the stored object at `rev`, recording `final` as its last state; returns it with the new RV."""
        if dry_run:
            return final
        try:
            new_rev, _ = await self.store.delete(key, rev, final)
        except RevMismatch as e:
            raise RetryWrite from e
        except KeyNotFound as e:
            raise errors.not_found(kind.plural, str((final.get("metadata") or {}).get("name", "")),
                                   kind.group) from e
        final.setdefault("metadata", {})["resourceVersion"] = str(new_rev)
        await self.after_delete(kind, final)
        for hook in self.strategies.removed:
            try:
                await hook(kind, final)
            except Exception:
                log.exception("removed-object hook failed for %s %s", kind.resource, key)
        return final

    # ---- hooks the CRD part overrides --------------------------------------------------------------

    async def after_write(self, kind: Kind, obj: Obj, old: Obj | None) -> None:
        """Called after a create or update was persisted."""

    async def after_delete(self, kind: Kind, obj: Obj) -> None:
        """Called after an object was removed from the store."""


class MemoSchema(Schema):
    """A `Schema` that remembers `list_rule` per path: the lookup scans every rule pattern, once for each
    list a patch touches, and a kind's rules never change."""

    def __init__(self, rules: Mapping[Path, ListRule], atomic_maps: tuple[Path, ...]) -> None:
        super().__init__(rules, atomic_maps)
        object.__setattr__(self, "_rule_of", {})  # the dataclass is frozen

    def list_rule(self, path: Path) -> ListRule:
        memo: dict[Path, ListRule] = self.__dict__["_rule_of"]
        rule = memo.get(path)
        if rule is None:
            if len(memo) >= 4096:  # paths come from request bodies: keep the memo bounded
                memo.clear()
            rule = memo[path] = super().list_rule(path)
        return rule


class _ShapeErrors:
    """The context manager of `shape_errors` (a plain class: every write enters one, and a generator-based
    context manager costs several times more per use)."""

    __slots__ = ("kind",)

    def __init__(self, kind: Kind) -> None:
        self.kind = kind

    def __enter__(self) -> None:
        return None

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if isinstance(e, (TypeError, AttributeError, ValueError)):
            kind = self.kind
            log.info("malformed %s body: %r", kind.kind, e)
            raise errors.bad_request(f'{kind.kind} in version "{kind.version}" cannot be handled as a '
                                     f"{kind.kind}: {e}") from None


def shape_errors(kind: Kind) -> _ShapeErrors:
    """A body whose fields have the wrong JSON types (a number where a string belongs, a string where a list
    belongs) is 400 BadRequest, as upstream's typed decoding answers, instead of crashing a strategy."""
    return _ShapeErrors(kind)


def check_shape(kind: Kind, obj: Obj) -> None:
    """spec and status of built-in kinds are objects; anything else cannot be decoded (400)."""
    if kind.crd:
        return  # the CRD schema decides
    for key in ("spec", "status"):
        value = obj.get(key)
        if value is not None and not isinstance(value, dict):
            raise errors.bad_request(f'{kind.kind} in version "{kind.version}" cannot be handled as a '
                                     f"{kind.kind}: {key} must be an object")


def conflict_error(kind: Kind, name: str) -> ApiError:
    return errors.conflict(kind.plural, name, kind.group)
