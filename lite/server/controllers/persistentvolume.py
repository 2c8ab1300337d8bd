"""The PersistentVolume controller: binds claims to volumes, releases and reclaims volumes, runs the built-in
local-path provisioner, and removes the storage-protection finalizers (upstream's
`pkg/controller/volume/persistentvolume`, `pvcprotection`, `pvprotection`, and k3s's local-path provisioner).

Keys: `claim:<ns>/<name>` and `volume:<name>` on one queue. Each sync reads only the caches (level-triggered):

    claim (not bind-completed)   volumeName ""  → matching volume (`lite.volumematch`) → bind
                                                 → none: WaitForFirstConsumer without a selected node: wait;
                                                   class provisioner local-path (node selected): create the PV
                                  volumeName set → that volume if it satisfies the claim → bind
    claim (bind-completed)        its volume gone or bound elsewhere → phase Lost; else finish the binding
    volume                        no claimRef → Available; its claim gone → Released, then reclaim:
                                  Retain keeps it; Delete deletes a provisioned volume (the node's agent then
                                  removes the directory), other volumes go Failed (no deleter)
    being deleted                 pvc-protection leaves once no running pod uses the claim;
                                  pv-protection leaves once the volume is not Bound

A bind is upstream's four writes in order (volume claimRef, volume phase Bound, claim volumeName and
annotations, claim phase Bound with capacity and access modes); each is skipped when already done, so a failed
sync resumes where it stopped. Writes are resourceVersion-guarded updates: a conflict requeues with backoff.
"""

from __future__ import annotations

from typing import Any, ClassVar

from lite.client import Client
from lite.errors import ApiError
from lite.events import EventRecorder
from lite.informer import NAMESPACE_INDEX, SharedInformers
from lite.objects import deep_copy, key_of
from lite.server.controllers.runtime import Controller, builtin
from lite.volumematch import (
    ANN_BETA_STORAGE_PROVISIONER,
    ANN_BIND_COMPLETED,
    ANN_BOUND_BY_CONTROLLER,
    ANN_PROVISIONED_BY,
    ANN_SELECTED_NODE,
    ANN_STORAGE_PROVISIONER,
    LOCAL_PATH,
    NO_PROVISIONER,
    PV_PROTECTION,
    PVC_PROTECTION,
    WAIT_FOR_FIRST_CONSUMER,
    find_matching_volume,
    is_bound_to_claim,
    provisioned_volume,
    unsatisfied_reason,
    volume_class,
)

Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")


def _meta(obj: Obj) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def _spec(obj: Obj) -> dict[str, Any]:
    s = obj.get("spec")
    return s if isinstance(s, dict) else {}


def _phase(obj: Obj) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


def claim_names(pod: Obj) -> list[str]:
    """The claims a pod's volumes name."""
    return [str(v["persistentVolumeClaim"].get("claimName", "")) for v in _spec(pod).get("volumes") or []
            if isinstance(v, dict) and isinstance(v.get("persistentVolumeClaim"), dict)]


def claim_in_use(claim: Obj, pods: list[Obj]) -> bool:
    """pvc-protection's rule: a pod of the claim's namespace that names it and has not finished."""
    name = _meta(claim).get("name")
    return any(_phase(p) not in TERMINAL and name in claim_names(p) for p in pods)


