"""Matching claims to volumes: the pure rules of upstream's `pkg/controller/volume/persistentvolume` (index.go
`FindMatchingVolume`, `checkVolumeSatisfyClaim`, `util.CheckNodeAffinity`) and of k3s's local-path provisioner.

Shared by the PV controller (node unknown: `node=None`) and the scheduler's VolumeBinding plugin (a candidate
node's labels), so both decide the same way. Objects are the API's JSON dicts; nothing here does I/O or mutates
its arguments.

Rules (upstream):
- a volume pre-bound to the claim (`spec.claimRef` names it, uid empty or equal) wins if its node affinity fits;
- otherwise only `Available` volumes without a claimRef, of the claim's class, matching the claim's selector, with
  every requested access mode and the same volumeMode, whose capacity covers the request: the smallest wins;
- with delayed binding (WaitForFirstConsumer) the controller binds only pre-bound volumes: the scheduler picks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from lite.errors import ApiError
from lite.quantity import parse_quantity
from lite.selectors import LabelSelector

Obj = dict[str, Any]

ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
ANN_BETA_STORAGE_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"
ANN_DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
ANN_BETA_DEFAULT_CLASS = "storageclass.beta.kubernetes.io/is-default-class"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
PV_PROTECTION = "kubernetes.io/pv-protection"
LOCAL_PATH = "rancher.io/local-path"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
HOSTNAME_LABEL = "kubernetes.io/hostname"


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _quantity(v: Any) -> Fraction:
    try:
        return parse_quantity(str(v)) if v is not None else Fraction(0)
    except (ValueError, ArithmeticError):
        return Fraction(0)


def storage_request(claim: Obj) -> Fraction:
    return _quantity(_d(_d(_d(claim.get("spec")).get("resources")).get("requests")).get("storage"))


def capacity(pv: Obj) -> Fraction:
    return _quantity(_d(_d(pv.get("spec")).get("capacity")).get("storage"))


def volume_class(obj: Obj) -> str:
    """A PV's or PVC's class: `spec.storageClassName`, else the beta annotation, else ""."""
    name = _d(obj.get("spec")).get("storageClassName")
    if name is None:
        name = _d(_d(obj.get("metadata")).get("annotations")).get("volume.beta.kubernetes.io/storage-class")
    return str(name or "")


def volume_mode(obj: Obj) -> str:
    return str(_d(obj.get("spec")).get("volumeMode") or "Filesystem")


def access_modes_ok(claim: Obj, pv: Obj) -> bool:
    have = set(_d(pv.get("spec")).get("accessModes") or [])
    return all(m in have for m in _d(claim.get("spec")).get("accessModes") or [])


def _meta(obj: Obj) -> dict[str, Any]:
    return _d(obj.get("metadata"))


def is_bound_to_claim(pv: Obj, claim: Obj) -> bool:
    """Upstream `IsVolumeBoundToClaim`: claimRef names the claim, and its uid (if any) is the claim's."""
    ref = _d(_d(pv.get("spec")).get("claimRef"))
    m = _meta(claim)
    if not ref or ref.get("name") != m.get("name") or ref.get("namespace") != m.get("namespace"):
        return False
    return not ref.get("uid") or ref.get("uid") == m.get("uid")


