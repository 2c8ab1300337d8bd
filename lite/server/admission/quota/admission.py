"""ResourceQuota admission: refuse a create that would go over a quota, and charge the quota for it.

Upstream's `plugin/pkg/admission/resourcequota` design, kept: a quota's `status.used` is raised with an
optimistic-concurrency status update of the ResourceQuota, so two creates can never both spend the last unit
(the store's resourceVersion check is the compare-and-swap). Requests of one namespace are queued and judged in
batches by one worker task per namespace, so N concurrent creates cost one status write per quota:

    admit(CREATE) ─ no quota in the namespace (`revisions`: nothing decoded; skipped while the worker's last
                    batch saw quotas there)? → allow
                  └ usage of the object, in nano-units (the pod's effective requests/limits from
                    LimitRanger when it summed them; kept per `pod_shape`, so the replicas of one template
                    pay once) → enqueue on the namespace; the worker, per batch:
                      status jobs (`write_status`: the controller's recounts, give-backs), each read fresh
                        and written RV-guarded
                      quotas: as this worker last read or wrote them when all are still at those revisions,
                        else listed → judge each request in order against status.hard / status.used (+ what
                        the batch's earlier requests took; consecutive pod creates of one shape at once when
                        all of them fit, which is what judging them in order gives; scopes and hard compiled
                        once per quota, and what each compiled quota makes of a pod shape — selected? charged
                        what? `must specify`? — kept with it) → start the RV-guarded status writes
                        (`replace_status`: the stored quota with the new status, no body copied or validated),
                        then answer every request (allow, or 403): the writes reach the store first and share
                        one commit with the admitted objects
                      → wait for them to commit before judging again; a write that lost to an outside status
                        write, or failed, is redone as "add this batch's charge to the fresh used"
    the object not stored after all (a later hook refuses, the name is taken, the commit fails)
                  → `Admission.undo`: the charge is taken off again by a status job, in turn

Why answering before the writes commit is safe: the worker is the only writer of its namespace's quota
status (the controller writes through `write_status`, in turn) and never judges before its previous writes
committed, so its compare-and-swap cannot lose except to a status write from outside (`kubectl replace
--subresource status`); then usage is corrected by adding the charge again, and only a create racing that
outside write could go over `hard`. A failed commit fails the objects that shared it too: the batch's charge
is added again and each of those objects gives its own back, so usage ends equal to what was stored.

Facts from upstream: admission judges against `status.hard` (a quota the controller has not yet filled in
restricts nothing), a tracked resource missing from `status.used` is `status unknown for quota`, a quota on
cpu/memory requires every container to state them (`failed quota: <name>: must specify ...`), scoped quotas
see only the pods they select, dry runs are judged and charge nothing. CREATE is charged its usage; an UPDATE
of a Service or PVC is charged what it adds (a Service turning NodePort/LoadBalancer, a PVC asking for more
storage); what an update gives back is returned by the controller's recount.

Invariants: one `QuotaAdmission` per server; `last_charge(ns)` tells the quota controller when admission
last raised a quota of `ns`, so a recount never lowers usage that a create still in flight has paid for.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import field
from fractions import Fraction
from typing import Any

from lite import errors
from lite.client import Client
from lite.kinds import Kind
from lite.quantity import format_nano
from lite.records import dataclass
from lite.server.admission.quota import usage as u
from lite.server.admission.quota.limitranger import Checked, Revisions
from lite.server.api.strategies import Admission

Obj = dict[str, Any]
log = logging.getLogger("lite.quota")
ATTEMPTS = 8  # status jobs: tries against outside writes to the same quota
# `Resources.replace_status(kind, ns, name, rev, status)`: the stored object at `rev` with `status`, written
# RV-guarded (409 when not at `rev`, 404 when gone); returns it as stored.
StatusWriter = Callable[[Kind, str, str, str, Obj], Awaitable[Obj]]


@dataclass
class _Request:
    review: Admission
    usage: dict[str, int]  # what the object uses, in nano-units (shared between requests: never changed)
    done: asyncio.Future[None]
    shape: bytes | None = None  # a pod create's `u.pod_shape`: its judgement per quota is kept under it
    error: errors.ApiError | None = None
    have: list[tuple[str, frozenset[str]]] | None = None  # u.stated(pod), computed once per request
    facts: u.PodFacts | None = None  # what scopes look at, computed once per request
    charged: dict[str, dict[str, int]] = field(default_factory=dict)  # quota name -> its charge (never changed)


NANO = 10**9
# Pod shapes remembered: what such a pod uses (one table), and each compiled quota's judgement of it (a
# namespace runs few pod templates; more shapes than this only cost working them out again).
USAGES, PLANS = 256, 64
# What a quota makes of a request before looking at its used: None (its scopes do not select the object, or
# it tracks nothing the object uses), else (what it would charge, the `must specify` text or "").
_Plan = tuple[dict[str, int], str] | None
# Kinds whose usage an update can raise (a Service becoming NodePort/LoadBalancer, a PVC asking for more).
GROWS = ("Service", "PersistentVolumeClaim")


def _to_nano(usage: u.Usage) -> dict[str, int]:
    return {k: math.ceil(v * NANO) for k, v in usage.items()}


def _from_nano(values: dict[str, int]) -> u.Usage:
    return {k: Fraction(v, NANO) for k, v in values.items()}


def _binary(ref: Any, name: str, value: int) -> bool:
    """`u.format_usage`'s choice of binary suffixes for one value (nano-units) next to its spec.hard string."""
    text = str(ref if ref is not None else "")
    return text.endswith("i") or (text == "" and "memory" in name and value >= 1024 * NANO)


