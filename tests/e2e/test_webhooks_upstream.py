"""Admission webhooks as upstream runs them, end to end (real `lite server`, real kubectl, the official Python
client, a webhook server on 127.0.0.1 from `tests.helpers.webhookserver`): CONNECT requests (exec, attach,
portforward, proxy) go to webhooks with upstream's AdmissionReview shape and can be denied; objects are
defaulted again after a mutating webhook; `service.path` is optional; a failed call names the Service's URL
and a plain reason.

Every configuration selects only the test's namespace (or, for nodes/proxy, only a node name the test owns), as
the server is shared by the e2e session, and is deleted after."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2ekit import Cluster, unique

from tests.helpers.webhookserver import WebhookServer

GROUP = "admissionregistration.k8s.io/v1"


@pytest.fixture
def hook(tmp_path: Path, ns: str) -> Iterator[WebhookServer]:
    server = WebhookServer(tmp_path, (f"hooks.{ns}.svc",)).start()
    yield server
    server.stop()


@pytest.fixture
def made(cluster: Cluster) -> Iterator[list[tuple[str, str]]]:
    objs: list[tuple[str, str]] = []
    yield objs
    for kind, name in objs:
        cluster.kubectl("delete", kind, name, "--ignore-not-found", check=False)


def webhook(name: str, ns: str, client_config: dict[str, Any], rules: list[dict[str, Any]],
            **extra: Any) -> dict[str, Any]:
    return {"name": name, "clientConfig": client_config, "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}, "rules": rules,
            "timeoutSeconds": 5, **extra}


def configure(cluster: Cluster, made: list[tuple[str, str]], kind: str, *webhooks: dict[str, Any]) -> str:
    name = unique("wh")
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(
        {"apiVersion": GROUP, "kind": kind, "metadata": {"name": name}, "webhooks": list(webhooks)}))
    made.append((kind.lower(), name))
    return name


def serve_through_service(cluster: Cluster, ns: str, port: int) -> None:
    """Service `hooks` in `ns` whose Endpoints are 127.0.0.1:`port` (a webhook server, or a closed port)."""
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hooks", "namespace": ns},
         "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}},
        {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "hooks", "namespace": ns},
         "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": port}]}]}]))


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pod(name: str, ns: str) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                           "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1d"],
                                                    "ports": [{"containerPort": 80}]}]}})


def raw(cluster: Cluster, method: str, path: str) -> tuple[int, dict[str, Any]]:
    m, url, headers, _, _ = cluster.api.param_serialize(method, path, header_params={"Accept": "application/json"})
    resp = cluster.api.call_api(m, url, header_params=headers)
    resp.read()
    return resp.status, json.loads(resp.data)


CONNECT = [{"operations": ["CONNECT"], "apiGroups": [""], "apiVersions": ["v1"],
            "resources": ["pods/exec", "pods/attach", "pods/portforward", "pods/proxy", "services/proxy"]}]


def test_connect_requests_go_to_webhooks_which_can_deny_them(cluster: Cluster, ns: str, hook: WebhookServer,
                                                             made: list[tuple[str, str]]) -> None:
    configure(cluster, made, "ValidatingWebhookConfiguration",
              webhook("connect.webhooks.lite.test", ns, {"url": hook.url("/deny-connect"),
                                                         "caBundle": hook.ca_bundle}, CONNECT))
    cluster.kubectl("apply", "-f", "-", input=pod("p", ns))

    out = cluster.kubectl("exec", "p", "-n", ns, "-c", "c", "--", "echo", "hi", check=False)
    assert out.returncode != 0
    assert 'admission webhook "connect.webhooks.lite.test" denied the request: connecting to p (exec) is not ' \
        'allowed' in out.stderr
    req = hook.reviews[-1]["request"]
    assert (req["operation"], req["name"], req["namespace"], req["subResource"]) == ("CONNECT", "p", ns, "exec")
    assert req["kind"] == {"group": "", "version": "v1", "kind": "PodExecOptions"}
    assert req["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert req["object"]["kind"] == "PodExecOptions" and req["object"]["apiVersion"] == "v1"
    assert req["object"]["command"] == ["echo", "hi"] and req["object"]["container"] == "c"
    assert req["object"]["stdout"] is True and req["oldObject"] is None and req["userInfo"]["username"]

    for sub, query, kind, fields in [
            ("attach", "?container=c&stdin=true&stdout=true", "PodAttachOptions",
             {"container": "c", "stdin": True, "stdout": True}),
            ("portforward", "?ports=80", "PodPortForwardOptions", {"ports": [80]})]:
        code, status = raw(cluster, "POST", f"/api/v1/namespaces/{ns}/pods/p/{sub}{query}")
        assert (code, status["code"], status.get("reason", "")) == (400, 400, ""), status  # as upstream's
        assert status["message"].endswith(f"connecting to p ({sub}) is not allowed")
        obj = hook.reviews[-1]["request"]["object"]
        assert obj == {"kind": kind, "apiVersion": "v1", **fields}

    code, status = raw(cluster, "GET", f"/api/v1/namespaces/{ns}/pods/p/proxy/some/page")
    assert code == 400 and status["message"].endswith("connecting to p (proxy) is not allowed")
    assert hook.reviews[-1]["request"]["object"] == {"kind": "PodProxyOptions", "apiVersion": "v1",
                                                     "path": "/some/page"}
    cluster.kubectl("create", "service", "clusterip", "web", "-n", ns, "--tcp=80:80")
    code, status = raw(cluster, "GET", f"/api/v1/namespaces/{ns}/services/web:80/proxy/")
    assert code == 400 and hook.reviews[-1]["request"]["kind"]["kind"] == "ServiceProxyOptions"
    assert hook.reviews[-1]["request"]["name"] == "web:80"

    # pods/log is a read, not a CONNECT: no review
    before = len(hook.reviews)
    cluster.kubectl("logs", "p", "-n", ns, check=False)
    assert len(hook.reviews) == before


def test_a_pod_is_defaulted_again_after_a_mutating_webhook(cluster: Cluster, ns: str, hook: WebhookServer,
                                                          made: list[tuple[str, str]]) -> None:
    rules = [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]
    configure(cluster, made, "MutatingWebhookConfiguration",
              webhook("init.webhooks.lite.test", ns, {"url": hook.url("/init-container"),
                                                      "caBundle": hook.ca_bundle}, rules))
    # the create's answer is the object as written (a later update, e.g. a status write, would default it too)
    got = json.loads(cluster.kubectl("create", "-f", "-", "-o", "json", input=pod("mutated", ns)).stdout)
    added = got["spec"]["initContainers"][0]
    assert added["name"] == "added"
    assert (added["terminationMessagePolicy"], added["terminationMessagePath"], added["imagePullPolicy"]) == \
        ("File", "/dev/termination-log", "Always")


def test_service_path_is_optional(cluster: Cluster, ns: str, made: list[tuple[str, str]]) -> None:
    rules = [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"]}]
    for i, extra in enumerate([{}, {"path": ""}, {"path": "/"}, {"path": "/a/b.c/"}]):
        name = configure(cluster, made, "ValidatingWebhookConfiguration", webhook(
            f"p{i}.webhooks.lite.test", ns, {"service": {"namespace": ns, "name": "hooks", **extra}}, rules,
            namespaceSelector={"matchLabels": {"no-such": "namespace"}}))
        got = json.loads(cluster.kubectl("get", "validatingwebhookconfiguration", name, "-o", "json").stdout)
        assert got["webhooks"][0]["clientConfig"]["service"].get("path") == extra.get("path")
    bad = webhook("bad.webhooks.lite.test", ns, {"service": {"namespace": ns, "name": "hooks", "path": "/a//B"}},
                  rules)
    out = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(
        {"apiVersion": GROUP, "kind": "ValidatingWebhookConfiguration", "metadata": {"name": unique("bad")},
         "webhooks": [bad]}), check=False)
    assert out.returncode != 0
    assert 'webhooks[0].clientConfig.service.path: Invalid value: "/a//B": segment[1] may not be empty' in out.stderr
    assert 'segment[2]: a lowercase RFC 1123 subdomain' in out.stderr


@pytest.mark.parametrize("case", ["refused", "untrusted", "broken"])
def test_a_failed_call_names_the_service_url_and_a_plain_reason(cluster: Cluster, ns: str, hook: WebhookServer,
                                                                 made: list[tuple[str, str]], tmp_path: Path,
                                                                 case: str) -> None:
    port = closed_port() if case == "refused" else hook.port
    serve_through_service(cluster, ns, port)
    path = "/status/500" if case == "broken" else "/validate"
    (tmp_path / "other").mkdir()
    other = WebhookServer(tmp_path / "other").start()  # its CA did not sign the hook's certificate
    try:
        ca = other.ca_bundle if case == "untrusted" else hook.ca_bundle
    finally:
        other.stop()
    rules = [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]
    configure(cluster, made, "ValidatingWebhookConfiguration", webhook(
        "down.webhooks.lite.test", ns, {"service": {"namespace": ns, "name": "hooks", "path": path},
                                        "caBundle": ca}, rules))
    out = cluster.kubectl("create", "configmap", "c", "-n", ns, check=False)
    assert out.returncode != 0
    url = f"https://hooks.{ns}.svc:443{path}?timeout=5s"
    why = {"refused": f'Post "{url}": dial tcp hooks.{ns}.svc:443: connect: connection refused',
           "untrusted": f'Post "{url}": tls: failed to verify certificate: x509: certificate signed by unknown '
                        'authority',
           "broken": 'an error on the server ("webhook broke") has prevented the request from succeeding'}[case]
    assert f'Internal error occurred: failed calling webhook "down.webhooks.lite.test": failed to call webhook: ' \
        f'{why}' in out.stderr, out.stderr
    assert "127.0.0.1" not in out.stderr and "Error" not in out.stderr.replace("Error from server", "")