class PersistentVolumeController(Controller):
    name: ClassVar[str] = "persistentvolume-binder"

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder | None = None, *,
                 local_path_root: str = "/var/lib/lite/storage") -> None:
        super().__init__(client, informers, recorder or EventRecorder(client, "persistentvolume-controller"))
        self.pvc_kind, self.pv_kind = builtin("", "PersistentVolumeClaim"), builtin("", "PersistentVolume")
        self.claims = self.informer(self.pvc_kind, primary=True)
        self.volumes = self.informer(self.pv_kind)
        self.classes = self.informer(builtin("storage.k8s.io", "StorageClass"))
        self.pods = self.informer(builtin("", "Pod"))
        self.local_path_root = local_path_root
        self.claims.add_handlers(on_add=self._claim_event, on_update=lambda _o, n: self._claim_event(n),
                                 on_delete=self._claim_event)
        self.volumes.add_handlers(on_add=self._volume_event, on_update=lambda _o, n: self._volume_event(n),
                                  on_delete=self._volume_event)
        self.classes.add_handlers(on_add=self._class_event, on_update=lambda _o, n: self._class_event(n))
        self.pods.add_handlers(on_update=lambda _o, n: self._pod_event(n), on_delete=self._pod_event)

    # -- events → keys --

    def _claim_event(self, claim: Obj) -> None:
        self.queue.add(f"claim:{key_of(claim)}")
        name = _spec(claim).get("volumeName")
        if name:
            self.queue.add(f"volume:{name}")
        for pv in self.volumes.list():  # a deleted claim releases the volumes that point at it
            ref = _spec(pv).get("claimRef") or {}
            if ref.get("name") == _meta(claim).get("name") and ref.get("namespace") == _meta(claim).get("namespace"):
                self.queue.add(f"volume:{_meta(pv).get('name', '')}")

    def _volume_event(self, pv: Obj) -> None:
        self.queue.add(f"volume:{_meta(pv).get('name', '')}")
        ref = _spec(pv).get("claimRef") or {}
        if ref.get("name"):
            self.queue.add(f"claim:{ref.get('namespace', '')}/{ref['name']}")
        elif _phase(pv) == "Available":  # a free volume: the waiting claims may fit it now
            self._pending_claims()

    def _class_event(self, _cls: Obj) -> None:
        self._pending_claims()

    def _pending_claims(self) -> None:
        for claim in self.claims.list():
            if _phase(claim) == "Pending":
                self.queue.add(f"claim:{key_of(claim)}")

    def _pod_event(self, pod: Obj) -> None:
        ns = _meta(pod).get("namespace", "")
        for name in claim_names(pod):
            claim = self.claims.get(f"{ns}/{name}")
            if claim is not None and _meta(claim).get("deletionTimestamp"):
                self.queue.add(f"claim:{ns}/{name}")

    def initial_keys(self) -> list[str]:
        claims, volumes = self.claims.keys(), self.volumes.keys()
        return [f"claim:{k}" for k in claims] + [f"volume:{k}" for k in volumes]

    async def reconcile(self, key: str) -> float | None:
        what, _, rest = key.partition(":")
        if what == "claim":
            claim = self.claims.get(rest)
            if claim is not None:
                await self.sync_claim(claim)
        elif what == "volume":
            pv = self.volumes.get(rest)
            if pv is not None:
                await self.sync_volume(pv)
        return None

    # -- claims --

    async def sync_claim(self, claim: Obj) -> None:
        if _meta(claim).get("deletionTimestamp"):
            await self._protect_claim(claim)
            return
        if (_meta(claim).get("annotations") or {}).get(ANN_BIND_COMPLETED):
            await self._sync_bound_claim(claim)
        else:
            await self._sync_unbound_claim(claim)

    async def _protect_claim(self, claim: Obj) -> None:
        finalizers = list(_meta(claim).get("finalizers") or [])
        if PVC_PROTECTION not in finalizers:
            return
        if claim_in_use(claim, self.pods.by_index(NAMESPACE_INDEX, str(_meta(claim).get("namespace", "")))):
            return
        body = deep_copy(claim)
        body["metadata"]["finalizers"] = [f for f in finalizers if f != PVC_PROTECTION]
        await self._update(self.pvc_kind, body)

    async def _sync_unbound_claim(self, claim: Obj) -> None:
        cls_name = volume_class(claim)
        cls = self.classes.get(cls_name) if cls_name else None
        delay = cls is not None and cls.get("volumeBindingMode") == WAIT_FOR_FIRST_CONSUMER
        wanted = _spec(claim).get("volumeName")
        if wanted:
            pv = self.volumes.get(str(wanted))
            if pv is None:
                return await self._set_claim_phase(claim, "Pending")
            if _spec(pv).get("claimRef") and not is_bound_to_claim(pv, claim):
                await self.recorder.warning(claim, "FailedBinding", f'volume "{wanted}" already bound to a '
                                            "different claim.")
                return await self._set_claim_phase(claim, "Pending")
            reason = unsatisfied_reason(pv, claim)
            if reason is not None:
                await self.recorder.warning(claim, "VolumeMismatch", f"Cannot bind to requested volume "
                                            f'"{wanted}": {reason}')
                return await self._set_claim_phase(claim, "Pending")
            return await self._bind(pv, claim)
        pv = find_matching_volume(claim, self.volumes.list(), delay_binding=delay)
        if pv is not None:
            return await self._bind(pv, claim)
        await self._set_claim_phase(claim, "Pending")
        selected = (_meta(claim).get("annotations") or {}).get(ANN_SELECTED_NODE)
        if delay and not selected:
            await self.recorder.normal(claim, "WaitForFirstConsumer",
                                       "waiting for first consumer to be created before binding")
        elif cls is None:
            await self.recorder.normal(claim, "FailedBinding", "no persistent volumes available for this claim "
                                       "and no storage class is set" if not cls_name else
                                       f'storageclass.storage.k8s.io "{cls_name}" not found')
        elif cls.get("provisioner") != NO_PROVISIONER:
            await self._provision(claim, cls, str(selected or ""))

    async def _provision(self, claim: Obj, cls: Obj, node: str) -> None:
        provisioner = str(cls.get("provisioner", ""))
        ann = _meta(claim).get("annotations") or {}
        if ann.get(ANN_STORAGE_PROVISIONER) != provisioner:
            body = deep_copy(claim)
            anns = body["metadata"].setdefault("annotations", {})
            anns[ANN_STORAGE_PROVISIONER] = anns[ANN_BETA_STORAGE_PROVISIONER] = provisioner
            claim = await self._update(self.pvc_kind, body)
        if provisioner != LOCAL_PATH:
            await self.recorder.normal(claim, "ExternalProvisioning", "Waiting for a volume to be created either by "
                                       f"the external provisioner '{provisioner}' or manually by the system "
                                       "administrator. If volume creation is delayed, please verify that the "
                                       "provisioner is running and correctly registered.")
            return
        if not node:
            await self.recorder.warning(claim, "ProvisioningFailed", "failed to provision volume with StorageClass "
                                        f'"{_meta(cls).get("name", "")}": configuration error, no node was '
                                        "specified (local-path needs volumeBindingMode WaitForFirstConsumer)")
            return
        pv = provisioned_volume(claim, cls, node, self.local_path_root)
        await self.recorder.normal(claim, "Provisioning", f'External provisioner is provisioning volume for claim '
                                   f'"{key_of(claim)}"')
        try:
            await self.client.create(self.pv_kind, "", pv)
        except ApiError as e:
            if e.code != 409:
                await self.recorder.warning(claim, "ProvisioningFailed", f"failed to provision volume: {e.message}")
                raise
            return
        await self.recorder.normal(claim, "ProvisioningSucceeded",
                                   f"Successfully provisioned volume {pv['metadata']['name']}")

    async def _sync_bound_claim(self, claim: Obj) -> None:
        name = _spec(claim).get("volumeName")
        pv = self.volumes.get(str(name)) if name else None
        if pv is None:
            if _phase(claim) != "Lost":
                await self.recorder.warning(claim, "ClaimLost", "Bound claim has lost reference to "
                                            "PersistentVolume. Data on the volume is lost!")
            return await self._set_claim_phase(claim, "Lost")
        if _spec(pv).get("claimRef") and not is_bound_to_claim(pv, claim):
            if _phase(claim) != "Lost":
                await self.recorder.warning(claim, "ClaimMisbound", "Two claims are bound to the same volume, "
                                            "this one is bound incorrectly")
            return await self._set_claim_phase(claim, "Lost")
        await self._bind(pv, claim)

    async def _bind(self, pv: Obj, claim: Obj) -> None:
        """Upstream `bind`: volume claimRef → volume Bound → claim volumeName/annotations → claim Bound."""
        cm = _meta(claim)
        ref = _spec(pv).get("claimRef") or {}
        if not ref or ref.get("uid") != cm.get("uid"):
            body = deep_copy(pv)
            body["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": cm.get("namespace", ""),
                                        "name": cm.get("name", ""), "uid": cm.get("uid", ""), "apiVersion": "v1",
                                        "resourceVersion": cm.get("resourceVersion", "")}
            if not ref:
                body["metadata"].setdefault("annotations", {})[ANN_BOUND_BY_CONTROLLER] = "yes"
            pv = await self._update(self.pv_kind, body)
        if _phase(pv) != "Bound":
            pv = await self._set_volume_phase(pv, "Bound")
        anns = cm.get("annotations") or {}
        if _spec(claim).get("volumeName") != _meta(pv).get("name") or anns.get(ANN_BIND_COMPLETED) != "yes":
            body = deep_copy(claim)
            if not _spec(claim).get("volumeName"):
                body["metadata"].setdefault("annotations", {})[ANN_BOUND_BY_CONTROLLER] = "yes"
            body["spec"]["volumeName"] = _meta(pv).get("name")
            body["metadata"].setdefault("annotations", {})[ANN_BIND_COMPLETED] = "yes"
            claim = await self._update(self.pvc_kind, body)
        status = claim.get("status") or {}
        want = {"phase": "Bound", "accessModes": list(_spec(pv).get("accessModes") or []),
                "capacity": dict(_spec(pv).get("capacity") or {})}
        if any(status.get(k) != v for k, v in want.items()):
            body = deep_copy(claim)
            body["status"] = {**status, **want}
            await self.client.update(self.pvc_kind, str(cm.get("namespace", "")), str(cm.get("name", "")), body,
                                     subresource="status")

    # -- volumes --

    async def sync_volume(self, pv: Obj) -> None:
        if _meta(pv).get("deletionTimestamp") and PV_PROTECTION in (_meta(pv).get("finalizers") or []) \
                and _phase(pv) != "Bound":
            body = deep_copy(pv)
            body["metadata"]["finalizers"] = [f for f in body["metadata"]["finalizers"] if f != PV_PROTECTION]
            await self._update(self.pv_kind, body)
            return
        # A volume being deleted but still Bound goes on as usual: once its claim goes it is Released, and
        # the next sync lifts pv-protection.
        ref = _spec(pv).get("claimRef") or {}
        if not ref:
            await self._set_volume_phase(pv, "Available")
            return
        claim = self.claims.get(f"{ref.get('namespace', '')}/{ref.get('name', '')}")
        if not ref.get("uid"):  # pre-bound by the user: the claim's sync binds it
            await self._set_volume_phase(pv, "Available")
            return
        if claim is not None and _meta(claim).get("uid") != ref.get("uid"):
            claim = None
        if claim is None:
            await self._release(pv)
        elif not _spec(claim).get("volumeName"):
            self.queue.add(f"claim:{key_of(claim)}")  # binding under way (or pre-bound): finish on the claim
        elif _spec(claim).get("volumeName") == _meta(pv).get("name"):
            await self._set_volume_phase(pv, "Bound")
        elif (_meta(pv).get("annotations") or {}).get(ANN_BOUND_BY_CONTROLLER):
            body = deep_copy(pv)  # the claim went to another volume: undo our half of this binding
            body["spec"].pop("claimRef", None)
            body["metadata"].get("annotations", {}).pop(ANN_BOUND_BY_CONTROLLER, None)
            pv = await self._update(self.pv_kind, body)
            await self._set_volume_phase(pv, "Available")

    async def _release(self, pv: Obj) -> None:
        if _phase(pv) not in ("Released", "Failed"):
            pv = await self._set_volume_phase(pv, "Released")
        if _phase(pv) == "Failed":
            return
        if _spec(pv).get("persistentVolumeReclaimPolicy") != "Delete":
            return  # Retain: the data and the volume stay until an administrator acts
        name = str(_meta(pv).get("name", ""))
        if (_meta(pv).get("annotations") or {}).get(ANN_PROVISIONED_BY) == LOCAL_PATH:
            try:
                await self.client.delete(self.pv_kind, "", name)
            except ApiError as e:
                if e.code != 404:
                    raise
            return
        msg = f'error getting deleter volume plugin for volume "{name}": no deletable volume plugin matched'
        await self.recorder.warning(pv, "VolumeFailedDelete", msg)
        await self._set_volume_phase(pv, "Failed", msg)

    # -- writes --

    async def _update(self, kind: Any, body: Obj) -> Obj:
        m = body["metadata"]
        return await self.client.update(kind, str(m.get("namespace", "")), str(m["name"]), body)

    async def _set_volume_phase(self, pv: Obj, phase: str, message: str = "") -> Obj:
        status = pv.get("status") or {}
        if status.get("phase") == phase and (status.get("message") or "") == message:
            return pv
        body = deep_copy(pv)
        body["status"] = {k: v for k, v in status.items() if k not in ("message", "reason")}
        body["status"]["phase"] = phase
        if message:
            body["status"]["message"] = message
        return await self.client.update(self.pv_kind, "", str(_meta(pv)["name"]), body, subresource="status")

    async def _set_claim_phase(self, claim: Obj, phase: str) -> None:
        if _phase(claim) == phase:
            return
        body = deep_copy(claim)
        body["status"] = {**(claim.get("status") or {}), "phase": phase}
        m = _meta(claim)
        await self.client.update(self.pvc_kind, str(m.get("namespace", "")), str(m["name"]), body,
                                 subresource="status")
