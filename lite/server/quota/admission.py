"""ResourceQuota admission: refuse a create that would go over a quota, and charge the quota before the write.

Upstream's `plugin/pkg/admission/resourcequota` design, kept: the quota's `status.used` is raised with an
optimistic-concurrency status update of the ResourceQuota *before* the object is stored, so two creates
can never both spend the last unit (the store's resourceVersion check is the compare-and-swap; a 409 means
re-read and judge again). Requests of one namespace are queued and judged in batches by one worker task per
namespace, so N concurrent creates cost one status write per quota, not N racing ones:

    admit(CREATE) ─ usage of the object ─ no quota tracks it? → allow
                  └ enqueue on the namespace ─ worker: read quotas → judge each request in order against
                    status.hard / status.used (+ what earlier requests of the batch took) → write the new
                    status.used of each changed quota (RV-guarded) → 409: re-read those quotas, judge again
                    → answer every request (allow, or 403 `exceeded quota: ...`)

Facts from upstream: admission judges against `status.hard` (a quota the controller has not yet filled in
restricts nothing), a tracked resource missing from `status.used` is `status unknown for quota`, a quota on
cpu/memory requires every container to state them (`failed quota: <name>: must specify ...`), scoped quotas
see only the pods they select, dry runs are judged and charge nothing. Only CREATE is charged; updates that
change usage (a Service's type, a PVC's size) are corrected by the quota controller's recount.

Invariants: one `QuotaAdmission` per server; `last_charge(ns)` tells the quota controller when admission
last raised a quota of `ns`, so a recount never lowers usage that a create still in flight has paid for.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from lite import errors
from lite.client import Client
from lite.kinds import Kind
from lite.objects import deep_copy
from lite.server.api.strategies import Admission
from lite.server.quota import usage as u

Obj = dict[str, Any]
log = logging.getLogger("lite.quota")
ATTEMPTS = 8


@dataclass
class _Request:
    review: Admission
    usage: u.Usage
    done: asyncio.Future[None]
    error: errors.ApiError | None = None
    have: list[tuple[str, frozenset[str]]] | None = None  # u.stated(pod), computed once per request


class QuotaAdmission:
    """The admission hook (`admit`) of one server over the in-process client."""

    def __init__(self, client: Client, quota_kind: Kind,
                 now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)) -> None:
        self.client = client
        self.kind = quota_kind
        self.now = now
        self._queues: dict[str, list[_Request]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._charged_at: dict[str, float] = {}

    def last_charge(self, namespace: str) -> float:
        """Loop time of the last charge in `namespace` (0.0: never)."""
        return self._charged_at.get(namespace, 0.0)

    async def admit(self, review: Admission) -> None:
        if review.operation != "CREATE" or review.subresource or review.obj is None or not review.namespace:
            return
        quotas = (await self.client.list(self.kind, review.namespace))["items"]
        if not quotas:
            return
        usage = u.object_usage(review.kind, review.obj, self.now())
        if not any(k in ((q.get("status") or {}).get("hard") or {}) for q in quotas for k in usage):
            return
        req = _Request(review, usage, asyncio.get_running_loop().create_future())
        self._queues.setdefault(review.namespace, []).append(req)
        if review.namespace not in self._workers:
            self._workers[review.namespace] = asyncio.create_task(self._drain(review.namespace),
                                                                  name=f"quota-admission-{review.namespace}")
        await req.done
        if req.error is not None:
            raise req.error

    async def _drain(self, ns: str) -> None:
        try:
            while self._queues.get(ns):
                batch = self._queues.pop(ns)
                try:
                    await self._judge(ns, batch)
                except errors.ApiError as e:
                    for r in batch:
                        r.error = r.error or e
                except Exception as e:
                    log.exception("quota admission failed in %s", ns)
                    for r in batch:
                        r.error = r.error or errors.internal(f"quota admission: {e}")
                for r in batch:
                    if not r.done.done():
                        r.done.set_result(None)
        finally:
            self._workers.pop(ns, None)
            self._queues.pop(ns, None)

    async def _judge(self, ns: str, batch: list[_Request]) -> None:
        pending: set[str] | None = None  # quota names still to write; None: all of them
        conflicted: set[str] = set()
        for _ in range(ATTEMPTS):
            quotas = [q for q in (await self.client.list(self.kind, ns))["items"]
                      if pending is None or q["metadata"]["name"] in pending]
            changed = self._evaluate(quotas, batch)
            if changed:
                # before the write: a recount racing it must already see that a charge is under way
                self._charged_at[ns] = asyncio.get_running_loop().time()
            results = await asyncio.gather(*(self._write(q) for q in changed))
            conflicted = {q["metadata"]["name"] for q, ok in zip(changed, results, strict=True) if not ok}
            if any(results):
                self._charged_at[ns] = asyncio.get_running_loop().time()
            if not conflicted:
                return
            pending = conflicted
        for r in batch:
            r.error = r.error or errors.forbidden(
                f"{_who(r.review)} is forbidden: unable to update status of the quotas {', '.join(sorted(conflicted))}",
                r.review.kind.plural, r.review.kind.group, r.review.name)

    def _evaluate(self, quotas: list[Obj], batch: list[_Request]) -> list[Obj]:
        """Judge the batch in order against `quotas`; return the quotas whose used grew (copies, new used)."""
        state: list[tuple[Obj, u.Usage, u.Usage, Obj]] = []
        for q in sorted(quotas, key=lambda q: str(q["metadata"]["name"])):
            status = q.get("status") or {}
            hard_raw = status.get("hard") or {}
            state.append((q, u.resource_list(hard_raw), u.resource_list(status.get("used")), hard_raw))
        grown: set[int] = set()
        for r in batch:
            if r.error is not None:
                continue
            takes: list[tuple[int, u.Usage]] = []
            for i, (q, hard, used, hard_raw) in enumerate(state):
                if not u.matches(q, r.review.kind, r.review.obj or {}):
                    continue
                delta = u.charge(r.usage, hard)
                if not delta:
                    continue
                r.error = self._refusal(r, q, hard, used, hard_raw, delta)
                if r.error is not None:
                    break
                takes.append((i, delta))
            if r.error is not None or r.review.dry_run:
                continue
            for i, delta in takes:
                used = state[i][2]
                for k, v in delta.items():
                    used[k] = used.get(k, Fraction(0)) + v
                grown.add(i)
        out: list[Obj] = []
        for i in sorted(grown):
            q, _hard, used, hard_raw = state[i]
            new = deep_copy(q)
            new.setdefault("status", {})["used"] = {
                **(q.get("status") or {}).get("used", {}), **u.format_usage(used, hard_raw)}
            out.append(new)
        return out

    def _refusal(self, r: _Request, q: Obj, hard: u.Usage, used: u.Usage, hard_raw: Obj,
                 delta: u.Usage) -> errors.ApiError | None:
        name = str(q["metadata"]["name"])
        if r.review.kind.gk == "Pod":
            if r.have is None:
                r.have = u.stated(r.review.obj or {})
            missing = u.missing_requirements(hard, r.review.obj or {}, r.have)
            if missing:
                return self._forbidden(r, f"failed quota: {name}: {missing}")
        unknown = sorted(k for k in delta if k not in ((q.get("status") or {}).get("used") or {}))
        if unknown:
            return self._forbidden(r, f"status unknown for quota: {name}, resources: {','.join(unknown)}")
        over = u.exceeded(used, delta, hard)
        if not over:
            return None
        requested = u.pretty({k: delta[k] for k in over}, hard_raw)
        spent = u.pretty({k: used.get(k, Fraction(0)) for k in over}, hard_raw)
        limited = u.pretty({k: hard[k] for k in over}, hard_raw)
        return self._forbidden(r, f"exceeded quota: {name}, requested: {requested}, used: {spent}, limited: {limited}")

    @staticmethod
    def _forbidden(r: _Request, detail: str) -> errors.ApiError:
        kind = r.review.kind
        return errors.forbidden(f"{_who(r.review)} is forbidden: {detail}", kind.plural, kind.group, r.review.name)

    async def _write(self, quota: Obj) -> bool:
        """The RV-guarded status write; False on a conflict (someone else changed the quota)."""
        meta = quota["metadata"]
        try:
            await self.client.update(self.kind, str(meta["namespace"]), str(meta["name"]), quota,
                                     subresource="status")
        except errors.ApiError as e:
            if e.code in (404, 409):
                return e.code == 404  # a deleted quota restricts nothing any more
            raise
        return True


def _who(review: Admission) -> str:
    plural = review.kind.plural if not review.kind.group else f"{review.kind.plural}.{review.kind.group}"
    return f'{plural} "{review.name}"' if review.name else plural
