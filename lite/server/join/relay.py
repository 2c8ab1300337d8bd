"""What one node's agent must be told: its pods and the ConfigMaps/Secrets (and RuntimeClass) they reference,
and the PersistentVolumeClaims they use with the PersistentVolumes bound to them (plus the local-path volumes
provisioned on that node, so its agent can remove their directories once they are deleted).

`NodeRelay` holds, per connected node, which pods and objects were sent, and turns cache changes into wire
messages (through `emit`). It is synchronous: informer handlers call it directly, in event order.

Invariants:
- A pod's ConfigMaps/Secrets are sent before the pod itself, so an agent never sees a pod whose references
  it has not been given (when they exist in the API at all).
- A pod is re-sent only when something other than its status (and resourceVersion/managedFields) changed:
  the agent's own status writes do not echo back.
- An object no pod of the node references any more is withdrawn with ObjectDelete (secrets do not linger).
- `resync(pods, reported)` sends the full desired set, PodDelete for every reported pod not in it, then Synced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from hashlib import blake2b
from typing import Any

from lite import wire
from lite.objects import name_of, namespace_of, uid_of
from lite.wire import pod_fingerprint

Obj = dict[str, Any]
Ref = tuple[str, str, str]  # (kind, namespace, name)
Lookup = Callable[[str, str, str], "Obj | None"]
_NO_REFS: frozenset[Ref] = frozenset()


def fingerprint_digest(pod: Obj) -> bytes:
    """A 16-byte digest of `wire.pod_fingerprint(pod)`: what a relay keeps per pod to tell a re-send from an
    echo of the agent's own status (the fingerprint itself is the whole pod spec, ~1.5 KB a pod)."""
    return blake2b(pod_fingerprint(pod), digest_size=16).digest()


def _names_in_volume(vol: Obj) -> Iterator[tuple[str, str]]:
    if (pvc := vol.get("persistentVolumeClaim")) and pvc.get("claimName"):
        yield "PersistentVolumeClaim", pvc["claimName"]
    if (cm := vol.get("configMap")) and cm.get("name"):
        yield "ConfigMap", cm["name"]
    if (sec := vol.get("secret")) and sec.get("secretName"):
        yield "Secret", sec["secretName"]
    for src in (vol.get("projected") or {}).get("sources") or []:
        if (cm := src.get("configMap")) and cm.get("name"):
            yield "ConfigMap", cm["name"]
        if (sec := src.get("secret")) and sec.get("name"):
            yield "Secret", sec["name"]


def _names_in_container(c: Obj) -> Iterator[tuple[str, str]]:
    for env in c.get("env") or []:
        vf = env.get("valueFrom") or {}
        if (ref := vf.get("configMapKeyRef")) and ref.get("name"):
            yield "ConfigMap", ref["name"]
        if (ref := vf.get("secretKeyRef")) and ref.get("name"):
            yield "Secret", ref["name"]
    for src in c.get("envFrom") or []:
        if (ref := src.get("configMapRef")) and ref.get("name"):
            yield "ConfigMap", ref["name"]
        if (ref := src.get("secretRef")) and ref.get("name"):
            yield "Secret", ref["name"]


def pod_refs(pod: Obj) -> set[Ref]:
    """ConfigMaps and Secrets the pod uses: volumes (incl. projected), env valueFrom/envFrom, pull secrets."""
    spec = pod.get("spec") or {}
    ns = namespace_of(pod)
    names: set[tuple[str, str]] = set()
    for vol in spec.get("volumes") or []:
        names.update(_names_in_volume(vol))
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(key) or []:
            names.update(_names_in_container(c))
    for ips in spec.get("imagePullSecrets") or []:
        if ips.get("name"):
            names.add(("Secret", ips["name"]))
    refs = {(kind, ns, name) for kind, name in names}
    if spec.get("runtimeClassName"):
        refs.add(("RuntimeClass", "", str(spec["runtimeClassName"])))
    return refs


def node_needs_volume(pv: Obj, claims: set[tuple[str, str]], node: str) -> bool:
    """A volume bound to a claim the node's pods use, or one the local-path provisioner made on `node`."""
    ref = (pv.get("spec") or {}).get("claimRef") or {}
    if (str(ref.get("namespace", "")), str(ref.get("name", ""))) in claims:
        return True
    ann = (pv.get("metadata") or {}).get("annotations") or {}
    return bool(node) and ann.get("pv.kubernetes.io/provisioned-by") == "rancher.io/local-path" \
        and ann.get("local.path.provisioner/selected-node") == node