@dataclass(frozen=True)
class _Compiled:
    """What a quota's spec and status.hard mean to admission, worked out once and carried from revision to
    revision while only admission's own status writes change the quota."""

    scopes: tuple[u.Scope, ...]
    hard_raw: Obj
    hard: dict[str, int]
    required: frozenset[str]  # the names it tracks that every container must state (u.VALIDATED)
    # pod shape -> `_plan` of such a pod against this quota (bounded: PLANS); kept as long as the compiled
    # quota is, since the plan depends only on the pod's shape and the quota's scopes and hard
    plans: dict[bytes, _Plan] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, q: Obj) -> _Compiled:
        hard_raw = (q.get("status") or {}).get("hard") or {}
        return cls(tuple(u.quota_scopes(q)), hard_raw, u.resource_nano(hard_raw),
                   frozenset(k for k in u.VALIDATED if k in hard_raw))


@dataclass(frozen=True)
class _Parsed:
    """A quota at revision `rv` as this worker wrote it: compiled spec, status in nano-units, and the status
    as stored. Exact: a nano-integer value formats to a string that parses back to the same value
    (`format_nano`)."""

    rv: str
    compiled: _Compiled
    used: dict[str, int]
    status: Obj

    @property
    def hard(self) -> dict[str, int]:
        return self.compiled.hard

    def quota(self, ns: str, name: str) -> Obj:
        """What admission reads of the quota at this revision (the rest of it is not needed)."""
        return {"apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": {"name": name, "namespace": ns, "resourceVersion": self.rv}, "status": self.status}


@dataclass
class _Quota:
    """One quota while a batch is judged: running `used`, what the batch `added`."""

    obj: Obj
    name: str
    compiled: _Compiled
    used_raw: Obj
    used: dict[str, int]
    added: dict[str, int]

    @classmethod
    def of(cls, q: Obj, known: _Parsed | None = None) -> _Quota:
        """`known`: the quota as this worker last wrote it; used when `q` is still that revision (saves
        parsing 10 quotas' spec and status every batch), parsed from `q` otherwise."""
        used_raw = (q.get("status") or {}).get("used") or {}
        if known is not None and known.rv == q["metadata"].get("resourceVersion"):
            compiled, used = known.compiled, dict(known.used)
        else:
            compiled, used = _Compiled.of(q), u.resource_nano(used_raw)
        return cls(q, str(q["metadata"]["name"]), compiled, used_raw, used, {})


@dataclass
class _Job:
    name: str
    build: Callable[[Obj], Obj | None]
    done: asyncio.Future[None]


