"""Real kubectl against a real lite server: discovery, apply, get, describe, label, patch, scale, create,
replace and delete, each checked on what kubectl prints or what the server then holds."""

from __future__ import annotations

import base64
import json

from e2ekit import Cluster, unique

MANIFESTS = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {{app: web, tier: front}}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
      - name: app
        image: busybox:{tag}
        command: [sleep, "3600"]
      - name: side
        image: busybox:1
---
apiVersion: v1
kind: Service
metadata:
  name: web
  labels: {{app: web}}
spec:
  selector: {{app: web}}
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
  labels: {{app: cfg}}
data:
  color: {color}
---
apiVersion: v1
kind: Secret
metadata:
  name: sec
type: Opaque
stringData:
  password: hunter2
"""


def manifests(replicas: int = 1, tag: str = "1", color: str = "blue") -> str:
    return MANIFESTS.format(replicas=replicas, tag=tag, color=color)


def jsonpath(cluster: Cluster, ns: str, what: str, path: str) -> str:
    return cluster.kubectl("get", "-n", ns, what, "-o", f"jsonpath={path}").stdout


def test_version(cluster: Cluster) -> None:
    out = cluster.kubectl("version", "-o", "json").stdout
    info = json.loads(out)
    assert info["serverVersion"]["major"] == "1" and info["serverVersion"]["minor"] == "32"
    assert info["clientVersion"]["minor"].startswith("32")  # the dispatcher chose kubectl 1.32


def test_api_resources(cluster: Cluster) -> None:
    out = cluster.kubectl("api-resources").stdout
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    for name in ("pods", "services", "configmaps", "secrets", "namespaces", "deployments", "replicasets"):
        assert name in rows, out
    assert "apps/v1" in rows["deployments"] and "true" in rows["deployments"].split()
    assert "cm" in rows["configmaps"].split()


def test_apply_multi_document_then_changes(cluster: Cluster, ns: str) -> None:
    out = cluster.kubectl("apply", "-n", ns, "-f", "-", input=manifests()).stdout
    for line in ("deployment.apps/web created", "service/web created", "configmap/cfg created",
                 "secret/sec created"):
        assert line in out, out
    assert base64.b64decode(jsonpath(cluster, ns, "secret/sec", "{.data.password}")) == b"hunter2"
    assert jsonpath(cluster, ns, "svc/web", "{.spec.ports[0].targetPort}") == "8080"

    out = cluster.kubectl("apply", "-n", ns, "-f", "-", input=manifests(replicas=2, color="red")).stdout
    assert "deployment.apps/web configured" in out and "configmap/cfg configured" in out, out
    assert "service/web unchanged" in out, out
    assert jsonpath(cluster, ns, "cm/cfg", "{.data.color}") == "red"
    assert jsonpath(cluster, ns, "deploy/web", "{.spec.replicas}") == "2"
    # The second container survived the strategic merge of the containers list.
    assert jsonpath(cluster, ns, "deploy/web", "{.spec.template.spec.containers[*].name}") == "app side"

    out = cluster.kubectl("apply", "--server-side", "--force-conflicts", "-n", ns, "-f", "-",
                          input=manifests(replicas=3, tag="2", color="green")).stdout
    assert "configmap/cfg serverside-applied" in out and "deployment.apps/web serverside-applied" in out, out
    assert jsonpath(cluster, ns, "cm/cfg", "{.data.color}") == "green"
    assert jsonpath(cluster, ns, "deploy/web", "{.spec.replicas}") == "3"
    assert jsonpath(cluster, ns, "deploy/web", "{.spec.template.spec.containers[0].image}") == "busybox:2"


def test_server_side_apply_creates(cluster: Cluster, ns: str) -> None:
    doc = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  a: '1'\n"
    out = cluster.kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=doc).stdout
    assert "configmap/ssa serverside-applied" in out
    assert jsonpath(cluster, ns, "cm/ssa", "{.data.a}") == "1"


def test_get_output_formats(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=manifests())
    wide = cluster.kubectl("get", "-n", ns, "deploy", "-o", "wide").stdout
    header = wide.splitlines()[0].split()
    assert header[:2] == ["NAME", "READY"] and "IMAGES" in header and "SELECTOR" in header, wide
    assert "busybox:1" in wide and "app=web" in wide

    doc = cluster.kubectl("get", "-n", ns, "cm", "cfg", "-o", "yaml").stdout
    assert "kind: ConfigMap" in doc and "color: blue" in doc and "resourceVersion:" in doc and "uid:" in doc

    everywhere = cluster.kubectl("get", "cm", "-A").stdout
    rows = [line.split() for line in everywhere.splitlines()]
    assert rows[0][:2] == ["NAMESPACE", "NAME"]
    assert [ns, "cfg"] in [r[:2] for r in rows[1:]], everywhere

    labels = cluster.kubectl("get", "-n", ns, "cm", "cfg", "--show-labels").stdout
    assert labels.splitlines()[0].split()[-1] == "LABELS" and "app=cfg" in labels.splitlines()[1]

    selected = cluster.kubectl("get", "-n", ns, "deploy,svc,cm", "-l", "app=web", "-o", "name").stdout.split()
    assert sorted(selected) == ["deployment.apps/web", "service/web"]
    none = cluster.kubectl("get", "-n", ns, "cm", "-l", "app=nothing")
    assert none.stdout == "" and "No resources found" in none.stderr


def test_describe(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=manifests())
    out = cluster.kubectl("describe", "-n", ns, "cm", "cfg").stdout
    lines = [line.split() for line in out.splitlines()]
    assert ["Name:", "cfg"] in lines and ["Namespace:", ns] in lines, out
    assert "color:" in out and "blue" in out
    dep = cluster.kubectl("describe", "-n", ns, "deployment", "web").stdout
    assert "Replicas:" in dep and "busybox:1" in dep and "Selector:" in dep, dep


def test_label_and_annotate(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("create", "configmap", "lab", "-n", ns, "--from-literal=k=v")
    assert "configmap/lab labeled" in cluster.kubectl("label", "-n", ns, "cm", "lab", "env=dev").stdout
    clash = cluster.kubectl("label", "-n", ns, "cm", "lab", "env=prod", check=False)
    assert clash.returncode != 0 and "already has a value" in clash.stderr
    cluster.kubectl("label", "-n", ns, "cm", "lab", "env=prod", "--overwrite")
    assert jsonpath(cluster, ns, "cm/lab", "{.metadata.labels.env}") == "prod"
    cluster.kubectl("label", "-n", ns, "cm", "lab", "env-")
    assert jsonpath(cluster, ns, "cm/lab", "{.metadata.labels}") in ("", "{}")

    assert "annotated" in cluster.kubectl("annotate", "-n", ns, "cm", "lab", "note=one").stdout
    cluster.kubectl("annotate", "-n", ns, "cm", "lab", "note=two", "--overwrite")
    assert jsonpath(cluster, ns, "cm/lab", "{.metadata.annotations.note}") == "two"
    cluster.kubectl("annotate", "-n", ns, "cm", "lab", "note-")
    assert "note" not in jsonpath(cluster, ns, "cm/lab", "{.metadata.annotations}")


def test_patch_strategic_merge_json(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=manifests())
    smp = '{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"busybox:3"}]}}}}'
    assert "deployment.apps/web patched" in cluster.kubectl("patch", "-n", ns, "deploy", "web", "-p", smp).stdout
    images = jsonpath(cluster, ns, "deploy/web", "{.spec.template.spec.containers[*].image}")
    assert images == "busybox:3 busybox:1"  # strategic: merged by name, the other container kept

    cluster.kubectl("patch", "-n", ns, "cm", "cfg", "--type=merge", "-p", '{"data":{"size":"L","color":null}}')
    data = json.loads(jsonpath(cluster, ns, "cm/cfg", "{.data}"))
    assert data == {"size": "L"}

    cluster.kubectl("patch", "-n", ns, "deploy", "web", "--type=json",
                    "-p", '[{"op":"replace","path":"/spec/replicas","value":4}]')
    assert jsonpath(cluster, ns, "deploy/web", "{.spec.replicas}") == "4"
    bad = cluster.kubectl("patch", "-n", ns, "deploy", "web", "--type=json",
                          "-p", '[{"op":"test","path":"/spec/replicas","value":5}]', check=False)
    assert bad.returncode != 0 and jsonpath(cluster, ns, "deploy/web", "{.spec.replicas}") == "4"


def test_scale(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=manifests())
    assert "deployment.apps/web scaled" in cluster.kubectl("scale", "-n", ns, "deploy/web", "--replicas=5").stdout
    assert jsonpath(cluster, ns, "deploy/web", "{.spec.replicas}") == "5"


def test_create_typed_commands(cluster: Cluster) -> None:
    # kubectl 1.32 sends protobuf bodies for these (spec §10).
    name = unique("ns")
    assert f"namespace/{name} created" in cluster.kubectl("create", "namespace", name).stdout
    assert name in cluster.kubectl("get", "ns", name, "-o", "name").stdout
    cluster.kubectl("create", "configmap", "cm1", "-n", name, "--from-literal=a=1", "--from-literal=b=2")
    assert json.loads(jsonpath(cluster, name, "cm/cm1", "{.data}")) == {"a": "1", "b": "2"}
    cluster.kubectl("create", "secret", "generic", "s1", "-n", name, "--from-literal=token=abc")
    assert base64.b64decode(jsonpath(cluster, name, "secret/s1", "{.data.token}")) == b"abc"
    assert jsonpath(cluster, name, "secret/s1", "{.type}") == "Opaque"
    out = cluster.kubectl("create", "deployment", "d1", "-n", name, "--image=busybox:1", "--replicas=2").stdout
    assert "deployment.apps/d1 created" in out
    assert jsonpath(cluster, name, "deploy/d1", "{.spec.replicas}") == "2"
    assert jsonpath(cluster, name, "deploy/d1", "{.spec.selector.matchLabels.app}") == "d1"
    dup = cluster.kubectl("create", "configmap", "cm1", "-n", name, check=False)
    assert dup.returncode != 0 and 'configmaps "cm1" already exists' in dup.stderr


def test_replace(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("create", "configmap", "rep", "-n", ns, "--from-literal=v=1")
    live = json.loads(cluster.kubectl("get", "-n", ns, "cm", "rep", "-o", "json").stdout)
    stale = json.loads(json.dumps(live))
    live["data"]["v"] = "2"
    assert "configmap/rep replaced" in cluster.kubectl("replace", "-f", "-", input=json.dumps(live)).stdout
    assert jsonpath(cluster, ns, "cm/rep", "{.data.v}") == "2"
    stale["data"]["v"] = "3"  # carries the old resourceVersion
    conflict = cluster.kubectl("replace", "-f", "-", input=json.dumps(stale), check=False)
    assert conflict.returncode != 0 and "Conflict" in conflict.stderr, conflict.stderr
    assert jsonpath(cluster, ns, "cm/rep", "{.data.v}") == "2"


def test_delete(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("create", "configmap", "gone", "-n", ns)
    assert 'configmap "gone" deleted' in cluster.kubectl("delete", "-n", ns, "cm", "gone").stdout
    missing = cluster.kubectl("get", "-n", ns, "cm", "gone", check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_delete_with_finalizer(cluster: Cluster, ns: str) -> None:
    doc = ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  finalizers: [example.com/hold]\n"
           "data:\n  a: b\n")
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=doc)
    out = cluster.kubectl("delete", "-n", ns, "cm", "held", "--wait=false").stdout
    assert 'configmap "held" deleted' in out
    assert jsonpath(cluster, ns, "cm/held", "{.metadata.deletionTimestamp}") != ""
    cluster.kubectl("patch", "-n", ns, "cm", "held", "--type=json",
                    "-p", '[{"op":"remove","path":"/metadata/finalizers"}]')
    missing = cluster.kubectl("get", "-n", ns, "cm", "held", check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_unauthorized_kubeconfig_is_refused(cluster: Cluster) -> None:
    text = cluster.kubeconfig.read_text().replace(cluster.server.token(), "not-the-token")
    # without the admin's client certificate, which would authenticate whatever the token
    text = "".join(line for line in text.splitlines(keepends=True) if "client-" not in line)
    bad = cluster.cache_dir.parent / unique("bad-kubeconfig")
    bad.write_text(text)
    out = cluster.kubectl("--kubeconfig", str(bad), "get", "ns", check=False)
    # kubectl words a 401 met during discovery as "the server has asked for the client to provide credentials"
    assert out.returncode != 0 and ("Unauthorized" in out.stderr or "provide credentials" in out.stderr)
