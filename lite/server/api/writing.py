"""Create and update: the write half of the generic registry.

Create: type meta and system metadata (uid, creationTimestamp, generation, namespace from the request),
generateName, strategy defaulting/preparation/validation, namespace lifecycle (must exist, not Terminating),
admission hooks, then one store create. Update and patch share one read-modify-write loop (`update_loop`,
upstream's GuaranteedUpdate): a client precondition (resourceVersion in the body) gives 409 Conflict on
mismatch; without one, a concurrent change simply re-runs the modification on the fresh object.

Invariants:
- Nothing is written when the update changes nothing (no new resourceVersion, no watch event).
- Only spec changes move metadata.generation (PodTemplate: `template`; custom objects: anything outside metadata
  and status).
- For kinds with a status subresource the main resource ignores status changes, and `status` writes change
  only the status.
- With dry_run everything runs except the store write (generateName included).
- No object over `bodylimits.MAX_OBJECT_BYTES` (1.5 MiB of JSON) is written, whatever produced it: 413
  before admission, dry run or not (an update may still shrink an object stored over it before the cap).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from lite import errors
from lite.errors import ApiError, Cause
from lite.kinds import Kind
from lite.objects import deep_copy
from lite.patch import json_equal, record_update
from lite.patch.ssa import Versions
from lite.server.api import versions
from lite.server.api.bodylimits import MAX_OBJECT_BYTES, check_object_size, object_too_large
from lite.server.api.params import go_quote, parse_uint64, stored_resource_version
from lite.server.api.registry_base import (
    STATUS_LIKE,
    WRITTEN,
    Obj,
    RegistryBase,
    RetryWrite,
    check_shape,
    conflict_error,
    note_written,
)
from lite.server.api.specmemo import BODY_SPEC, Key, SpecMemo, encoded_size, meta_shape
from lite.server.api.strategies import Admission, Strategy, crschema
from lite.server.api.strategies.base import ratcheted_causes
from lite.server.api.uids import random_suffix
from lite.server.store import KeyExists, KeyNotFound, RevMismatch
from lite.validation import validate_object_meta

# Built-in classes upstream creates at start-up (value as upstream).
SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}
_GENERATED_MAX = 58
_NAME_ATTEMPTS = 8
_UPDATE_ATTEMPTS = 20
_TERMINATING = "unable to create new content in namespace {} because it is being terminated"
_PRIORITY_CLASSES = "scheduling.k8s.io/priorityclasses/"

Build = Callable[[Obj], Obj]


def generate_name(base: str) -> str:
    return base[:_GENERATED_MAX] + random_suffix()


def meta_of(obj: Any) -> Obj:
    if not isinstance(obj, dict):
        raise errors.bad_request("the request body must be a JSON object")
    meta = obj.get("metadata")
    if meta is None:
        meta = obj["metadata"] = {}
    if not isinstance(meta, dict):
        raise errors.bad_request("metadata must be an object")
    return meta


def _answer_only() -> bool:
    """True when the object being created goes, once written, only into this request's answer (the HTTP layer's
    create put a fresh `Written` for it): it may then hold values shared with other such objects (read-only
    everywhere: nothing on the write path changes managedFields in place)."""
    slot = WRITTEN.get()
    return slot is not None and slot.obj is None


def same_json(a: Any, b: Any) -> bool:
    """`lite.patch.json_equal`, with two exact shortcuts that run in C: JSON-equal values are always `==`
    (so `!=` means different), and equal orjson encodings mean identical values. Only values that are `==`
    but encode differently (key order, 1 vs 1.0, true vs 1) take the recursive comparison."""
    if a != b:
        return False
    try:
        if orjson.dumps(a) == orjson.dumps(b):
            return True
    except TypeError:  # not JSON-encodable as it is: let json_equal decide
        pass
    return json_equal(a, b)


def spec_changed(kind: Kind, new: Obj, old: Obj, annotations_too: bool) -> bool:
    if kind.crd:
        strip = ("metadata", "status")
        return not same_json({k: v for k, v in new.items() if k not in strip},
                              {k: v for k, v in old.items() if k not in strip})
    if not same_json(new.get("spec"), old.get("spec")):
        return True
    if not same_json(new.get("template"), old.get("template")):  # PodTemplate: its template is its spec
        return True
    if not same_json(new.get("webhooks"), old.get("webhooks")):  # webhook configurations: webhooks are the spec
        return True
    return annotations_too and not same_json((new.get("metadata") or {}).get("annotations"),
                                              (old.get("metadata") or {}).get("annotations"))


class WriteMixin(RegistryBase):
    """create / update (see the module docstring)."""

    # ---- create ------------------------------------------------------------------------------------

    async def create_object(self, kind: Kind, namespace: str, obj: Obj, *, dry_run: bool = False,
                            manager: str = "", view: Kind | None = None) -> Obj:
        """POST of a whole object; `obj` is consumed (mutated and returned). `manager` records an Update
        entry in managedFields (empty: none, as for in-process controllers). `view`: the view kind the request
        came through (admission sees it as `Admission.view`)."""
        self.check_stored(kind)
        meta = meta_of(obj)
        check_shape(kind, obj)
        ns = self.scoped(kind, namespace)
        if kind.namespaced:
            body_ns = meta.get("namespace") or ""
            if ns and body_ns and body_ns != ns:
                raise errors.bad_request("the namespace of the provided object does not match the namespace "
                                         "sent on the request")
            ns = ns or str(body_ns)
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        _clear_resource_version(kind, meta)
        generated = not meta.get("name") and bool(meta.get("generateName"))
        if generated:
            meta["name"] = generate_name(str(meta["generateName"]))
        self._init_system_meta(kind, obj, meta)
        strategy = self.strategy(kind)
        if kind.crd and kind.has_status():
            obj.pop("status", None)  # with a status subresource, create cannot set status (upstream)
        _prune(kind, obj)
        spec_bytes = self._default_for_create(kind, strategy, obj)
        # The spec is final from here on (managedFields touch only metadata): equal specs share their results.
        # (not through a view: the remembered field sets are in the stored version's shape)
        spec_key = None
        if strategy.spec_validation and view is None:
            spec_key = (kind.gk, strategy.validate, spec_bytes) if spec_bytes is not None else \
                SpecMemo.key(kind.gk, strategy.validate, obj.get("spec"))
        known = self.spec_memo.get(spec_key) if spec_key is not None else None
        if manager:
            # the entry's time is the creation time (one clock read per create, formatted once per second)
            now = str(meta.get("creationTimestamp") or self.now_rfc3339())
            # a spec seen with a manager before: the whole FieldsV1 of objects of this metadata field set
            shape = meta_shape(obj) if known is not None and known.fields is not None else None
            fields_key = (spec_key, shape) if spec_key is not None and shape is not None else None
            remembered = self.create_fields.get(fields_key) if fields_key is not None else None
            if remembered is not None:
                obj = self.record_write(kind, None, obj, manager, view=view, now=now,
                                        fields=remembered.shared if _answer_only() else remembered.fresh())
            else:
                spec_fields = known.fields_v1() if known is not None else None
                obj = self.record_write(kind, None, obj, manager, view=view, now=now,
                                        known={"spec": spec_fields} if spec_fields is not None else None)
                if fields_key is not None:
                    entries = obj["metadata"].get("managedFields") or [{}]
                    self.create_fields.put(fields_key, entries[0].get("fieldsV1") or {})
            meta = obj["metadata"]
        name = str(meta.get("name") or "")
        causes = validate_object_meta(meta, namespaced=kind.namespaced, name_fn=strategy.name_fn)
        if known is not None:
            causes += known.causes
            if manager and known.fields is None and spec_key is not None:  # first seen without a manager
                self.spec_memo.put(spec_key, list(known.causes), _spec_fields(obj))
        else:
            spec_causes = strategy.validate(obj)
            causes += spec_causes
            if spec_key is not None:
                self.spec_memo.put(spec_key, spec_causes, _spec_fields(obj) if manager else None)
        causes += self.schema_causes(kind, obj, None)
        if causes:
            raise errors.invalid(kind.kind, name, causes, kind.group)
        if kind.namespaced:
            self._check_namespace(kind, ns, name)
        # the spec's encoding is known (the spec is final, as above): only the rest is encoded to measure it
        size = encoded_size(obj, "spec", spec_bytes) if spec_bytes is not None and view is None else None
        if size is None:
            check_object_size(obj)
        elif size > MAX_OBJECT_BYTES:
            raise object_too_large(size)
        review = Admission("CREATE", kind, ns, name, obj, None, dry_run=dry_run, view=view)
        await self.admit(review)
        try:
            return await self._insert(kind, ns, obj, generated, dry_run)
        except Exception:  # not on cancellation: the queued write may still commit
            await review.rollback()
            raise

    def _default_for_create(self, kind: Kind, strategy: Strategy, obj: Obj) -> bytes | None:
        """`strategy.default` then `prepare_create` on `obj`; for a strategy with `spec_create`, their results are
        remembered per spec (`specmemo.CreateDefaults`) and an equal spec takes them decoded afresh. Returns the
        encoding of the spec they left when it is known (it is the `SpecMemo` key's), else None."""
        key: Key | None = None
        if strategy.spec_create:
            spec = obj.get("spec")
            body = BODY_SPEC.get()
            if body is not None and body[0] is spec and spec and not kind.crd:  # encoded by the body check already
                BODY_SPEC.set(None)
                key = (kind.gk, strategy.default, body[1])
            else:
                key = SpecMemo.key(kind.gk, strategy.default, spec)
        got = self.create_defaults.get(key) if key is not None else None
        if got is not None:
            spec, status = got
            obj["spec"] = orjson.loads(spec)
            if status is None:
                obj.pop("status", None)
            else:
                obj["status"] = orjson.loads(status)
            return spec
        strategy.default(obj)
        strategy.prepare_create(obj)
        if key is None or not isinstance(obj.get("spec"), dict):
            return None
        try:
            spec = orjson.dumps(obj["spec"])
            status = orjson.dumps(obj["status"]) if "status" in obj else None
        except TypeError:  # not JSON-encodable as it is: the shape checks refuse it elsewhere
            return None
        self.create_defaults.put(key, spec, status)
        return spec

    def field_versions(self, kind: Kind) -> Versions | None:
        """The versions `kind`'s objects are served in, as managedFields bookkeeping needs them (each entry is
        judged in its own version, `lite.patch.ssa.Versions`); None for a kind served in one version."""
        if not versions.has_views(kind):
            return None
        stored = self.kinds.by_gvk(kind.storage[0], kind.storage[1], kind.kind) if kind.storage else kind
        if stored is None:
            return None

        def find(api_version: str) -> Kind | None:
            group, _, version = api_version.rpartition("/")
            found = self.kinds.by_gvk(group, version, stored.kind)
            if found is stored or (found is not None and found.storage == (stored.group, stored.version)):
                return found
            return None

        def convert(obj: Obj, frm: str, to: str) -> Obj | None:
            a, b = find(frm), find(to)
            if a is None or b is None:
                return None
            return versions.to_view(b, versions.to_stored(a, obj))

        def schema(api_version: str) -> Any:
            return self.schema(find(api_version) or stored)

        return Versions(convert, schema)

    def record_write(self, kind: Kind, old: Obj | None, new: Obj, manager: str, subresource: str = "",
                     view: Kind | None = None, *, now: str | None = None,
                     known: Mapping[str, dict[str, Any]] | None = None,
                     fields: dict[str, Any] | None = None) -> Obj:
        """`new` with the managedFields entry of `manager`'s write (not an apply) recorded in place: in the
        version the request came through (`view`, else `kind`) and that version's field shape, as upstream keeps
        each entry; the other entries lose, each in its own version, what the write changed. `now`: the entry's
        time (default the current second); `known`: field sets already computed for equal values (a create in
        the stored version only, see `record_update`); `fields`: the whole FieldsV1 of a create, known already (the
        stored version only)."""
        shape = view or kind
        ignore_status = subresource not in STATUS_LIKE
        now = now or self.now_rfc3339()
        if view is None:
            return record_update(old, new, manager=manager, api_version=kind.api_version, now=now,
                                 schema=self.schema(kind), ignore_status=ignore_status, subresource=subresource,
                                 in_place=True, versions=self.field_versions(kind), known=known, fields=fields)
        seen = record_update(versions.to_view(view, old) if old is not None else None, versions.to_view(view, new),
                             manager=manager, api_version=shape.api_version, now=now,
                             schema=self.schema(shape), ignore_status=ignore_status, subresource=subresource,
                             versions=self.field_versions(shape))
        meta = new["metadata"] = dict(new.get("metadata") or {})
        fields = (seen.get("metadata") or {}).get("managedFields")
        if fields:
            meta["managedFields"] = fields
        else:
            meta.pop("managedFields", None)
        return new

    def _init_system_meta(self, kind: Kind, obj: Obj, meta: Obj) -> None:
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        meta["uid"] = self.uids.next()
        meta["creationTimestamp"] = self.now_rfc3339()
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(k, None)
        if kind.generation or kind.crd:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)

    def _check_namespace(self, kind: Kind, ns: str, name: str) -> None:
        got = self.store.get_packed(f"core/namespaces/{ns}")
        if got is None:
            raise errors.not_found("namespaces", ns)
        nsobj = self.decoded_once(*got)  # the namespace itself (shared, read only), decoded once per revision
        if (nsobj.get("metadata") or {}).get("deletionTimestamp") or \
                (nsobj.get("status") or {}).get("phase") == "Terminating":
            detail = _TERMINATING.format(ns)
            who = f'{kind.resource} "{name}"' if name else kind.resource
            raise ApiError(f"{who} is forbidden: {detail}", 403, "Forbidden", name=name, group=kind.group,
                           kind=kind.plural,
                           causes=[Cause("NamespaceTerminating", detail, "metadata.namespace")])

    def priority_class(self, name: str) -> Obj | None:
        """The stored PriorityClass `name` (shared: do not mutate), read from the store's cache (no I/O)."""
        got = self.store.get_packed(f"{_PRIORITY_CLASSES}{name}")
        return self.decoded_once(*got) if got is not None else None

    def priority_classes(self) -> list[Obj]:
        """Every stored PriorityClass (shared: do not mutate), read from the store's cache (no I/O)."""
        page, _, _ = self.store.list_packed(_PRIORITY_CLASSES)
        return [self.decoded_once(rev, raw) for _k, rev, raw in page]

    def default_priority_class(self) -> Obj | None:
        """The lowest-valued stored PriorityClass with `globalDefault: true` (the first such by name on a tie;
        None: none; shared: do not mutate), worked out again only when the classes changed: the store's `stamp` of
        their prefix stays the same object while none is written or deleted."""
        stamp = self.store.stamp(_PRIORITY_CLASSES)
        known = self._default_class
        if known is not None and known[0] is stamp:
            return known[1]
        page, _, _ = self.store.list_packed(_PRIORITY_CLASSES)
        defaults = [c for c in (self.decoded_once(rev, raw) for _k, rev, raw in page) if c.get("globalDefault")]
        found = min(defaults, key=lambda c: int(c.get("value") or 0)) if defaults else None
        self._default_class = (stamp, found)
        return found

    async def _insert(self, kind: Kind, ns: str, obj: Obj, generated: bool, dry_run: bool) -> Obj:
        meta = obj["metadata"]
        strategy = self.strategy(kind)
        for attempt in range(_NAME_ATTEMPTS if generated else 1):
            key = self.key(kind, ns, meta["name"])
            exists = self.store.get(key) is not None
            try:
                if exists:
                    raise KeyExists(key)
                if dry_run:
                    return obj
                rev, raw = await self.store.create(key, obj)
            except KeyExists:
                if generated and attempt + 1 < _NAME_ATTEMPTS:
                    meta["name"] = generate_name(str(meta["generateName"]))
                    strategy.default(obj)
                    continue
                raise errors.already_exists(kind.plural, meta["name"], kind.group) from None
            meta["resourceVersion"] = str(rev)  # now `raw` is exactly obj's JSON (the store set this rev there)
            await self.after_write(kind, obj, None)
            note_written(kind, obj, raw)
            return obj
        raise errors.already_exists(kind.plural, meta["name"], kind.group)  # pragma: no cover

    # ---- update ------------------------------------------------------------------------------------

    async def update_loop(self, kind: Kind, namespace: str, name: str, build: Build, *,
                          subresource: str = "", dry_run: bool = False, manager: str = "",
                          create: Callable[[], Awaitable[Obj]] | None = None,
                          view: Kind | None = None) -> tuple[Obj, bool]:
        """Read, `build(old) -> new`, prepare/validate, write with the read revision; (object, created)."""
        self.check_stored(kind)
        ns = self.scoped(kind, namespace)
        key = self.key(kind, ns, name)
        for _ in range(_UPDATE_ATTEMPTS):
            got = self.store.get(key)
            if got is None:
                if create is not None:
                    return await create(), True
                raise errors.not_found(kind.plural, name, kind.group)
            rev, old = got[0], self.decode(kind, got[1])
            if kind.converts_by_webhook:
                old = (await self.present(kind, [old]))[0]
            new = build(old)
            wanted = precondition(kind, (new.get("metadata") or {}).get("resourceVersion"))
            if wanted and wanted != str(rev):
                raise conflict_error(kind, name)
            try:
                out = await self._write_update(kind, ns, name, key, rev, new, old, subresource, dry_run, manager,
                                               view)
                return out, False
            except RetryWrite:
                if wanted:
                    raise conflict_error(kind, name) from None
        raise conflict_error(kind, name)

    async def _write_update(self, kind: Kind, ns: str, name: str, key: str, rev: int, new: Obj, old: Obj,
                            subresource: str, dry_run: bool, manager: str, view: Kind | None = None) -> Obj:
        self.prepare_update(kind, ns, name, new, old, subresource)
        new["metadata"]["resourceVersion"] = str(rev)
        if same_json(new, old) or _same_but_field_times(new, old):
            return old
        if manager:  # a subresource write is its own entry, owning what it changed (status, spec.replicas)
            new = self.record_write(kind, old, new, manager, subresource, view)
        check_object_size(new, old=old)
        review = Admission("UPDATE", kind, ns, name, new, old, subresource, dry_run, view=view)
        await self.admit(review)
        if _should_delete_during_update(new, old):
            return await self.remove(kind, key, new, rev, dry_run)
        if dry_run:
            return new
        try:
            new_rev, raw = await self.store.update(key, new, rev)
        except (RevMismatch, KeyNotFound) as e:
            await review.rollback()  # the loop reads again and is admitted (charged) again
            raise RetryWrite from e
        except Exception:
            await review.rollback()
            raise
        new["metadata"]["resourceVersion"] = str(new_rev)  # in place: `raw` is exactly new's JSON
        await self.after_write(kind, new, old)
        note_written(kind, new, raw)
        return new

    def prepare_update(self, kind: Kind, ns: str, name: str, new: Obj, old: Obj, subresource: str) -> None:
        """System metadata from `old`, status rule, strategy hooks, generation, validation (422)."""
        meta, ometa = meta_of(new), old.get("metadata") or {}
        check_shape(kind, new)
        new["apiVersion"], new["kind"] = kind.api_version, kind.kind
        causes: list[Cause] = []
        for field in ("name", "namespace", "uid"):
            if not meta.get(field) and ometa.get(field):
                meta[field] = ometa[field]
            elif meta.get(field, "") != ometa.get(field, ""):
                causes.append(errors.field_invalid(f"metadata.{field}", meta.get(field), "field is immutable"))
        for field in ("creationTimestamp", "deletionTimestamp", "generation"):
            if field in ometa:
                meta[field] = ometa[field]
            else:
                meta.pop(field, None)
        if "deletionGracePeriodSeconds" in ometa and meta.get("deletionGracePeriodSeconds") is None:
            meta["deletionGracePeriodSeconds"] = ometa["deletionGracePeriodSeconds"]
        strategy = self.strategy(kind)
        _prune(kind, new)
        strategy.default(new)
        if not subresource:
            if kind.has_status():
                if "status" in old:
                    new["status"] = deep_copy({"s": old["status"]})["s"]
                else:
                    new.pop("status", None)
            strategy.prepare_update(new, old)
        else:
            strategy.prepare_subresource(subresource, new, old)
        annotations_too = strategy.generation_on_annotations and not subresource  # status writes keep it
        if "generation" in ometa and spec_changed(kind, new, old, annotations_too):
            meta["generation"] = int(ometa["generation"]) + 1
        causes += validate_object_meta(meta, namespaced=kind.namespaced, name_fn=strategy.name_fn)
        # A kind whose validation reads the spec alone (`spec_validation`) and whose spec this write leaves
        # as it was (every status write, label and finalizer edits) would get exactly the causes the stored
        # object already has, which ratcheting then drops: skip the walk. A pod binding sets spec.nodeName, which
        # upstream's binding never validates (ValidatePodBinding checks the target; the pod is written as is).
        spec_kept = subresource == "binding" or (strategy.spec_validation and old is not None
                                                 and same_json(new.get("spec"), old.get("spec")))
        if not spec_kept:
            causes += ratcheted_causes(strategy.validate, new, old)
        causes += self.schema_causes(kind, new, old)
        if not subresource:
            causes += strategy.validate_update(new, old)
        else:
            causes += strategy.validate_subresource(subresource, new, old)
        if causes:
            raise errors.invalid(kind.kind, name, causes, kind.group)

    async def update_object(self, kind: Kind, namespace: str, name: str, obj: Obj, *,
                            subresource: str = "", dry_run: bool = False, manager: str = "",
                            view: Kind | None = None) -> Obj:
        """PUT of the object or of its `status`; the body's resourceVersion is the precondition."""
        meta = meta_of(obj)
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on "
                                     f"the URL ({name})")
        if kind.namespaced and namespace and meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request("the namespace of the provided object does not match the namespace sent "
                                     "on the request")

        def build(old: Obj) -> Obj:
            if subresource in STATUS_LIKE:
                new = status_write(self.strategy(kind), old, deep_copy(obj))
                new["metadata"]["resourceVersion"] = meta.get("resourceVersion") or ""
                return new
            return _keep_managed_fields(deep_copy(obj), old)

        out, _ = await self.update_loop(kind, namespace, name, build, subresource=subresource, dry_run=dry_run,
                                        manager=manager, view=view)
        return out

    async def replace_status(self, kind: Kind, namespace: str, name: str, rev: str, status: Obj) -> Obj:
        """A status write for an in-process writer of a whole status it built itself from revision `rev` (quota
        admission; the scheduler's unschedulable report, which falls back to a patch on 409): the
        stored object at revision `rev` with `status` in place of its own, written with `rev` as the store's
        compare-and-swap; returns it with its new resourceVersion. It skips what `update_object(subresource=
        "status")` does for a client's body and such a write does not need: copying the body, re-deriving system
        metadata from the stored object (nothing but `status` changes) and validating the object (the writer's
        status is valid by construction). Still the same as that path: admission hooks run (webhooks may watch
        the status; a refusal gives back what earlier hooks took), no object over `MAX_OBJECT_BYTES` is written,
        and the store write makes one new resourceVersion and one watch event. 404 when the object is gone, 409
        when it is not at `rev` (committed or pending)."""
        self.check_stored(kind)
        ns = self.scoped(kind, namespace)
        key = self.key(kind, ns, name)
        got = self.store.get(key)
        if got is None:
            raise errors.not_found(kind.plural, name, kind.group)
        if str(got[0]) != rev:
            raise conflict_error(kind, name)
        old = self.decode(kind, got[1])
        new = {**old, "metadata": {**old["metadata"], "resourceVersion": rev}, "status": status}
        if len(got[1]) + len(orjson.dumps(status)) > MAX_OBJECT_BYTES:  # a bound; measured exactly only near it
            check_object_size(new, old=old)
        review = Admission("UPDATE", kind, ns, name, new, old, "status", False)
        await self.admit(review)
        try:
            new_rev, _ = await self.store.update(key, new, got[0])
        except (RevMismatch, KeyNotFound) as e:
            await review.rollback()
            if isinstance(e, KeyNotFound):
                raise errors.not_found(kind.plural, name, kind.group) from None
            raise conflict_error(kind, name) from None
        except Exception:
            await review.rollback()
            raise
        new["metadata"]["resourceVersion"] = str(new_rev)
        await self.after_write(kind, new, old)
        return new


