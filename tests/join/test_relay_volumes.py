"""The relay tells a node's agent about claims and volumes: a pod's PersistentVolumeClaims and the volumes bound
to them go before the pod, the local-path volumes made for that node go even without pods (so its agent can
remove their directories when they are deleted), and each is withdrawn once the node no longer needs it."""

from __future__ import annotations

from typing import Any

from lite import wire
from lite.server.join.relay import NodeRelay, node_needs_volume

Obj = dict[str, Any]


def claim(name: str, rv: str = "1", volume: str = "") -> Obj:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
            "spec": {"volumeName": volume} if volume else {}}


def volume(name: str, claim_name: str = "", node: str = "", rv: str = "1") -> Obj:
    meta: Obj = {"name": name, "resourceVersion": rv}
    if node:
        meta["annotations"] = {"pv.kubernetes.io/provisioned-by": "rancher.io/local-path",
                               "local.path.provisioner/selected-node": node}
    spec: Obj = {"claimRef": {"namespace": "ns", "name": claim_name}} if claim_name else {}
    return {"metadata": meta, "spec": spec}


def user(uid: str, claim_name: str) -> Obj:
    return {"metadata": {"name": f"p-{uid}", "namespace": "ns", "uid": uid, "resourceVersion": "1"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}],
                     "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim_name}}]}}


class World:
    def __init__(self) -> None:
        self.claims: dict[str, Obj] = {}
        self.pvs: dict[str, Obj] = {}
        self.sent: list[wire.Message] = []
        self.relay = NodeRelay(self.sent.append, self.lookup, node="n1", volumes=lambda: list(self.pvs.values()))

    def lookup(self, kind: str, ns: str, name: str) -> Obj | None:
        return self.claims.get(name) if kind == "PersistentVolumeClaim" else None

    def log(self) -> list[tuple[str, str, str]]:
        out = []
        for m in self.sent:
            if isinstance(m, wire.ObjectUpsert):
                out.append(("upsert", m.kind, str(m.obj["metadata"]["name"])))
            elif isinstance(m, wire.ObjectDelete):
                out.append(("delete", m.kind, m.name))
            elif isinstance(m, wire.PodUpsert):
                out.append(("pod", "", str(m.pod["metadata"]["name"])))
        self.sent.clear()
        return out


def test_claim_and_volume_go_before_the_pod_and_leave_after_it() -> None:
    w = World()
    w.claims["data"] = claim("data", volume="pv1")
    w.pvs["pv1"] = volume("pv1", "data")
    w.pvs["other"] = volume("other", "elsewhere")
    w.relay.upsert_pod(user("u1", "data"))
    assert w.log() == [("upsert", "PersistentVolumeClaim", "data"), ("upsert", "PersistentVolume", "pv1"),
                       ("pod", "", "p-u1")]
    w.pvs["pv1"] = volume("pv1", "data", rv="2")  # a volume change reaches the node
    w.relay.volumes_changed()
    assert w.log() == [("upsert", "PersistentVolume", "pv1")]
    w.relay.volumes_changed()
    assert w.log() == []  # unchanged: nothing sent
    w.relay.remove_pod(user("u1", "data"))
    assert w.log() == [("delete", "PersistentVolumeClaim", "data"), ("delete", "PersistentVolume", "pv1")]
    w.relay.volumes_changed()
    assert w.log() == []


def test_local_path_volumes_of_the_node_without_pods() -> None:
    w = World()
    w.pvs["mine"] = volume("mine", node="n1")
    w.pvs["theirs"] = volume("theirs", node="n2")
    w.relay.resync([], {})
    assert w.log() == [("upsert", "PersistentVolume", "mine")]
    del w.pvs["mine"]
    w.relay.volumes_changed()
    assert w.log() == [("delete", "PersistentVolume", "mine")]


def test_node_needs_volume() -> None:
    claims = {("ns", "data")}
    assert node_needs_volume(volume("a", "data"), claims, "n1")
    assert not node_needs_volume(volume("b", "other"), claims, "n1")
    assert node_needs_volume(volume("c", node="n1"), set(), "n1")
    assert not node_needs_volume(volume("d", node="n2"), set(), "n1")
    assert not node_needs_volume(volume("e", node="n1"), set(), "")
