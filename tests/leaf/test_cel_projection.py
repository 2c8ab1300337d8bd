"""lite.cel.projection: what an expression reads of its variables, and evaluating over that part alone gives
the same result (or the same error) as over the whole values (pure, table-driven, with the real runtime)."""

from __future__ import annotations

from typing import Any

import pytest

from lite import cel
from lite.cel.projection import project, reads

ENV = cel.Environment({"object": cel.DYN, "oldObject": cel.DYN})
NAMES = ("object", "oldObject")

POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web", "tier": "front"},
                 "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
    "spec": {"containers": [
        {"name": "a", "image": "busybox", "ports": [{"containerPort": 80, "name": "http"}],
         "securityContext": {"privileged": False}, "resources": {}},
        {"name": "b", "image": "nginx", "terminationMessagePath": "/dev/termination-log"}],
        "restartPolicy": "Always", "tolerations": [{"key": "k", "operator": "Exists"}]},
    "status": {"phase": "Pending"},
}
OLD = {**POD, "spec": {**POD["spec"], "restartPolicy": "Never"}}


@pytest.mark.parametrize(("src", "want"), [
    ("object.metadata.name == 'x'", {"object": {"metadata": {"name": None}}, "oldObject": {}}),
    ("has(object.metadata.labels) && object.metadata.labels.tier == 'x'",
     {"object": {"metadata": {"labels": None}}, "oldObject": {}}),
    # a shorter path keeps the whole subtree, whatever the order
    ("object.spec.x == 1 || object.spec == oldObject.spec",
     {"object": {"spec": None}, "oldObject": {"spec": None}}),
    # elements of a list read through a comprehension, nested
    ("object.spec.containers.all(c, c.ports.all(p, p.containerPort > 0))",
     {"object": {"spec": {"containers": {"*": {"ports": {"*": {"containerPort": None}}}}}}, "oldObject": {}}),
    ("object.spec.containers.exists(c, true)", {"object": {"spec": {"containers": {"*": {}}}}, "oldObject": {}}),
    ("object.spec.containers.map(c, c.name, c.image).size() > 0",
     {"object": {"spec": {"containers": {"*": {"name": None, "image": None}}}}, "oldObject": {}}),
    # read whole: bare, indexed at the root, filter (its elements escape), an element used bare
    ("object != null", {"object": None, "oldObject": {}}),
    ("object['spec'].x == 1", {"object": None, "oldObject": {}}),
    ("object.spec.containers.filter(c, c.name == 'a')[0].image == 'x'",
     {"object": {"spec": {"containers": None}}, "oldObject": {}}),
    ("object.spec.containers.all(c, c != null)", {"object": {"spec": {"containers": {"*": None}}}, "oldObject": {}}),
    # a macro variable with a variable's name stands for the elements inside its body
    ("object.spec.containers.all(object, object.name != '')",
     {"object": {"spec": {"containers": {"*": {"name": None}}}}, "oldObject": {}}),
    # only measured: every element kept, cut to what else is read of it
    ("object.spec.containers.size() > 0", {"object": {"spec": {"containers": {"*": {}}}}, "oldObject": {}}),
    ("size(object.spec.containers) > 0 && object.spec.containers.all(c, c.image != '')",
     {"object": {"spec": {"containers": {"*": {"image": None}}}}, "oldObject": {}}),
    ("object.spec.containers.size() > 0 && object.spec.containers[0].image != ''",
     {"object": {"spec": {"containers": None}}, "oldObject": {}}),
    # not parsed by lite: everything
    ("object.metadata.name ==", {"object": None, "oldObject": None}),
])
def test_reads(src: str, want: dict[str, Any]) -> None:
    assert reads(src, NAMES) == want


def test_project_keeps_shapes() -> None:
    got = project(POD, {"metadata": {"name": None}, "spec": {"containers": {"*": {"image": None}}}})
    assert got == {"metadata": {"name": "web"}, "spec": {"containers": [{"image": "busybox"}, {"image": "nginx"}]}}
    assert project(POD, None) is POD
    assert project(None, {"spec": None}) is None
    assert project({"labels": {"a": "b"}}, {"labels": {"*": None}}) == {"labels": {"a": "b"}}  # map: as it is
    assert project({"x": [1, 2]}, {"x": {"y": None}}) == {"x": [1, 2]}  # selection on a list: kept whole


def _outcome(src: str, data: dict[str, Any]) -> Any:
    try:
        return ("value", ENV.compile(src).eval(data))
    except cel.CelError as e:
        return ("error", str(e))


@pytest.mark.parametrize("src", [
    "object.metadata.name.size() <= 63 && !object.metadata.name.startsWith('forbidden')",
    "!has(object.metadata.labels) || !('tier' in object.metadata.labels) || object.metadata.labels.tier != 'x'",
    "object.spec.containers.all(c, has(c.image) && c.image != 'bad')",
    "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) || "
    "!c.securityContext.privileged)",
    "object.spec.containers.exists(c, c.ports.exists(p, p.containerPort == 80))",
    "object.spec.containers.map(c, c.name) == ['a', 'b']",
    "object.spec.containers.exists_one(c, c.name == 'b')",
    "object.spec.containers.size() == 2 && object.spec.containers[1].terminationMessagePath != ''",
    "object.spec.containers.all(c, c.missing == 1)",  # the same error
    "object.spec.nothing.x == 1",
    "object.spec.containers.x == 1",
    "object.status.phase == oldObject.status.phase && object.spec.restartPolicy != oldObject.spec.restartPolicy",
    "object.spec.containers.filter(c, c.name == 'a')[0].image == 'busybox'",
    "object.metadata.labels.all(k, k.size() > 0) && object.metadata.labels.exists(k, k == 'app')",
    "cel.bind(s, object.spec, s.containers.size() == 2)",
    "[object.spec.containers.all(c, c.name != ''), object.metadata.?labels.app.orValue('') == 'web']",
    "object.spec.containers.all(object, object.name != '')",
    "has(object.spec.tolerations) && object.spec.tolerations[0].key == 'k'",
    "object.spec.containers.size() == 2 && object.spec.containers.all(c, has(c.image))",
    "size(object.metadata.labels) == 2 && object.metadata.name.size() == 3 && size(object.spec.tolerations) == 1",
    "object.spec.nothing.size() == 0",
    "object.metadata.managedFields.size() == 1 && object.metadata.managedFields.all(f, f.manager == 'kubectl')",
])
def test_projected_evaluation_agrees(src: str) -> None:
    """The property the plugin relies on: the same value or the same error."""
    paths = reads(src, NAMES)
    whole = {"object": POD, "oldObject": OLD}
    projected = {k: project(v, paths[k]) for k, v in whole.items()}
    assert _outcome(src, projected) == _outcome(src, whole)
