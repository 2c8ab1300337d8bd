"""What the node-local desired-state cache keeps, and what a replay of it consists of (pure, no I/O).

`CacheState` mirrors the desired state the agent holds, fed with the same messages `Agent.handle` gets
(`record(state, msg)` returns the sections the message changed). The rules, by kind:

- The node config: the last Welcome/NodeConfig `config`.
- Pods: PodUpsert sets, PodDelete removes, Synced keeps only its uids.
- Objects pods reference (`POD_KINDS`: ConfigMap, Secret, RuntimeClass, PersistentVolumeClaim): kept while a
  cached pod references them (`pod_refs`, the relay's rule). An object that loses its last referencing pod
  (pod deleted, or its new version no longer names it) is dropped at once; at Synced every unreferenced one
  is. An object relayed before its pod (the relay always sends them first) is never dropped for that.
- Objects whose consumers replace their whole set at each resync (`RESYNC_KINDS`: Node for the pod network,
  Service/EndpointSlice for the proxy, DNS and service env, NetworkPolicy/Namespace/PolicyPod for the policy
  enforcer, PersistentVolume as the agent's volume sweep does): between Welcome and Synced the ones relayed
  are noted, at Synced the others are dropped; ObjectDelete drops one at any time.
- Any other kind: upsert/delete only.
- Service-account tokens (`tokens`, (pod uid, `satokens.token_key`) → (token, expiry)): kept while their pod is.

`replay_messages(state)` is what the agent hands itself when it has no server: Welcome(config), the objects in
`REPLAY_ORDER` (Nodes first, so the pod network knows its peers; the pods' objects before the pods), every pod,
then Synced(their uids). None when no Welcome was ever recorded (a node that never joined, or a cache that
could not be read): replaying nothing would tell the agent to stop the pods it adopted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lite import wire

Obj = dict[str, Any]
Ref = tuple[str, str, str]  # (kind, namespace, name)
Key = tuple[str, str]  # (namespace, name)

POD_KINDS = frozenset({"ConfigMap", "Secret", "RuntimeClass", "PersistentVolumeClaim"})
RESYNC_KINDS = frozenset({"Node", "Service", "EndpointSlice", "NetworkPolicy", "Namespace", "PolicyPod",
                          "PersistentVolume"})
REPLAY_ORDER = ("Node", "Namespace", "NetworkPolicy", "PolicyPod", "Service", "EndpointSlice", "RuntimeClass",
                "PersistentVolume", "PersistentVolumeClaim", "ConfigMap", "Secret")
SECRET = "Secret"

# Sections: the unit the cache writes (one file each). Objects go by kind; Secrets and tokens are encrypted.
CONFIG, PODS, SECRETS, TOKENS = "config", "pods", "secrets", "tokens"
ENCRYPTED = frozenset({SECRETS, TOKENS})


def section_of(kind: str) -> str:
    return SECRETS if kind == SECRET else f"objects-{kind}"


def valid_kind(kind: str) -> bool:
    """A kind names a file (`objects-<kind>`): plain letters only."""
    return kind.isascii() and kind.isalpha() and len(kind) <= 64


@dataclass
class CacheState:
    config: Obj | None = None
    pods: dict[str, Obj] = field(default_factory=dict)
    objects: dict[str, dict[Key, Obj]] = field(default_factory=dict)  # kind -> (namespace, name) -> object
    tokens: dict[tuple[str, str], tuple[str, float]] = field(default_factory=dict)
    refs: dict[str, set[Ref]] = field(default_factory=dict)  # pod uid -> its POD_KINDS references
    users: dict[Ref, int] = field(default_factory=dict)  # reference -> how many cached pods make it
    resynced: set[Ref] | None = None  # RESYNC_KINDS objects relayed since the last Welcome (None: no resync)

    def count(self) -> int:
        """Pods plus objects held (the cache's object bound counts these)."""
        return len(self.pods) + sum(len(objs) for objs in self.objects.values())

    def referenced(self, ref: Ref) -> bool:
        return self.users.get(ref, 0) > 0

    def set_refs(self, uid: str, refs: set[Ref]) -> set[Ref]:
        """The pod's references are now `refs` (empty: the pod is gone); the ones no cached pod makes any more."""
        old = self.refs.pop(uid, set())
        if refs:
            self.refs[uid] = refs
        for ref in refs - old:
            self.users[ref] = self.users.get(ref, 0) + 1
        lost = set()
        for ref in old - refs:
            left = self.users.get(ref, 0) - 1
            if left > 0:
                self.users[ref] = left
            else:
                self.users.pop(ref, None)
                lost.add(ref)
        return lost


# ---- references -------------------------------------------------------------------------------------------

def _volume_names(vol: Obj) -> Iterator[tuple[str, str]]:
    if (pvc := vol.get("persistentVolumeClaim")) and pvc.get("claimName"):
        yield "PersistentVolumeClaim", str(pvc["claimName"])
    if (cm := vol.get("configMap")) and cm.get("name"):
        yield "ConfigMap", str(cm["name"])
    if (sec := vol.get("secret")) and sec.get("secretName"):
        yield SECRET, str(sec["secretName"])
    for src in (vol.get("projected") or {}).get("sources") or []:
        if (cm := (src or {}).get("configMap")) and cm.get("name"):
            yield "ConfigMap", str(cm["name"])
        if (sec := (src or {}).get("secret")) and sec.get("name"):
            yield SECRET, str(sec["name"])


def _container_names(c: Obj) -> Iterator[tuple[str, str]]:
    for env in c.get("env") or []:
        vf = (env or {}).get("valueFrom") or {}
        if (ref := vf.get("configMapKeyRef")) and ref.get("name"):
            yield "ConfigMap", str(ref["name"])
        if (ref := vf.get("secretKeyRef")) and ref.get("name"):
            yield SECRET, str(ref["name"])
    for src in c.get("envFrom") or []:
        if (ref := (src or {}).get("configMapRef")) and ref.get("name"):
            yield "ConfigMap", str(ref["name"])
        if (ref := (src or {}).get("secretRef")) and ref.get("name"):
            yield SECRET, str(ref["name"])


def pod_refs(pod: Obj) -> set[Ref]:
    """The ConfigMaps, Secrets, claims and RuntimeClass a pod uses (the same set the server's relay sends it)."""
    spec = pod.get("spec") or {}
    ns = str((pod.get("metadata") or {}).get("namespace") or "")
    names: set[tuple[str, str]] = set()
    for vol in spec.get("volumes") or []:
        names.update(_volume_names(vol or {}))
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(key) or []:
            names.update(_container_names(c or {}))
    for ips in spec.get("imagePullSecrets") or []:
        if (ips or {}).get("name"):
            names.add((SECRET, str(ips["name"])))
    refs = {(kind, ns, name) for kind, name in names}
    if spec.get("runtimeClassName"):
        refs.add(("RuntimeClass", "", str(spec["runtimeClassName"])))
    return refs


def unused(state: CacheState) -> set[Ref]:
    """Cached objects of `POD_KINDS` that no cached pod references."""
    return {(kind, ns, name) for kind in POD_KINDS for ns, name in state.objects.get(kind, {})
            if not state.referenced((kind, ns, name))}


# ---- recording --------------------------------------------------------------------------------------------

def _drop(state: CacheState, ref: Ref, dirty: set[str]) -> None:
    objs = state.objects.get(ref[0])
    if objs is not None and objs.pop((ref[1], ref[2]), None) is not None:
        dirty.add(section_of(ref[0]))


def _drop_pod(state: CacheState, uid: str, dirty: set[str]) -> None:
    if state.pods.pop(uid, None) is not None:
        dirty.add(PODS)
    for ref in sorted(state.set_refs(uid, set())):
        _drop(state, ref, dirty)
    for key in [k for k in state.tokens if k[0] == uid]:
        del state.tokens[key]
        dirty.add(TOKENS)


def record(state: CacheState, msg: wire.Message) -> set[str]:
    """Apply one desired-state message; the sections it changed (empty: nothing to keep)."""
    dirty: set[str] = set()
    if isinstance(msg, (wire.Welcome, wire.NodeConfig)):
        if msg.config != state.config:
            state.config = dict(msg.config)
            dirty |= {CONFIG, PODS}  # the pods' file goes with the config: a replay needs both
        if isinstance(msg, wire.Welcome):
            state.resynced = set()
    elif isinstance(msg, wire.PodUpsert):
        meta = msg.pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return dirty
        lost = state.set_refs(uid, pod_refs(msg.pod))
        state.pods[uid] = msg.pod
        dirty.add(PODS)
        for ref in sorted(lost):
            _drop(state, ref, dirty)
    elif isinstance(msg, wire.PodDelete):
        _drop_pod(state, msg.uid, dirty)
    elif isinstance(msg, wire.ObjectUpsert):
        if not valid_kind(msg.kind):
            return dirty
        meta = msg.obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        state.objects.setdefault(msg.kind, {})[key] = msg.obj
        dirty.add(section_of(msg.kind))
        if msg.kind in RESYNC_KINDS and state.resynced is not None:
            state.resynced.add((msg.kind, *key))
    elif isinstance(msg, wire.ObjectDelete):
        _drop(state, (msg.kind, msg.namespace, msg.name), dirty)
    elif isinstance(msg, wire.Synced):
        desired = set(msg.uids)
        for uid in [u for u in state.pods if u not in desired]:
            _drop_pod(state, uid, dirty)
        for ref in sorted(unused(state)):
            _drop(state, ref, dirty)
        if state.resynced is not None:
            for kind in RESYNC_KINDS:
                for ns, name in [k for k in state.objects.get(kind, {}) if (kind, *k) not in state.resynced]:
                    _drop(state, (kind, ns, name), dirty)
            state.resynced = None
    return dirty


def keep_token(state: CacheState, uid: str, key: str, token: str, expires: float) -> set[str]:
    """A token the server issued for a cached pod (others are not kept: nothing would remove them)."""
    if uid not in state.pods or state.tokens.get((uid, key)) == (token, expires):
        return set()
    state.tokens[(uid, key)] = (token, expires)
    return {TOKENS}


# ---- replay -----------------------------------------------------------------------------------------------

def _pod_order(pod: Obj) -> tuple[str, str, str]:
    meta = pod.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def replay_messages(state: CacheState) -> list[wire.Message] | None:
    """Welcome(config) → objects (`REPLAY_ORDER`, then other kinds by name) → pods (oldest first) → Synced."""
    if state.config is None:
        return None
    out: list[wire.Message] = [wire.Welcome(config=dict(state.config))]
    kinds = [k for k in REPLAY_ORDER if k in state.objects] + sorted(set(state.objects) - set(REPLAY_ORDER))
    for kind in kinds:
        for key in sorted(state.objects[kind]):
            out.append(wire.ObjectUpsert(kind, state.objects[kind][key]))
    pods = sorted(state.pods.values(), key=_pod_order)
    out.extend(wire.PodUpsert(pod) for pod in pods)
    out.append(wire.Synced([str(pod["metadata"]["uid"]) for pod in pods]))
    return out


# ---- sections (what a file holds) -------------------------------------------------------------------------

def section_data(state: CacheState, name: str) -> Any:
    """The JSON-able content of one section now (shallow: the objects themselves are shared, never mutated)."""
    if name == CONFIG:
        return state.config
    if name == PODS:
        return list(state.pods.values())
    if name == TOKENS:
        return [[uid, key, token, expires] for (uid, key), (token, expires) in state.tokens.items()]
    kind = SECRET if name == SECRETS else name.removeprefix("objects-")
    return list(state.objects.get(kind, {}).values())


def restore(sections: dict[str, Any]) -> CacheState:
    """A state from loaded sections (what `section_data` gave); malformed entries are skipped."""
    state = CacheState()
    config = sections.get(CONFIG)
    state.config = config if isinstance(config, dict) else None
    for pod in sections.get(PODS) or []:
        uid = str(((pod or {}).get("metadata") or {}).get("uid") or "") if isinstance(pod, dict) else ""
        if uid:
            state.pods[uid] = pod
            state.set_refs(uid, pod_refs(pod))
    for name, data in sections.items():
        if name == SECRETS or name.startswith("objects-"):
            kind = SECRET if name == SECRETS else name.removeprefix("objects-")
            if not valid_kind(kind) or not isinstance(data, list):
                continue
            objs = state.objects.setdefault(kind, {})
            for obj in data:
                if isinstance(obj, dict):
                    meta = obj.get("metadata") or {}
                    objs[(str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = obj
    for entry in sections.get(TOKENS) or []:
        if isinstance(entry, list) and len(entry) == 4 and str(entry[0]) in state.pods:
            state.tokens[(str(entry[0]), str(entry[1]))] = (str(entry[2]), float(entry[3]))
    return state
