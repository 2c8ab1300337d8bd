"""Pod Security Standards checks and the PSA policy helpers, as tables of pods and upstream's texts."""

from __future__ import annotations

from typing import Any

import pytest

from lite.server.admission import podsecurity, psachecks
from lite.server.admission.podsecurity import Policy

RESTRICTED_SC = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                 "seccompProfile": {"type": "RuntimeDefault"}}


def pod(*containers: dict[str, Any], annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "annotations": annotations or {}},
            "spec": {"containers": list(containers) or [{"name": "c", "image": "i"}], **spec}}


def c(name: str = "c", **sc: Any) -> dict[str, Any]:
    return {"name": name, "image": "i", "securityContext": sc}


def ok(name: str = "c", **extra: Any) -> dict[str, Any]:
    """A container that passes restricted, with `extra` merged into its securityContext."""
    return c(name, **{**RESTRICTED_SC, **extra})


def check(level: str, p: dict[str, Any]) -> str:
    return psachecks.summary(psachecks.evaluate(level, p["metadata"], p["spec"]))


@pytest.mark.parametrize(("p", "want"), [
    (pod(), ""),
    (pod(c(privileged=True)), 'privileged (container "c" must not set securityContext.privileged=true)'),
    (pod(c("a", privileged=True), c("b", privileged=True)),
     'privileged (containers "a", "b" must not set securityContext.privileged=true)'),
    (pod(hostNetwork=True, hostPID=True), "host namespaces (hostNetwork=true, hostPID=true)"),
    (pod(c(capabilities={"add": ["SYS_ADMIN", "NET_ADMIN", "CHOWN"]})),
     'non-default capabilities (container "c" must not include "NET_ADMIN", "SYS_ADMIN" in '
     "securityContext.capabilities.add)"),
    (pod(volumes=[{"name": "h", "hostPath": {"path": "/"}}]), 'hostPath volumes (volume "h")'),
    (pod({"name": "c", "image": "i", "ports": [{"containerPort": 80, "hostPort": 8080},
                                               {"containerPort": 9, "hostPort": 443}]}),
     'hostPort (container "c" uses hostPorts 443, 8080)'),
    (pod(c(procMount="Unmasked")), 'procMount (container "c" must not set securityContext.procMount to "Unmasked")'),
    (pod(securityContext={"seLinuxOptions": {"type": "spc_t", "user": "u"}}),
     'seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: type "spc_t"; user may not be set)'),
    (pod(securityContext={"seLinuxOptions": {"type": "container_engine_t"}}), ""),
    (pod(c(seccompProfile={"type": "Unconfined"})),
     'seccompProfile (container "c" must not set securityContext.seccompProfile.type to "Unconfined")'),
    (pod(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"},
                                      {"name": "net.ipv4.tcp_syncookies", "value": "1"}]}),
     "forbidden sysctls (kernel.msgmax)"),
    (pod(annotations={"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}),
     'forbidden AppArmor profile (annotation must not set AppArmor profile type to '
     '"container.apparmor.security.beta.kubernetes.io/c="unconfined"")'),
    (pod(securityContext={"appArmorProfile": {"type": "Unconfined"}}),
     'forbidden AppArmor profile (pod must not set AppArmor profile type to "Unconfined")'),
    (pod(c("a", appArmorProfile={"type": "Unconfined"}), c("b", appArmorProfile={"type": "RuntimeDefault"}),
         annotations={"container.apparmor.security.beta.kubernetes.io/a": "bogus",
                      "container.apparmor.security.beta.kubernetes.io/b": "localhost/"}),
     'forbidden AppArmor profiles (container "a" and annotation must not set AppArmor profile type to '
     '"Unconfined", "container.apparmor.security.beta.kubernetes.io/a="bogus"")'),
    (pod(annotations={"container.apparmor.security.beta.kubernetes.io/c": "localhost/x"}), ""),
    (pod(c(runAsUser=0, runAsNonRoot=False)), ""),  # restricted-only checks
])
def test_baseline(p: dict[str, Any], want: str) -> None:
    assert check("baseline", p) == want
    assert check("privileged", p) == ""


def test_restricted_reports_baseline_first_then_restricted_checks_in_upstreams_order() -> None:
    assert check("restricted", pod(c(privileged=True))) == (
        'privileged (container "c" must not set securityContext.privileged=true), '
        'allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), '
        'unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), '
        'runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), '
        'seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" '
        'or "Localhost")')


