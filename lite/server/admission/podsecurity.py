"""Pod Security Admission: the `pod-security.kubernetes.io/enforce|audit|warn` namespace labels applied to pods.

What upstream's PodSecurity plugin does, over the pure checks of `psachecks.py`:
- pods (create, update that changes the spec, and `ephemeralcontainers` updates) are refused when they
  violate the namespace's `enforce` level: 403 `pods "x" is forbidden: violates PodSecurity
  "restricted:latest": <reason (detail), ...>`; a `warn` level violation adds the warning
  `would violate PodSecurity "<level>:<version>": ...`; an `audit` level violation is logged as the
  `pod-security.kubernetes.io/audit-violations` annotation would be (lite keeps no audit log);
- workload objects with a pod template (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob,
  ReplicationController, PodTemplate) are never refused, only warned and audited, as upstream;
- a Namespace whose labels name an unknown level or a malformed version is refused (422 naming the label);
  when an update changes the `enforce` level, the answer warns about the existing pods that violate it
  (`existing pods in namespace "ns" violate the new PodSecurity enforce level "restricted:latest"`, then one
  `<pod>: <reasons>` line per pod, identical reasons grouped).

Every `-version` is accepted as `latest` or `v1.N` and shown as given; the checks applied are always
upstream's latest ones (lite does not keep older check versions). Exemptions are not configurable.

Invariants: only the Namespace lookup (`NamespaceLabels`, an informer cache) and, on namespace label changes,
a list of its pods do I/O.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from lite import errors
from lite.client import Client
from lite.errors import ApiError, Cause
from lite.kinds import Kind, KindRegistry
from lite.patch import json_equal
from lite.records import dataclass
from lite.server.admission.namespaces import NamespaceLabels
from lite.server.api.admissionwarnings import add_warning
from lite.server.api.strategies import Admission

if TYPE_CHECKING:  # psachecks is imported when a namespace has a pod-security label (~0.1 MB otherwise)
    from lite.server.admission import psachecks

log = logging.getLogger("lite.admission")
Obj = dict[str, Any]
PREFIX = "pod-security.kubernetes.io/"
MODES = ("enforce", "audit", "warn")
_VERSION = re.compile(r"^v1\.(0|[1-9][0-9]*)$")
MAX_POD_LINES = 10  # upstream lists at most this many groups of pods in namespace warnings

# Where each workload kind keeps its pod template.
TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Deployment.apps": ("spec", "template"), "ReplicaSet.apps": ("spec", "template"),
    "StatefulSet.apps": ("spec", "template"), "DaemonSet.apps": ("spec", "template"),
    "Job.batch": ("spec", "template"), "CronJob.batch": ("spec", "jobTemplate", "spec", "template"),
    "ReplicationController": ("spec", "template"), "PodTemplate": ("template",)}


@dataclass(frozen=True)
class Policy:
    level: str
    version: str

    def __str__(self) -> str:
        return f"{self.level}:{self.version}"


def policies(labels: dict[str, Any] | None) -> dict[str, Policy]:
    """The policy of each mode the labels set (a mode without a level label is privileged: nothing to do).
    Malformed labels evaluate as restricted:latest, as upstream's fallback for a bad label does."""
    labels = labels or {}
    out = {}
    for mode in MODES:
        level = labels.get(PREFIX + mode)
        if level is None:
            continue
        version = str(labels.get(f"{PREFIX}{mode}-version") or "latest")
        from lite.server.admission import psachecks

        if level not in psachecks.LEVELS:
            level = "restricted"
        if version != "latest" and not _VERSION.match(version):
            version = "latest"
        out[mode] = Policy(str(level), version)
    return out


def label_causes(labels: dict[str, Any] | None) -> list[Cause]:
    causes = []
    for mode in MODES:
        key = PREFIX + mode
        level = (labels or {}).get(key)
        if level is not None:
            from lite.server.admission import psachecks

            if level not in psachecks.LEVELS:
                causes.append(errors.field_invalid(f"metadata.labels[{key}]", level,
                                                   f"must be one of {', '.join(psachecks.LEVELS)}"))
        version = (labels or {}).get(f"{key}-version")
        if version is not None and version != "latest" and not _VERSION.match(str(version)):
            causes.append(errors.field_invalid(f"metadata.labels[{key}-version]", version,
                                               'must be "latest" or "v1.x"'))
    return causes


def pod_template(gk: str, obj: Obj) -> Obj | None:
    path = TEMPLATE_PATHS.get(gk)
    cur: Any = obj
    for step in path or ():
        cur = cur.get(step) if isinstance(cur, dict) else None
    return cur if path and isinstance(cur, dict) else None


