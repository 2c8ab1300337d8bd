"""Container env and argv: envFrom/env order, valueFrom sources, $(VAR) expansion, image defaults (kubelet rules)."""

from __future__ import annotations

import base64

import pytest

from lite.agent.envs import ConfigError, PodContext, command_line, container_env, expand, merge_image_env


def _pod(container: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "serviceAccountName": "default", "containers": [container]}}


CTX = PodContext(
    config_maps={"cm": {"data": {"A": "1", "B": "two", "bad-key": "x"}}},
    secrets={"s": {"data": {"PASS": base64.b64encode(b"hunter2").decode()}}},
    host_ip="10.0.0.5", pod_ip="10.42.0.7", node_allocatable={"cpu": "2", "memory": "1Gi"},
)


@pytest.mark.parametrize(("text", "want"), [
    ("$(A)", "1"), ("x$(A)y", "x1y"), ("$$(A)", "$(A)"), ("$(MISSING)", "$(MISSING)"), ("$(A", "$(A"),
    ("$A", "$A"), ("a$", "a$"), ("$(A)$(B)", "1two"), ("$$$(A)", "$1"),
])
def test_expand(text: str, want: str) -> None:
    assert expand(text, {"A": "1", "B": "two"}.get) == want


def test_env_order_sources_and_expansion() -> None:
    c = {"name": "c", "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}], "env": [
        {"name": "X", "value": "$(CM_A)-$(Y)"}, {"name": "Y", "value": "y"}, {"name": "Z", "value": "$(Y)"},
        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "PASS"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
        {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
    ], "resources": {"requests": {"cpu": "250m"}}}
    env = container_env(_pod(c), c, CTX)
    assert env["CM_A"] == "1" and env["CM_bad-key"] == "x"
    assert env["X"] == "1-$(Y)"  # Y is defined later: not expanded
    assert env["Z"] == "y" and env["PW"] == "hunter2" and env["POD"] == "p" and env["IP"] == "10.42.0.7"
    assert env["APP"] == "web" and env["MEM"] == "1024" and env["CPU"] == "250"


def test_missing_sources() -> None:
    c = {"name": "c", "env": [{"name": "V", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}}}]}
    with pytest.raises(ConfigError, match='configmap "nope" not found'):
        container_env(_pod(c), c, CTX)
    c = {"name": "c", "env": [{"name": "V", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]}
    with pytest.raises(ConfigError, match="couldn't find key k in ConfigMap ns/cm"):
        container_env(_pod(c), c, CTX)
    c = {"name": "c", "env": [
        {"name": "V", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}}}],
        "envFrom": [{"secretRef": {"name": "gone", "optional": True}}]}
    assert container_env(_pod(c), c, CTX) == {}


def test_image_env_and_command_line() -> None:
    env = merge_image_env(["PATH=/bin", "HOME=/root"], {"HOME": "/home", "GREETING": "hi"})
    assert env == {"PATH": "/bin", "HOME": "/home", "GREETING": "hi"}
    ep, cmd = ["/entry"], ["default-arg"]
    assert command_line({}, ep, cmd, env) == ["/entry", "default-arg"]
    assert command_line({"args": ["$(GREETING)"]}, ep, cmd, env) == ["/entry", "hi"]
    assert command_line({"command": ["sh", "-c"]}, ep, cmd, env) == ["sh", "-c"]
    assert command_line({"command": ["echo"], "args": ["$$(HOME)", "$(HOME)"]}, ep, cmd, env) == \
        ["echo", "$(HOME)", "/home"]