def status_write(strategy: Strategy, old: Obj, body: Obj) -> Obj:
    """What a write to `status` makes of `old`: the body's status (none when it has none) and the body's
    metadata that the kind's status strategy takes (`Strategy.status_metadata`: labels, annotations,
    finalizers, ownerReferences for most kinds, as upstream's status strategies reset only the spec);
    nothing else. `body` is consumed."""
    new = deep_copy(old)
    status = body.get("status")
    if status is None:
        new.pop("status", None)
    else:
        new["status"] = status
    sent = body.get("metadata") or {}
    for field in strategy.status_metadata:
        if sent.get(field):
            new["metadata"][field] = sent[field]
        else:
            new["metadata"].pop(field, None)
    return new


def precondition(kind: Kind, value: Any) -> str:
    """The revision an update names in `metadata.resourceVersion` ("" for none), read as upstream's versioner
    reads it: an unsigned integer, where 0 means an unconditional update. Anything else is refused with 400
    (upstream fails there with a 500 carrying the same parse error)."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise errors.bad_request(f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
                                 f"json: cannot unmarshal {type(value).__name__} into Go struct field "
                                 "ObjectMeta.metadata.resourceVersion of type string")
    try:
        n = parse_uint64(value)
    except ValueError as e:
        raise errors.bad_request(f"resourceVersion: Invalid value: {go_quote(value)}: {e}") from None
    return str(n) if n else ""


def _clear_resource_version(kind: Kind, meta: Obj) -> None:
    """A create may not name a revision: a positive integer is refused (400), anything else that upstream's
    versioner cannot read as one ("abc", "0", "-5") is dropped, as the apiserver's store does."""
    rv = meta.pop("resourceVersion", None)
    if rv is not None and not isinstance(rv, str):
        raise errors.bad_request(f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
                                 f"json: cannot unmarshal {type(rv).__name__} into Go struct field "
                                 "ObjectMeta.metadata.resourceVersion of type string")
    if stored_resource_version(rv):
        raise errors.bad_request("resourceVersion should not be set on objects to be created")


