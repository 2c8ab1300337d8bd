"""get and list: resourceVersion rules, label/field selectors, limit/continue pagination.

resourceVersion (docs §8.1): "unset", "0", NotOlderThan N (N not in the future) and a limit-less "N" answer
the current state; an exact N (resourceVersionMatch=Exact, or "N" with a limit) reads the state as of N, as
upstream reads etcd at N: 410 Expired "The resourceVersion for the provided list is too old." once the store's
window no longer reaches back to N; N beyond the current revision is 504 "Too large resource version". On a shared
datastore the HTTP handlers first await `freshen` (a consistent read for no resourceVersion, a wait of up to 3 s
for an N or a continue token's revision beyond this server's mirror); on `Store` it returns None.

Continue tokens are upstream's fields, base64url of {"v": "meta.k8s.io/v1", "rv", "start"}: every page reads
at the first page's revision "rv" (a snapshot: objects created, changed or deleted since do not show), and the
next page starts after "start", the last key returned. When "rv" left the store's window the answer is 410
Expired with upstream's inconsistent-continue message and, in the Status's metadata.continue, the same
position with rv -1: a token that goes on from the current state (rv < 0 reads the current state, as upstream;
only 0 is refused).

Invariants: a list never returns more than `limit` items; `continue` is set only when more items may follow;
`remainingItemCount` only when no selector filtered the page (upstream rule).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable

import orjson

from lite import errors
from lite.errors import ApiError
from lite.kinds import Kind
from lite.selectors import check_field_selector, field_set, parse_field_selector, parse_label_selector
from lite.server.api.params import INT64_MAX, INT64_MIN, parse_resource_version
from lite.server.api.registry_base import WRITTEN, Obj, RegistryBase
from lite.server.store import Compacted
from lite.server.store.packing import is_packed, unpack

Matcher = Callable[[Obj], bool]
_Page = list[tuple[str, int, bytes]]  # (key, mod_rev, value as the store holds it)
_EXPIRED_LIST = "The resourceVersion for the provided list is too old."
# Items a selector list reads at once beyond those it still needs (at a past revision every read passes over the
# window's newer events again, so reading one item at a time for a selector that matches few would repeat it).
_SELECTOR_CHUNK = 256
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
    revision a non-zero int64 (negative: go on from the current state), the start key non-empty and inside
    the listed range (400 otherwise)."""
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
    if not isinstance(rv, int) or isinstance(rv, bool) or not isinstance(start, str) \
            or not INT64_MIN <= rv <= INT64_MAX:
        raise errors.bad_request(f"{invalid}: malformed revision or start key")
    if rv == 0:
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


# What a validated list request reads: (key prefix, key to start after ("" = the first under prefix), items per
# page (0 = all), revision to read at (0 = the current state), matcher, from a continue token (start is its
# position)). A plain tuple: built on every list, the hot path (a NamedTuple cost ~0.3 us of a one-item list's
# ~8 us in process).
_ListPlan = tuple[str, str, int, int, Matcher | None, bool]


def _token_rev(token: str) -> int:
    """The revision in a continue token, 0 when it has none readable (`decode_continue` refuses it later)."""
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token.encode() + b"=" * (-len(token) % 4)))
    except (binascii.Error, ValueError):
        return 0
    rv = data.get("rv") if isinstance(data, dict) else None
    return rv if isinstance(rv, int) and not isinstance(rv, bool) and 0 < rv <= INT64_MAX else 0


