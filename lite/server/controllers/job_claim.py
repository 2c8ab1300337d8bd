"""Which pods a Job owns: upstream getPodsForJob, a ControllerRefManager that carries the tracking finalizer.

- An owned pod (controllerRef uid = the Job's) that still matches `spec.selector` stays; one that stopped
  matching is released: its reference to the Job and the tracking finalizer are removed in one patch.
- An orphan (no controllerRef) that matches is adopted, the reference and the tracking finalizer added in one
  patch, but only while a live read shows the same Job not being deleted (upstream's canAdopt recheck), and
  never when the pod itself is being deleted.
- Pods controlled by anything else are never touched.

Invariants: every patch carries the pod's resourceVersion, so a claim never races another writer (a conflict
leaves the pod as it was; the next sync looks again); nothing here reads the Job's cache.
"""

from __future__ import annotations

from typing import Any

from lite.client import Client
from lite.errors import ApiError
from lite.kinds import Kind
from lite.objects import controller_of, is_deleting, meta, name_of, namespace_of, owner_ref, uid_of
from lite.selectors import LabelSelector
from lite.server.controllers.controllerref import still_ours

Obj = dict[str, Any]


def job_selector(job: Obj) -> LabelSelector | None:
    """The Job's selector; None when it has none (nothing can match: upstream's labels.Nothing)."""
    sel = (job.get("spec") or {}).get("selector")
    return LabelSelector.from_dict(sel) if sel else None


async def claim_pods(client: Client, job_kind: Kind, pod_kind: Kind, job: Obj, candidates: list[Obj],
                     finalizer: str) -> list[Obj]:
    """The Job's pods among `candidates` (its own and the namespace's orphans) after adoption and release."""
    selector = job_selector(job)
    claimed: list[Obj] = []
    can_adopt: bool | None = None
    for pod in candidates:
        ref = controller_of(pod)
        matches = selector is not None and selector.matches(meta(pod).get("labels") or {})
        if ref is not None:
            if ref.get("uid") != uid_of(job):
                continue
            if matches or is_deleting(job):
                claimed.append(pod)
            else:
                await _patch(client, pod_kind, pod, _released(pod, job, finalizer))
            continue
        if not matches or is_deleting(pod) or is_deleting(job):
            continue
        if can_adopt is None:
            can_adopt = await still_ours(client, job_kind, job)
        if not can_adopt:
            continue
        adopted = await _patch(client, pod_kind, pod, _adopted(pod, job, finalizer))
        if adopted is not None:
            claimed.append(adopted)
    return claimed


def _adopted(pod: Obj, job: Obj, finalizer: str) -> Obj:
    fins = list(meta(pod).get("finalizers") or [])
    return {"ownerReferences": [*(meta(pod).get("ownerReferences") or []), owner_ref(job)],
            "finalizers": fins if finalizer in fins else [*fins, finalizer]}


def _released(pod: Obj, job: Obj, finalizer: str) -> Obj:
    refs = [r for r in meta(pod).get("ownerReferences") or [] if r.get("uid") != uid_of(job)]
    fins = [f for f in meta(pod).get("finalizers") or [] if f != finalizer]
    return {"ownerReferences": refs or None, "finalizers": fins or None}


async def _patch(client: Client, kind: Kind, pod: Obj, fields: Obj) -> Obj | None:
    """Merge-patch metadata fields, guarded by the pod's resourceVersion; None if gone, changed or refused."""
    patch = {"metadata": {"resourceVersion": meta(pod).get("resourceVersion"), **fields}}
    try:
        return await client.patch(kind, namespace_of(pod), name_of(pod), patch)
    except ApiError as e:
        if e.code in (404, 409, 422):
            return None
        raise
