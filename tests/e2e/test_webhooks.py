"""Admission webhooks end to end: a real `lite server`, real kubectl, and a webhook server the test runs on
127.0.0.1 (TLS with its own CA in caBundle), reached by `url` and by a `service` whose Endpoints point at it.

Every webhook configuration here selects only the test's namespace (namespaceSelector on
`kubernetes.io/metadata.name`), because the server is shared by the whole e2e session, and is deleted after."""

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
def hook(tmp_path: Path) -> Iterator[WebhookServer]:
    server = WebhookServer(tmp_path).start()
    yield server
    server.stop()


def webhook(name: str, ns: str, client_config: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "clientConfig": client_config, "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["configmaps"]}], **extra}


def configuration(kind: str, name: str, *webhooks: dict[str, Any]) -> str:
    return yaml.safe_dump({"apiVersion": GROUP, "kind": kind, "metadata": {"name": name}, "webhooks": list(webhooks)})


class Configs:
    """Applies webhook configurations and removes them all at the end of the test."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.made: list[tuple[str, str]] = []

    def apply(self, kind: str, *webhooks: dict[str, Any]) -> str:
        name = unique("wh")
        self.cluster.kubectl("apply", "-f", "-", input=configuration(kind, name, *webhooks))
        self.made.append((kind.lower(), name))
        return name

    def delete_all(self) -> None:
        for kind, name in self.made:
            self.cluster.kubectl("delete", kind, name, "--ignore-not-found", check=False)


@pytest.fixture
def configs(cluster: Cluster) -> Iterator[Configs]:
    c = Configs(cluster)
    yield c
    c.delete_all()


def configmap(name: str, ns: str, labels: dict[str, str] | None = None) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
                           "data": {"k": "v"}})


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_validating_webhook_rejects_a_labelled_configmap(cluster: Cluster, ns: str, hook: WebhookServer,
                                                         configs: Configs) -> None:
    configs.apply("ValidatingWebhookConfiguration",
                  webhook("deny.webhooks.lite.test", ns, {"url": hook.url("/validate"), "caBundle": hook.ca_bundle}))
    refused = cluster.kubectl("apply", "-f", "-", input=configmap("bad", ns, {"deny": "yes"}), check=False)
    assert refused.returncode != 0
    assert 'admission webhook "deny.webhooks.lite.test" denied the request: label deny=yes is not allowed' \
        in refused.stderr
    assert "Warning: checked by the test webhook" in refused.stderr
    assert cluster.kubectl("get", "configmap", "bad", "-n", ns, check=False).returncode != 0

    made = cluster.kubectl("apply", "-f", "-", input=configmap("good", ns))
    assert "Warning: checked by the test webhook" in made.stderr
    request = hook.reviews[-1]["request"]
    assert (request["operation"], request["namespace"], request["name"]) == ("CREATE", ns, "good")
    assert request["resource"] == {"group": "", "version": "v1", "resource": "configmaps"}
    assert request["userInfo"]["username"] == "system:admin"  # the admin kubeconfig's client certificate
    assert request["object"]["data"] == {"k": "v"} and request["dryRun"] is False

    # dry-run requests reach webhooks whose sideEffects are None, marked as such
    dry = cluster.kubectl("create", "configmap", "dry", "-n", ns, "--dry-run=server", "-o", "name")
    assert dry.stdout.strip() == "configmap/dry" and hook.reviews[-1]["request"]["dryRun"] is True

    # an update that adds the label is refused too; the stored object is unchanged
    upd = cluster.kubectl("label", "configmap", "good", "-n", ns, "deny=yes", check=False)
    assert upd.returncode != 0 and "denied the request" in upd.stderr
    labels = json.loads(cluster.kubectl("get", "configmap", "good", "-n", ns, "-o", "json").stdout)["metadata"]
    assert "deny" not in (labels.get("labels") or {})


def test_mutating_webhook_through_a_service_adds_a_label(cluster: Cluster, ns: str, tmp_path: Path,
                                                         configs: Configs) -> None:
    server = WebhookServer(tmp_path, (f"hooks.{ns}.svc",)).start()
    try:
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hooks", "namespace": ns},
             "spec": {"ports": [{"name": "https", "port": 443, "targetPort": server.port}]}},
            {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "hooks", "namespace": ns},
             "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": server.port}]}]},
        ]))
        service = {"service": {"namespace": ns, "name": "hooks", "path": "/mutate"}, "caBundle": server.ca_bundle}
        configs.apply("MutatingWebhookConfiguration", webhook("label.webhooks.lite.test", ns, service))
        cluster.kubectl("apply", "-f", "-", input=configmap("plain", ns))
        got = json.loads(cluster.kubectl("get", "configmap", "plain", "-n", ns, "-o", "json").stdout)
        assert got["metadata"]["labels"] == {"mutated": "yes"}
        assert server.reviews and server.reviews[-1]["request"]["name"] == "plain"
    finally:
        server.stop()


@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
def test_failure_policy_with_the_webhook_down(cluster: Cluster, ns: str, hook: WebhookServer, configs: Configs,
                                              policy: str) -> None:
    down = {"url": f"https://127.0.0.1:{closed_port()}/validate", "caBundle": hook.ca_bundle}
    configs.apply("ValidatingWebhookConfiguration",
                  webhook("down.webhooks.lite.test", ns, down, failurePolicy=policy, timeoutSeconds=2))
    out = cluster.kubectl("create", "configmap", "c", "-n", ns, check=False)
    if policy == "Ignore":
        assert out.returncode == 0, out.stderr
    else:
        assert out.returncode != 0
        assert 'Internal error occurred: failed calling webhook "down.webhooks.lite.test"' in out.stderr
        assert cluster.kubectl("get", "configmap", "c", "-n", ns, check=False).returncode != 0


def test_webhook_configuration_validation(cluster: Cluster, ns: str, configs: Configs) -> None:
    bad = webhook("nodots", ns, {"url": "http://127.0.0.1:1/x"}, timeoutSeconds=40,
                  matchConditions=[{"name": "c", "expression": "true"}])
    del bad["sideEffects"]
    out = cluster.kubectl("apply", "-f", "-", input=configuration("ValidatingWebhookConfiguration", "bad", bad),
                          check=False)
    assert out.returncode != 0
    for text in ('is invalid', 'webhooks[0].name: Invalid value: "nodots": should be a domain with at least three '
                 'segments separated by dots', "webhooks[0].sideEffects: Required value",
                 "webhooks[0].timeoutSeconds: Invalid value: 40: the timeout value must be between 1 and 30 seconds",
                 "webhooks[0].matchConditions: Forbidden", "'https' is the only allowed URL scheme"):
        assert text in out.stderr
    name = configs.apply("MutatingWebhookConfiguration",
                         webhook("ok.webhooks.lite.test", ns, {"url": "https://127.0.0.1:1/x"},
                                 namespaceSelector={"matchLabels": {"no-such": "namespace"}}))
    got = json.loads(cluster.kubectl("get", "mutatingwebhookconfiguration", name, "-o", "json").stdout)
    wh = got["webhooks"][0]
    assert (wh["failurePolicy"], wh["matchPolicy"], wh["timeoutSeconds"], wh["reinvocationPolicy"]) == \
        ("Fail", "Equivalent", 10, "Never")
    assert wh["objectSelector"] == {} and wh["rules"][0]["scope"] == "*"
    table = cluster.kubectl("get", "mutatingwebhookconfiguration", name).stdout.splitlines()
    assert table[0].split() == ["NAME", "WEBHOOKS", "AGE"] and table[1].split()[:2] == [name, "1"]
