"""networking.k8s.io/v1 through the real kubectl and the Python client: NetworkPolicy, Ingress (status through
/status) and IngressClass — discovery, `kubectl get` columns, upstream validation messages."""

from __future__ import annotations

import json

from e2ekit import Cluster

NETPOL = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "db-in"},
          "spec": {"podSelector": {"matchLabels": {"app": "db"}},
                   "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "x"}}}],
                                "ports": [{"port": 5432}]}]}}
INGRESS = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web"},
           "spec": {"ingressClassName": "nginx", "tls": [{"hosts": ["a.example.com"], "secretName": "tls"}],
                    "rules": [{"host": "a.example.com", "http": {"paths": [
                        {"path": "/", "pathType": "Prefix",
                         "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}}
CLASS = {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "nginx"},
         "spec": {"controller": "k8s.io/ingress-nginx"}}


def test_networking_kinds_with_kubectl(cluster: Cluster, ns: str) -> None:
    resources = cluster.kubectl("api-resources", "--api-group=networking.k8s.io").stdout
    for row in ("networkpolicies", "ingresses", "ingressclasses"):
        assert any(line.startswith(row + " ") for line in resources.splitlines()), resources
    assert "netpol" in resources and "ing " in resources

    cluster.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(NETPOL))
    out = cluster.kubectl("-n", ns, "get", "netpol").stdout.splitlines()
    assert out[0].split() == ["NAME", "POD-SELECTOR", "AGE"] and out[1].split()[:2] == ["db-in", "app=db"]
    got = json.loads(cluster.kubectl("-n", ns, "get", "networkpolicy", "db-in", "-o", "json").stdout)
    assert got["spec"]["policyTypes"] == ["Ingress"] and got["spec"]["ingress"][0]["ports"][0]["protocol"] == "TCP"

    cluster.kubectl("apply", "-f", "-", input=json.dumps(CLASS))
    try:
        out = cluster.kubectl("get", "ingressclass", "nginx").stdout.splitlines()
        assert out[0].split() == ["NAME", "CONTROLLER", "PARAMETERS", "AGE"]
        assert out[1].split()[:3] == ["nginx", "k8s.io/ingress-nginx", "<none>"]
        cluster.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(INGRESS))
        status = {"status": {"loadBalancer": {"ingress": [{"ip": "10.99.0.1"}]}}}
        cluster.kubectl("-n", ns, "patch", "ingress", "web", "--subresource=status", "--type=merge",
                        "-p", json.dumps(status))
        out = cluster.kubectl("-n", ns, "get", "ing").stdout.splitlines()
        assert out[0].split() == ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"]
        assert out[1].split()[:6] == ["web", "nginx", "a.example.com", "10.99.0.1", "80,", "443"]
    finally:
        cluster.kubectl("delete", "ingressclass", "nginx", check=False)

    bad = json.loads(json.dumps(NETPOL))
    bad["metadata"]["name"] = "bad"
    bad["spec"]["ingress"][0]["from"] = [{"ipBlock": {"cidr": "10.0.0.0/24", "except": ["192.168.0.0/24"]}}]
    proc = cluster.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(bad), check=False)
    assert proc.returncode != 0
    assert 'The NetworkPolicy "bad" is invalid' in proc.stderr
    assert "spec.ingress[0].from[0].ipBlock.except[0]" in proc.stderr and "strict subset of `cidr`" in proc.stderr

    from kubernetes import client

    net = client.NetworkingV1Api(cluster.api)
    assert [p.metadata.name for p in net.list_namespaced_network_policy(ns).items] == ["db-in"]
    assert net.read_namespaced_ingress("web", ns).status.load_balancer.ingress[0].ip == "10.99.0.1"
