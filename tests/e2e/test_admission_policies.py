"""ValidatingAdmissionPolicy end to end: a real `lite server`, real kubectl and the official Python client.

Every policy here selects only the test's namespace (matchConstraints.namespaceSelector), as the server is
shared by the e2e session, and is deleted after."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2ekit import Cluster, unique
from kubernetes import client
from kubernetes.client.exceptions import ApiException

V1 = "admissionregistration.k8s.io/v1"


class Policies:
    def __init__(self, cluster: Cluster, ns: str) -> None:
        self.cluster, self.ns = cluster, ns
        self.made: list[tuple[str, str]] = []

    def policy(self, validations: list[dict[str, Any]], **spec: Any) -> str:
        name = unique("vap")
        match = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.ns}},
                 "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                                    "resources": ["configmaps"]}]}
        body = {"apiVersion": V1, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
                "spec": {"matchConstraints": match, "validations": validations, **spec}}
        self.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(body))
        self.made.append(("validatingadmissionpolicy", name))
        return name

    def bind(self, policy: str, actions: list[str], **spec: Any) -> str:
        name = unique("vapb")
        body = {"apiVersion": V1, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
                "spec": {"policyName": policy, "validationActions": actions, **spec}}
        self.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(body))
        self.made.append(("validatingadmissionpolicybinding", name))
        return name

    def delete_all(self) -> None:
        for kind, name in reversed(self.made):
            self.cluster.kubectl("delete", kind, name, "--ignore-not-found", check=False)


@pytest.fixture
def policies(cluster: Cluster, ns: str) -> Iterator[Policies]:
    p = Policies(cluster, ns)
    yield p
    p.delete_all()


def cm(name: str, ns: str, data: dict[str, str], labels: dict[str, str] | None = None) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": name, "namespace": ns, "labels": labels or {}}, "data": data})


def test_deny_warn_and_messages(cluster: Cluster, ns: str, policies: Policies) -> None:
    p = policies.policy([{"expression": "!has(object.data) || !('bad' in object.data)",
                          "messageExpression": "'key bad is not allowed in ' + object.metadata.name",
                          "reason": "Forbidden"}])
    b = policies.bind(p, ["Deny"])
    refused = cluster.kubectl("apply", "-f", "-", input=cm("one", ns, {"bad": "1"}), check=False)
    assert refused.returncode != 0
    assert (f'configmaps "one" is forbidden: ValidatingAdmissionPolicy \'{p}\' with binding \'{b}\' denied '
            "request: key bad is not allowed in one") in refused.stderr
    cluster.kubectl("apply", "-f", "-", input=cm("two", ns, {"good": "1"}))
    # the official client sees upstream's status: reason from the validation, code by reason
    v1 = client.CoreV1Api(cluster.api)
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="three"),
                                                               data={"bad": "x"}))
    status = json.loads(e.value.body)
    assert (e.value.status, status["reason"]) == (403, "Forbidden")
    message = (f'configmaps "three" is forbidden: ValidatingAdmissionPolicy \'{p}\' with binding \'{b}\' denied '
               "request: key bad is not allowed in three")
    assert status["message"] == message
    assert status["details"] == {"name": "three", "kind": "configmaps",
                                 "causes": [{"message": message.split(" is forbidden: ")[1]}]}

    # Warn: allowed, with upstream's Warning text; no message -> `failed expression: <expr>`
    w = policies.policy([{"expression": "object.data.size() < 2"}])
    wb = policies.bind(w, ["Warn", "Audit"])
    made = cluster.kubectl("apply", "-f", "-", input=cm("four", ns, {"a": "1", "b": "2"}))
    assert (f"Warning: Validation failed for ValidatingAdmissionPolicy '{w}' with binding '{wb}': "
            "failed expression: object.data.size() < 2") in made.stderr


def test_params_from_a_configmap_and_not_found(cluster: Cluster, ns: str, policies: Policies) -> None:
    cluster.kubectl("create", "configmap", "limits", "-n", ns, "--from-literal=max=2")
    p = policies.policy([{"expression": "variables.keys <= int(params.data.max)",
                          "messageExpression": "'at most ' + params.data.max + ' keys'"}],
                        paramKind={"apiVersion": "v1", "kind": "ConfigMap"},
                        matchConditions=[{"name": "not-the-params", "expression": "object.metadata.name != 'limits'"}],
                        variables=[{"name": "keys", "expression": "object.data.size()"}])
    b = policies.bind(p, ["Deny"], paramRef={"name": "limits", "parameterNotFoundAction": "Deny"})
    # kubectl get prints upstream's columns
    row = cluster.kubectl("get", "validatingadmissionpolicy", p, "--no-headers").stdout.split()
    assert row[:3] == [p, "1", "v1/ConfigMap"]
    row = cluster.kubectl("get", "validatingadmissionpolicybinding", b, "--no-headers").stdout.split()
    assert row[:3] == [b, p, "*/limits"]
    refused = cluster.kubectl("apply", "-f", "-", input=cm("big", ns, {"a": "1", "b": "2", "c": "3"}), check=False)
    assert refused.returncode != 0 and "denied request: at most 2 keys" in refused.stderr
    cluster.kubectl("apply", "-f", "-", input=cm("small", ns, {"a": "1"}))
    # a binding whose params are missing: Deny refuses everything it matches, Allow admits
    p2 = policies.policy([{"expression": "true"}], paramKind={"apiVersion": "v1", "kind": "ConfigMap"})
    b2 = policies.bind(p2, ["Deny"], paramRef={"name": "absent", "parameterNotFoundAction": "Deny"})
    refused = cluster.kubectl("apply", "-f", "-", input=cm("x", ns, {"a": "1"}), check=False)
    assert (f"ValidatingAdmissionPolicy '{p2}' with binding '{b2}' denied request: failed to configure binding: "
            "no params found for policy binding with `Deny` parameterNotFoundAction") in refused.stderr
    cluster.kubectl("delete", "validatingadmissionpolicybinding", b2)
    policies.bind(p2, ["Deny"], paramRef={"name": "absent", "parameterNotFoundAction": "Allow"})
    cluster.kubectl("apply", "-f", "-", input=cm("allowed", ns, {"a": "1"}))


def test_failure_policy_namespace_object_and_authorizer(cluster: Cluster, ns: str, policies: Policies) -> None:
    broken = policies.policy([{"expression": "object.data.missing == 'x'"}], failurePolicy="Ignore")
    policies.bind(broken, ["Deny"])
    cluster.kubectl("apply", "-f", "-", input=cm("ignored", ns, {"a": "1"}))
    failing = policies.policy([{"expression": "object.data.missing == 'x'"}], failurePolicy="Fail")
    policies.bind(failing, ["Deny"])
    refused = cluster.kubectl("apply", "-f", "-", input=cm("failed", ns, {"a": "1"}), check=False)
    assert "denied request: expression 'object.data.missing == 'x'' resulted in error: no such key: missing" \
        in refused.stderr
    cluster.kubectl("delete", "validatingadmissionpolicy", failing)
    # matchConditions: a request they do not all accept skips the policy
    picky = policies.policy([{"expression": "false", "message": "checked"}],
                            matchConditions=[{"name": "labelled", "expression": "has(object.metadata.labels) && "
                                                                                "'check' in object.metadata.labels"},
                                             {"name": "not-skipped", "expression": "!('skip' in object.data)"}])
    policies.bind(picky, ["Deny"])
    cluster.kubectl("apply", "-f", "-", input=cm("unlabelled", ns, {"a": "1"}))
    cluster.kubectl("apply", "-f", "-", input=cm("skipped", ns, {"skip": "1"}, {"check": "1"}))
    refused = cluster.kubectl("apply", "-f", "-", input=cm("checked", ns, {"a": "1"}, {"check": "1"}), check=False)
    assert "denied request: checked" in refused.stderr
    cluster.kubectl("delete", "validatingadmissionpolicy", picky)
    p = policies.policy([
        {"expression": f"namespaceObject.metadata.name == '{ns}'"},
        {"expression": "authorizer.group('').resource('secrets').namespace(object.metadata.namespace)"
                       ".check('get').allowed()", "message": "needs get on secrets"},
        {"expression": "!authorizer.serviceAccount('default', 'default').group('').resource('secrets')"
                       ".check('delete').allowed()"},
        {"expression": "request.userInfo.username == 'system:admin' && request.operation in ['CREATE', 'UPDATE']"},
    ])
    policies.bind(p, ["Deny"])
    cluster.kubectl("apply", "-f", "-", input=cm("checked", ns, {"a": "1"}))


def test_served_validated_and_explained(cluster: Cluster) -> None:
    bad = {"apiVersion": V1, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": unique("bad")},
           "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                            "operations": ["CREATE"], "resources": ["pods"]}]},
                    "validations": [{"expression": "object.spec.+"}]}}
    refused = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert refused.returncode != 0 and "spec.validations[0].expression: Invalid value" in refused.stderr
    binding = {"apiVersion": V1, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": unique("bad")},
               "spec": {"policyName": "x", "validationActions": ["Deny", "Warn"]}}
    refused = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(binding), check=False)
    assert "must not contain both Deny and Warn" in refused.stderr
    # server-side apply of a policy and a binding (managedFields over the kinds' schemas)
    name = unique("ssa")
    ok = {"apiVersion": V1, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
          "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                           "operations": ["CREATE"], "resources": ["pods"]}]},
                   "validations": [{"expression": "true"}]}}
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(ok))
    ok["spec"]["validations"] = [{"expression": "1 == 1"}]
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(ok))
    got = json.loads(cluster.kubectl("get", "validatingadmissionpolicy", name, "-o", "json").stdout)
    assert got["spec"]["validations"] == [{"expression": "1 == 1"}] and got["metadata"]["generation"] == 2
    cluster.kubectl("delete", "validatingadmissionpolicy", name)
    explained = cluster.kubectl("explain", "validatingadmissionpolicy.spec.validations")
    assert "messageExpression" in explained.stdout
    resources = cluster.kubectl("api-resources", "--api-group=admissionregistration.k8s.io", "-o", "name").stdout
    assert "validatingadmissionpolicies.admissionregistration.k8s.io" in resources
    assert "validatingadmissionpolicybindings.admissionregistration.k8s.io" in resources


GATEWAY_INSTALL = Path(__file__).resolve().parent.parent / "fixtures" / "gateway-api" / "v1.6.1" / \
    "standard-install.yaml"


def test_gateway_api_install_applies_enforces_safe_upgrades_and_deletes(cluster: Cluster) -> None:
    install = str(GATEWAY_INSTALL)
    try:
        cluster.kubectl("apply", "-f", install)
        again = cluster.kubectl("apply", "-f", install)  # a re-apply passes the policy it installed
        assert "customresourcedefinition.apiextensions.k8s.io/httproutes.gateway.networking.k8s.io unchanged" \
            in again.stdout
        # the safe-upgrades policy refuses an older bundle of a Gateway API CRD, with the policy's message
        crds = [d for d in yaml.safe_load_all(GATEWAY_INSTALL.read_text())
                if d and d.get("kind") == "CustomResourceDefinition"]
        old = crds[0]
        old["metadata"]["annotations"]["gateway.networking.k8s.io/bundle-version"] = "v1.4.0"
        refused = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(old), check=False)
        assert refused.returncode != 0
        assert ("ValidatingAdmissionPolicy 'safe-upgrades.gateway.networking.k8s.io' with binding "
                "'safe-upgrades.gateway.networking.k8s.io' denied request: Installing CRDs with version before "
                "v1.5.0 is prohibited by default.") in refused.stderr
        # experimental on top of standard is refused too
        exp = crds[1]
        exp["metadata"]["annotations"]["gateway.networking.k8s.io/channel"] = "experimental"
        refused = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(exp), check=False)
        assert "Installing experimental CRDs on top of standard channel CRDs is prohibited" in refused.stderr
    finally:
        cluster.kubectl("delete", "-f", install, "--ignore-not-found", "--wait=true", check=False)
    left = cluster.kubectl("get", "validatingadmissionpolicies,validatingadmissionpolicybindings", "-o", "name")
    assert "safe-upgrades" not in left.stdout


def test_status_type_checking(cluster: Cluster) -> None:
    name = unique("typed")
    body = {"apiVersion": V1, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                             "operations": ["CREATE"], "resources": ["deployments"]}]},
                     "validations": [{"expression": "object.spec.replicas <= 5"},
                                     {"expression": "object.spec.replica > 1"}]}}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(body))
    try:
        status: dict[str, Any] = {}
        for _ in range(100):
            got = json.loads(cluster.kubectl("get", "validatingadmissionpolicy", name, "-o", "json").stdout)
            status = got.get("status") or {}
            if status.get("observedGeneration") == got["metadata"]["generation"]:
                break
            time.sleep(0.1)
        assert status["typeChecking"]["expressionWarnings"] == [{
            "fieldRef": "spec.validations[1].expression",
            "warning": "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replica'\n"
                       " | object.spec.replica > 1\n | ...........^"}]
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicy", name, "--ignore-not-found")


def test_params_from_a_custom_resource_by_selector_and_audit(cluster: Cluster, ns: str,
                                                              policies: Policies) -> None:
    group = f"{unique('p')}.lite.test"
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": f"limits.{group}"},
           "spec": {"group": group, "scope": "Namespaced",
                    "names": {"plural": "limits", "singular": "limit", "kind": "Limit", "listKind": "LimitList"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "properties": {"maxKeys": {"type": "integer"}}}}}]}}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(crd))
    try:
        cluster.kubectl("wait", "--for=condition=Established", f"crd/limits.{group}", "--timeout=30s")
        for name, keys, tier in (("small", 1, "a"), ("other", 9, "b")):
            cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({
                "apiVersion": f"{group}/v1", "kind": "Limit",
                "metadata": {"name": name, "namespace": ns, "labels": {"tier": tier}}, "maxKeys": keys}))
        p = policies.policy([{"expression": "object.data.size() <= params.maxKeys",
                              "messageExpression": "'at most ' + string(params.maxKeys) + ' keys, by ' + "
                                                   "params.metadata.name"}],
                            paramKind={"apiVersion": f"{group}/v1", "kind": "Limit"},
                            auditAnnotations=[{"key": "keys", "valueExpression": "string(object.data.size())"}])
        b = policies.bind(p, ["Deny", "Audit"],
                          paramRef={"selector": {"matchLabels": {"tier": "a"}}, "parameterNotFoundAction": "Deny"})
        refused = cluster.kubectl("apply", "-f", "-", input=cm("two-keys", ns, {"a": "1", "b": "2"}), check=False)
        assert f"with binding '{b}' denied request: at most 1 keys, by small" in refused.stderr
        cluster.kubectl("apply", "-f", "-", input=cm("one-key", ns, {"a": "1"}))
        # Audit: the failure and the audit annotation are logged where lite keeps audit information
        log = cluster.server.log_path.read_text(errors="replace")
        assert "validation.policy.admission.k8s.io/validation_failure" in log and f"'{p}/keys': '2'" in log
    finally:
        cluster.kubectl("delete", "crd", f"limits.{group}", "--ignore-not-found", check=False)


def test_runtime_cost_limit_and_authorizer_signatures(cluster: Cluster, ns: str, policies: Policies) -> None:
    """An expression over a large map goes over upstream's per-call cost limit: failurePolicy Fail refuses with
    upstream's message, Ignore admits; and an authorizer path check used as a resource check is refused at
    policy write, as upstream's type checker does."""
    wrong = {"apiVersion": V1, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": unique("vap")},
             "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                              "operations": ["CREATE"], "resources": ["pods"]}]},
                      "validations": [{"expression": "authorizer.path('/healthz').namespace('a').check('get')"
                                                     ".allowed()"}]}}
    refused = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(wrong), check=False)
    assert refused.returncode != 0
    assert "spec.validations[0].expression: Invalid value" in refused.stderr
    assert "compilation failed: ERROR: <input>:1:38: found no matching overload for 'namespace' applied to " \
           "'kubernetes.authorization.PathCheck.(string)'" in refused.stderr
    expr = "object.data.all(k, object.data[k].matches('^[a-z]+(-[a-z]+)*([.][a-z]+(-[a-z]+)*)*$'))"
    big = {f"k{i}": "a" * 1400 for i in range(1000)}  # 1.4 MB: 1,000 x 140 x 10 over the 1,000,000 per call
    strict = policies.policy([{"expression": expr}], failurePolicy="Fail",
                             matchConditions=[{"name": "strict", "expression": "'strict' in object.metadata.labels"}])
    policies.bind(strict, ["Deny"])
    lax = policies.policy([{"expression": expr}], failurePolicy="Ignore",
                          matchConditions=[{"name": "lax", "expression": "'lax' in object.metadata.labels"}])
    policies.bind(lax, ["Deny"])
    refused = cluster.kubectl("create", "-f", "-", input=cm("strict", ns, big, {"strict": "1"}), check=False)
    assert refused.returncode != 0
    assert f"ValidatingAdmissionPolicy '{strict}' with binding" in refused.stderr
    assert f"denied request: expression '{expr}' resulted in error: operation cancelled: actual cost limit " \
           "exceeded" in refused.stderr
    # the lax policy would refuse this one (the 'x' value does not match), but its evaluation is cut off and
    # its failurePolicy ignores that; a small one it judges as usual
    cluster.kubectl("create", "-f", "-", input=cm("lax", ns, {**big, "x": "1"}, {"lax": "1"}))
    refused = cluster.kubectl("create", "-f", "-", input=cm("lax-small", ns, {"a": "b", "x": "1"}, {"lax": "1"}),
                              check=False)
    assert f"denied request: failed expression: {expr}" in refused.stderr
