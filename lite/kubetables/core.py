"""Table printers for core/v1 kinds kubectl lists most: Pod, Node, Namespace, Service, Endpoints,
EndpointSlice, ConfigMap, Secret, ServiceAccount, Event (core/v1 and events.k8s.io/v1).

Columns and cells mirror kubectl's upstream printers; cells are in column order, wide columns included.
Null-safe on partial objects.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from lite.kubetables.format import (
    Obj,
    age,
    dct,
    format_labels,
    get,
    i,
    lst,
    or_none,
    s,
    since,
)
from lite.kubetables.pods import pod_row
from lite.kubetables.spec import Printer, age_col, col, name_col

_ROLE_PREFIX = "node-role.kubernetes.io/"


def _pod(obj: Obj, now: dt.datetime) -> list[Any]:
    return pod_row(obj, now)[0]


def node_roles(labels: Obj) -> list[str]:
    """Roles from `node-role.kubernetes.io/<role>` keys and the `kubernetes.io/role` value, sorted."""
    roles = {k[len(_ROLE_PREFIX):] for k in labels if k.startswith(_ROLE_PREFIX) and len(k) > len(_ROLE_PREFIX)}
    legacy = labels.get("kubernetes.io/role")
    if isinstance(legacy, str) and legacy:
        roles.add(legacy)
    return sorted(roles)


def _node_address(obj: Obj, atype: str) -> str:
    for a in lst(obj, "status", "addresses"):
        if s(a, "type") == atype:
            return s(a, "address")
    return "<none>"


def _node(obj: Obj, now: dt.datetime) -> list[Any]:
    status: list[str] = []
    for c in lst(obj, "status", "conditions"):
        if s(c, "type") == "Ready":
            status = ["Ready" if s(c, "status") == "True" else "NotReady"]
    if not status:
        status = ["Unknown"]
    if get(obj, "spec", "unschedulable") is True:
        status.append("SchedulingDisabled")
    info = dct(obj, "status", "nodeInfo")
    return [s(obj, "metadata", "name"), ",".join(status), or_none(",".join(node_roles(dct(obj, "metadata", "labels")))),
            age(obj, now), s(info, "kubeletVersion"), _node_address(obj, "InternalIP"),
            _node_address(obj, "ExternalIP"), or_none(s(info, "osImage"), "<unknown>"),
            or_none(s(info, "kernelVersion"), "<unknown>"), or_none(s(info, "containerRuntimeVersion"), "<unknown>")]


def _namespace(obj: Obj, now: dt.datetime) -> list[Any]:
    return [s(obj, "metadata", "name"), s(obj, "status", "phase"), age(obj, now)]


def _external_ip(obj: Obj) -> str:
    spec = dct(obj, "spec")
    ext = [str(x) for x in lst(spec, "externalIPs")]
    stype = s(spec, "type")
    if stype in ("ClusterIP", "NodePort"):
        return ",".join(ext) or "<none>"
    if stype == "LoadBalancer":
        lb: list[str] = []
        for ing in lst(obj, "status", "loadBalancer", "ingress"):
            v = s(ing, "ip") or s(ing, "hostname")
            if v and v not in lb:
                lb.append(v)
        return ",".join(lb + ext) or "<pending>"
    if stype == "ExternalName":
        return s(spec, "externalName")
    return "<unknown>"


def service_ports(ports: list[Any]) -> str:
    """`80/TCP`, or `80:30080/TCP` with a node port, comma-joined; "<none>" when there are none."""
    out = []
    for p in ports:
        proto = s(p, "protocol")
        out.append(f"{i(p, 'port')}:{i(p, 'nodePort')}/{proto}" if i(p, "nodePort") > 0 else f"{i(p, 'port')}/{proto}")
    return ",".join(out) or "<none>"


def _service(obj: Obj, now: dt.datetime) -> list[Any]:
    spec = dct(obj, "spec")
    ips = lst(spec, "clusterIPs")
    cluster_ip = str(ips[0]) if ips else s(spec, "clusterIP")  # clusterIP: writers that set only the old field
    return [s(obj, "metadata", "name"), s(spec, "type"), or_none(cluster_ip), _external_ip(obj),
            service_ports(lst(spec, "ports")), age(obj, now), format_labels(spec.get("selector"))]


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def format_endpoints(obj: Obj) -> str:
    """Up to three `ip:port` entries, then ` + N more...`; "<none>" without subsets."""
    subsets = lst(obj, "subsets")
    if not subsets:
        return "<none>"
    shown: list[str] = []
    count = 0
    for ss in subsets:
        addrs = [s(a, "ip") for a in lst(ss, "addresses")]
        ports = lst(ss, "ports")
        for port in ports or [None]:
            count += len(addrs)
            for ip in addrs:
                if len(shown) < 3:
                    shown.append(ip if port is None else _join_host_port(ip, i(port, "port")))
    text = ",".join(shown)
    return f"{text} + {count - 3} more..." if count > 3 else text


def _endpoints(obj: Obj, now: dt.datetime) -> list[Any]:
    return [s(obj, "metadata", "name"), format_endpoints(obj), age(obj, now)]


def _more(items: list[str], limit: int = 3) -> str:
    if len(items) > limit:
        return ",".join(items[:limit]) + f" + {len(items) - limit} more..."
    return ",".join(items) or "<unset>"


def _endpointslice(obj: Obj, now: dt.datetime) -> list[Any]:
    ports = [str(p["port"]) if isinstance(get(p, "port"), int) else s(p, "name") or "*" for p in lst(obj, "ports")]
    addrs = [str(a) for e in lst(obj, "endpoints") for a in lst(e, "addresses")]
    return [s(obj, "metadata", "name"), s(obj, "addressType"), _more(ports), _more(addrs), age(obj, now)]


def _configmap(obj: Obj, now: dt.datetime) -> list[Any]:
    return [s(obj, "metadata", "name"), len(dct(obj, "data")) + len(dct(obj, "binaryData")), age(obj, now)]


def _secret(obj: Obj, now: dt.datetime) -> list[Any]:
    return [s(obj, "metadata", "name"), s(obj, "type"), len(dct(obj, "data")), age(obj, now)]


def _serviceaccount(obj: Obj, now: dt.datetime) -> list[Any]:
    return [s(obj, "metadata", "name"), len(lst(obj, "secrets")), age(obj, now)]


def _event_cells(ev: Obj, now: dt.datetime) -> list[Any]:
    """Cells of a core/v1-shaped event (events.k8s.io ones are mapped to this shape first)."""
    first = since(ev["firstTimestamp"], now) if get(ev, "firstTimestamp") else since(get(ev, "eventTime"), now)
    last = since(ev["lastTimestamp"], now) if get(ev, "lastTimestamp") else first
    count = i(ev, "count")
    if isinstance(get(ev, "series"), dict):
        last, count = since(get(ev, "series", "lastObservedTime"), now), i(ev, "series", "count")
    elif count == 0:
        count = 1  # singleton events of the new API carry no count
    inv = dct(ev, "involvedObject")
    target = s(inv, "kind").lower() + (f"/{s(inv, 'name')}" if s(inv, "name") else "")
    component = s(ev, "source", "component") or s(ev, "reportingComponent")
    host = s(ev, "source", "host") or s(ev, "reportingInstance")
    source = f"{component}, {host}" if host else component
    return [last, s(ev, "type"), s(ev, "reason"), target, s(inv, "fieldPath"), source,
            s(ev, "message").strip(), first, count, s(ev, "metadata", "name")]


def _componentstatus(obj: Obj, now: dt.datetime) -> list[Any]:
    """upstream printComponentStatus: Healthy/Unhealthy from the Healthy condition, its message and error."""
    status, message, error = "Unknown", "", ""
    for c in lst(obj, "conditions"):
        if isinstance(c, dict) and c.get("type") == "Healthy":
            status = "Healthy" if c.get("status") == "True" else "Unhealthy"
            message, error = s(c, "message"), s(c, "error")
            break
    return [s(obj, "metadata", "name"), status, message, error]


def _event(obj: Obj, now: dt.datetime) -> list[Any]:
    return _event_cells(obj, now)


def _events_v1(obj: Obj, now: dt.datetime) -> list[Any]:
    core = {"metadata": obj.get("metadata"), "involvedObject": obj.get("regarding"), "message": obj.get("note"),
            "reason": obj.get("reason"), "type": obj.get("type"), "source": obj.get("deprecatedSource"),
            "firstTimestamp": obj.get("deprecatedFirstTimestamp"), "eventTime": obj.get("eventTime"),
            "lastTimestamp": obj.get("deprecatedLastTimestamp"), "count": obj.get("deprecatedCount"),
            "series": obj.get("series"), "reportingComponent": obj.get("reportingController"),
            "reportingInstance": obj.get("reportingInstance")}
    return _event_cells(core, now)


_POD_COLUMNS = (
    name_col(), col("Ready", desc="Ready containers out of all containers."),
    col("Status", desc="The aggregate status of the containers in this pod."),
    col("Restarts", desc="Container restarts, and when the last one happened."), age_col(),
    col("IP", wide=True, desc="IP address of the pod."), col("Node", wide=True, desc="Node the pod runs on."),
    col("Nominated Node", wide=True, desc="Node nominated by preemption."),
    col("Readiness Gates", wide=True, desc="True readiness gates out of all gates."),
)
_EVENT_COLUMNS = (
    col("Last Seen", desc="Time since the event was last seen."), col("Type", desc="Normal or Warning."),
    col("Reason", desc="Short machine-readable reason."), col("Object", desc="The object the event is about."),
    col("Subobject", wide=True, desc="Field path within the object."),
    col("Source", wide=True, desc="Component that reported the event."),
    col("Message", desc="Human-readable description."),
    col("First Seen", wide=True, desc="Time since the event was first seen."),
    col("Count", wide=True, desc="Times the event occurred."),
    col("Name", wide=True, fmt="name", desc="Name of the event object."),
)

PRINTERS: dict[str, Printer] = {
    "Pod": (_POD_COLUMNS, _pod),
    "Node": ((name_col(), col("Status", desc="The status of the node."), col("Roles", desc="The roles of the node."),
              age_col(), col("Version", desc="Kubelet version."),
              col("Internal-IP", wide=True, desc="First InternalIP address."),
              col("External-IP", wide=True, desc="First ExternalIP address."),
              col("OS-Image", wide=True, desc="Operating system image."),
              col("Kernel-Version", wide=True, desc="Kernel version."),
              col("Container-Runtime", wide=True, desc="Container runtime and version.")), _node),
    "Namespace": ((name_col(), col("Status", desc="The status of the namespace."), age_col()), _namespace),
    "Service": ((name_col(), col("Type", desc="Service type."), col("Cluster-IP", desc="Cluster IP address."),
                 col("External-IP", desc="External addresses."), col("Port(s)", desc="Service ports."), age_col(),
                 col("Selector", wide=True, desc="Pod label selector.")), _service),
    "Endpoints": ((name_col(), col("Endpoints", desc="Addresses and ports."), age_col()), _endpoints),
    "EndpointSlice.discovery.k8s.io": ((name_col(), col("AddressType", desc="Address family."),
                                        col("Ports", desc="Ports."), col("Endpoints", desc="Addresses."),
                                        age_col()), _endpointslice),
    "ConfigMap": ((name_col(), col("Data", desc="Number of data entries."), age_col()), _configmap),
    "Secret": ((name_col(), col("Type", desc="Secret type."), col("Data", desc="Number of data entries."),
                age_col()), _secret),
    "ServiceAccount": ((name_col(), col("Secrets", desc="Number of referenced secrets."), age_col()),
                       _serviceaccount),
    "ComponentStatus": ((name_col(), col("Status", desc="Status of the component conditions"),
                         col("Message", desc="Message of the component conditions"),
                         col("Error", desc="Error of the component conditions")), _componentstatus),
    "Event": (_EVENT_COLUMNS, _event),
    "Event.events.k8s.io": (_EVENT_COLUMNS, _events_v1),
}
