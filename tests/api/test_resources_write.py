"""Resources: generateName, dryRun, patches (json/merge/strategic/apply), validation and immutable fields."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from lite.errors import ApiError
from lite.kinds import Kind, KindRegistry
from lite.server.admission.priority import PriorityAdmission
from lite.server.api.resources import Resources
from lite.server.api.strategies import Admission

KINDS = KindRegistry()


def kind(plural: str, group: str = "", version: str = "v1") -> Kind:
    k = KINDS.by_resource(group, version, plural)
    assert k is not None
    return k


POD, CM, NS, SVC, SECRET = kind("pods"), kind("configmaps"), kind("namespaces"), kind("services"), kind("secrets")
DEPLOY, JOB, PVC = kind("deployments", "apps"), kind("jobs", "batch"), kind("persistentvolumeclaims")




def pod(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "nginx:1"}], **spec}}


def deployment(name: str = "web") -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}


def fields(e: pytest.ExceptionInfo[ApiError]) -> list[str]:
    return [c.field for c in e.value.causes]


async def test_generate_name(res: Resources) -> None:
    out = await res.create(CM, "default", {"metadata": {"generateName": "x" * 70}})
    name = out["metadata"]["name"]
    assert len(name) == 63 and name.startswith("x" * 58)
    assert all(ch in "bcdfghjklmnpqrstvwxz2456789" for ch in name[58:])
    out = await res.create(CM, "default", {"metadata": {"generateName": "web-"}})
    assert out["metadata"]["name"].startswith("web-") and len(out["metadata"]["name"]) == 9


async def test_dry_run_persists_nothing(res: Resources) -> None:
    rev = res.store.current_rev
    out = await res.create(POD, "default", {**pod(), "metadata": {"generateName": "p-"}}, dry_run=True)
    assert out["metadata"]["name"].startswith("p-") and out["spec"]["restartPolicy"] == "Always"
    await res.create(CM, "default", {"metadata": {"name": "a"}, "data": {"k": "v"}})
    rev = res.store.current_rev
    await res.patch(CM, "default", "a", {"data": {"k": "w"}}, dry_run=True)
    await res.update(CM, "default", "a", {"metadata": {"name": "a"}, "data": {"k": "z"}}, dry_run=True)
    deleted = await res.delete(CM, "default", "a", dry_run=True)
    assert deleted["metadata"]["name"] == "a"
    assert res.store.current_rev == rev
    assert (await res.get(CM, "default", "a"))["data"] == {"k": "v"}
    assert (await res.list(POD, "default"))["items"] == []
    with pytest.raises(ApiError) as e:
        await res.create(CM, "default", {"metadata": {"name": "a"}}, dry_run=True)
    assert e.value.reason == "AlreadyExists"


async def test_patch_types(res: Resources) -> None:
    await res.create(DEPLOY, "default", deployment())
    out = await res.patch(DEPLOY, "default", "web", {"metadata": {"labels": {"a": "1"}}}, patch_type="merge")
    assert out["metadata"]["labels"] == {"a": "1"} and out["metadata"]["generation"] == 1
    out = await res.patch(DEPLOY, "default", "web", [{"op": "replace", "path": "/spec/replicas", "value": 4}],
                          patch_type="json")
    assert out["spec"]["replicas"] == 4 and out["metadata"]["generation"] == 2
    smp = {"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "busybox"}]}}}}
    out = await res.patch(DEPLOY, "default", "web", smp, patch_type="strategic")
    containers = {c["name"]: c for c in out["spec"]["template"]["spec"]["containers"]}
    assert set(containers) == {"c", "side"} and containers["side"]["imagePullPolicy"] == "Always"
    with pytest.raises(ApiError) as e:
        await res.patch(DEPLOY, "default", "missing", {"spec": {}}, patch_type="merge")
    assert e.value.code == 404
    with pytest.raises(ApiError) as e:  # an RV inside the patch is a precondition
        await res.patch(DEPLOY, "default", "web", {"metadata": {"resourceVersion": "1", "labels": {"b": "2"}}})
    assert e.value.code == 409 and e.value.reason == "Conflict"


async def test_apply_creates_then_updates(res: Resources) -> None:
    intent = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}}
    out, created = await res.patch_ex(CM, "default", "cfg", intent, patch_type="apply", field_manager="kubectl")
    assert created and out["data"] == {"a": "1"} and out["metadata"]["uid"]
    assert [(m["manager"], m["operation"]) for m in out["metadata"]["managedFields"]] == [("kubectl", "Apply")]
    # A field the manager drops from its intent is removed.
    out, created = await res.patch_ex(CM, "default", "cfg", {**intent, "data": {"b": "2"}}, patch_type="apply",
                                      field_manager="kubectl")
    assert not created and out["data"] == {"b": "2"}
    # Another manager changing an applied field conflicts unless forced.
    with pytest.raises(ApiError) as e:
        await res.patch(CM, "default", "cfg", {**intent, "data": {"b": "3"}}, patch_type="apply",
                        field_manager="other")
    assert e.value.code == 409 and e.value.reason == "Conflict"
    out = await res.patch(CM, "default", "cfg", {**intent, "data": {"b": "3"}}, patch_type="apply",
                          field_manager="other", force=True)
    assert out["data"] == {"b": "3"}
    with pytest.raises(ApiError) as e:
        await res.patch(CM, "default", "cfg", intent, patch_type="apply")
    assert e.value.code == 400
    # Ordinary writes with a field manager record an Update entry.
    out = await res.patch(CM, "default", "cfg", {"metadata": {"labels": {"x": "y"}}}, field_manager="kubectl-label")
    assert ("kubectl-label", "Update") in [(m["manager"], m["operation"]) for m in out["metadata"]["managedFields"]]


async def test_pod_validation(res: Resources) -> None:
    with pytest.raises(ApiError) as e:
        await res.create(POD, "default", {"metadata": {"name": "p"}, "spec": {}})
    assert e.value.code == 422 and e.value.reason == "Invalid" and fields(e) == ["spec.containers"]
    assert e.value.message.startswith('Pod "p" is invalid: spec.containers: Required value')
    bad = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}, {"name": "c"},
                                                             {"name": "Bad_Name", "image": "i"}]}}
    with pytest.raises(ApiError) as e:
        await res.create(POD, "default", bad)
    assert fields(e) == ["spec.containers[1].name", "spec.containers[1].image", "spec.containers[2].name"]
    assert e.value.causes[0].reason == "FieldValueDuplicate"
    with pytest.raises(ApiError) as e:
        await res.create(POD, "default", {**pod(), "metadata": {"name": "UPPER"}})
    assert fields(e) == ["metadata.name"]


async def test_deployment_validation(res: Resources) -> None:
    d = deployment()
    d["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    with pytest.raises(ApiError) as e:
        await res.create(DEPLOY, "default", d)
    assert e.value.message.startswith('Deployment.apps "web" is invalid: spec.template.metadata.labels: ')
    assert "`selector` does not match template `labels`" in e.value.message
    d = deployment()
    del d["spec"]["selector"]
    with pytest.raises(ApiError) as e:
        await res.create(DEPLOY, "default", d)
    assert fields(e) == ["spec.selector"]


async def test_defaults_deployment_service_secret_job(res: Resources) -> None:
    d = await res.create(DEPLOY, "default", deployment())
    spec = d["spec"]
    assert spec["replicas"] == 1 and spec["revisionHistoryLimit"] == 10 and spec["progressDeadlineSeconds"] == 600
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%",
                                                                            "maxSurge": "25%"}}
    assert spec["template"]["spec"]["restartPolicy"] == "Always" and d["status"] == {}
    svc = await res.create(SVC, "default", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})
    assert svc["spec"]["type"] == "ClusterIP" and svc["spec"]["sessionAffinity"] == "None"
    assert svc["spec"]["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
    sec = await res.create(SECRET, "default", {"metadata": {"name": "s"}, "stringData": {"u": "admin"}})
    assert sec["type"] == "Opaque" and sec["data"] == {"u": base64.b64encode(b"admin").decode()}
    assert "stringData" not in sec
    job = await res.create(JOB, "default", {"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}})
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert job["spec"]["template"]["metadata"]["labels"]["job-name"] == "j"
    assert job["spec"]["backoffLimit"] == 6 and job["spec"]["completions"] == 1


async def test_service_validation_and_names(res: Resources) -> None:
    with pytest.raises(ApiError) as e:
        await res.create(SVC, "default", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 70000}]}})
    assert fields(e) == ["spec.ports[0].port", "spec.ports[0].targetPort"]  # targetPort defaults to port
    with pytest.raises(ApiError) as e:  # services need DNS-1035 names
        await res.create(SVC, "default", {"metadata": {"name": "1abc"}, "spec": {"ports": [{"port": 80}]}})
    assert fields(e) == ["metadata.name"]
    with pytest.raises(ApiError) as e:
        await res.create(NS, "", {"metadata": {"name": "a.b"}})  # namespaces need DNS-1123 labels
    assert fields(e) == ["metadata.name"]


async def test_immutable_fields(res: Resources) -> None:
    d = await res.create(DEPLOY, "default", deployment())
    d["spec"]["selector"] = {"matchLabels": {"app": "web", "x": "y"}}
    d["spec"]["template"]["metadata"]["labels"]["x"] = "y"
    with pytest.raises(ApiError) as e:
        await res.update(DEPLOY, "default", "web", d)
    assert fields(e) == ["spec.selector"] and "field is immutable" in e.value.message
    p = await res.create(POD, "default", pod())
    out = await res.patch(POD, "default", "p", {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}},
                          patch_type="strategic")
    assert out["spec"]["containers"][0]["image"] == "nginx:2"
    with pytest.raises(ApiError) as e:
        await res.patch(POD, "default", "p", {"spec": {"restartPolicy": "Never"}})
    assert fields(e) == ["spec"] and "pod updates may not change fields" in e.value.message
    with pytest.raises(ApiError) as e:
        await res.patch(POD, "default", "p", {"metadata": {"uid": "other"}})
    assert fields(e) == ["metadata.uid"]
    assert p["metadata"]["uid"] == (await res.get(POD, "default", "p"))["metadata"]["uid"]
    await res.create(CM, "default", {"metadata": {"name": "c"}, "data": {"a": "1"}, "immutable": True})
    with pytest.raises(ApiError) as e:
        await res.patch(CM, "default", "c", {"data": {"a": "2"}})
    assert fields(e) == ["data"]
    await res.create(SECRET, "default", {"metadata": {"name": "s"}})
    with pytest.raises(ApiError) as e:
        await res.patch(SECRET, "default", "s", {"type": "kubernetes.io/basic-auth"})
    assert fields(e) == ["type"]
    await res.create(SVC, "default", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}],
                                                                          "clusterIP": "10.0.0.5"}})
    with pytest.raises(ApiError) as e:
        await res.patch(SVC, "default", "s", {"spec": {"clusterIP": "10.0.0.6"}})
    assert fields(e) == ["spec.clusterIPs[0]"]
    # An update that omits the allocated clusterIP keeps it.
    svc = await res.update(SVC, "default", "s", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 81}]}})
    assert svc["spec"]["clusterIP"] == "10.0.0.5"
    pvc = {"metadata": {"name": "v"}, "spec": {"accessModes": ["ReadWriteOnce"],
                                               "resources": {"requests": {"storage": "1Gi"}}}}
    await res.create(PVC, "default", pvc)
    await res.patch(PVC, "default", "v", {"spec": {"resources": {"requests": {"storage": "2Gi"}}}})
    with pytest.raises(ApiError) as e:
        await res.patch(PVC, "default", "v", {"spec": {"accessModes": ["ReadWriteMany"]}})
    assert fields(e) == ["spec"]


async def test_namespace_terminating_forbids_create(res: Resources) -> None:
    await res.create(NS, "", {"metadata": {"name": "gone"}})
    out = await res.delete(NS, "", "gone")
    assert out["status"]["phase"] == "Terminating" and out["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiError) as e:
        await res.create(CM, "gone", {"metadata": {"name": "x"}})
    assert e.value.code == 403 and e.value.reason == "Forbidden"
    assert e.value.message == ('configmaps "x" is forbidden: unable to create new content in namespace gone '
                               "because it is being terminated")
    with pytest.raises(ApiError) as e:
        await res.delete(NS, "", "default")
    assert e.value.code == 403
    # The namespace controller empties spec.finalizers through namespaces/finalize, then deletes again.
    await res.update(NS, "", "gone", {"metadata": {"name": "gone"}, "spec": {"finalizers": []}},
                     subresource="finalize")
    await res.delete(NS, "", "gone")
    with pytest.raises(ApiError) as e:
        await res.get(NS, "", "gone")
    assert e.value.code == 404


async def test_admission_hooks_run_in_order(res: Resources) -> None:
    seen: list[str] = []

    async def first(a: Admission) -> None:
        seen.append(f"1:{a.operation}:{a.name}")
        if a.operation == "CREATE" and a.obj is not None and a.kind.kind == "Service":
            a.obj["spec"]["clusterIP"] = "10.96.0.10"

    async def second(a: Admission) -> None:
        seen.append(f"2:{a.operation}")

    res.strategies.add_admission(first)
    res.strategies.add_admission(second)
    svc = await res.create(SVC, "default", {"metadata": {"name": "dns"}, "spec": {"ports": [{"port": 53}]}})
    assert svc["spec"]["clusterIP"] == "10.96.0.10"
    await res.delete(SVC, "default", "dns")
    assert seen == ["1:CREATE:dns", "2:CREATE", "1:DELETE:dns", "2:DELETE"]


async def test_server_side_apply_takes_over_client_side_apply(res: Resources) -> None:
    import orjson

    d = deployment()
    d["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": orjson.dumps(d).decode()}
    await res.create(DEPLOY, "default", d, field_manager="kubectl-client-side-apply")
    intent = {"apiVersion": "apps/v1", "kind": "Deployment", **deployment()}
    intent["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    out = await res.patch(DEPLOY, "default", "web", intent, patch_type="apply", field_manager="kubectl")
    assert out["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:2"
    # Another manager gets the conflict as usual.
    intent["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:3"
    with pytest.raises(ApiError) as e:
        await res.patch(DEPLOY, "default", "web", intent, patch_type="apply", field_manager="helm")
    assert e.value.code == 409


async def test_repeated_apply_writes_nothing(res: Resources) -> None:
    intent = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "same"}, "data": {"a": "1"}}
    first = await res.patch(CM, "default", "same", intent, patch_type="apply", field_manager="kubectl")
    again = await res.patch(CM, "default", "same", intent, patch_type="apply", field_manager="kubectl")
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


async def test_pod_priority_from_priority_class(res: Resources) -> None:
    res.strategies.add_admission(PriorityAdmission(res).admit)  # the Priority admission plugin, as a server runs it
    pc = kind("priorityclasses", "scheduling.k8s.io")
    assert (await res.get(pc, "", "system-node-critical"))["value"] == 2000001000
    p = await res.create(POD, "default", pod("plain"))
    assert p["spec"]["priority"] == 0 and p["spec"]["preemptionPolicy"] == "PreemptLowerPriority"
    await res.create(pc, "", {"metadata": {"name": "high"}, "value": 1000, "preemptionPolicy": "Never"})
    p = await res.create(POD, "default", pod("high", priorityClassName="high"))
    assert (p["spec"]["priority"], p["spec"]["preemptionPolicy"]) == (1000, "Never")
    p = await res.create(POD, "default", pod("crit", priorityClassName="system-cluster-critical"))
    assert p["spec"]["priority"] == 2000000000
    with pytest.raises(ApiError) as e:
        await res.create(POD, "default", pod("nope", priorityClassName="missing"))
    assert e.value.code == 403
    assert e.value.message == 'pods "nope" is forbidden: no PriorityClass with name missing was found'
    await res.create(pc, "", {"metadata": {"name": "dflt"}, "value": 7, "globalDefault": True})
    p = await res.create(POD, "default", pod("d"))
    assert (p["spec"]["priority"], p["spec"]["priorityClassName"]) == (7, "dflt")
    # the default class is judged again whenever a class changes (it is remembered between creates)
    await res.create(pc, "", {"metadata": {"name": "aaa-low"}, "value": 3, "globalDefault": True})
    p = await res.create(POD, "default", pod("d2"))
    assert (p["spec"]["priority"], p["spec"]["priorityClassName"]) == (3, "aaa-low")
    await res.patch(pc, "", "aaa-low", {"globalDefault": False})
    p = await res.create(POD, "default", pod("d3"))
    assert (p["spec"]["priority"], p["spec"]["priorityClassName"]) == (7, "dflt")
    await res.delete(pc, "", "dflt")
    p = await res.create(POD, "default", pod("d4"))
    assert p["spec"]["priority"] == 0 and "priorityClassName" not in p["spec"]


@pytest.mark.parametrize("body", [
    {"metadata": {"name": 5}},
    {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "i"}], "tolerations": "x"}},
    {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": "x"}}]}},
])
async def test_wrongly_typed_fields_are_400(res: Resources, body: dict[str, Any]) -> None:
    with pytest.raises(ApiError) as e:
        await res.create(POD, "default", body)
    assert e.value.code == 400 and e.value.message.startswith('Pod in version "v1" cannot be handled as a Pod: ')


async def test_status_must_be_an_object(res: Resources) -> None:
    await res.create(POD, "default", pod("s"))
    with pytest.raises(ApiError) as e:
        await res.update(POD, "default", "s", {"metadata": {"name": "s"}, "status": "x"}, subresource="status")
    assert e.value.code == 400
    assert (await res.get(POD, "default", "s"))["status"]["phase"] == "Pending"


async def test_job_with_a_foreign_generated_selector_is_rejected(res: Resources) -> None:
    exported = {"metadata": {"name": "j"}, "spec": {
        "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "old-uid"}},
        "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "old-uid"}},
                     "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}
    with pytest.raises(ApiError) as e:
        await res.create(JOB, "default", exported)
    assert [c.field for c in e.value.causes] == [
        "spec.selector", "spec.template.metadata.labels[batch.kubernetes.io/controller-uid]"]


async def test_update_without_managed_fields_keeps_them_and_empty_object_clears(res: Resources) -> None:
    """Upstream: a PUT that leaves managedFields out keeps the stored entries; `[{}]` removes them."""
    cm = {"metadata": {"name": "mf"}, "data": {"a": "1"}}
    created = await res.create(CM, "default", cm, field_manager="creator")
    assert [e["manager"] for e in created["metadata"]["managedFields"]] == ["creator"]
    body = {"metadata": {"name": "mf", "resourceVersion": created["metadata"]["resourceVersion"]},
            "data": {"a": "2"}}
    updated = await res.update(CM, "default", "mf", body)
    assert [e["manager"] for e in updated["metadata"]["managedFields"]] == ["creator"]
    assert updated["data"] == {"a": "2"}
    body = {"metadata": {"name": "mf", "managedFields": [{}]}, "data": {"a": "3"}}
    cleared = await res.update(CM, "default", "mf", body)
    assert "managedFields" not in cleared["metadata"]


async def test_replace_status_writes_only_the_status_at_the_named_revision(res: Resources) -> None:
    """The quota worker's narrow status write: the stored object with the new status, one new revision and one
    watch event, admission run as a status UPDATE; a stale revision is 409 (nothing written), a gone object 404."""
    rq = kind("resourcequotas")
    made = await res.create(rq, "default", {"metadata": {"name": "q", "labels": {"a": "b"}},
                                            "spec": {"hard": {"pods": "3"}}})
    rv = made["metadata"]["resourceVersion"]
    seen: list[tuple[str, str, str]] = []

    async def hook(a: Admission) -> None:
        if a.kind.kind == "ResourceQuota" and a.old is not None:
            seen.append((a.operation, a.subresource, a.old["metadata"]["resourceVersion"]))

    res.strategies.add_admission(hook)
    status = {"hard": {"pods": "3"}, "used": {"pods": "1"}}
    w = res.watch(rq, "default", resource_version=rv)
    out = await res.replace_status(rq, "default", "q", rv, status)
    ev = await anext(w)
    await w.aclose()
    got = await res.get(rq, "default", "q")
    assert out == got and got["status"] == status and got["spec"] == made["spec"]
    assert got["metadata"] == {**made["metadata"], "resourceVersion": got["metadata"]["resourceVersion"]}
    assert int(got["metadata"]["resourceVersion"]) > int(rv)
    assert (ev.type, ev.object) == ("MODIFIED", got)
    assert seen == [("UPDATE", "status", rv)]
    with pytest.raises(ApiError) as e:
        await res.replace_status(rq, "default", "q", rv, {"used": {"pods": "2"}})
    assert e.value.code == 409 and (await res.get(rq, "default", "q")) == got
    with pytest.raises(ApiError) as e:
        await res.replace_status(rq, "default", "gone", rv, status)
    assert e.value.code == 404