class NodeRelay:
    """Per-node bookkeeping of what was sent. See the module docstring."""

    def __init__(self, emit: Callable[[wire.Message], None], lookup: Lookup, *, node: str = "",
                 volumes: Callable[[], Iterable[Obj]] = lambda: ()) -> None:
        self._emit = emit
        self._lookup = lookup
        self._node = node
        self._volumes = volumes
        self._pvs: dict[str, str] = {}  # PersistentVolumes sent -> resourceVersion
        self._pods: dict[str, bytes] = {}  # uid -> digest of the fingerprint sent (`fingerprint_digest`)
        self._refs: dict[str, frozenset[Ref]] = {}  # uid -> refs of that pod (only pods with some refs)
        self._sent: dict[Ref, str] = {}  # refs whose object was sent -> its resourceVersion

    def referenced(self, ref: Ref) -> bool:
        return any(ref in refs for refs in self._refs.values())

    def upsert_pod(self, pod: Obj) -> None:
        uid = uid_of(pod)
        refs = frozenset(pod_refs(pod)) or _NO_REFS
        old_refs = self._refs.get(uid, _NO_REFS)
        if refs:
            self._refs[uid] = refs
        elif old_refs:
            del self._refs[uid]
        for ref in sorted(refs - old_refs):
            if ref not in self._sent:
                self._send_object(ref)
        if refs != old_refs:
            self.volumes_changed()
        fp = fingerprint_digest(pod)
        if self._pods.get(uid) != fp:
            self._pods[uid] = fp
            self._emit(wire.PodUpsert(pod))
        self._withdraw(old_refs - refs)

    def remove_pod(self, pod: Obj) -> None:
        uid = uid_of(pod)
        if uid not in self._pods:
            return
        del self._pods[uid]
        self._emit(wire.PodDelete(uid, namespace_of(pod), name_of(pod)))
        self._withdraw(self._refs.pop(uid, _NO_REFS))
        self.volumes_changed()

    def object_changed(self, kind: str, obj: Obj, deleted: bool = False) -> None:
        ref = (kind, namespace_of(obj), name_of(obj))
        if not self.referenced(ref):
            return
        if deleted:
            if self._sent.pop(ref, None) is not None:
                self._emit(wire.ObjectDelete(kind, ref[1], ref[2]))
            return
        rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        if self._sent.get(ref) != rv or not rv:
            self._sent[ref] = rv
            self._emit(wire.ObjectUpsert(kind, obj))
        if kind == "PersistentVolumeClaim":
            self.volumes_changed()

    def volumes_changed(self) -> None:
        """Send the PersistentVolumes this node needs now (see `node_needs_volume`), withdraw the others."""
        claims = {(ns, name) for refs in self._refs.values() for kind, ns, name in refs
                  if kind == "PersistentVolumeClaim"}
        want = {name_of(pv): pv for pv in self._volumes() if node_needs_volume(pv, claims, self._node)}
        for name, pv in sorted(want.items()):
            rv = str((pv.get("metadata") or {}).get("resourceVersion", ""))
            if self._pvs.get(name) != rv or not rv:
                self._pvs[name] = rv
                self._emit(wire.ObjectUpsert("PersistentVolume", pv))
        for name in sorted(set(self._pvs) - set(want)):
            del self._pvs[name]
            self._emit(wire.ObjectDelete("PersistentVolume", "", name))

    def resync(self, pods: Iterable[Obj], reported: dict[str, str]) -> None:
        uids = []
        for pod in pods:
            uids.append(uid_of(pod))
            self.upsert_pod(pod)
        self.volumes_changed()
        desired = set(uids)
        for uid, key in sorted(reported.items()):
            if uid not in desired:
                ns, _, name = key.partition("/")
                self._emit(wire.PodDelete(uid, ns, name))
        self._emit(wire.Synced(uids))

    def _send_object(self, ref: Ref) -> None:
        obj = self._lookup(*ref)
        if obj is not None:
            self._sent[ref] = str((obj.get("metadata") or {}).get("resourceVersion", ""))
            self._emit(wire.ObjectUpsert(ref[0], obj))

    def _withdraw(self, refs: frozenset[Ref]) -> None:
        for ref in sorted(refs):
            if not self.referenced(ref) and self._sent.pop(ref, None) is not None:
                self._emit(wire.ObjectDelete(*ref))
