"""VolumeBinding as tables: claims missing, being deleted, bound to a missing volume, unbound with Immediate
binding; bound volumes' node affinity; WaitForFirstConsumer claims matched to a free volume on the node or
provisioned there; the Reserve plan; and the whole cycle's message for an unbound immediate claim."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from plugkit import info, ni, node, pod, snap

from lite.server.scheduler.cycle import Algorithm, fit_error_message
from lite.server.scheduler.framework import Failure
from lite.server.scheduler.plugins.volumebinding import (
    ERR_BIND_CONFLICT,
    ERR_NODE_CONFLICT,
    ERR_PV_NOT_EXIST,
    ERR_UNBOUND_IMMEDIATE,
    Plan,
    TableVolumes,
    VolumeBinding,
    plan,
    pre_filter_state,
)
from lite.server.scheduler.registry import Profile, plugins_for

Obj = dict[str, Any]
WFFC = {"metadata": {"name": "wffc"}, "provisioner": "rancher.io/local-path",
        "volumeBindingMode": "WaitForFirstConsumer"}
STATIC = {"metadata": {"name": "static"}, "provisioner": "kubernetes.io/no-provisioner",
          "volumeBindingMode": "WaitForFirstConsumer"}
ZONED = {"metadata": {"name": "zoned"}, "provisioner": "example.com/disk", "volumeBindingMode": "WaitForFirstConsumer",
         "allowedTopologies": [{"matchLabelExpressions": [{"key": "zone", "values": ["a"]}]}]}
IMMEDIATE = {"metadata": {"name": "now"}, "provisioner": "example.com/disk", "volumeBindingMode": "Immediate"}
CLASSES = {c["metadata"]["name"]: c for c in (WFFC, STATIC, ZONED, IMMEDIATE)}


def claim(name: str, cls: str = "wffc", volume: str = "", deleting: bool = False, size: str = "1Gi") -> Obj:
    meta: Obj = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: Obj = {"storageClassName": cls, "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": size}}}
    if volume:
        spec["volumeName"] = volume
    return {"metadata": meta, "spec": spec}


def volume(name: str, on: str | None = None, cls: str = "static", size: str = "1Gi", bound_to: str = "") -> Obj:
    spec: Obj = {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": cls,
                 "local": {"path": f"/mnt/{name}"}}
    if on:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [on]}]}]}}
    if bound_to:
        spec["claimRef"] = {"namespace": "default", "name": bound_to, "uid": f"uid-{bound_to}"}
    return {"metadata": {"name": name}, "spec": spec, "status": {"phase": "Bound" if bound_to else "Available"}}


def user(*claims: str) -> Obj:
    return pod("p", volumes=[{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims])


def view(claims: list[Obj], volumes: list[Obj]) -> TableVolumes:
    return TableVolumes({f"default/{c['metadata']['name']}": c for c in claims},
                        {v["metadata"]["name"]: v for v in volumes}, CLASSES)


def run(p: Obj, n: str, claims: list[Obj], volumes: list[Obj], labels: dict[str, str] | None = None) -> Any:
    node_info = ni(node(n, labels=labels))
    s = dataclasses.replace(snap(node_info), volumes=view(claims, volumes))
    plugin = VolumeBinding()
    state = plugin.pre_filter(info(p), s)
    if state is None:
        return "skip"
    failure = plugin.filter(state, info(p), node_info)
    return failure.reasons[0] if isinstance(failure, Failure) else None


CASES: list[tuple[str, Obj, str, list[Obj], list[Obj], dict[str, str] | None, Any]] = [
    ("no claims", pod("p"), "n1", [], [], None, "skip"),
    ("claim missing", user("c"), "n1", [], [], None, 'persistentvolumeclaim "c" not found'),
    ("claim being deleted", user("c"), "n1", [claim("c", deleting=True)], [], None,
     'persistentvolumeclaim "c" is being deleted'),
    ("bound to a missing volume", user("c"), "n1", [claim("c", volume="gone")], [], None, ERR_PV_NOT_EXIST),
    ("bound volume on this node", user("c"), "n1", [claim("c", volume="v")], [volume("v", "n1", bound_to="c")],
     None, None),
    ("bound volume on another node", user("c"), "n2", [claim("c", volume="v")], [volume("v", "n1", bound_to="c")],
     None, ERR_NODE_CONFLICT),
    ("unbound immediate", user("c"), "n1", [claim("c", cls="now")], [], None, ERR_UNBOUND_IMMEDIATE),
    ("unbound, class missing = immediate", user("c"), "n1", [claim("c", cls="nosuch")], [], None,
     ERR_UNBOUND_IMMEDIATE),
    ("delayed, provisioner makes it anywhere", user("c"), "n1", [claim("c")], [], None, None),
    ("delayed static, free volume here", user("c"), "n1", [claim("c", cls="static")], [volume("v", "n1")], None,
     None),
    ("delayed static, volume elsewhere", user("c"), "n2", [claim("c", cls="static")], [volume("v", "n1")], None,
     ERR_BIND_CONFLICT),
    ("delayed static, one volume for two claims", user("c", "d"), "n1",
     [claim("c", cls="static"), claim("d", cls="static")], [volume("v", "n1")], None, ERR_BIND_CONFLICT),
    ("allowed topology matches", user("c"), "n1", [claim("c", cls="zoned")], [], {"zone": "a"}, None),
    ("allowed topology misses", user("c"), "n1", [claim("c", cls="zoned")], [], {"zone": "b"}, ERR_BIND_CONFLICT),
]


@pytest.mark.parametrize(("case", "p", "n", "claims", "volumes", "labels", "want"), CASES, ids=[c[0] for c in CASES])
def test_filter(case: str, p: Obj, n: str, claims: list[Obj], volumes: list[Obj], labels: dict[str, str] | None,
                want: Any) -> None:
    assert run(p, n, claims, volumes, labels) == want


def test_plan_prebinds_static_and_provisions_the_rest() -> None:
    c, d = claim("c", cls="static"), claim("d")
    state = pre_filter_state(user("c", "d"), view([c, d], [volume("v", "n1"), volume("w", "n2")]))
    assert state is not None
    got = plan(state, ni(node("n1")))
    assert isinstance(got, Plan)
    assert [(cl["metadata"]["name"], v["metadata"]["name"]) for cl, v in got.binds] == [("c", "v")]
    assert [cl["metadata"]["name"] for cl in got.provisions] == ["d"]


def test_cycle_reports_unbound_immediate_claims() -> None:
    nodes = [ni(node("n1")), ni(node("n2"))]
    s = dataclasses.replace(snap(*nodes), volumes=view([claim("c", cls="now")], []))
    algo = Algorithm(plugins_for(Profile()), Profile(), random.Random(1))
    res = algo.schedule(info(user("c")), s)
    assert not res.node
    assert fit_error_message(res.num_nodes, res.statuses) == \
        f"0/2 nodes are available: {ERR_UNBOUND_IMMEDIATE}."
