"""networking.k8s.io/v1 NetworkPolicy, Ingress, IngressClass: defaults, upstream validation (field and message),
status through /status only, and the `kubectl get` rows — through a real registry on a real store."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from lite.errors import ApiError
from lite.kinds import Kind, KindRegistry
from lite.server.admission.defaultingressclass import DefaultIngressClassAdmission, default_class
from lite.server.api.resources import Resources
from lite.server.api.tables import to_table


def kind(res: Resources | None, plural: str) -> Kind:
    k = (res.kinds if res else KindRegistry()).by_resource("networking.k8s.io", "v1", plural)
    assert k is not None
    return k


def netpol(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": name},
            "spec": {"podSelector": {}, **spec}}


def ingress(name: str, annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **({"annotations": annotations} if annotations else {})}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta, "spec": spec}


def backend(name: str = "web", **port: Any) -> dict[str, Any]:
    return {"service": {"name": name, "port": port or {"number": 80}}}


def http(path: Any = "/", path_type: Any = "Prefix", be: Any = None) -> dict[str, Any]:
    item: dict[str, Any] = {"path": path, "backend": be or backend()}
    if path_type is not None:
        item["pathType"] = path_type
    return {"http": {"paths": [item]}}


async def test_networkpolicy_defaults(res: Resources) -> None:
    got = await res.create(kind(res, "networkpolicies"), "default",
                           netpol("d", ingress=[{"ports": [{"port": 80}]}]))
    assert got["spec"]["policyTypes"] == ["Ingress"]
    assert got["spec"]["ingress"][0]["ports"][0]["protocol"] == "TCP"
    assert got["metadata"]["generation"] == 1
    both = await res.create(kind(res, "networkpolicies"), "default", netpol("e", egress=[{}]))
    assert both["spec"]["policyTypes"] == ["Ingress", "Egress"]


NETPOL_BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"ingress": [{"from": [{}]}]}, "spec.ingress[0].from[0]", "must specify a peer"),
    ({"ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}]}, "spec.ingress[0].from[0]",
     "may not specify both ipBlock and another peer"),
    ({"egress": [{"to": [{"ipBlock": {"cidr": "300.0.0.0/8"}}]}]}, "spec.egress[0].to[0].ipBlock.cidr",
     "must be a valid CIDR value"),
    ({"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/24", "except": ["192.168.0.0/24"]}}]}]},
     "spec.egress[0].to[0].ipBlock.except[0]", "must be a strict subset of `cidr`"),
    ({"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/24", "except": ["10.0.0.0/24"]}}]}]},
     "spec.egress[0].to[0].ipBlock.except[0]", "must be a strict subset of `cidr`"),
    ({"ingress": [{"ports": [{"port": 0}]}]}, "spec.ingress[0].ports[0].port", "must be between 1 and 65535"),
    ({"ingress": [{"ports": [{"port": 90, "endPort": 80}]}]}, "spec.ingress[0].ports[0].endPort",
     "must be greater than or equal to `port`"),
    ({"ingress": [{"ports": [{"port": "http", "endPort": 80}]}]}, "spec.ingress[0].ports[0].endPort",
     "may not be specified when `port` is non-numeric"),
    ({"ingress": [{"ports": [{"endPort": 80}]}]}, "spec.ingress[0].ports[0].endPort",
     "may not be specified when `port` is not specified"),
    ({"ingress": [{"ports": [{"port": "Bad_Name"}]}]}, "spec.ingress[0].ports[0].port", "alpha-numeric"),
    ({"ingress": [{"ports": [{"protocol": "ICMP"}]}]}, "spec.ingress[0].ports[0].protocol", "Unsupported value"),
    ({"policyTypes": ["Sideways"]}, "spec.policyTypes[0]", "Unsupported value"),
    ({"policyTypes": ["Ingress", "Egress", "Ingress"]}, "spec.policyTypes", "may not specify more than two"),
    ({"podSelector": {"matchLabels": {"a": "-x-"}}}, "spec.podSelector.matchLabels", "valid label"),
]


@pytest.mark.parametrize(("spec", "field", "message"), NETPOL_BAD)
async def test_networkpolicy_refused(res: Resources, spec: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ApiError) as e:
        await res.create(kind(res, "networkpolicies"), "default", netpol("bad", **spec))
    assert e.value.code == 422
    assert any(c.field == field and message in c.message for c in e.value.causes), e.value.causes


INGRESS_BAD: list[tuple[dict[str, Any], dict[str, str] | None, str, str]] = [
    ({}, None, "spec", "either `defaultBackend` or `rules` must be specified"),
    ({"rules": [{"host": "1.2.3.4", **http()}]}, None, "spec.rules[0].host", "must be a DNS name, not an IP"),
    ({"rules": [{"host": "*.*.x", **http()}]}, None, "spec.rules[0].host", "wildcard"),
    ({"rules": [http(path_type=None)]}, None, "spec.rules[0].http.paths[0].pathType", "pathType must be specified"),
    ({"rules": [http(path_type="Glob")]}, None, "spec.rules[0].http.paths[0].pathType", "Unsupported value"),
    ({"rules": [http(path="a")]}, None, "spec.rules[0].http.paths[0].path", "must be an absolute path"),
    ({"rules": [http(path="/a//b")]}, None, "spec.rules[0].http.paths[0].path", "must not contain '//'"),
    ({"rules": [{"http": {"paths": []}}]}, None, "spec.rules[0].http.paths", "Required value"),
    ({"defaultBackend": {"service": {"name": "web", "port": {"number": 80, "name": "http"}}}}, None,
     "spec.defaultBackend",
     "cannot set both port name & port number"),
    ({"defaultBackend": {"service": {"name": "web", "port": {}}}}, None, "spec.defaultBackend",
     "port name or number is required"),
    ({"defaultBackend": {**backend(), "resource": {"kind": "B", "name": "b"}}}, None, "spec.defaultBackend",
     "cannot set both resource and service backends"),
    ({"defaultBackend": {}}, None, "spec.defaultBackend", "resource or service backend is required"),
    ({"defaultBackend": backend("Web")}, None, "spec.defaultBackend.service.name", "RFC 1123"),
    ({"defaultBackend": backend(), "ingressClassName": "Nope!"}, None, "spec.ingressClassName", "RFC 1123"),
    ({"defaultBackend": backend(), "ingressClassName": "a"}, {"kubernetes.io/ingress.class": "b"},
     "annotations.kubernetes.io/ingress.class", "must match `ingressClassName`"),
    ({"defaultBackend": backend(), "tls": [{"hosts": ["x_y"], "secretName": "s"}]}, None, "spec.tls[0].hosts[0]",
     "RFC 1123"),
]


@pytest.mark.parametrize(("spec", "annotations", "field", "message"), INGRESS_BAD)
async def test_ingress_refused(res: Resources, spec: dict[str, Any], annotations: dict[str, str] | None,
                               field: str, message: str) -> None:
    with pytest.raises(ApiError) as e:
        await res.create(kind(res, "ingresses"), "default", ingress("bad", annotations, **spec))
    assert e.value.code == 422
    assert any(c.field == field and message in c.message for c in e.value.causes), e.value.causes


async def test_ingress_status_only_through_status(res: Resources) -> None:
    k = kind(res, "ingresses")
    body = ingress("web", None, rules=[{"host": "a.example", **http()}], ingressClassName="nginx")
    body["status"] = {"loadBalancer": {"ingress": [{"ip": "10.0.0.9"}]}}
    got = await res.create(k, "default", body)
    assert got["status"] == {}
    got["status"] = {"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}]}}
    got = await res.update(k, "default", "web", got, subresource="status")
    assert got["status"]["loadBalancer"]["ingress"] == [{"ip": "192.0.2.7"}]
    got["status"] = {"loadBalancer": {"ingress": [{"hostname": "10.1.1.1"}]}}
    with pytest.raises(ApiError) as e:
        await res.update(k, "default", "web", got, subresource="status")
    assert e.value.code == 422 and "not an IP address" in e.value.causes[0].message


async def test_ingressclass_controller_rules(res: Resources) -> None:
    k = kind(res, "ingressclasses")
    base = {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "nginx"}}
    with pytest.raises(ApiError) as e:
        await res.create(k, "", {**base, "spec": {"controller": "no-domain"}})
    assert e.value.causes[0].field == "spec.controller"
    with pytest.raises(ApiError) as e:
        await res.create(k, "", {**base, "spec": {"controller": "k8s.io/x",
                                                  "parameters": {"kind": "C", "name": "c", "scope": "Namespace"}}})
    assert e.value.causes[0].field == "spec.parameters.namespace"
    got = await res.create(k, "", {**base, "spec": {"controller": "k8s.io/ingress-nginx",
                                                    "parameters": {"kind": "C", "name": "c"}}})
    assert got["spec"]["parameters"]["scope"] == "Cluster"
    got["spec"]["controller"] = "k8s.io/other"
    with pytest.raises(ApiError) as e:
        await res.update(k, "", "nginx", got)
    assert "field is immutable" in e.value.causes[0].message


NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
META = {"name": "x", "namespace": "default", "creationTimestamp": "2025-12-31T23:00:00Z"}


def cells(plural: str, obj: dict[str, Any]) -> list[Any]:
    return list(to_table(kind(None, plural), [{"metadata": META, **obj}], {}, now=NOW)["rows"][0]["cells"])


def test_table_rows() -> None:
    assert cells("networkpolicies", {"spec": {"podSelector": {}}}) == ["x", "<none>", "60m"]
    assert cells("networkpolicies", {"spec": {"podSelector": {"matchLabels": {"app": "db"}}}})[1] == "app=db"
    rules = [{"host": h} for h in ("a.io", "b.io", "c.io", "d.io", "e.io")]
    lb = {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}, {"hostname": "lb.example"}]}}
    assert cells("ingresses", {"spec": {"rules": rules, "tls": [{}]}, "status": lb}) == [
        "x", "<none>", "a.io,b.io,c.io + 2 more...", "10.0.0.1,10.0...", "80, 443", "60m"]
    assert cells("ingresses", {"spec": {"ingressClassName": "nginx", "rules": [{}]}})[1:5] == ["nginx", "*", "", "80"]
    params = {"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "p"}
    assert cells("ingressclasses", {"spec": {"controller": "k8s.io/nginx", "parameters": params}}) == [
        "x", "k8s.io/nginx", "IngressParameters.k8s.example.com/p", "60m"]


def ic(name: str, created: str, default: bool = True) -> dict[str, Any]:
    annotations = {"ingressclass.kubernetes.io/is-default-class": "true" if default else "false"}
    return {"metadata": {"name": name, "creationTimestamp": created, "annotations": annotations}}


@pytest.mark.parametrize(("classes", "want"), [
    ([], None),
    ([ic("a", "2026-01-01T00:00:00Z", default=False)], None),
    ([ic("a", "2026-01-01T00:00:00Z"), ic("b", "2026-01-02T00:00:00Z")], "b"),  # the newest default
    ([ic("b", "2026-01-01T00:00:00Z"), ic("a", "2026-01-01T00:00:00Z")], "a"),  # same age: by name
])
def test_default_class_choice(classes: list[dict[str, Any]], want: str | None) -> None:
    assert default_class(classes) == want


async def test_default_ingress_class_admission(res: Resources) -> None:
    res.strategies.add_admission(DefaultIngressClassAdmission(res, kind(res, "ingressclasses")).admit)
    k = kind(res, "ingresses")
    plain = await res.create(k, "default", ingress("before", None, defaultBackend=backend()))
    assert "ingressClassName" not in plain["spec"]  # no default class yet
    await res.create(kind(res, "ingressclasses"), "", {
        "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": "nginx", "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
        "spec": {"controller": "k8s.io/ingress-nginx"}})
    got = await res.create(k, "default", ingress("web", None, defaultBackend=backend()))
    assert got["spec"]["ingressClassName"] == "nginx"
    chosen = await res.create(k, "default", ingress("own", None, defaultBackend=backend(), ingressClassName="x"))
    assert chosen["spec"]["ingressClassName"] == "x"
    legacy = await res.create(k, "default", ingress("legacy", {"kubernetes.io/ingress.class": "traefik"},
                                                    defaultBackend=backend()))
    assert "ingressClassName" not in legacy["spec"]
    plain["spec"]["rules"] = [{"host": "a.example", **http()}]
    updated = await res.update(k, "default", "before", plain)
    assert "ingressClassName" not in updated["spec"]  # updates are left alone
