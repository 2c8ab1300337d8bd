"""Table printers for networking.k8s.io NetworkPolicy, Ingress and IngressClass, mirroring upstream's
`printNetworkPolicy`, `printIngress` and `printIngressClass`. Cells are in column order. Null-safe.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from lite.kubetables.format import Obj, age, dct, format_selector, get, lst, s
from lite.kubetables.spec import Printer, age_col, col, name_col


def ingress_hosts(rules: list[Any]) -> str:
    """Upstream formatHosts: up to three hosts, then `+ N more...`; `*` when no rule names a host."""
    hosts: list[str] = []
    more = False
    for rule in rules:
        if len(hosts) == 3:
            more = True
        if not more and s(rule, "host"):
            hosts.append(s(rule, "host"))
    if not hosts:
        return "*"
    text = ",".join(hosts)
    return f"{text} + {len(rules) - 3} more..." if more else text


def ingress_address(obj: Obj, wide: bool = False) -> str:
    """Upstream ingressLoadBalancerStatusStringer: IPs and hostnames, cut to 13 characters + '...' past 16."""
    parts = []
    for ing in lst(obj, "status", "loadBalancer", "ingress"):
        if s(ing, "ip"):
            parts.append(s(ing, "ip"))
        if s(ing, "hostname"):
            parts.append(s(ing, "hostname"))
    text = ",".join(parts)
    return text[:13] + "..." if not wide and len(text) > 16 else text


def _networkpolicy(obj: Obj, now: dt.datetime) -> list[Any]:
    return [s(obj, "metadata", "name"), format_selector(get(obj, "spec", "podSelector")), age(obj, now)]


def _ingress(obj: Obj, now: dt.datetime) -> list[Any]:
    spec = dct(obj, "spec")
    cls = get(spec, "ingressClassName")
    return [s(obj, "metadata", "name"), cls if isinstance(cls, str) else "<none>", ingress_hosts(lst(spec, "rules")),
            ingress_address(obj), "80, 443" if lst(spec, "tls") else "80", age(obj, now)]


def _ingressclass(obj: Obj, now: dt.datetime) -> list[Any]:
    params = dct(obj, "spec", "parameters")
    shown = "<none>"
    if params:
        shown = s(params, "kind") + (f".{s(params, 'apiGroup')}" if get(params, "apiGroup") is not None else "")
        shown += "/" + s(params, "name")
    return [s(obj, "metadata", "name"), s(obj, "spec", "controller"), shown, age(obj, now)]


PRINTERS: dict[str, Printer] = {
    "NetworkPolicy.networking.k8s.io": (
        (name_col(), col("Pod-Selector", desc="Pods the policy selects."), age_col()), _networkpolicy),
    "Ingress.networking.k8s.io": (
        (name_col(), col("Class", desc="The name of the IngressClass resource that should be used."),
         col("Hosts", desc="Hosts the ingress serves."), col("Address", desc="Load balancer addresses."),
         col("Ports", desc="Ports of the ingress."), age_col()), _ingress),
    "IngressClass.networking.k8s.io": (
        (name_col(), col("Controller", desc="The controller that should handle this class."),
         col("Parameters", desc="A reference to a resource with additional parameters."), age_col()),
        _ingressclass),
}