def violations(policy: Policy, pod: Obj) -> list[psachecks.Violation]:
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    from lite.server.admission import psachecks

    return psachecks.evaluate(policy.level, meta or {}, spec or {})


def significant_pod_update(new: Obj, old: Obj) -> bool:
    """Upstream re-checks a pod update only when its spec (or the seccomp/AppArmor annotations) changed."""
    if not json_equal(new.get("spec"), old.get("spec")):
        return True
    return not json_equal(_security_annotations(new), _security_annotations(old))


def _security_annotations(obj: Obj) -> dict[str, Any]:
    ann = (obj.get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in ann.items() if "apparmor" in k or "seccomp" in k} if isinstance(ann, dict) else {}


def namespace_warnings(ns: str, policy: Policy, pods: list[Obj]) -> list[str]:
    """Upstream's warnings for a namespace whose new enforce level existing pods violate."""
    groups: dict[str, list[str]] = {}
    for pod in pods:
        found = violations(policy, pod)
        if found:
            reasons = ", ".join(v.reason for v in found)
            groups.setdefault(reasons, []).append(str((pod.get("metadata") or {}).get("name", "")))
    if not groups:
        return []
    out = [f'existing pods in namespace "{ns}" violate the new PodSecurity enforce level "{policy}"']
    for reasons, names in list(groups.items())[:MAX_POD_LINES]:
        who = names[0] if len(names) == 1 else f"{names[0]} (and {len(names) - 1} other " \
            f"{'pod' if len(names) == 2 else 'pods'})"
        out.append(f"{who}: {reasons}")
    return out


class PodSecurityAdmission:
    """The admission hook; `client` is the in-process registry."""

    def __init__(self, client: Client, kinds: KindRegistry, namespaces: NamespaceLabels) -> None:
        self.client = client
        self.namespaces = namespaces
        self.pod_kind = _core(kinds, "pods")

    async def admit(self, adm: Admission) -> None:
        if adm.operation == "DELETE" or adm.obj is None:
            return
        gk = adm.kind.gk
        if gk == "Namespace":
            if not adm.subresource:
                await self._namespace(adm, adm.obj)
            return
        if gk == "Pod":
            if adm.subresource not in ("", "ephemeralcontainers"):
                return
            if adm.operation == "UPDATE" and adm.old is not None and not significant_pod_update(adm.obj, adm.old):
                return
            await self._judge(adm, adm.obj, enforce=True)
            return
        if adm.subresource:
            return
        template = pod_template(gk, adm.obj)
        if template is not None:
            await self._judge(adm, template, enforce=False)

    async def _judge(self, adm: Admission, pod: Obj, *, enforce: bool) -> None:
        modes = policies(await self._namespace_labels(adm.namespace))
        if not modes:
            return
        from lite.server.admission import psachecks

        refused: ApiError | None = None
        enforced = modes.get("enforce")
        if enforce and enforced is not None:
            found = violations(enforced, pod)
            if found:
                refused = errors.forbidden(
                    f'{adm.kind.resource} "{adm.name}" is forbidden: violates PodSecurity "{enforced}": '
                    f"{psachecks.summary(found)}", adm.kind.plural, adm.kind.group, adm.name)
        audit = modes.get("audit")
        if audit is not None and (found := violations(audit, pod)):
            log.info("audit %s %s/%s: pod-security.kubernetes.io/audit-violations=would violate PodSecurity %r: %s",
                     adm.kind.resource, adm.namespace, adm.name, str(audit), psachecks.summary(found))
        warn = modes.get("warn")
        if warn is not None and not (refused is not None and warn == enforced):
            found = violations(warn, pod)
            if found:
                add_warning(f'would violate PodSecurity "{warn}": {psachecks.summary(found)}')
        if refused is not None:
            raise refused

    async def _namespace(self, adm: Admission, ns: Obj) -> None:
        labels = (ns.get("metadata") or {}).get("labels") or {}
        causes = label_causes(labels)
        if causes:
            raise errors.invalid("Namespace", adm.name, causes)
        if adm.operation != "UPDATE" or adm.old is None:
            return
        new = policies(labels).get("enforce")
        old = policies((adm.old.get("metadata") or {}).get("labels") or {}).get("enforce")
        if new is None or new == old or new.level == "privileged":
            return
        listed = await self.client.list(self.pod_kind, adm.name)
        pods = [p for p in listed.get("items") or [] if isinstance(p, dict)]
        for text in namespace_warnings(adm.name, new, pods):
            add_warning(text)

    async def _namespace_labels(self, namespace: str) -> dict[str, Any] | None:
        return await self.namespaces.get(namespace) if namespace else None


def _core(kinds: KindRegistry, plural: str) -> Kind:
    k = kinds.by_resource("", "v1", plural)
    if k is None:
        raise RuntimeError(f"{plural} is not registered")
    return k