def _requirement_matches(r: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = str(r.get("key", "")), r.get("operator"), [str(v) for v in r.get("values") or []]
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and len(values) == 1:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_affinity_matches(pv: Obj, labels: Mapping[str, str], node_name: str) -> bool:
    """Upstream `CheckNodeAffinity`: the required terms ORed, each term's expressions ANDed; no affinity fits."""
    required = _d(_d(_d(pv.get("spec")).get("nodeAffinity")).get("required"))
    terms = required.get("nodeSelectorTerms")
    if not required:
        return True
    for term in terms or []:
        term = _d(term)
        exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
        if not exprs and not fields:
            continue  # an empty term matches nothing
        if all(_requirement_matches(_d(r), labels) for r in exprs) and \
                all(_requirement_matches(_d(r), {"metadata.name": node_name}) for r in fields):
            return True
    return False


def _selector_matches(claim: Obj, pv: Obj) -> bool:
    sel = _d(claim.get("spec")).get("selector")
    if not sel:
        return True
    try:
        return LabelSelector.from_dict(sel).matches(_meta(pv).get("labels") or {})
    except ApiError:
        return False


def find_matching_volume(claim: Obj, volumes: Iterable[Obj], *, node: tuple[Mapping[str, str], str] | None = None,
                         delay_binding: bool = False) -> Obj | None:
    """Upstream `FindMatchingVolume`. `node` = (labels, name) on the scheduler's path, None for the controller."""
    requested, wanted_class = storage_request(claim), volume_class(claim)
    best: Obj | None = None
    for pv in volumes:
        size = capacity(pv)
        if size < requested or volume_mode(pv) != volume_mode(claim) or _meta(pv).get("deletionTimestamp"):
            continue
        affinity_ok = node is None or node_affinity_matches(pv, node[0], node[1])
        if is_bound_to_claim(pv, claim):
            return pv if affinity_ok else None
        if node is None and delay_binding:
            continue  # the scheduler binds this claim
        if _d(pv.get("status")).get("phase") != "Available" or _d(pv.get("spec")).get("claimRef"):
            continue
        if not _selector_matches(claim, pv) or volume_class(pv) != wanted_class or not affinity_ok:
            continue
        if not access_modes_ok(claim, pv):
            continue
        if best is None or capacity(best) > size:
            best = pv
    return best


def unsatisfied_reason(pv: Obj, claim: Obj) -> str | None:
    """Upstream `checkVolumeSatisfyClaim`: why a volume named by `claim.spec.volumeName` cannot serve it."""
    if capacity(pv) < storage_request(claim):
        return "requested PV is too small"
    if volume_class(pv) != volume_class(claim):
        return "storageClassName does not match"
    if volume_mode(pv) != volume_mode(claim):
        return "incompatible volumeMode"
    if not access_modes_ok(claim, pv):
        return "incompatible accessMode"
    return None


def pv_path(pv: Obj) -> str:
    """The host directory of a hostPath or local volume ("" for other sources)."""
    spec = _d(pv.get("spec"))
    return str(_d(spec.get("hostPath")).get("path") or _d(spec.get("local")).get("path") or "")


def local_path_dir(root: str, claim: Obj) -> str:
    """k3s's local-path directory of a claim: `<root>/pvc-<uid>_<namespace>_<name>`."""
    m = _meta(claim)
    return f"{root.rstrip('/')}/pvc-{m.get('uid', '')}_{m.get('namespace', '')}_{m.get('name', '')}"


def provisioned_volume(claim: Obj, storage_class: Obj, node: str, root: str) -> Obj:
    """The PV the local-path provisioner creates for `claim` on `node` (k3s's shape: hostPath DirectoryOrCreate,
    required node affinity on the hostname, the class's reclaim policy, the claim's size and access modes)."""
    m, spec = _meta(claim), _d(claim.get("spec"))
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"pvc-{m.get('uid', '')}",
                     "annotations": {ANN_PROVISIONED_BY: LOCAL_PATH, "local.path.provisioner/selected-node": node}},
        "spec": {
            "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
            "capacity": {"storage": str(_d(_d(spec.get("resources")).get("requests")).get("storage", "0"))},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": m.get("namespace", ""),
                         "name": m.get("name", ""), "uid": m.get("uid", ""),
                         "resourceVersion": m.get("resourceVersion", "")},
            "hostPath": {"path": local_path_dir(root, claim), "type": "DirectoryOrCreate"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}]}]}},
            "persistentVolumeReclaimPolicy": str(storage_class.get("reclaimPolicy") or "Delete"),
            "storageClassName": volume_class(claim),
            "volumeMode": volume_mode(claim),
        },
    }


def is_default_class(storage_class: Obj) -> bool:
    ann = _meta(storage_class).get("annotations") or {}
    return "true" in (ann.get(ANN_DEFAULT_CLASS), ann.get(ANN_BETA_DEFAULT_CLASS))


def default_class(classes: Iterable[Obj]) -> Obj | None:
    """Upstream `GetDefaultClass`: of several default classes the newest wins (then the name)."""
    found = [c for c in classes if is_default_class(c)]
    if not found:
        return None
    found.sort(key=lambda c: (str(_meta(c).get("creationTimestamp", "")), str(_meta(c).get("name", ""))))
    return found[-1]
