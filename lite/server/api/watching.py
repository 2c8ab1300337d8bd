"""watch: events after a resourceVersion, as `lite.client.WatchEvent`s, straight from the store's window.

- RV "" or "0" (or sendInitialEvents): synthetic ADDED for the current state, then live events from that
  same revision (the state and the watch start are taken without yielding to the loop: nothing is lost or
  repeated). With sendInitialEvents a BOOKMARK annotated `k8s.io/initial-events-end` closes the snapshot.
- RV "N": only changes after N. N older than the window: one ERROR event (Status 410 Expired,
  "too old resource version: N (M)") and the stream ends. N newer than the store: 504 "Timeout: Too large
  resource version: N, current: M" (cause ResourceVersionTooLarge, retryAfterSeconds 1) before any stream,
  as get and list; no acknowledged write can carry such an RV, and a watch from it would silently skip
  every event up to N. (On a shared datastore the handler first waits up to 3 s for this server's mirror to
  reach N, and RV "" starts from a consistent read: `ReadMixin.freshen`.)
- Selectors are applied per event with the previous state: an object that stops matching is sent as DELETED
  (its previous content at the event's RV), one that starts matching as ADDED.
- Bookmarks every `bookmark_interval` seconds when allowed, carrying the last revision seen on the resource.
- The stream ends at `timeout_seconds`, or when the store drops a slow watcher (the client re-watches).

Invariants: the store's bytes are forwarded unchanged (`WatchEvent.raw`) with no selector, and with one for
every built-in kind's event but a DELETED made of the previous state (its resourceVersion is the event's); events are
strictly in revision order; the store watch is closed however the consumer leaves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from lite import errors
from lite.client import WatchEvent
from lite.errors import ApiError, expired
from lite.kinds import Kind
from lite.selectors import parse_field_selector, required_keys
from lite.server.api.reading import Matcher, make_matcher, parse_rv, too_large
from lite.server.api.registry_base import Obj, RegistryBase
from lite.server.store import Compacted, StoreEvent, Watch, WatchDropped
from lite.server.store.packing import is_packed

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def error_event(err: ApiError) -> WatchEvent:
    return WatchEvent("ERROR", err.status())


class WatchMixin(RegistryBase):
    """watch."""

    def watch_objects(self, kind: Kind, namespace: str = "", *, resource_version: str = "",
                      label_selector: str = "", field_selector: str = "", allow_bookmarks: bool = False,
                      timeout_seconds: float | None = None, send_initial_events: bool = False,
                      resource_version_match: str = "") -> AsyncIterator[WatchEvent]:
        """Validate eagerly (bad selectors and RVs raise here, before any stream starts)."""
        self.check_stored(kind)
        matcher = make_matcher(kind, label_selector, field_selector)
        needs = required_keys(kind, parse_field_selector(field_selector)) if matcher is not None and field_selector \
            else ()
        if resource_version_match and resource_version_match != "NotOlderThan":
            raise errors.invalid("ListOptions", "", [errors.field_forbidden(
                "resourceVersionMatch", "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
                if send_initial_events else "resourceVersionMatch is forbidden for watch")], "meta.k8s.io")
        after = parse_rv(resource_version) if resource_version not in ("", "0") else -1
        if after > self.store.current_rev:
            raise too_large(after, self.store.current_rev)
        prefix = self.prefix(kind, self.scoped(kind, namespace))
        return self._stream(kind, prefix, after, matcher, allow_bookmarks, timeout_seconds, send_initial_events,
                            needs)

    async def _stream(self, kind: Kind, prefix: str, after: int, matcher: Matcher | None, bookmarks: bool,
                      lifetime: float | None, initial_events: bool,
                      needs: tuple[bytes, ...] = ()) -> AsyncIterator[WatchEvent]:
        initial: list[tuple[str, int, bytes]] = []
        if after < 0 or initial_events:
            initial, rev, _ = self.store.list(prefix)
            after = rev
        try:
            w = self.store.watch(prefix, after)
        except Compacted as e:
            yield error_event(expired(f"too old resource version: {after} ({e.oldest_rev - 1})"))
            return
        if needs and hasattr(w, "skip"):
            # Live events `_live` would discard unseen are not even queued: no wake-up, no future, no timer each.
            w.skip = lambda sev: _unmatchable(sev, needs)
        try:
            for _key, _rev, raw in initial:
                obj = self.decode(kind, raw) if (matcher is not None or kind.crd) else None
                if obj is None:
                    yield WatchEvent("ADDED", raw=raw)
                elif matcher is None or matcher(obj):
                    yield WatchEvent("ADDED", obj)
            if initial_events:
                yield self._bookmark(kind, after, end_of_initial=True)
            async for ev in self._live(kind, w, after, matcher, bookmarks, lifetime, needs):
                yield ev
        finally:
            w.close()

    async def _live(self, kind: Kind, w: Watch, last_rev: int, matcher: Matcher | None, bookmarks: bool,
                    lifetime: float | None, needs: tuple[bytes, ...] = ()) -> AsyncIterator[WatchEvent]:
        # A deadline polled between events, not asyncio.timeout: the generator is suspended at its yields
        # in the consumer's task, where a timeout would cancel the consumer instead.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + lifetime if lifetime is not None and lifetime > 0 else None
        next_bookmark = loop.time() + self.bookmark_interval if bookmarks else None
        while True:
            now = loop.time()
            if deadline is not None and now >= deadline:
                return
            if next_bookmark is not None and now >= next_bookmark:
                # the watch's own skips (`Watch.skip`) may have passed newer revisions than the last one seen here
                yield self._bookmark(kind, max(last_rev, getattr(w, "passed_rev", last_rev)))
                next_bookmark = now + self.bookmark_interval
                continue
            wake = min((t for t in (deadline, next_bookmark) if t is not None), default=None)
            try:
                sev = await w.next_before(wake)
            except (StopAsyncIteration, WatchDropped):
                return
            if sev is None:
                continue
            last_rev = sev.rev
            if needs and _unmatchable(sev, needs):
                continue  # neither this state nor the one it replaced matches: nothing to decode or send
            out = self._translate(kind, sev, matcher)
            if out is not None:
                yield out

    def _translate(self, kind: Kind, ev: StoreEvent, matcher: Matcher | None) -> WatchEvent | None:
        if matcher is None:
            if kind.crd:
                return WatchEvent(ev.type, self.decode(kind, ev.value))
            return WatchEvent(ev.type, raw=ev.value)
        value = ev.value
        cur = self.decode(kind, value)
        # A built-in kind's object is its stored bytes decoded as they are: a stream forwards those bytes.
        raw = None if kind.crd else value
        if ev.type == "DELETED":
            return WatchEvent("DELETED", cur, raw) if matcher(cur) else None
        cur_match = matcher(cur)
        prev = self.decode(kind, ev.prev) if ev.prev is not None and ev.type == "MODIFIED" else None
        prev_match = prev is not None and matcher(prev)
        if cur_match:
            return WatchEvent("MODIFIED" if prev_match else "ADDED", cur, raw)
        if prev_match and prev is not None:
            prev.setdefault("metadata", {})["resourceVersion"] = str(ev.rev)
            return WatchEvent("DELETED", prev)
        return None

    @staticmethod
    def _bookmark(kind: Kind, rev: int, end_of_initial: bool = False) -> WatchEvent:
        meta: Obj = {"resourceVersion": str(rev)}
        if end_of_initial:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        return WatchEvent("BOOKMARK", {"kind": kind.kind, "apiVersion": kind.api_version, "metadata": meta})


def _unmatchable(sev: StoreEvent, needs: tuple[bytes, ...]) -> bool:
    """True when neither the event's state nor (for a MODIFIED) the one it replaced can match: nothing of it is
    sent, whatever the selector says after decoding."""
    return _cannot_match(sev.value, needs) and (sev.prev is None or sev.type != "MODIFIED" or
                                                _cannot_match(sev.prev, needs))


def _cannot_match(raw: bytes, needs: tuple[bytes, ...]) -> bool:
    """True when the plain JSON `raw` lacks a key every matching object has (`selectors.required_keys`); False
    when it has them all or is packed (then only decoding tells)."""
    if is_packed(raw):
        return False
    for n in needs:  # noqa: SIM110 - a loop, not any(<generator>): runs for every event of every such watch
        if n not in raw:
            return True
    return False
