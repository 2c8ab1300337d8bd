"""securityContext end to end: pods applied with the real kubectl to a `lite server` plus a node agent (the
node fixture of `test_pods`, one cluster for this module), read back with `kubectl logs`, `kubectl exec` and
`kubectl get`: `id`, CapEff, a write to a read-only root, the Seccomp line, seccomp also on exec, runAsNonRoot
refused with kubelet's message, an unsafe sysctl rejected. Needs root, kubectl, docker-registry, busybox-static.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from e2ekit import unique
from test_pods import IMAGE, Node, node  # noqa: F401 - the module's cluster fixture

from lite.agent.runtime import linux

pytestmark = [pytest.mark.root, pytest.mark.timeout(600)]

@pytest.fixture
def ns(node: Node) -> str:  # noqa: F811 - one namespace per test, as in test_pods
    name = unique("secctx")
    node.kubectl("create", "namespace", name)
    return name


def _pod(name: str, command: str, sc: dict[str, Any], pod_sc: dict[str, Any] | None = None,
         restart: str = "Never") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 1,
                     "securityContext": pod_sc or {},
                     "containers": [{"name": "c", "image": IMAGE, "command": ["sh", "-c", command],
                                     "securityContext": sc}]}}


def _apply(n: Node, ns: str, manifest: dict[str, Any]) -> None:
    n.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))


def _phase(n: Node, ns: str, name: str) -> str:
    return str((n.pod(ns, name).get("status") or {}).get("phase"))


def test_restricted_container_shows_its_context(node: Node, ns: str) -> None:  # noqa: F811
    script = ("id; grep -E '^(CapEff|Seccomp|NoNewPrivs):' /proc/self/status; "
              "touch /x 2>/dev/null && echo root-writable || echo root-read-only")
    sc = {"runAsUser": 1000, "runAsGroup": 3000, "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
          "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}
    _apply(node, ns, _pod("restricted", script, sc, {"seccompProfile": {"type": "RuntimeDefault"},
                                                     "supplementalGroups": [4000]}))
    node.wait(lambda: _phase(node, ns, "restricted") == "Succeeded", 90, "restricted pod Succeeded")
    out = node.kubectl("logs", "-n", ns, "restricted").stdout.splitlines()
    assert out[0] == "uid=1000 gid=3000 groups=3000,4000", out
    fields = dict(line.split(":\t") for line in out[1:4])
    # NET_BIND_SERVICE only, but a non-root process holds no effective capabilities (no ambient set)
    assert fields == {"CapEff": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}, out
    assert out[4] == "root-read-only", out


def test_exec_is_confined_like_the_container(node: Node, ns: str) -> None:  # noqa: F811
    _apply(node, ns, _pod("confined", "sleep 3600", {"runAsUser": 1000,
                                                     "seccompProfile": {"type": "RuntimeDefault"}}, restart="Always"))
    node.wait_ready(ns, "confined")
    got = node.kubectl("exec", "-n", ns, "confined", "--", "sh", "-c",
                       "grep Seccomp: /proc/self/status; unshare -Ur true 2>/dev/null && echo escaped || echo refused")
    assert got.stdout.split() == ["Seccomp:", "2", "refused"], got.stdout
    _apply(node, ns, _pod("open", "sleep 3600", {}, restart="Always"))
    node.wait_ready(ns, "open")
    got = node.kubectl("exec", "-n", ns, "open", "--", "grep", "CapEff", "/proc/self/status")
    assert got.stdout.split()[1] == f"{sum(1 << n for n in linux.cap_numbers(linux.DEFAULT_CAPABILITIES)):016x}"


def test_run_as_non_root_and_unsafe_sysctls_are_refused(node: Node, ns: str) -> None:  # noqa: F811
    _apply(node, ns, _pod("rootimage", "id", {}, {"runAsNonRoot": True}))

    def waiting() -> dict[str, Any]:
        statuses = (node.pod(ns, "rootimage").get("status") or {}).get("containerStatuses") or [{}]
        return dict((statuses[0].get("state") or {}).get("waiting") or {})

    node.wait(lambda: waiting().get("reason") == "CreateContainerConfigError", 90, "CreateContainerConfigError")
    uid = node.pod(ns, "rootimage")["metadata"]["uid"]
    assert waiting()["message"] == ("container has runAsNonRoot and image will run as root "
                                    f'(pod: "rootimage_{ns}({uid})", container: c)')
    manifest = _pod("sysctl", "true", {}, {"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]})
    _apply(node, ns, manifest)
    node.wait(lambda: _phase(node, ns, "sysctl") == "Failed", 90, "sysctl pod Failed")
    status = node.pod(ns, "sysctl")["status"]
    assert status["reason"] == "SysctlForbidden"
    assert status["message"] == 'Pod was rejected: forbidden sysctl: "kernel.msgmax" not allowlisted'