def _keep_managed_fields(new: Obj, old: Obj) -> Obj:
    """An update that leaves managedFields out (or empty) keeps the stored ones, as upstream does, so clients
    that strip them from their caches erase nobody's ownership; `[{}]` is upstream's way to clear them."""
    meta = new.setdefault("metadata", {})
    fields = meta.get("managedFields")
    if not fields and (old.get("metadata") or {}).get("managedFields"):
        meta["managedFields"] = old["metadata"]["managedFields"]
    elif fields == [{}]:
        meta.pop("managedFields", None)
    return new


def _same_but_field_times(new: Obj, old: Obj) -> bool:
    """Equal apart from managedFields timestamps: a no-op apply writes nothing (upstream keeps the old time)."""
    def strip(obj: Obj) -> Obj:
        meta = dict(obj.get("metadata") or {})
        meta["managedFields"] = [{k: v for k, v in e.items() if k != "time"} for e in meta.get("managedFields") or []
                                 if isinstance(e, dict)]
        return {**obj, "metadata": meta}

    if not (new.get("metadata") or {}).get("managedFields"):
        return False
    return same_json(strip(new), strip(old))


def _prune(kind: Kind, obj: Obj) -> None:
    """Custom objects: drop unknown fields and fill defaults per the CRD schema (in place)."""
    if kind.crd and kind.schema:
        crschema.prune_and_default(obj, kind.schema)




def _spec_fields(obj: Obj) -> dict[str, Any]:
    """The `f:spec` subtree of the Update entry `record_update` just wrote on a create ({} when it owns none)."""
    entries = obj["metadata"].get("managedFields") or [{}]
    return dict((entries[0].get("fieldsV1") or {}).get("f:spec") or {})


def _should_delete_during_update(new: Obj, old: Obj) -> bool:
    """Upstream ShouldDeleteDuringUpdate: the last finalizer left an object already being deleted."""
    nmeta, ometa = new.get("metadata") or {}, old.get("metadata") or {}
    if nmeta.get("finalizers") or not ometa.get("finalizers"):
        return False
    return bool(nmeta.get("deletionTimestamp")) and nmeta.get("deletionGracePeriodSeconds") == 0
