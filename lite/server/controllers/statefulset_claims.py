"""StatefulSet `persistentVolumeClaimRetentionPolicy`: the owner references a replica's claims carry, so the
garbage collector removes them when the policy says Delete (upstream `stateful_set_utils.go`
`updateClaimOwnerRefForSetAndPod`).

    whenDeleted  whenScaled   claim of a pod in range        claim of a scaled-down (condemned) pod
    Retain       Retain       no set ref, no pod ref         no set ref, no pod ref
    Delete       Retain       set ref                        set ref
    Retain       Delete       no ref                         pod ref (GC removes it with the pod)
    Delete       Delete       set ref                        pod ref, no set ref

The references are not controller references (`controller: false`), as upstream's. Only references to this
set and this pod (by uid) are added or removed; others are kept as found. Pure.
"""

from __future__ import annotations

from typing import Any

from lite.objects import owner_ref, uid_of

Obj = dict[str, Any]


def policy_of(sts: Obj) -> tuple[str, str]:
    p = (sts.get("spec") or {}).get("persistentVolumeClaimRetentionPolicy") or {}
    return str(p.get("whenDeleted") or "Retain"), str(p.get("whenScaled") or "Retain")


def claim_owner_refs(claim: Obj, sts: Obj, pod: Obj | None, condemned: bool) -> list[Obj]:
    """The claim's ownerReferences under the set's policy (`pod` None: not created yet, counts as in range)."""
    when_deleted, when_scaled = policy_of(sts)
    want_set = when_deleted == "Delete" and not (condemned and when_scaled == "Delete")
    want_pod = pod is not None and condemned and when_scaled == "Delete"
    ours = {uid_of(sts)} | ({uid_of(pod)} if pod is not None else set())
    refs = [r for r in (claim.get("metadata") or {}).get("ownerReferences") or [] if r.get("uid") not in ours]
    if want_set:
        refs.append(owner_ref(sts, controller=False, block=True))
    if want_pod and pod is not None:
        refs.append(owner_ref(dict(pod, apiVersion="v1", kind="Pod"), controller=False, block=True))
    return refs


def refs_differ(claim: Obj, refs: list[Obj]) -> bool:
    have = (claim.get("metadata") or {}).get("ownerReferences") or []
    key = lambda r: (r.get("uid"), r.get("kind"), r.get("name"))  # noqa: E731
    return sorted(map(key, have)) != sorted(map(key, refs))