class QuotaAdmission:
    """The admission hook (`admit`) of one server over the in-process client."""

    def __init__(self, client: Client, quota_kind: Kind,
                 now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
                 revisions: Revisions | None = None, replace_status: StatusWriter | None = None) -> None:
        self.client = client
        self.kind = quota_kind
        self.now = now
        self.revisions = revisions  # with it, a create reads no quota, and a batch only those that changed
        # `Resources.replace_status`: the batches' status writes skip the generic update path's body work
        self.replace_status = replace_status
        self._queues: dict[str, list[_Request | _Job]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._charged_at: dict[str, float] = {}
        self._parsed: dict[str, dict[str, _Parsed]] = {}  # namespace -> quota name -> last written status
        self._usage: dict[bytes, dict[str, int]] = {}  # pod shape -> what such a pod uses (bounded: USAGES)

    def tracks(self, namespace: str) -> bool:
        """Whether `namespace` had quotas at its last batch (its requests go to its worker, which finds whether
        they are gone since)."""
        return bool(self._parsed.get(namespace))

    def last_charge(self, namespace: str) -> float:
        """Loop time of the last charge in `namespace` (0.0: never)."""
        return self._charged_at.get(namespace, 0.0)

    async def admit(self, review: Admission) -> None:
        await self.check(review)

    async def check(self, review: Admission, checked: Checked | None = None) -> None:
        """The hook; `checked`: what LimitRanger worked out about the pod (its effective requests/limits in
        nano-units when it summed them, its `pod_shape`)."""
        if review.subresource or review.obj is None or not review.namespace:
            return
        if review.operation != "CREATE" and not (review.operation == "UPDATE" and review.kind.gk in GROWS):
            return
        # Only whether the namespace has a quota at all (none decoded, or one): the worker reads them, once
        # per batch, and allows what none of them tracks. A namespace that had quotas at its last batch goes
        # to the worker without asking (if they are gone since, the worker finds none and allows).
        if self.tracks(review.namespace):
            pass
        elif self.revisions is not None:
            if not self.revisions(self.kind, review.namespace):
                return
        elif not (await self.client.list(self.kind, review.namespace, limit=1))["items"]:
            return
        shape: bytes | None = None
        if review.old is None and review.kind.gk == "Pod":
            shape = checked.shape if checked is not None else u.pod_shape(review.obj)
        usage = self._usage.get(shape) if shape is not None else None
        if usage is None:
            usage = self._usage_of(review, checked.effective if checked is not None else None)
            if shape is not None:
                if len(self._usage) >= USAGES:
                    self._usage.clear()
                self._usage[shape] = usage
        if not usage:
            return
        req = _Request(review, usage, asyncio.get_running_loop().create_future(), shape)
        self._queues.setdefault(review.namespace, []).append(req)
        self._start(review.namespace)
        await req.done
        if req.error is not None:
            raise req.error
        if req.charged:
            review.undo.append(functools.partial(self._give_back, review.namespace, req.charged))

    def _usage_of(self, review: Admission, effective: u.Effective | None) -> dict[str, int]:
        """What the object uses (a create), or adds to what the old one used (an update), in nano-units."""
        now = self.now()
        usage = u.object_usage_nano(review.kind, review.obj or {}, now, effective if review.old is None else None)
        if review.old is not None:  # an update is charged what it adds (upstream: non-negative delta)
            before = u.object_usage_nano(review.kind, review.old, now)
            usage = {k: v - before.get(k, 0) for k, v in usage.items() if v > before.get(k, 0)}
        return usage

    async def _give_back(self, ns: str, charged: dict[str, dict[str, int]]) -> None:
        """Undo a charge whose object was not stored. As a status job it runs after the batch that charged
        settled, so the charge is in `used` (written, or re-added after a lost write) when it is taken out."""
        for name, delta in charged.items():
            await self.write_status(ns, name, _adder({k: -v for k, v in delta.items()}))

    async def write_status(self, namespace: str, name: str, build: Callable[[Obj], Obj | None]) -> None:
        """Run `build(fresh quota) -> quota to write | None` and write its result (RV-guarded, retried on 409),
        in turn with this namespace's admission batches, so the quota controller never races a charge."""
        job = _Job(name, build, asyncio.get_running_loop().create_future())
        self._queues.setdefault(namespace, []).append(job)
        self._start(namespace)
        await job.done

    def _start(self, ns: str) -> None:
        if ns not in self._workers:
            self._workers[ns] = asyncio.create_task(self._drain(ns), name=f"quota-admission-{ns}")

    async def _drain(self, ns: str) -> None:
        """The namespace's worker: status jobs, then a batch of requests, until nothing waits."""
        try:
            while self._queues.get(ns):
                batch = self._queues.pop(ns)
                for job in batch:
                    if isinstance(job, _Job):
                        await self._run_job(ns, job)
                requests = [r for r in batch if isinstance(r, _Request)]
                inflight: list[tuple[Obj, dict[str, int], asyncio.Task[bool]]] = []
                try:
                    inflight = await self._judge(ns, requests)
                except errors.ApiError as e:
                    for r in requests:
                        r.error = r.error or e
                except Exception as e:
                    log.exception("quota admission failed in %s", ns)
                    for r in requests:
                        r.error = r.error or errors.internal(f"quota admission: {e}")
                for r in requests:
                    if not r.done.done():
                        r.done.set_result(None)
                await self._settle(ns, inflight)
        finally:
            self._workers.pop(ns, None)
            for left in self._queues.pop(ns, []):
                if not left.done.done():
                    left.done.set_exception(errors.internal("quota admission stopped"))

    async def _judge(self, ns: str, batch: list[_Request]) -> list[tuple[Obj, dict[str, int], asyncio.Task[bool]]]:
        """Judge the batch, start the status writes that charge it, and answer its requests.

        The answers go out without waiting for the writes' commit, so the admitted objects join the writes
        in the same commit (one fsync for the batch, as without quotas). That is safe because nothing else
        writes these quotas' status meanwhile: this worker waits for the writes to commit before it reads
        the quotas again, and the controller writes through `write_status`, in turn. A write that fails
        anyway (someone wrote the status from outside) is redone by `_settle`."""
        parsed = self._parsed.setdefault(ns, {})
        quotas = await self._quotas(ns, parsed)
        written: dict[str, tuple[_Compiled, dict[str, int]]] = {}
        changed = self._evaluate(quotas, batch, parsed, written)
        if changed:
            # before the answers: a recount must already see that a charge is under way
            self._charged_at[ns] = asyncio.get_running_loop().time()
        # The writes are started first, so each reaches the store's queue ahead of the objects it pays for
        # (the loop runs tasks in the order they became ready), and the store commits them together.
        inflight = [(q, delta, asyncio.create_task(self._write(q, parsed, written.get(q["metadata"]["name"]))))
                    for q, delta in changed]
        for r in batch:
            r.done.set_result(None)
        return inflight

    async def _quotas(self, ns: str, parsed: dict[str, _Parsed]) -> list[Obj]:
        """The namespace's quotas: rebuilt from what this worker wrote when every one of them is still at
        the revision its last write got (nothing decoded), else listed."""
        revs = self.revisions(self.kind, ns) if self.revisions is not None else None
        if revs is not None and all(name in parsed and parsed[name].rv == str(rv) for name, rv in revs):
            return [parsed[name].quota(ns, name) for name, _ in revs]
        return list((await self.client.list(self.kind, ns))["items"])

    async def _settle(self, ns: str, inflight: list[tuple[Obj, dict[str, int], asyncio.Task[bool]]]) -> None:
        """Wait for the batch's status writes to commit before the next batch reads the quotas; a write that
        lost to an outside status write is redone as a plain addition to the quota's fresh `used`."""
        for q, delta, task in inflight:
            try:
                ok = await task
            except Exception as e:
                # A failed commit: the objects that shared it failed too and give their charges back
                # (`_give_back`, queued behind this); an object stored in a later commit keeps its charge.
                log.warning("quota %s/%s: status write failed, charge queued again: %r", ns, q["metadata"]["name"], e)
                ok = False
            if not ok:
                job = _Job(str(q["metadata"]["name"]), _adder(delta), asyncio.get_running_loop().create_future())
                job.done.add_done_callback(_log_failure)
                self._queues.setdefault(ns, []).insert(0, job)
        if inflight:
            self._charged_at[ns] = asyncio.get_running_loop().time()

    async def _run_job(self, ns: str, job: _Job) -> None:
        try:
            for _ in range(ATTEMPTS):
                try:
                    fresh = await self.client.get(self.kind, ns, job.name)
                except errors.ApiError as e:
                    if e.code == 404:
                        break
                    raise
                body = job.build(fresh)
                if body is None or await self._write(body):
                    break
            job.done.set_result(None)
        except Exception as e:
            job.done.set_exception(e)

    def _evaluate(self, quotas: list[Obj], batch: list[_Request], parsed: dict[str, _Parsed] | None = None,
                  written: dict[str, tuple[_Compiled, dict[str, int]]] | None = None,
                  ) -> list[tuple[Obj, dict[str, int]]]:
        """Judge the batch in order against `quotas`; return status-write bodies of the quotas whose used grew
        with what the batch added to each. Sums are in integer nano-units (exact: upstream keeps no finer
        unit); only the values that changed are formatted again."""
        known = dict(parsed or {})
        state = [_Quota.of(q, known.get(str(q["metadata"]["name"])))
                 for q in sorted(quotas, key=lambda q: str(q["metadata"]["name"]))]
        if parsed is not None:
            # every quota as read (a deleted one's entry goes); this batch's successful writes replace them
            parsed.clear()
            for q in state:
                rv = str(q.obj["metadata"].get("resourceVersion") or "")
                if rv:
                    parsed[q.name] = _Parsed(rv, q.compiled, dict(q.used), q.obj.get("status") or {})
        for run in _runs(batch):
            if len(run) > 1 and self._judge_run(run, state):
                continue
            for r in run:
                if r.error is None:
                    self._judge_one(r, state)
        out: list[tuple[Obj, dict[str, int]]] = []
        for q in state:
            if not any(q.added.values()):
                continue  # used unchanged (nothing charged, or only zeros): nothing to write
            hard_raw = q.compiled.hard_raw
            used = {**q.used_raw, **{k: format_nano(q.used[k], binary=_binary(hard_raw.get(k), k, q.used[k]))
                                     for k in q.added}}
            out.append((_status_body(q.obj, used), q.added))
            if written is not None:
                written[q.name] = (q.compiled, q.used)
        return out

    def _judge_run(self, run: list[_Request], state: list[_Quota]) -> bool:
        """Judge a run of requests of one pod shape (`_runs`) at once: when all of them fit under every quota
        that selects them, charge them together and return True. Else return False and charge nothing: they
        are then judged one by one. The same outcome as judging them in order, which admits all of them
        exactly when all of them fit."""
        n, takes = len(run), []
        for q in state:
            plan = _plan_of(q.compiled, run[0])
            if plan is None:
                continue
            delta, missing = plan
            hard, used = q.compiled.hard, q.used
            if missing or not all(k in q.used_raw and used.get(k, 0) + n * v <= hard[k] for k, v in delta.items()):
                return False
            takes.append((q, delta))
        for q, delta in takes:
            for k, v in delta.items():
                q.used[k] = q.used.get(k, 0) + n * v
                q.added[k] = q.added.get(k, 0) + n * v
        charged = {q.name: delta for q, delta in takes}  # shared by the run's requests: never changed
        for r in run:
            r.charged = charged
        return True

    def _judge_one(self, r: _Request, state: list[_Quota]) -> None:
        """Judge one request against every quota; charge it to the running `used` unless refused or a dry
        run. Per quota: its plan (kept per pod shape), then the refusals against its used."""
        takes: list[tuple[_Quota, dict[str, int]]] = []
        for q in state:
            plan = _plan_of(q.compiled, r)
            if plan is None:
                continue
            delta, missing = plan
            if missing:
                r.error = self._forbidden(r, f"failed quota: {q.name}: {missing}")
                return
            r.error = self._refusal(r, q, delta)
            if r.error is not None:
                return
            takes.append((q, delta))
        if r.review.dry_run:
            return
        for q, delta in takes:
            for k, v in delta.items():
                q.used[k] = q.used.get(k, 0) + v
                q.added[k] = q.added.get(k, 0) + v
            r.charged[q.name] = delta

    def _refusal(self, r: _Request, q: _Quota, delta: dict[str, int]) -> errors.ApiError | None:
        c = q.compiled
        used, hard = q.used, c.hard
        if all(k in q.used_raw and used.get(k, 0) + v <= hard[k] for k, v in delta.items()):
            return None  # the common case, without building the lists below
        unknown = sorted(k for k in delta if k not in q.used_raw)
        if unknown:
            return self._forbidden(r, f"status unknown for quota: {q.name}, resources: {','.join(unknown)}")
        over = sorted(k for k, v in delta.items() if used.get(k, 0) + v > hard[k])
        requested = u.pretty(_from_nano({k: delta[k] for k in over}), c.hard_raw)
        spent = u.pretty(_from_nano({k: q.used.get(k, 0) for k in over}), c.hard_raw)
        limited = u.pretty(_from_nano({k: c.hard[k] for k in over}), c.hard_raw)
        return self._forbidden(r, f"exceeded quota: {q.name}, requested: {requested}, used: {spent}, "
                                  f"limited: {limited}")

    @staticmethod
    def _forbidden(r: _Request, detail: str) -> errors.ApiError:
        kind = r.review.kind
        return errors.forbidden(f"{_who(r.review)} is forbidden: {detail}", kind.plural, kind.group, r.review.name)

    async def _write(self, quota: Obj, parsed: dict[str, _Parsed] | None = None,
                     kept: tuple[_Compiled, dict[str, int]] | None = None) -> bool:
        """The RV-guarded status write; False on a conflict (someone else changed the quota). With `kept`
        (the quota compiled, its used in nano-units), a successful write records them in `parsed` under the
        new revision."""
        meta = quota["metadata"]
        try:
            if self.replace_status is not None and kept is not None:  # the batch's own write: the narrow path
                stored = await self.replace_status(self.kind, str(meta["namespace"]), str(meta["name"]),
                                                   str(meta["resourceVersion"]), quota["status"])
            else:
                stored = await self.client.update(self.kind, str(meta["namespace"]), str(meta["name"]), quota,
                                                  subresource="status")
        except errors.ApiError as e:
            if e.code in (404, 409):
                return e.code == 404  # a deleted quota restricts nothing any more
            raise
        rv = (stored.get("metadata") or {}).get("resourceVersion")
        if parsed is not None and kept is not None and rv:
            parsed[str(meta["name"])] = _Parsed(str(rv), kept[0], kept[1], stored.get("status") or {})
        return True


def _runs(batch: list[_Request]) -> list[list[_Request]]:
    """The batch in order, cut into runs: consecutive pod creates of one shape, not yet refused and not dry
    runs, form one run; every other request is a run of its own."""
    def joins(r: _Request) -> bool:
        return r.shape is not None and r.error is None and not r.review.dry_run

    out: list[list[_Request]] = []
    for r in batch:
        if out and joins(r) and joins(out[-1][0]) and out[-1][0].shape == r.shape:
            out[-1].append(r)
        else:
            out.append([r])
    return out


def _plan_of(c: _Compiled, r: _Request) -> _Plan:
    """`_plan`, kept in `c.plans` under the request's pod shape."""
    if r.shape is None:
        return _plan(c, r)
    if r.shape in c.plans:
        return c.plans[r.shape]
    plan = c.plans[r.shape] = _plan(c, r)
    if len(c.plans) > PLANS:
        c.plans.clear()
        c.plans[r.shape] = plan
    return plan


def _plan(c: _Compiled, r: _Request) -> _Plan:
    """What quota `c` makes of request `r` before its used counts: whether its scopes select the object (pod
    facts worked out once per request), what of the object's usage it tracks, and for a pod, the `must
    specify` text when it tracks cpu or memory that a container does not state."""
    kind, obj = r.review.kind, r.review.obj or {}
    if c.scopes:
        if not (kind.group == "" and kind.kind == "Pod"):
            return None
        if r.facts is None:
            r.facts = u.pod_facts(obj)
        if not u.selects(c.scopes, kind, obj, r.facts):
            return None
    delta = {k: r.usage[k] for k in c.hard if k in r.usage}
    if not delta:
        return None
    missing = ""
    if c.required and kind.gk == "Pod":
        if r.have is None:
            r.have = u.stated(obj)
        if not all(c.required <= got for _, got in r.have):
            missing = u.missing_requirements(c.hard, obj, r.have)
    return delta, missing


def _adder(delta: dict[str, int]) -> Callable[[Obj], Obj | None]:
    """A status job adding `delta` (nano-units; negative to give a charge back, never below 0) to a
    quota's used: a charge whose first write lost a race or failed, or the charge of an object not stored."""
    def build(fresh: Obj) -> Obj | None:
        status = fresh.setdefault("status", {})
        raw = dict(status.get("used") or {})
        hard = status.get("hard") or {}
        changed = False
        for k, v in delta.items():
            if k not in raw and v < 0:
                continue  # nothing to give back (a recount dropped the name)
            value = max(0, u.nano(raw.get(k, "0")) + v)
            raw[k] = format_nano(value, binary=_binary(hard.get(k), k, value))
            changed = True
        if not changed:
            return None
        status["used"] = raw
        return fresh
    return build


def _status_body(q: Obj, used: Obj) -> Obj:
    """The body of a status write: a status write takes only `status` from it (and the resourceVersion as
    precondition), so the rest of the quota is neither copied nor sent."""
    meta = q["metadata"]
    return {"apiVersion": q.get("apiVersion", "v1"), "kind": "ResourceQuota",
            "metadata": {"name": meta["name"], "namespace": meta.get("namespace", ""),
                         "resourceVersion": meta.get("resourceVersion", "")},
            "status": {**(q.get("status") or {}), "used": used}}


def _log_failure(done: asyncio.Future[None]) -> None:
    if not done.cancelled() and done.exception() is not None:
        log.warning("quota status job failed: %r", done.exception())


def _who(review: Admission) -> str:
    plural = review.kind.plural if not review.kind.group else f"{review.kind.plural}.{review.kind.group}"
    return f'{plural} "{review.name}"' if review.name else plural
