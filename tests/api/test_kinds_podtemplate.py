"""core/v1 PodTemplate through a real registry: create/get/list/deletecollection, the template validated as a
pod template (422 with upstream field paths), defaulting of the template's pod spec, and the table row."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from lite.errors import ApiError
from lite.kinds import Kind
from lite.server.api.resources import Resources
from lite.server.api.tables import to_table


def pt_kind(res: Resources) -> Kind:
    k = res.kinds.by_resource("", "v1", "podtemplates")
    assert k is not None
    return k


def pt(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name, "labels": {"set": "a"}},
            "template": {"metadata": {"labels": labels or {"app": "web"}},
                         "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}}


def test_kind_is_served_namespaced_with_deletecollection(res: Resources) -> None:
    k = pt_kind(res)
    assert k.namespaced and "deletecollection" in k.verbs and k.api_version == "v1" and not k.subresources


async def test_create_get_list_deletecollection(res: Resources) -> None:
    k = pt_kind(res)
    made = await res.create(k, "default", pt("one"))
    assert made["template"]["spec"]["restartPolicy"] == "Always"  # pod spec defaulting
    assert made["template"]["spec"]["containers"][0]["terminationMessagePath"] == "/dev/termination-log"
    assert "status" not in made and made["metadata"]["generation"] == 1
    await res.create(k, "default", pt("two", restartPolicy="Never"))  # any restart policy is allowed
    other = pt("three")
    other["metadata"]["labels"] = {"set": "b"}
    await res.create(k, "default", other)
    got = await res.get(k, "default", "two")
    assert got["template"]["spec"]["restartPolicy"] == "Never"
    listed = await res.list(k, "default")
    assert listed["kind"] == "PodTemplateList"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["one", "three", "two"]
    out = await res.delete_collection(k, "default", label_selector="set=a")
    assert sorted(i["metadata"]["name"] for i in out["items"]) == ["one", "two"]
    assert [i["metadata"]["name"] for i in (await res.list(k, "default"))["items"]] == ["three"]


@pytest.mark.parametrize(("mutate", "field", "words"), [
    (lambda o: o.pop("template"), "template.spec.containers", "Required value"),  # a value struct upstream
    (lambda o: o["template"].pop("spec"), "template.spec.containers", "Required value"),
    (lambda o: o["template"]["spec"].update(containers=[]), "template.spec.containers", "Required value"),
    (lambda o: o["template"]["spec"]["containers"][0].pop("image"), "template.spec.containers[0].image",
     "Required value"),
    (lambda o: o["template"]["spec"].update(restartPolicy="Sometimes"), "template.spec.restartPolicy",
     "Unsupported value"),
    (lambda o: o["template"]["metadata"].update(labels={"bad key!": "x"}), "template.metadata.labels",
     "Invalid value"),
    (lambda o: o["template"]["metadata"].update(annotations={"bad key!": "x"}), "template.metadata.annotations",
     "Invalid value"),
    (lambda o: o["template"]["spec"].update(ephemeralContainers=[{"name": "e", "image": "busybox"}]),
     "template.spec.ephemeralContainers", "ephemeral containers not allowed in pod template"),
])
async def test_bad_template_is_422(res: Resources, mutate: Any, field: str, words: str) -> None:
    obj = pt("bad")
    mutate(obj)
    with pytest.raises(ApiError) as e:
        await res.create(pt_kind(res), "default", obj)
    assert e.value.code == 422 and e.value.reason == "Invalid"
    assert any(c.field == field and words in c.message for c in e.value.causes), e.value.causes
    assert (await res.list(pt_kind(res), "default"))["items"] == []


async def test_update_is_validated_too(res: Resources) -> None:
    k = pt_kind(res)
    obj = await res.create(k, "default", pt("upd"))
    obj["template"]["spec"]["containers"] = []
    with pytest.raises(ApiError) as e:
        await res.update(k, "default", "upd", obj)
    assert e.value.code == 422
    assert (await res.get(k, "default", "upd"))["template"]["spec"]["containers"][0]["image"] == "busybox"


async def test_generation_moves_with_the_template_only(res: Resources) -> None:
    k = pt_kind(res)
    obj = await res.create(k, "default", pt("gen"))
    obj["metadata"]["labels"] = {"set": "b"}
    obj = await res.update(k, "default", "gen", obj)
    assert obj["metadata"]["generation"] == 1
    obj["template"]["spec"]["containers"][0]["image"] = "nginx"
    obj = await res.update(k, "default", "gen", obj)
    assert obj["metadata"]["generation"] == 2


def test_table_row_has_upstreams_columns(res: Resources) -> None:
    obj = pt("t", labels={"tier": "a", "app": "web"})
    obj["template"]["spec"]["containers"].append({"name": "side", "image": "nginx:1"})
    t = to_table(pt_kind(res), [obj], {}, now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    assert [(c["name"], c["priority"]) for c in t["columnDefinitions"]] == [
        ("Name", 0), ("Containers", 0), ("Images", 0), ("Pod Labels", 0)]
    assert t["rows"][0]["cells"] == ["t", "c,side", "busybox,nginx:1", "app=web,tier=a"]
    empty = to_table(pt_kind(res), [{"metadata": {"name": "e"}, "template": {}}], {})
    assert empty["rows"][0]["cells"] == ["e", "", "", "<none>"]
