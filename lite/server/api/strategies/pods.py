"""Pod strategy: upstream SetDefaults_Pod/PodSpec/Container, admission-time defaults, validation, update rules.

Also exports the pod-spec pieces (`default_pod_spec`, `validate_pod_spec`) that workload templates reuse.

Invariants:
- Defaulting only fills what is absent; it never overwrites what the user wrote.
- `validate_pod_spec` reports field paths under the prefix it is given (`spec` or `spec.template.spec`).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import orjson

from lite.errors import Cause, field_forbidden, field_invalid
from lite.quantity import parse_quantity
from lite.server.api.strategies import podvalidation
from lite.server.api.strategies.base import Obj, Strategy

DEFAULT_TOLERATION_SECONDS = 300
_NOT_READY = "node.kubernetes.io/not-ready"
_UNREACHABLE = "node.kubernetes.io/unreachable"
_MUTABLE_MSG = ("pod updates may not change fields other than `spec.containers[*].image`,"
                "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                "(allow it to be set to 1 if it was previously negative)")


def _image_pull_policy(image: str) -> str:
    # Upstream: ":latest" or no tag (digests count as a tag) pulls Always, anything else IfNotPresent.
    name = image.split("@", 1)[0]
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else ""
    if "@" in image:
        return "IfNotPresent"
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _default_probe(probe: Any) -> None:
    if isinstance(probe, dict):
        for k, v in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1),
                     ("failureThreshold", 3)):
            probe.setdefault(k, v)
        http = probe.get("httpGet")
        if isinstance(http, dict):
            http.setdefault("path", "/")
            http.setdefault("scheme", "HTTP")


def default_container(c: Obj) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    if isinstance(c.get("image"), str) and c["image"]:
        c.setdefault("imagePullPolicy", _image_pull_policy(c["image"]))
    c.setdefault("resources", {})
    for p in c.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
    for env in c.get("env") or []:
        ref = (env.get("valueFrom") or {}).get("fieldRef") if isinstance(env, dict) else None
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        _default_probe(c.get(probe))


def _requests_from_limits(c: Obj) -> None:
    """Upstream SetDefaults_Pod (Pods only, not templates): requests default to limits where unset."""
    res = c.get("resources")
    if isinstance(res, dict) and isinstance(res.get("limits"), dict):
        req = res.get("requests")
        if not isinstance(req, dict):
            req = res["requests"] = {}
        for name, q in res["limits"].items():
            req.setdefault(name, q)


def _field_ref_version(items: Any) -> None:
    for item in items or []:
        ref = item.get("fieldRef") if isinstance(item, dict) else None
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")


def _default_volume(v: Obj) -> None:
    if not any(key != "name" for key in v):  # SetDefaults_Volume: no source at all is an emptyDir
        v["emptyDir"] = {}
    for src in ("secret", "configMap"):
        if isinstance(v.get(src), dict):
            v[src].setdefault("defaultMode", 420)
    if isinstance(v.get("downwardAPI"), dict):
        v["downwardAPI"].setdefault("defaultMode", 420)
        _field_ref_version(v["downwardAPI"].get("items"))
    if isinstance(v.get("projected"), dict):
        v["projected"].setdefault("defaultMode", 420)
        for source in v["projected"].get("sources") or []:
            if not isinstance(source, dict):
                continue
            if isinstance(source.get("downwardAPI"), dict):
                _field_ref_version(source["downwardAPI"].get("items"))
            if isinstance(source.get("serviceAccountToken"), dict):
                source["serviceAccountToken"].setdefault("expirationSeconds", 3600)
    if isinstance(v.get("hostPath"), dict):
        v["hostPath"].setdefault("type", "")


def default_pod_spec(spec: Obj) -> None:
    """Upstream SetDefaults_PodSpec + containers/volumes: also applied to workload templates."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                default_container(c)
    for v in spec.get("volumes") or []:
        if isinstance(v, dict):
            _default_volume(v)


def _default_statuses(status: Obj) -> None:
    # Fields the Python client's V1ContainerStatus requires; agents may leave them out while starting.
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(key) or []:
            if isinstance(cs, dict):
                for field, value in (("image", ""), ("imageID", ""), ("ready", False), ("restartCount", 0)):
                    if cs.get(field) is None:
                        cs[field] = value


def default_pod(pod: Obj) -> None:
    spec = pod.get("spec")
    if isinstance(spec, dict):
        default_pod_spec(spec)
        # SetDefaults_Pod: what only Pods (not templates) get
        spec.setdefault("enableServiceLinks", True)
        for key in ("containers", "initContainers"):
            for c in spec.get(key) or []:
                if isinstance(c, dict):
                    _requests_from_limits(c)
                    if spec.get("hostNetwork"):
                        for port in c.get("ports") or []:
                            if isinstance(port, dict) and not port.get("hostPort") and "containerPort" in port:
                                port["hostPort"] = port["containerPort"]
        # DefaultTolerationSeconds admission runs on create and update alike.
        _default_tolerations(spec)
    status = pod.get("status")
    if isinstance(status, dict):
        _default_statuses(status)


def _default_tolerations(spec: Obj) -> None:
    """DefaultTolerationSeconds admission: tolerate not-ready/unreachable NoExecute for 300 s."""
    tols = spec.setdefault("tolerations", [])
    for key in (_NOT_READY, _UNREACHABLE):
        if not any(isinstance(t, dict) and (t.get("key") == key or (not t.get("key") and
                   t.get("operator") == "Exists")) and t.get("effect") in (None, "", "NoExecute") for t in tols):
            tols.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": DEFAULT_TOLERATION_SECONDS})


