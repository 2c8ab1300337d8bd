"""get and list: resourceVersion rules, label/field selectors, limit/continue pagination.

resourceVersion (docs §8.1): lite serves only the current state, so "unset", "0", NotOlderThan N (N not in
the future) and a limit-less "N" all answer the current state; an exact N (resourceVersionMatch=Exact, or
"N" with a limit) that is not the current revision is 410 Expired; N beyond the current revision is 504
"Too large resource version" as upstream.

Continue tokens are opaque base64 of {"v", "rv", "start"}: the next page starts after the last key returned.
Pages after the first come from the current state (not a snapshot at "rv"); the list keeps reporting the
first page's revision. A token whose revision left the watch window is 410 Expired, as upstream's
compacted tokens are.

Invariants: a list never returns more than `limit` items; `continue` is set only when more items may follow;
`remainingItemCount` only when no selector filtered the page (upstream rule).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable

import orjson

from lite import errors
from lite.errors import ApiError
from lite.kinds import Kind
from lite.selectors import check_field_selector, field_set, parse_field_selector, parse_label_selector
from lite.server.api.params import INT64_MAX, parse_resource_version
from lite.server.api.registry_base import WRITTEN, Obj, RegistryBase
from lite.server.store.packing import is_packed, unpack

Matcher = Callable[[Obj], bool]
_EXPIRED_CONTINUE = ("The provided continue parameter is too old to display a consistent list result. You can "
                     "start a new list without the continue parameter, or use the continue token in this "
                     "response to retrieve the remainder of the results. Continuing with the provided token "
                     "results in an inconsistent list - objects that were created, modified, or deleted "
                     "between the time the first chunk was returned and now may show up in the list.")


def parse_rv(rv: str) -> int:
    """A resourceVersion parameter as upstream's `strconv.ParseUint` reads it (400 BadRequest otherwise)."""
    return parse_resource_version(rv)


def too_large(rv: int, current: int) -> ApiError:
    # upstream storage.NewTooLargeResourceVersionError: NewTimeoutError prefixes "Timeout: "
    return ApiError(f"Timeout: Too large resource version: {rv}, current: {current}", 504, "Timeout", retry_after=1,
                    causes=[errors.Cause("ResourceVersionTooLarge", "Too large resource version")])


def make_matcher(kind: Kind, label_selector: str, field_selector: str) -> Matcher | None:
    """None when both selectors are empty (everything matches); 400 BadRequest on a bad selector."""
    labels = parse_label_selector(label_selector) if label_selector else None
    fields = parse_field_selector(field_selector) if field_selector else None
    if fields is not None:
        fields = check_field_selector(kind, fields)  # old labels (a pod's spec.host) matched as their new ones
    if (labels is None or labels.empty) and (fields is None or fields.empty):
        return None

    def match(obj: Obj) -> bool:
        if labels is not None and not labels.matches((obj.get("metadata") or {}).get("labels") or {}):
            return False
        return fields is None or fields.matches(field_set(kind, obj))

    return match


def encode_continue(rv: int, start: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start})).decode()


def decode_continue(token: str, prefix: str) -> tuple[int, str]:
    """(revision, start key) of a continue token, checked as upstream's storage.DecodeContinue: the
    revision a positive int64, the start key non-empty and inside the listed range (400 otherwise)."""
    invalid = "invalid continue token: continue key is not valid"
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token.encode() + b"=" * (-len(token) % 4)))
    except (binascii.Error, ValueError) as e:
        raise errors.bad_request(f"{invalid}: {e}") from None
    if not isinstance(data, dict):
        raise errors.bad_request(f"{invalid}: the token is not a JSON object")
    if data.get("v") != "meta.k8s.io/v1":
        raise errors.bad_request(f"{invalid}: server does not recognize this encoded version")
    rv, start = data.get("rv"), data.get("start")
    if not isinstance(rv, int) or isinstance(rv, bool) or not isinstance(start, str) or rv > INT64_MAX:
        raise errors.bad_request(f"{invalid}: malformed revision or start key")
    if rv <= 0:
        raise errors.bad_request(f"{invalid}: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    if not start:
        raise errors.bad_request(f"{invalid}: encoded start key empty (version meta.k8s.io/v1)")
    if not start.startswith(prefix):
        raise errors.bad_request("invalid continue token: continue key is not valid: key is outside the listed "
                                 "range")
    return rv, start


def validate_list_options(rv: str, match: str, continue_: str) -> None:
    """Upstream ValidateListOptions: 422 Invalid on ListOptions."""
    causes = []
    if match:
        if not rv:
            causes.append(errors.field_forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden "
                                                 "unless resourceVersion is provided"))
        if continue_:
            causes.append(errors.field_forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden "
                                                 "when continue is provided"))
        if match not in ("Exact", "NotOlderThan"):
            causes.append(errors.field_not_supported("resourceVersionMatch", match, ["Exact", "NotOlderThan", ""]))
        if match == "Exact" and rv == "0":
            causes.append(errors.field_forbidden("resourceVersionMatch", 'resourceVersionMatch "exact" is '
                                                 'forbidden for resourceVersion "0"'))
    if causes:
        raise errors.invalid("ListOptions", "", causes, "meta.k8s.io")
    if continue_ and rv and rv != "0":
        raise errors.bad_request("specifying resource version is not allowed when using continue")


