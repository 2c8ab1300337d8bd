"""Pod Security Admission end to end with real kubectl: namespace labels, upstream's refusal and warning texts.

Pods here are bound to a node that does not exist (`spec.nodeName`), so nothing ever runs them."""

from __future__ import annotations

from typing import Any

import yaml
from e2ekit import Cluster

NOWHERE = "psa-no-such-node"
RESTRICTED_SC = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                 "seccompProfile": {"type": "RuntimeDefault"}}


def pod(name: str, ns: str, sc: dict[str, Any] | None = None, **spec: Any) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                           "spec": {"nodeName": NOWHERE, "containers": [
                               {"name": "c", "image": "busybox", "securityContext": sc or {}}], **spec}})


def label(cluster: Cluster, ns: str, *labels: str, check: bool = True) -> Any:
    return cluster.kubectl("label", "--overwrite", "namespace", ns, *labels, check=check)


def test_restricted_refuses_a_privileged_pod_with_upstreams_message(cluster: Cluster, ns: str) -> None:
    label(cluster, ns, "pod-security.kubernetes.io/enforce=restricted")
    out = cluster.kubectl("apply", "-f", "-", input=pod("priv", ns, {"privileged": True}), check=False)
    assert out.returncode != 0
    assert ('pods "priv" is forbidden: violates PodSecurity "restricted:latest": privileged (container "c" must '
            'not set securityContext.privileged=true), allowPrivilegeEscalation != false (container "c" must set '
            'securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "c" must set '
            'securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "c" must set '
            'securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set '
            'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")') in out.stderr
    assert cluster.kubectl("get", "pod", "priv", "-n", ns, check=False).returncode != 0
    made = cluster.kubectl("apply", "-f", "-", input=pod("fine", ns, RESTRICTED_SC))
    assert "pod/fine created" in made.stdout and "Warning" not in made.stderr
    # workloads are not refused (their pods are), and get no warning without a warn label
    dep = cluster.kubectl("create", "deployment", "d", "-n", ns, "--image=busybox")
    assert "created" in dep.stdout and "Warning" not in dep.stderr


def test_warn_mode_and_workload_templates(cluster: Cluster, ns: str) -> None:
    label(cluster, ns, "pod-security.kubernetes.io/warn=baseline", "pod-security.kubernetes.io/warn-version=v1.30")
    out = cluster.kubectl("apply", "-f", "-", input=pod("hostnet", ns, hostNetwork=True))
    assert "pod/hostnet created" in out.stdout
    assert 'Warning: would violate PodSecurity "baseline:v1.30": host namespaces (hostNetwork=true)' in out.stderr
    dep = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w", "namespace": ns},
        "spec": {"selector": {"matchLabels": {"app": "w"}}, "template": {
            "metadata": {"labels": {"app": "w"}},
            "spec": {"containers": [{"name": "w", "image": "busybox", "securityContext": {"privileged": True}}]}}}}))
    assert 'Warning: would violate PodSecurity "baseline:v1.30": privileged (container "w" must not set ' \
           'securityContext.privileged=true)' in dep.stderr


def test_namespace_label_changes(cluster: Cluster, ns: str) -> None:
    cluster.kubectl("apply", "-f", "-", input=pod("old-priv", ns, {"privileged": True}))
    out = label(cluster, ns, "pod-security.kubernetes.io/enforce=baseline")
    assert f'Warning: existing pods in namespace "{ns}" violate the new PodSecurity enforce level "baseline:latest"' \
        in out.stderr
    assert "Warning: old-priv: privileged" in out.stderr
    bad = label(cluster, ns, "pod-security.kubernetes.io/enforce=strict", check=False)
    assert bad.returncode != 0
    assert ('metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of '
            "privileged, baseline, restricted") in bad.stderr
