"""The scheduler's volume side effects (upstream volumebinding's Reserve and PreBind, `SchedulerVolumeBinder`).

- `reserve(pod, node, view)`: the plugin's `plan` for the chosen node (None: the pod has no unbound claims to
  act on). Pure; called in the scheduling loop.
- `pre_bind(pod, node, plan)`: in the pod's bind task, before the Binding: pre-bind each chosen volume
  (`spec.claimRef` with the claim's uid, `pv.kubernetes.io/bound-by-controller`), set
  `volume.kubernetes.io/selected-node` on each claim to provision, then wait until every claim of the pod is
  Bound (the PV controller and the provisioner finish the work). A write failure or `timeout` raises
  `VolumeBindingError`: the scheduler forgets the assumed pod and retries it.
- `InformerVolumes`: the `VolumeView` over the scheduler's informers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from lite.client import Client, Obj
from lite.errors import ApiError
from lite.informer import Informer
from lite.objects import deep_copy
from lite.server.scheduler.plugins.volumebinding import Plan, VolumeView, claim_names, plan, pre_filter_state
from lite.server.scheduler.snapshot import NodeInfo
from lite.volumematch import ANN_BOUND_BY_CONTROLLER, ANN_SELECTED_NODE

BIND_TIMEOUT = 600.0  # upstream's default bindTimeoutSeconds


class VolumeBindingError(Exception):
    """PreBind failed; the message goes into the FailedScheduling event."""


class InformerVolumes:
    def __init__(self, claims: Informer, pvs: Informer, classes: Informer) -> None:
        self._claims, self._pvs, self._classes = claims, pvs, classes

    def claim(self, namespace: str, name: str) -> Obj | None:
        return self._claims.get(f"{namespace}/{name}")

    def volume(self, name: str) -> Obj | None:
        return self._pvs.get(name)

    def storage_class(self, name: str) -> Obj | None:
        return self._classes.get(name)

    def volumes(self) -> Iterable[Obj]:
        return self._pvs.list()


class VolumeBinder:
    def __init__(self, client: Client, claims: Informer, pvs: Informer, *, timeout: float = BIND_TIMEOUT) -> None:
        self.client = client
        self.claims, self.pvs = claims, pvs
        self.timeout = timeout
        self._changed = asyncio.Event()

    def changed(self) -> None:
        """A claim, volume or class changed: wake the pre-binds that wait for claims to bind."""
        self._changed.set()
        self._changed = asyncio.Event()

    @staticmethod
    def reserve(pod: Obj, node: NodeInfo, view: VolumeView | None) -> Plan | None:
        state = pre_filter_state(pod, view)
        if state is None or not state.delayed:
            return None
        result = plan(state, node)
        return result if isinstance(result, Plan) else None

    async def pre_bind(self, pod: Obj, node: str, decided: Plan) -> None:
        try:
            for claim, pv in decided.binds:
                body = deep_copy(pv)
                m = claim["metadata"]
                body["spec"]["claimRef"] = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                            "namespace": m.get("namespace", ""), "name": m.get("name", ""),
                                            "uid": m.get("uid", ""), "resourceVersion": m.get("resourceVersion", "")}
                body["metadata"].setdefault("annotations", {})[ANN_BOUND_BY_CONTROLLER] = "yes"
                await self.client.update(self.pvs.kind, "", str(pv["metadata"]["name"]), body)
            for claim in decided.provisions:
                m = claim["metadata"]
                await self.client.patch(self.claims.kind, str(m.get("namespace", "")), str(m.get("name", "")),
                                        {"metadata": {"annotations": {ANN_SELECTED_NODE: node}}},
                                        patch_type="merge")
        except ApiError as e:
            raise VolumeBindingError(f"running PreBind plugin \"VolumeBinding\": {e.message}") from None
        await self._wait_bound(pod)

    async def _wait_bound(self, pod: Obj) -> None:
        ns = str((pod.get("metadata") or {}).get("namespace", ""))
        names = claim_names(pod)
        deadline = time.monotonic() + self.timeout
        while True:
            event = self._changed
            claims: list[Any] = [self.claims.get(f"{ns}/{n}") for n in names]
            if any(c is None for c in claims):
                raise VolumeBindingError("running PreBind plugin \"VolumeBinding\": a PersistentVolumeClaim of "
                                         "the pod was deleted")
            if all((c.get("status") or {}).get("phase") == "Bound" for c in claims):
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise VolumeBindingError("running PreBind plugin \"VolumeBinding\": binding volumes: "
                                         "timed out waiting for the condition")
            try:
                await asyncio.wait_for(event.wait(), left)
            except TimeoutError:
                continue
