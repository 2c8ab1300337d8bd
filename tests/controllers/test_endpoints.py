"""Endpoints and EndpointSlice controllers against the real in-process API."""

from __future__ import annotations

from typing import Any

from conftest import POD, Kit, bare_pod

from lite.objects import labels_of
from lite.server.controllers.endpoints import EndpointsController
from lite.server.controllers.endpointslices import MANAGED_BY, SERVICE_NAME, EndpointSliceController
from lite.server.controllers.runtime import builtin

SVC = builtin("", "Service")
EP = builtin("", "Endpoints")
SLICE = builtin("discovery.k8s.io", "EndpointSlice")
Obj = dict[str, Any]


def service(name: str, **spec: Any) -> Obj:
    spec.setdefault("ports", [{"name": "http", "port": 80, "targetPort": "web"}])
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default",
                                                                "labels": {"tier": "front"}},
            "spec": {"selector": {"app": name}, **spec}}


async def running_pod(kit: Kit, name: str, app: str, ip: str, *, ready: bool, port: int = 8080,
                      node: str = "node-1") -> Obj:
    pod = bare_pod(name, {"app": app})
    pod["spec"]["containers"][0]["ports"] = [{"name": "web", "containerPort": port}]
    created = await kit.api.create(POD, "default", pod)
    await kit.make_ready(created, node=node, ready=ready)
    return await kit.api.patch(POD, "default", name, {"status": {"podIP": ip}}, subresource="status")


async def test_ready_and_not_ready_addresses_with_named_port(kit: Kit) -> None:
    await kit.api.create(SVC, "default", service("web"))
    await running_pod(kit, "web-a", "web", "10.42.0.5", ready=True)
    await running_pod(kit, "web-b", "web", "10.42.0.6", ready=False, node="node-2")
    await running_pod(kit, "other", "db", "10.42.0.7", ready=True)
    c = EndpointsController(kit.api, kit.informers)
    await kit.settle(c)
    await c.reconcile("default/web")
    ep = await kit.api.get(EP, "default", "web")
    assert labels_of(ep) == {"tier": "front"}
    [subset] = ep["subsets"]
    assert [a["ip"] for a in subset["addresses"]] == ["10.42.0.5"]
    assert subset["addresses"][0]["targetRef"]["name"] == "web-a"
    assert subset["addresses"][0]["nodeName"] == "node-1"
    assert [a["ip"] for a in subset["notReadyAddresses"]] == ["10.42.0.6"]
    assert subset["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    # The pod becomes ready: it moves over; deleting the service removes the Endpoints.
    await kit.make_ready(await kit.api.get(POD, "default", "web-b"), ready=True)
    await kit.settle(c)
    await c.reconcile("default/web")
    ep = await kit.api.get(EP, "default", "web")
    assert [a["ip"] for a in ep["subsets"][0]["addresses"]] == ["10.42.0.5", "10.42.0.6"]
    await kit.api.delete(SVC, "default", "web")
    await kit.settle(c)
    await c.reconcile("default/web")
    assert (await kit.api.list(EP, "default"))["items"] == []


async def test_publish_not_ready_and_headless(kit: Kit) -> None:
    await kit.api.create(SVC, "default", service("hl", clusterIP="None", publishNotReadyAddresses=True))
    await running_pod(kit, "hl-0", "hl", "10.42.0.9", ready=False)
    c = EndpointsController(kit.api, kit.informers)
    await kit.settle(c)
    await c.reconcile("default/hl")
    ep = await kit.api.get(EP, "default", "hl")
    assert [a["ip"] for a in ep["subsets"][0]["addresses"]] == ["10.42.0.9"]
    assert "service.kubernetes.io/headless" in labels_of(ep)


async def test_selectorless_service_left_alone(kit: Kit) -> None:
    svc = service("ext")
    del svc["spec"]["selector"]
    await kit.api.create(SVC, "default", svc)
    c = EndpointsController(kit.api, kit.informers)
    await kit.settle(c)
    await c.reconcile("default/ext")
    assert (await kit.api.list(EP, "default"))["items"] == []


async def test_slices_labels_conditions_and_placeholder(kit: Kit) -> None:
    await kit.api.create(SVC, "default", service("web"))
    c = EndpointSliceController(kit.api, kit.informers)
    await kit.settle(c)
    await c.reconcile("default/web")
    [placeholder] = (await kit.api.list(SLICE, "default"))["items"]
    assert placeholder["endpoints"] == [] and labels_of(placeholder)[SERVICE_NAME] == "web"
    await running_pod(kit, "web-a", "web", "10.42.0.5", ready=True)
    await running_pod(kit, "web-b", "web", "10.42.0.6", ready=False)
    await kit.settle(c)
    await c.reconcile("default/web")
    [sl] = (await kit.api.list(SLICE, "default"))["items"]
    assert sl["metadata"]["name"] == placeholder["metadata"]["name"]
    assert labels_of(sl)[MANAGED_BY] == "endpointslice-controller.k8s.io"
    assert sl["addressType"] == "IPv4"
    assert sl["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    by_ip = {e["addresses"][0]: e for e in sl["endpoints"]}
    assert by_ip["10.42.0.5"]["conditions"] == {"ready": True, "serving": True, "terminating": False}
    assert by_ip["10.42.0.6"]["conditions"]["ready"] is False
    assert by_ip["10.42.0.5"]["targetRef"]["name"] == "web-a"
    assert sl["metadata"]["ownerReferences"][0]["kind"] == "Service"


async def test_slices_split_at_max_and_by_port(kit: Kit) -> None:
    await kit.api.create(SVC, "default", service("web"))
    for i in range(5):
        await running_pod(kit, f"web-{i}", "web", f"10.42.0.{10 + i}", ready=True)
    await running_pod(kit, "web-alt", "web", "10.42.0.50", ready=True, port=9090)
    c = EndpointSliceController(kit.api, kit.informers, max_per_slice=2)
    await kit.settle(c)
    await c.reconcile("default/web")
    slices = (await kit.api.list(SLICE, "default"))["items"]
    by_port: dict[int, list[int]] = {}
    for sl in slices:
        by_port.setdefault(sl["ports"][0]["port"], []).append(len(sl["endpoints"]))
    assert sorted(by_port[8080]) == [1, 2, 2] and by_port[9090] == [1]
    # Stable: a second pass writes nothing.
    await kit.settle(c)
    before = {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in slices}
    await c.reconcile("default/web")
    after = {s["metadata"]["name"]: s["metadata"]["resourceVersion"]
             for s in (await kit.api.list(SLICE, "default"))["items"]}
    assert after == before
