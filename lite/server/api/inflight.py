"""Requests in flight: kube-apiserver's `--max-requests-inflight` / `--max-mutating-requests-inflight`, with
queues in front of the budgets as API Priority and Fairness (upstream's default; GA in 1.29) has.

Role: `kind_of(verb, subresource, query)` sorts a request by its RequestInfo (`authz.attrs.request_info`:
the verb, and the subresource of a resource request; pure, table-tested): `None` for a long-running request, which is
never limited (the verbs `watch` and `proxy`; the subresources `attach`, `exec`, `proxy`, `log` and
`portforward`; also a GET carrying `watch`, which lite serves as a stream), else `READONLY` (the verbs get,
list) or `MUTATING` (every other verb, non-resource POSTs included). `InFlight` holds one budget per kind and,
per kind, one FIFO queue per flow (the user's name, as APF's flow distinguisher `ByUser`); it is the pure
bookkeeping, with no clock and no I/O: the caller (`http._api`) waits, with a deadline, for the
`Waiter` that `enter` returns, and answers 429 with upstream's body (`too_many_requests`) when `enter` refuses
or the wait ends without a slot. As upstream (`filters/maxinflight.go`, APF's `exempt` priority level), a user
in `system:masters` is served even when the budget is spent (without a slot, never queued), and a budget of 0
is no limit.

Queues, with APF's defaults for the priority levels ordinary users land in (`workload-low`, `global-default`:
128 queues of at most 50 requests, hand size 6): a flow may have at most `FLOW_QUEUE_LIMIT` = 6 x 50 = 300
requests waiting (a flow's hand of 6 queues, full), a kind at most `QUEUE_LIMIT` = 128 x 50 = 6,400; past
either, `enter` refuses at once. A freed slot goes straight to a waiter, the flows taking turns (round robin:
the head of the flow waiting longest since its last turn), so one user's burst cannot starve another user;
within a flow, first come, first served. A request waits at most `wait_limit(timeout)`: a quarter of its
deadline, as APF's `getRequestWaitContext` (the `timeout` query parameter when it is below upstream's 60 s
`--request-timeout`, else 60 s: 15 s by default).

A slot is held from after authentication until the handler has its answer (reading the request body,
the store, admission webhooks, an aggregated API's backend); writing the answer out is left to aiohttp,
whose TLS transport buffers it whole, so a client reading slowly costs memory, not a slot.

Invariants: `inflight[kind]` equals the slots taken and not yet released (a slot handed to a waiter stays
taken) and never exceeds the kind's budget; `queued[kind]` equals the waiters of the kind neither granted nor
abandoned, at most `QUEUE_LIMIT`, at most `FLOW_QUEUE_LIMIT` of them one flow's; a kind has waiters only while
its budget is spent (a freed slot is handed on before it is counted free); each waiter is granted or abandoned
exactly once; everything runs on the event loop (no lock).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping

from aiohttp import web

from lite.records import dataclass

READONLY = "readOnly"  # upstream's metric label values for the two budgets
MUTATING = "mutating"
LONG_RUNNING_VERBS = frozenset({"watch", "proxy"})
LONG_RUNNING_SUBRESOURCES = frozenset({"attach", "exec", "proxy", "log", "portforward"})
READ_VERBS = frozenset({"get", "list", "watch"})
RETRY_AFTER = "1"  # seconds, as upstream (a constant there too)
MESSAGE = "Too many requests, please try again later."
QUEUE_LENGTH_LIMIT = 50  # APF's default queueLengthLimit
HAND_SIZE = 6  # APF's default handSize: the queues one flow may use
QUEUES = 128  # APF's default queues for workload-low and global-default
FLOW_QUEUE_LIMIT = HAND_SIZE * QUEUE_LENGTH_LIMIT
QUEUE_LIMIT = QUEUES * QUEUE_LENGTH_LIMIT
REQUEST_TIMEOUT = 60.0  # upstream's --request-timeout: a request's deadline unless `timeout` asks for less
MAX_WAIT = 60.0  # APF's cap on a request's wait
QUEUE_FULL = "queue-full"  # why a request was answered 429: APF's `reason` label values
TIME_OUT = "time-out"
CANCELLED = "cancelled"  # its client went away while it waited (no answer is sent, none can be read)
REASONS = (QUEUE_FULL, TIME_OUT, CANCELLED)


def kind_of(verb: str, subresource: str, query: Mapping[str, str]) -> str | None:
    """The budget a request draws on, or None when it is long-running (see the module docstring);
    `subresource` is "" for a non-resource request."""
    if verb in LONG_RUNNING_VERBS or subresource in LONG_RUNNING_SUBRESOURCES:
        return None
    if verb == "get" and query.get("watch", "false").lower() not in ("false", "0"):
        return None
    return READONLY if verb in READ_VERBS else MUTATING


def wait_limit(timeout: float | None) -> float:
    """Seconds a request may wait for a slot: a quarter of its deadline (`timeout`, the request's `timeout`
    query parameter in seconds, counts when it is above 0 and below REQUEST_TIMEOUT), at most MAX_WAIT."""
    deadline = timeout if timeout is not None and 0 < timeout < REQUEST_TIMEOUT else REQUEST_TIMEOUT
    return min(deadline / 4, MAX_WAIT)


@dataclass(eq=False)
class Waiter:
    """A request waiting in a queue for a slot of `kind`. `on_grant` (set by whoever waits) is called once,
    when the slot is handed over; from then the waiter holds it and must `leave` it."""

    kind: str
    flow: str
    on_grant: Callable[[], None] | None = None
    granted: bool = False


class InFlight:
    """The two budgets (0: unlimited) and their queues; see the module docstring."""

    def __init__(self, max_readonly: int, max_mutating: int) -> None:
        self.limits = {READONLY: max_readonly, MUTATING: max_mutating}
        self.inflight = {READONLY: 0, MUTATING: 0}
        self.queued = {READONLY: 0, MUTATING: 0}
        self.rejected = {kind: dict.fromkeys(REASONS, 0) for kind in (READONLY, MUTATING)}  # by kind, reason
        self._flows: dict[str, dict[str, deque[Waiter]]] = {READONLY: {}, MUTATING: {}}  # in turn order
        self._peak = {READONLY: 0, MUTATING: 0}
        self._queued_peak = {READONLY: 0, MUTATING: 0}

    def enter(self, kind: str, privileged: bool, flow: str = "") -> bool | Waiter | None:
        """True: a slot is taken (`leave` it); None: served without a slot; a Waiter: queued in `flow`'s
        queue (wait for `on_grant`, or `abandon` it); False: the queues are full, answer 429."""
        limit = self.limits[kind]
        if not limit:
            return None
        if self.inflight[kind] < limit:
            n = self.inflight[kind] = self.inflight[kind] + 1
            self._peak[kind] = max(self._peak[kind], n)
            return True
        if privileged:
            return None
        flows = self._flows[kind]
        queue = flows.get(flow)
        if self.queued[kind] >= QUEUE_LIMIT or (queue is not None and len(queue) >= FLOW_QUEUE_LIMIT):
            self.rejected[kind][QUEUE_FULL] += 1
            return False
        if queue is None:
            queue = flows[flow] = deque()
        waiter = Waiter(kind, flow)
        queue.append(waiter)
        n = self.queued[kind] = self.queued[kind] + 1
        self._queued_peak[kind] = max(self._queued_peak[kind], n)
        return waiter

    def serving(self) -> bool:
        """Whether any request holds a slot now (requests served without one, under no limit or past a spent
        budget for `system:masters`, are not counted)."""
        return self.inflight[READONLY] > 0 or self.inflight[MUTATING] > 0

    def leave(self, kind: str) -> None:
        """Release a slot: it goes to the next waiter (flows in turn), or becomes free when none waits."""
        flows = self._flows[kind]
        if not flows:
            self.inflight[kind] -= 1
            return
        flow = next(iter(flows))
        queue = flows.pop(flow)
        waiter = queue.popleft()
        if queue:
            flows[flow] = queue  # to the back of the turn order
        self.queued[kind] -= 1
        waiter.granted = True
        if waiter.on_grant is not None:
            waiter.on_grant()

    def abandon(self, waiter: Waiter, reason: str) -> bool:
        """Take a waiter out of its queue, for `reason` (TIME_OUT: its wait limit passed; CANCELLED: its client
        went away). False when it was granted meanwhile: it holds a slot then, and must `leave` it."""
        if waiter.granted:
            return False
        flows = self._flows[waiter.kind]
        queue = flows[waiter.flow]
        queue.remove(waiter)
        if not queue:
            del flows[waiter.flow]
        self.queued[waiter.kind] -= 1
        self.rejected[waiter.kind][reason] += 1
        return True

    def take_peaks(self) -> dict[str, int]:
        """The most slots of each kind held at once since the previous call (`apiserver_current_inflight_requests`,
        upstream's per-second watermark, here per scrape)."""
        peaks = {kind: max(peak, self.inflight[kind]) for kind, peak in self._peak.items()}
        self._peak = dict(self.inflight)
        return peaks

    def take_queue_peaks(self) -> dict[str, int]:
        """The most requests of each kind waiting at once since the previous call
        (`apiserver_current_inqueue_requests`, likewise)."""
        peaks = {kind: max(peak, self.queued[kind]) for kind, peak in self._queued_peak.items()}
        self._queued_peak = dict(self.queued)
        return peaks


def too_many_requests() -> web.Response:
    """Upstream's answer, byte for byte: Go's `http.Error` text (not a Status) and `Retry-After: 1`."""
    return web.Response(status=429, body=(MESSAGE + "\n").encode(),
                        headers={"Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff",
                                 "Retry-After": RETRY_AFTER})