@pytest.mark.parametrize(("p", "want"), [
    (pod(ok()), ""),
    (pod(ok(), ok("d", capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]})), ""),
    (pod(ok(capabilities={"drop": ["ALL"], "add": ["SYS_TIME"]})),
     'non-default capabilities (container "c" must not include "SYS_TIME" in securityContext.capabilities.add), '
     'unrestricted capabilities (container "c" must not include "SYS_TIME" in securityContext.capabilities.add)'),
    (pod(ok(allowPrivilegeEscalation=True)),
     'allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false)'),
    (pod(ok(runAsNonRoot=False)),
     'runAsNonRoot != true (container "c" must not set securityContext.runAsNonRoot=false)'),
    (pod(c("c", allowPrivilegeEscalation=False, capabilities={"drop": ["ALL"]}), securityContext={
        "runAsNonRoot": True, "seccompProfile": {"type": "Localhost", "localhostProfile": "x"}}), ""),
    (pod(ok(runAsUser=0), securityContext={"runAsUser": 0}),
     'runAsUser=0 (pod and container "c" must not set runAsUser=0)'),
    (pod(ok(), volumes=[{"name": "h", "hostPath": {"path": "/"}}, {"name": "n", "nfs": {"server": "s"}},
                        {"name": "e", "emptyDir": {}}]),
     'restricted volume types (volumes "h", "n" use restricted volume types "hostPath", "nfs")'),
    (pod(ok(seccompProfile={"type": "Unconfined"})),
     'seccompProfile (container "c" must not set securityContext.seccompProfile.type to "Unconfined")'),
    (pod(ok(), {"name": "d", "image": "i"}, initContainers=[ok("i")]),
     'allowPrivilegeEscalation != false (container "d" must set securityContext.allowPrivilegeEscalation=false), '
     'unrestricted capabilities (container "d" must set securityContext.capabilities.drop=["ALL"]), '
     'runAsNonRoot != true (pod or container "d" must set securityContext.runAsNonRoot=true), '
     'seccompProfile (pod or container "d" must set securityContext.seccompProfile.type to "RuntimeDefault" '
     'or "Localhost")'),
])
def test_restricted(p: dict[str, Any], want: str) -> None:
    assert check("restricted", p) == want


def test_malformed_specs_do_not_crash() -> None:
    for spec in ({"containers": "x"}, {"containers": [1, None]}, {"securityContext": 5, "volumes": [3]},
                 {"containers": [{"name": "c", "securityContext": {"capabilities": "all"}}]}):
        psachecks.evaluate("restricted", {}, spec)


@pytest.mark.parametrize(("labels", "want"), [
    ({}, {}),
    ({"pod-security.kubernetes.io/enforce": "baseline"}, {"enforce": Policy("baseline", "latest")}),
    ({"pod-security.kubernetes.io/warn": "restricted", "pod-security.kubernetes.io/warn-version": "v1.30"},
     {"warn": Policy("restricted", "v1.30")}),
    ({"pod-security.kubernetes.io/audit": "bogus"}, {"audit": Policy("restricted", "latest")}),
])
def test_policies(labels: dict[str, str], want: dict[str, Policy]) -> None:
    assert podsecurity.policies(labels) == want


def test_label_causes() -> None:
    causes = podsecurity.label_causes({"pod-security.kubernetes.io/enforce": "strict",
                                       "pod-security.kubernetes.io/warn-version": "1.2"})
    assert [(x.field, x.message) for x in causes] == [
        ("metadata.labels[pod-security.kubernetes.io/enforce]",
         'Invalid value: "strict": must be one of privileged, baseline, restricted'),
        ("metadata.labels[pod-security.kubernetes.io/warn-version]",
         'Invalid value: "1.2": must be "latest" or "v1.x"')]
    assert podsecurity.label_causes({"pod-security.kubernetes.io/enforce-version": "v1.25"}) == []


def test_pod_templates_of_workloads() -> None:
    tpl = {"spec": {"containers": []}}
    assert podsecurity.pod_template("Deployment.apps", {"spec": {"template": tpl}}) is tpl
    assert podsecurity.pod_template("CronJob.batch", {"spec": {"jobTemplate": {"spec": {"template": tpl}}}}) is tpl
    assert podsecurity.pod_template("PodTemplate", {"template": tpl}) is tpl
    assert podsecurity.pod_template("ConfigMap", {"spec": {"template": tpl}}) is None
    assert podsecurity.pod_template("Job.batch", {"spec": "x"}) is None


def test_significant_pod_update() -> None:
    p = pod(c(privileged=True))
    relabelled = {**p, "metadata": {**p["metadata"], "labels": {"a": "b"}}}
    assert not podsecurity.significant_pod_update(relabelled, p)
    assert podsecurity.significant_pod_update(pod(c()), p)
    annotated = pod(c(privileged=True), annotations={"container.apparmor.security.beta.kubernetes.io/c": "x"})
    assert podsecurity.significant_pod_update(annotated, p)


def test_namespace_warnings_group_pods_by_reasons() -> None:
    def named(n: str, p: dict[str, Any]) -> dict[str, Any]:
        return {**p, "metadata": {"name": n}}
    pods = [named("a", pod(c(privileged=True))), named("b", pod(c(privileged=True))), named("c", pod()),
            named("d", pod(hostIPC=True))]
    assert podsecurity.namespace_warnings("ns", Policy("baseline", "latest"), pods) == [
        'existing pods in namespace "ns" violate the new PodSecurity enforce level "baseline:latest"',
        "a (and 1 other pod): privileged", "d: host namespaces"]
    assert podsecurity.namespace_warnings("ns", Policy("baseline", "latest"), [pods[2]]) == []
