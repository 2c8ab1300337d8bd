"""The per-kind strategy record and the registry that holds strategies and admission hooks.

A `Strategy` is a bundle of small pure functions, the equivalent of upstream's RESTCreateStrategy /
RESTUpdateStrategy / RESTDeleteStrategy for one kind. The generic registry (`lite.server.api.resources`)
calls them in a fixed order:

    create:  default -> prepare_create -> validate (+ ObjectMeta) -> admission hooks -> persist
    update:  default -> (status kept) -> prepare_update -> validate + validate_update -> admission -> persist
    status:  default -> prepare_subresource -> validate + validate_subresource -> admission -> persist

Invariants:
- Strategy functions mutate only the object they are given (the new object), never `old`.
- They never do I/O; anything that needs I/O (allocators, quota) is an async admission hook.
- `Strategies` is an instance owned by one server; nothing here is module-level mutable state.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import field
from typing import Any, Literal

from lite.errors import Cause
from lite.kinds import Kind
from lite.records import dataclass
from lite.validation import NameFn, name_is_dns_subdomain

Obj = dict[str, Any]
log = logging.getLogger(__name__)
GcPolicy = Literal["orphan", "background", "unsupported"]


def _noop(obj: Obj) -> None:
    return None


def _noop2(new: Obj, old: Obj) -> None:
    return None


def _ok(obj: Obj) -> list[Cause]:
    return []


def _ok2(new: Obj, old: Obj) -> list[Cause]:
    return []


def _noop3(subresource: str, new: Obj, old: Obj) -> None:
    return None


def _ok3(subresource: str, new: Obj, old: Obj) -> list[Cause]:
    return []


STATUS_METADATA = ("labels", "annotations", "finalizers", "ownerReferences")


@dataclass(frozen=True)
class Strategy:
    """Per-kind behaviour. Every field has a do-nothing default, so a kind names only what it needs."""

    # SetDefaults_*: run on every create and update (upstream defaults on every decode).
    default: Callable[[Obj], None] = _noop
    # PrepareForCreate: status reset, admission-time defaults that apply only on create.
    prepare_create: Callable[[Obj], None] = _noop
    # `default` then `prepare_create` on a create read nothing but `obj["spec"]`, write nothing but `obj["spec"]` and
    # `obj["status"]` (whatever status the body had), and raise nothing but ValueError: the registry then
    # remembers their result per spec (`lite.server.api.specmemo.CreateDefaults`).
    spec_create: bool = False
    # PrepareForUpdate(new, old): e.g. keep fields that only a subresource may change.
    prepare_update: Callable[[Obj, Obj], None] = _noop2
    validate: Callable[[Obj], list[Cause]] = _ok
    # `validate(obj)` reads nothing but `obj["spec"]` (and raises nothing but ValueError): the registry then
    # remembers its causes per spec on create (`lite.server.api.specmemo`), as controllers make many equal specs.
    spec_validation: bool = False
    validate_update: Callable[[Obj, Obj], list[Cause]] = _ok2
    # A status-like subresource write (`status`, `approval`): (subresource, new, old), after the generic
    # rule copied the body's status onto the stored object; narrows what that subresource may change.
    prepare_subresource: Callable[[str, Obj, Obj], None] = _noop3
    validate_subresource: Callable[[str, Obj, Obj], list[Cause]] = _ok3
    name_fn: NameFn = name_is_dns_subdomain
    # Upstream DefaultGarbageCollectionPolicy; "unsupported" = no orphan/foreground finalizers are added.
    gc_policy: GcPolicy = "unsupported"
    # Graceful deletion (pods): (obj, requested grace or None) -> grace period to use (0 = at once).
    graceful: Callable[[Obj, int | None], int] | None = None
    # Upstream Store.ReturnDeletedObject: DELETE answers the object rather than a Status.
    return_deleted_object: bool = False
    # Whether the spec changing bumps metadata.generation also for annotation changes (Deployment).
    generation_on_annotations: bool = False
    # The metadata a write to `status` takes from its body. Upstream's status strategies reset the spec and
    # keep the request's metadata; some keep more of the stored object: Deployment its labels (the controller
    # records its revision annotation through status), Pod its ownerReferences, APIService and custom objects
    # all of their metadata, a CRD all but its finalizers.
    status_metadata: tuple[str, ...] = STATUS_METADATA


@dataclass
class Admission:
    """One request as admission hooks see it. Hooks may mutate `obj` (CREATE/UPDATE) or raise ApiError.

    A hook that takes something for the request (quota admission charging a quota) appends to `undo` what
    gives it back; the registry runs `rollback()` when the request fails after admission (a later hook
    refuses it, the name is taken, the store write fails) — not when it is cancelled, as the write may
    still commit."""

    # CONNECT (exec, attach, portforward, proxy) goes only to the `connect` hooks, with `obj` the request's
    # *Options object (PodExecOptions, ...) and no `old`.
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    kind: Kind
    namespace: str
    name: str
    obj: Obj | None
    old: Obj | None
    subresource: str = ""
    dry_run: bool = False
    undo: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    # The kind the request came through when it is a view of `kind` (autoscaling/v1 HPAs, events.k8s.io
    # Events; `lite.server.api.viewing`); `obj` and `old` are always in `kind`'s (the stored) shape. Hooks that
    # match rules by version (webhooks, policies) match and present the request in this version.
    view: Kind | None = None

    @property
    def request_kind(self) -> Kind:
        """The kind (group, version) the client used."""
        return self.view or self.kind

    async def rollback(self) -> None:
        """Run (and forget) the undo actions, newest first; each is run even if an earlier one fails."""
        while self.undo:
            action = self.undo.pop()
            try:
                await action()
            except Exception:
                log.exception("admission undo failed for %s %s/%s", self.kind.resource, self.namespace, self.name)


AdmissionHook = Callable[[Admission], Awaitable[None]]
# Told after an object left the store for good (DELETE, or the update that removed its last finalizer),
# e.g. so an allocator releases a Service's clusterIP. Not called for dry runs. Must not raise.
RemovedHook = Callable[[Kind, Obj], Awaitable[None]]

_DEFAULT = Strategy()


@dataclass
class Strategies:
    """Strategies by `Kind.gk`, a fallback for custom resources, and the ordered admission hooks."""

    by_gk: dict[str, Strategy] = field(default_factory=dict)
    custom: Strategy = _DEFAULT
    admission: list[AdmissionHook] = field(default_factory=list)
    connect: list[AdmissionHook] = field(default_factory=list)
    removed: list[RemovedHook] = field(default_factory=list)
    # each admission hook's group-kinds (None: every kind), and the hooks per group-kind (made on first use)
    _scopes: list[frozenset[str] | None] = field(default_factory=list)
    _by_gk: dict[str, tuple[AdmissionHook, ...]] = field(default_factory=dict)

    def for_kind(self, kind: Kind) -> Strategy:
        found = self.by_gk.get(kind.gk)
        if found is not None:
            return found
        return self.custom if kind.crd else _DEFAULT

    def register(self, gk: str, strategy: Strategy) -> None:
        self.by_gk[gk] = strategy

    def add_admission(self, hook: AdmissionHook, kinds: frozenset[str] | None = None) -> None:
        """Append a hook; hooks run in the order added, after validation, before the write. `kinds`: the only
        group-kinds it acts on (it is not run for the others)."""
        self.admission.append(hook)
        self._scopes.append(kinds)
        self._by_gk.clear()

    def admission_for(self, gk: str) -> tuple[AdmissionHook, ...]:
        """The admission hooks that act on group-kind `gk`, in order."""
        hooks = self._by_gk.get(gk)
        if hooks is None:
            scopes = self._scopes + [None] * (len(self.admission) - len(self._scopes))  # appended to directly
            hooks = tuple(h for h, k in zip(self.admission, scopes, strict=True) if k is None or gk in k)
            if len(self._by_gk) >= 4096:  # custom kinds come and go: keep the memo bounded
                self._by_gk.clear()
            self._by_gk[gk] = hooks
        return hooks

    def add_connect_admission(self, hook: AdmissionHook) -> None:
        """Append a hook for CONNECT requests (the plugins that handle them: admission webhooks)."""
        self.connect.append(hook)

    def add_removed_hook(self, hook: RemovedHook) -> None:
        self.removed.append(hook)


def ratcheted_causes(validate: Callable[[Obj], list[Cause]], new: Obj, old: Obj | None) -> list[Cause]:
    """`validate(new)`, less the causes `old` already had: an object stored before a rule existed (an older
    lite wrote it) stays updatable — status, labels, finalizer removal — while an update cannot add a new
    problem. A ValueError (an undecodable value, 400) that `old` raises too is ratcheted the same way."""
    try:
        causes = validate(new)
    except ValueError:
        if old is None or _decodes(validate, old):
            raise
        return []
    if not causes or old is None:
        return causes
    try:
        before = set(validate(old))
    except ValueError:
        return causes
    return [c for c in causes if c not in before]


def _decodes(validate: Callable[[Obj], list[Cause]], obj: Obj) -> bool:
    try:
        validate(obj)
    except ValueError:
        return False
    return True