def _list_meta(rv: int, more: int, last: str, matcher: Matcher | None) -> Obj:
    meta: Obj = {"resourceVersion": str(rv)}
    if more:
        meta["continue"] = encode_continue(rv, last)
        if matcher is None:
            meta["remainingItemCount"] = more
    return meta


class ReadMixin(RegistryBase):
    """get / list."""

    def get_object(self, kind: Kind, namespace: str, name: str, resource_version: str = "") -> Obj:
        self.check_stored(kind)
        if resource_version and resource_version != "0":
            n = parse_rv(resource_version)
            if n > self.store.current_rev:
                raise too_large(n, self.store.current_rev)
        return self.read(kind, namespace, name)[1]

    def get_encoded(self, kind: Kind, namespace: str, name: str) -> bytes:
        """The JSON of `get_object(...)`: the stored bytes themselves unless the object needs presenting."""
        self.check_stored(kind)
        got = self.store.get(self.key(kind, self.scoped(kind, namespace), name))
        if got is None:
            raise errors.not_found(kind.plural, name, kind.group)
        return orjson.dumps(self.decode(kind, got[1])) if kind.crd else got[1]

    def get_shared(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        """The stored object of a built-in kind, decoded once per revision and shared (callers must not mutate
        it), or None when there is none: for admission plugins that read one small object on every request (the
        pod's ServiceAccount)."""
        self.check_stored(kind)
        if kind.crd:
            raise ValueError("get_shared serves built-in kinds only (custom objects are presented per version)")
        got = self.store.get_packed(self.key(kind, self.scoped(kind, namespace), name))
        return self.decoded_once(*got) if got is not None else None  # unpacked only when not decoded before

    def written_encoded(self, kind: Kind, namespace: str, obj: Obj) -> bytes | None:
        """The stored bytes of `obj`, an object a write just returned, when they are its JSON: a built-in kind
        (custom objects are stored in their storage version) whose stored revision is still `obj`'s
        resourceVersion (the store encoded exactly this object then). None otherwise (a dry run, a newer write
        meanwhile): the caller encodes `obj` itself. The bytes the write itself left for this request
        (`registry_base.Written`) come first: the store holds them packed once committed."""
        slot = WRITTEN.get()
        raw = slot.take(obj) if slot is not None else None
        if raw is not None:
            return raw
        got = self.held_encoding(kind, namespace, obj)
        if got is None or is_packed(got):
            return None  # packed (the store packs at commit): encoding `obj` is cheaper than inflating them
        return got

    def held_encoding(self, kind: Kind, namespace: str, obj: Obj) -> bytes | None:
        """The bytes the store holds for `obj`'s revision (packed: `lite.server.store.packing`), for an
        in-process cache to keep instead of a copy of its own (`lite.informer`'s compact caches): the same bytes
        object stays in the store until the object changes. A built-in kind whose stored revision is still
        `obj`'s only, else None. `decode_held` decodes them."""
        if kind.crd or kind.storage or kind.converts_by_webhook:
            return None
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            return None
        rv = meta.get("resourceVersion")
        if not isinstance(rv, str) or not rv.isdigit():
            return None
        got = self.store.get_packed(self.key(kind, self.scoped(kind, namespace), str(meta.get("name") or "")))
        return got[1] if got is not None and str(got[0]) == rv else None

    @staticmethod
    def decode_held(raw: bytes) -> Obj:
        """The object of bytes from `held_encoding` (packed or plain JSON)."""
        out: Obj = orjson.loads(unpack(raw))
        return out

    def revisions(self, kind: Kind, namespace: str = "") -> list[tuple[str, int]]:
        """(name, revision) of every stored object of `kind` (in `namespace`), sorted by name, committed
        state, nothing decoded: a cache key for in-process callers that keep what they derived from those
        objects (quota and LimitRange admission)."""
        self.check_stored(kind)
        prefix = self.prefix(kind, self.scoped(kind, namespace))
        page, _, _ = self.store.list_packed(prefix)  # values unused: not unpacked
        return [(key[len(prefix):], rev) for key, rev, _ in page]

    def list_objects(self, kind: Kind, namespace: str = "", *, label_selector: str = "", field_selector: str = "",
                     limit: int = 0, continue_: str = "", resource_version: str = "",
                     resource_version_match: str = "") -> Obj:
        prefix, start, list_rv, matcher = self._plan_list(kind, namespace, label_selector, field_selector, limit,
                                                          continue_, resource_version, resource_version_match)
        items, rev, more, last = self._collect(kind, prefix, start, limit, matcher)
        meta = _list_meta(list_rv or rev, more, last, matcher)
        return {"apiVersion": kind.api_version, "kind": kind.list_kind, "metadata": meta, "items": items}

    def list_encoded(self, kind: Kind, namespace: str = "", *, label_selector: str = "", field_selector: str = "",
                     limit: int = 0, continue_: str = "", resource_version: str = "",
                     resource_version_match: str = "") -> bytes:
        """The JSON of `list_objects(...)`. Without a selector the items are the stored bytes joined as they
        are (they are orjson's encoding of exactly the objects `list_objects` would decode from them)."""
        prefix, start, list_rv, matcher = self._plan_list(kind, namespace, label_selector, field_selector, limit,
                                                          continue_, resource_version, resource_version_match)
        if matcher is not None or kind.crd:  # custom objects may be presented in another apiVersion
            items, rev, more, last = self._collect(kind, prefix, start, limit, matcher)
            meta = _list_meta(list_rv or rev, more, last, matcher)
            return orjson.dumps({"apiVersion": kind.api_version, "kind": kind.list_kind, "metadata": meta,
                                 "items": items})
        page, rev, remaining = self.store.list(prefix, start_after=start, limit=limit)
        last = page[-1][0] if page else start
        meta = _list_meta(list_rv or rev, remaining if limit else 0, last, None)
        return b"".join((b'{"apiVersion":', orjson.dumps(kind.api_version), b',"kind":', orjson.dumps(kind.list_kind),
                         b',"metadata":', orjson.dumps(meta), b',"items":[',
                         b",".join([raw for _key, _rev, raw in page]), b"]}"))

    def _plan_list(self, kind: Kind, namespace: str, label_selector: str, field_selector: str, limit: int,
                   continue_: str, resource_version: str,
                   resource_version_match: str) -> tuple[str, str, int, Matcher | None]:
        """Validate a list request: (key prefix, key to start after, revision of the continued list, matcher)."""
        self.check_stored(kind)
        limit = max(limit, 0)  # upstream takes a negative limit as none
        validate_list_options(resource_version, resource_version_match, continue_)
        matcher = make_matcher(kind, label_selector, field_selector)
        prefix = self.prefix(kind, self.scoped(kind, namespace))
        start, list_rv = "", 0
        if continue_:
            list_rv, start = decode_continue(continue_, prefix)
            if list_rv < self.store.oldest_rev - 1:
                raise errors.expired(_EXPIRED_CONTINUE)
        self._check_list_rv(resource_version, resource_version_match, limit)
        return prefix, start, list_rv, matcher

    def _check_list_rv(self, rv: str, match: str, limit: int) -> None:
        if not rv or rv == "0":
            return
        n = parse_rv(rv)
        current = self.store.current_rev
        exact = match == "Exact" or (not match and limit > 0)
        if exact and n != current:
            if n > current:
                raise too_large(n, current)
            raise errors.expired(f"too old resource version: {n} ({current})")
        if n > current:
            raise too_large(n, current)

    def _collect(self, kind: Kind, prefix: str, start: str, limit: int,
                 matcher: Matcher | None) -> tuple[list[Obj], int, int, str]:
        """(items, rev, how many more may follow (0 = none), last key examined)."""
        out: list[Obj] = []
        while True:
            want = limit - len(out) if limit else 0
            page, rev, remaining = self.store.list(prefix, start_after=start, limit=want)
            for key, _rev, raw in page:
                obj = self.decode(kind, raw)
                start = key
                if matcher is None or matcher(obj):
                    out.append(obj)
            if not limit or remaining == 0:
                return out, rev, 0, start
            if len(out) >= limit:
                return out, rev, remaining, start