def _quantities(c: Mapping[str, Any], which: str) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for name, q in ((c.get("resources") or {}).get(which) or {}).items():
        try:
            out[name] = parse_quantity(str(q))
        except ValueError:
            continue
    return out


def qos_class(spec: Mapping[str, Any]) -> str:
    """Upstream GetPodQOS over containers and init containers (cpu and memory only)."""
    containers = [c for k in ("containers", "initContainers") for c in spec.get(k) or [] if isinstance(c, dict)]
    any_set, guaranteed = False, True
    for c in containers:
        req = {k: v for k, v in _quantities(c, "requests").items() if k in ("cpu", "memory")}
        lim = {k: v for k, v in _quantities(c, "limits").items() if k in ("cpu", "memory")}
        if any(v != 0 for v in req.values()) or any(v != 0 for v in lim.values()):
            any_set = True
        if set(lim) != {"cpu", "memory"} or any(req.get(k, lim[k]) != lim[k] for k in lim):
            guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def prepare_create_pod(pod: Obj) -> None:
    spec = pod.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    # ServiceAccount and Priority admission defaults (create only, as upstream admission).
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    # spec.priority comes from the PriorityClass at admission (the registry looks it up).
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    status: Obj = {"phase": "Pending", "qosClass": qos_class(spec)}
    pod["status"] = status


def validate_pod_spec(spec: Any, path: str = "spec", restart_policies: list[str] | None = None,
                      for_pod: bool = False) -> list[Cause]:
    """Upstream `ValidatePodSpec` (see `podvalidation`); `for_pod` adds the checks only pods get."""
    return podvalidation.validate_pod_spec(spec, path, restart_policies, for_pod)


def validate_pod(pod: Obj) -> list[Cause]:
    return validate_pod_spec(pod.get("spec"), for_pod=True)


def _canon(v: Any) -> bytes:
    return orjson.dumps(v, option=orjson.OPT_SORT_KEYS)


def validate_pod_update(new: Obj, old: Obj) -> list[Cause]:
    """Pod spec is immutable except images, activeDeadlineSeconds, tolerations additions, scheduling gates."""
    nspec, ospec = new.get("spec") or {}, old.get("spec") or {}
    causes: list[Cause] = []
    otols = [_canon(t) for t in ospec.get("tolerations") or []]
    ntols = {_canon(t) for t in nspec.get("tolerations") or []}
    if any(t not in ntols for t in otols):
        causes.append(field_forbidden("spec.tolerations",
                                      "existing toleration can not be modified except its tolerationSeconds"))
    for key in ("containers", "initContainers"):
        if len(nspec.get(key) or []) != len(ospec.get(key) or []):
            return [*causes, field_forbidden(f"spec.{key}", "pod updates may not add or remove containers")]
    oads, nads = ospec.get("activeDeadlineSeconds"), nspec.get("activeDeadlineSeconds")
    if oads is not None and nads is None:
        causes.append(Cause("FieldValueInvalid", "Invalid value: null: must not update from a positive integer to "
                            "nil value", "spec.activeDeadlineSeconds"))
    elif oads is not None and isinstance(nads, int) and nads > oads:
        causes.append(field_invalid("spec.activeDeadlineSeconds", nads,
                                    "must be less than or equal to previous value"))
    old_gates = {g.get("name") for g in ospec.get("schedulingGates") or [] if isinstance(g, dict)}
    for i, g in enumerate(nspec.get("schedulingGates") or []):
        name = g.get("name") if isinstance(g, dict) else None
        if name not in old_gates:
            causes.append(field_forbidden(f"spec.schedulingGates[{i}].name",
                                          f"only deletion is allowed, but found new scheduling gate '{name}'"))
    # Compare everything else: copy the mutable fields from the new spec onto the old one.
    mutated = orjson.loads(orjson.dumps(ospec))
    for key in ("containers", "initContainers"):
        olds, news = mutated.get(key) or [], nspec.get(key) or []
        if len(olds) == len(news):
            for o, n in zip(olds, news, strict=True):
                if isinstance(o, dict) and isinstance(n, dict) and "image" in n:
                    o["image"] = n["image"]
    for key in ("activeDeadlineSeconds", "tolerations", "schedulingGates"):
        if key in nspec:
            mutated[key] = nspec[key]
        else:
            mutated.pop(key, None)
    if (ospec.get("terminationGracePeriodSeconds") or 0) < 0 and nspec.get("terminationGracePeriodSeconds") == 1:
        mutated["terminationGracePeriodSeconds"] = 1
    if _canon(mutated) != _canon(nspec):
        causes.append(field_forbidden("spec", _MUTABLE_MSG))
    return causes


def pod_grace(pod: Obj, requested: int | None) -> int:
    """Upstream CheckGracefulDelete for pods: unbound or terminated pods go at once."""
    spec = pod.get("spec") or {}
    period = requested if requested is not None else int(spec.get("terminationGracePeriodSeconds") or 0)
    if not spec.get("nodeName"):
        period = 0
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        period = 0
    return 1 if period < 0 else period


POD = Strategy(
    default=default_pod,
    prepare_create=prepare_create_pod,
    spec_create=True,  # default_pod + prepare_create_pod: the spec, and a status made from the spec alone
    validate=validate_pod,
    spec_validation=True,  # validate_pod is validate_pod_spec of the spec, a pure function
    validate_update=validate_pod_update,
    graceful=pod_grace,
    return_deleted_object=True,
    status_metadata=("labels", "annotations", "finalizers"),  # old kubelets corrupt ownerReferences (upstream)
)