class ReadMixin(RegistryBase):
    """get / list."""

    def freshen(self, resource_version: str = "", continue_: str = "") -> Awaitable[None] | None:
        """What an HTTP get, list or watch awaits before it reads (None: nothing, always so on `Store`).

        Over a shared datastore (`MirrorStore.fresh`): no resourceVersion means the most recent state, so the
        mirror first catches up with what the datastore had committed (a write acknowledged by another server
        shows here); a resourceVersion (or a continue token's) newer than the mirror is waited for, up to 3 s,
        as kube-apiserver's watch cache waits, before it is "too large". "0" reads whatever is mirrored.
        """
        if continue_:
            rev = _token_rev(continue_)
            return self.store.fresh(rev) if rev else None
        if not resource_version:
            return self.store.fresh()
        if resource_version == "0" or not (resource_version.isascii() and resource_version.isdigit()) \
                or len(resource_version) > 19:
            return None  # "any", or malformed (refused by the read itself)
        rev = int(resource_version)
        return self.store.fresh(rev) if rev else None

    def get_object(self, kind: Kind, namespace: str, name: str, resource_version: str = "") -> Obj:
        self.check_stored(kind)
        if resource_version and resource_version != "0":
            self._check_get_rv(resource_version)
        return self.read(kind, namespace, name)[1]

    def _check_get_rv(self, resource_version: str) -> None:
        n = parse_rv(resource_version)
        if n > self.store.current_rev:
            raise too_large(n, self.store.current_rev)

    def get_encoded(self, kind: Kind, namespace: str, name: str, resource_version: str = "") -> bytes:
        """The JSON of `get_object(...)`: the stored bytes themselves unless the object needs presenting."""
        self.check_stored(kind)
        if resource_version and resource_version != "0":
            self._check_get_rv(resource_version)
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

    def stamp(self, kind: Kind) -> object:
        """The store's `stamp` of every stored object of `kind` (all namespaces): the same object while none of
        them is written or deleted (compare with `is`). Cheap (no listing): a cache key for in-process callers
        that keep what they derived from those objects across many requests."""
        return self.store.stamp(self.prefix(kind))

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
        plan = self._plan_list(kind, namespace, label_selector, field_selector, limit, continue_, resource_version,
                               resource_version_match)
        items, rev, more, last = self._collect(kind, plan)
        meta = _list_meta(rev, more, last, plan[4])
        return {"apiVersion": kind.api_version, "kind": kind.list_kind, "metadata": meta, "items": items}

    def list_encoded(self, kind: Kind, namespace: str = "", *, label_selector: str = "", field_selector: str = "",
                     limit: int = 0, continue_: str = "", resource_version: str = "",
                     resource_version_match: str = "") -> bytes:
        """The JSON of `list_objects(...)`. Without a selector the items are the stored bytes joined as they
        are (they are orjson's encoding of exactly the objects `list_objects` would decode from them)."""
        plan = self._plan_list(kind, namespace, label_selector, field_selector, limit, continue_, resource_version,
                               resource_version_match)
        if plan[4] is not None or kind.crd:  # custom objects may be presented in another apiVersion
            items, rev, more, last = self._collect(kind, plan)
            meta = _list_meta(rev, more, last, plan[4])
            return orjson.dumps({"apiVersion": kind.api_version, "kind": kind.list_kind, "metadata": meta,
                                 "items": items})
        start, limit = plan[1], plan[2]
        page, rev, remaining = self._page(plan, start, limit)
        last = page[-1][0] if page else start
        meta = _list_meta(rev, remaining if limit else 0, last, None)
        return b"".join((b'{"apiVersion":', orjson.dumps(kind.api_version), b',"kind":', orjson.dumps(kind.list_kind),
                         b',"metadata":', orjson.dumps(meta), b',"items":[',
                         b",".join([unpack(raw) for _key, _rev, raw in page]), b"]}"))

    def _plan_list(self, kind: Kind, namespace: str, label_selector: str, field_selector: str, limit: int,
                   continue_: str, resource_version: str, resource_version_match: str) -> _ListPlan:
        """Validate a list request and say what to read."""
        self.check_stored(kind)
        limit = max(limit, 0)  # upstream takes a negative limit as none
        validate_list_options(resource_version, resource_version_match, continue_)
        matcher = make_matcher(kind, label_selector, field_selector)
        prefix = self.prefix(kind, self.scoped(kind, namespace))
        if not continue_:
            return prefix, "", limit, self._list_rv(resource_version, resource_version_match, limit), matcher, False
        rv, start = decode_continue(continue_, prefix)
        if rv > self.store.current_rev:
            raise too_large(rv, self.store.current_rev)
        return prefix, start, limit, max(rv, 0), matcher, True  # rv < 0: on from the current state

    def _list_rv(self, rv: str, match: str, limit: int) -> int:
        """The revision a list without a continue token reads at (0: the current state)."""
        if not rv or rv == "0":
            return 0
        n = parse_rv(rv)
        current = self.store.current_rev
        if n > current:
            raise too_large(n, current)
        return n if match == "Exact" or (not match and limit > 0) else 0

    def _page(self, plan: _ListPlan, start: str, limit: int) -> tuple[_Page, int, int]:
        """One store read of the plan: (items, the revision they are as of, how many more follow)."""
        try:
            return self.store.list_packed(plan[0], start_after=start, limit=limit, at_rev=plan[3])
        except Compacted:
            if not plan[5]:
                raise errors.expired(_EXPIRED_LIST) from None
            # upstream's handleCompactedErrorForPaging: the same position, at whatever is current then
            raise ApiError(_EXPIRED_CONTINUE, 410, "Expired", list_continue=encode_continue(-1, plan[1])) from None

    def _collect(self, kind: Kind, plan: _ListPlan) -> tuple[list[Obj], int, int, str]:
        """(items, rev, how many more may follow (0 = none), last key examined)."""
        out: list[Obj] = []
        _, start, limit, _, matcher, _ = plan
        while True:
            want = limit - len(out) if limit else 0
            page, rev, remaining = self._page(plan, start, max(want, _SELECTOR_CHUNK) if want and matcher else want)
            for i, (key, _rev, raw) in enumerate(page):
                obj = self.decode(kind, unpack(raw))
                start = key
                if matcher is None or matcher(obj):
                    out.append(obj)
                    if len(out) == limit:
                        return out, rev, remaining + len(page) - i - 1, start
            if not limit or remaining == 0:
                return out, rev, 0, start

