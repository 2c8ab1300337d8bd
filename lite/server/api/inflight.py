"""Requests in flight: kube-apiserver's `--max-requests-inflight` / `--max-mutating-requests-inflight`.

Role: `kind_of(verb, subresource, query)` sorts a request by its RequestInfo (`authz.attrs.request_info`:
the verb, and the subresource of a resource request; pure, table-tested): `None` for a long-running request, which is
never limited (the verbs `watch` and `proxy`; the subresources `attach`, `exec`, `proxy`, `log` and
`portforward`; also a GET carrying `watch`, which lite serves as a stream), else `READONLY` (the verbs get,
list) or `MUTATING` (every other verb, non-resource POSTs included). `InFlight` holds one budget per kind;
`enter` takes a slot, or says the budget is spent, and the caller answers 429 with upstream's body
(`too_many_requests`). As upstream (`filters/maxinflight.go`), a user in `system:masters` is served even
when the budget is spent (without a slot), and a budget of 0 is no limit.

A slot is held from after authentication until the handler has its answer (reading the request body,
the store, admission webhooks, an aggregated API's backend); writing the answer out is left to aiohttp,
whose TLS transport buffers it whole, so a client reading slowly costs memory, not a slot.

Invariants: `inflight[kind]` equals the slots taken and not yet released and never exceeds the kind's
budget; everything runs on the event loop (no lock).
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

READONLY = "readOnly"  # upstream's metric label values for the two budgets
MUTATING = "mutating"
LONG_RUNNING_VERBS = frozenset({"watch", "proxy"})
LONG_RUNNING_SUBRESOURCES = frozenset({"attach", "exec", "proxy", "log", "portforward"})
READ_VERBS = frozenset({"get", "list", "watch"})
RETRY_AFTER = "1"  # seconds, as upstream (a constant there too)
MESSAGE = "Too many requests, please try again later."


def kind_of(verb: str, subresource: str, query: Mapping[str, str]) -> str | None:
    """The budget a request draws on, or None when it is long-running (see the module docstring);
    `subresource` is "" for a non-resource request."""
    if verb in LONG_RUNNING_VERBS or subresource in LONG_RUNNING_SUBRESOURCES:
        return None
    if verb == "get" and query.get("watch", "false").lower() not in ("false", "0"):
        return None
    return READONLY if verb in READ_VERBS else MUTATING


class InFlight:
    """The two budgets (0: unlimited); see the module docstring."""

    def __init__(self, max_readonly: int, max_mutating: int) -> None:
        self.limits = {READONLY: max_readonly, MUTATING: max_mutating}
        self.inflight = {READONLY: 0, MUTATING: 0}
        self.refused = {READONLY: 0, MUTATING: 0}
        self._peak = {READONLY: 0, MUTATING: 0}

    def enter(self, kind: str, privileged: bool) -> bool | None:
        """True: a slot is taken (`leave` it); None: served without a slot; False: answer 429."""
        limit = self.limits[kind]
        if not limit:
            return None
        if self.inflight[kind] < limit:
            n = self.inflight[kind] = self.inflight[kind] + 1
            self._peak[kind] = max(self._peak[kind], n)
            return True
        if privileged:
            return None
        self.refused[kind] += 1
        return False

    def leave(self, kind: str) -> None:
        self.inflight[kind] -= 1

    def take_peaks(self) -> dict[str, int]:
        """The most slots of each kind held at once since the previous call (`apiserver_current_inflight_requests`,
        upstream's per-second watermark, here per scrape)."""
        peaks = {kind: max(peak, self.inflight[kind]) for kind, peak in self._peak.items()}
        self._peak = dict(self.inflight)
        return peaks


def too_many_requests() -> web.Response:
    """Upstream's answer, byte for byte: Go's `http.Error` text (not a Status) and `Retry-After: 1`."""
    return web.Response(status=429, body=(MESSAGE + "\n").encode(),
                        headers={"Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff",
                                 "Retry-After": RETRY_AFTER})
