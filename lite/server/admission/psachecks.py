"""The Pod Security Standards checks (k8s.io/pod-security-admission/policy/check_*.go), at their latest
versions, as pure functions over a pod's metadata and spec (plain dicts).

`evaluate(level, meta, spec)` runs every check of that level in upstream's order (the baseline checks by ID,
then the restricted ones by ID; a restricted check that overrides a baseline one replaces it: restricted
volume types replace hostPath volumes, the restricted seccomp check the baseline one) and returns the
`Violation`s; `summary(violations)` is upstream's `reason (detail), reason (detail)` text.

Invariants: no I/O; tolerant of malformed specs (a field of the wrong type counts as unset); every message
word for word as upstream's (`pluralize`, `joinQuote` as upstream's helpers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from lite.records import dataclass

Obj = dict[str, Any]
LEVELS = ("privileged", "baseline", "restricted")

ALLOWED_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                                  "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
SAFE_SYSCTLS = frozenset({"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
                          "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start",
                          "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
                          "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                          "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})  # 1.31+
RESTRICTED_OK_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                                   "persistentVolumeClaim", "projected", "secret"})
APPARMOR_PREFIX = "container.apparmor.security.beta.kubernetes.io/"


@dataclass(frozen=True)
class Violation:
    reason: str
    detail: str


def pluralize(one: str, many: str, n: int) -> str:
    return one if n == 1 else many


def join_quote(items: list[str]) -> str:
    """Upstream's joinQuote: each item between double quotes, as it is (no escaping)."""
    return ", ".join(f'"{i}"' for i in items)


def _d(v: Any) -> Obj:
    return v if isinstance(v, dict) else {}


def containers(spec: Obj) -> Iterator[Obj]:
    """initContainers, containers, ephemeralContainers (upstream's visitContainers order)."""
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            if isinstance(c, dict):
                yield c


def _sc(c: Obj) -> Obj:
    return _d(c.get("securityContext"))


def _names(spec: Obj, pred: Callable[[Obj], bool]) -> list[str]:
    return [str(c.get("name", "")) for c in containers(spec) if pred(c)]


def _who(names: list[str]) -> str:
    return f'{pluralize("container", "containers", len(names))} {join_quote(names)}'


# ---- baseline --------------------------------------------------------------------------------------

def app_armor(meta: Obj, spec: Obj) -> Violation | None:
    setters: list[str] = []
    values: set[str] = set()
    pod_type = _d(_d(spec.get("securityContext")).get("appArmorProfile")).get("type")
    if pod_type is not None and pod_type not in ("RuntimeDefault", "Localhost"):
        setters.append("pod")
        values.add(str(pod_type))
    bad = []
    for c in containers(spec):
        t = _d(_sc(c).get("appArmorProfile")).get("type")
        if t is not None and t not in ("RuntimeDefault", "Localhost"):
            bad.append(str(c.get("name", "")))
            values.add(str(t))
    if bad:
        setters.append(_who(bad))
    annotations = sorted(f'{k}="{v}"' for k, v in _d(meta.get("annotations")).items()
                         if str(k).startswith(APPARMOR_PREFIX)
                         and not (v in ("", "runtime/default") or str(v).startswith("localhost/")))
    if annotations:
        setters.append(pluralize("annotation", "annotations", len(annotations)))
    if not setters:
        return None
    shown = [*sorted(values), *annotations]
    return Violation(pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", len(shown)),
                     f"{' and '.join(setters)} must not set AppArmor profile type to {join_quote(shown)}")


def capabilities_baseline(meta: Obj, spec: Obj) -> Violation | None:
    bad, caps = [], set()
    for c in containers(spec):
        extra = [str(x) for x in _d(_sc(c).get("capabilities")).get("add") or [] if x not in ALLOWED_CAPABILITIES]
        if extra:
            bad.append(str(c.get("name", "")))
            caps.update(extra)
    if not bad:
        return None
    return Violation("non-default capabilities",
                     f"{_who(bad)} must not include {join_quote(sorted(caps))} in securityContext.capabilities.add")


def host_namespaces(meta: Obj, spec: Obj) -> Violation | None:
    used = sorted(f"{f}=true" for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f) is True)
    return Violation("host namespaces", ", ".join(used)) if used else None


def host_path_volumes(meta: Obj, spec: Obj) -> Violation | None:
    names = [str(v.get("name", "")) for v in spec.get("volumes") or [] if isinstance(v, dict) and "hostPath" in v]
    if not names:
        return None
    return Violation("hostPath volumes", f'{pluralize("volume", "volumes", len(names))} {join_quote(names)}')


def host_ports(meta: Obj, spec: Obj) -> Violation | None:
    bad: list[str] = []
    ports: set[str] = set()
    for c in containers(spec):
        used = [p.get("hostPort") for p in c.get("ports") or [] if isinstance(p, dict) and p.get("hostPort")]
        if used:
            bad.append(str(c.get("name", "")))
            ports.update(str(p) for p in used)
    if not bad:
        return None
    return Violation("hostPort", f'{_who(bad)} {pluralize("uses", "use", len(bad))} '
                                 f'{pluralize("hostPort", "hostPorts", len(ports))} {", ".join(sorted(ports))}')


def privileged(meta: Obj, spec: Obj) -> Violation | None:
    bad = _names(spec, lambda c: _sc(c).get("privileged") is True)
    return Violation("privileged", f"{_who(bad)} must not set securityContext.privileged=true") if bad else None


def proc_mount(meta: Obj, spec: Obj) -> Violation | None:
    bad, kinds = [], set()
    for c in containers(spec):
        pm = _sc(c).get("procMount")
        if pm is not None and pm != "Default":
            bad.append(str(c.get("name", "")))
            kinds.add(str(pm))
    if not bad:
        return None
    return Violation("procMount", f"{_who(bad)} must not set securityContext.procMount to {join_quote(sorted(kinds))}")


def se_linux_options(meta: Obj, spec: Obj) -> Violation | None:
    bad_types: set[str] = set()
    flags = {"user": False, "role": False}

    def ok(opts: Obj) -> bool:
        good = True
        if str(opts.get("type") or "") not in SELINUX_TYPES:
            bad_types.add(str(opts.get("type")))
            good = False
        for f in ("user", "role"):
            if opts.get(f):
                flags[f], good = True, False
        return good

    setters = []
    pod_opts = _d(spec.get("securityContext")).get("seLinuxOptions")
    if isinstance(pod_opts, dict) and not ok(pod_opts):
        setters.append("pod")
    bad = _names(spec, lambda c: isinstance(_sc(c).get("seLinuxOptions"), dict) and not ok(_sc(c)["seLinuxOptions"]))
    if bad:
        setters.append(_who(bad))
    if not setters:
        return None
    data = []
    if bad_types:  # upstream names a set user or role only next to a bad type (its nesting, kept)
        data.append(f'{pluralize("type", "types", len(bad_types))} {join_quote(sorted(bad_types))}')
        data += [f"{f} may not be set" for f in ("user", "role") if flags[f]]
    return Violation("seLinuxOptions",
                     f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}")


def _seccomp_type(sc: Obj) -> str | None:
    p = sc.get("seccompProfile")
    return str(p.get("type")) if isinstance(p, dict) else None


def _seccomp(spec: Obj, restricted: bool) -> Violation | None:
    setters, values = [], set()
    pod_type = _seccomp_type(_d(spec.get("securityContext")))
    pod_ok = pod_type in ("RuntimeDefault", "Localhost")
    if pod_type is not None and not pod_ok:
        setters.append("pod")
        values.add(pod_type)
    explicit, implicit = [], []
    for c in containers(spec):
        t = _seccomp_type(_sc(c))
        if t is not None:
            if t not in ("RuntimeDefault", "Localhost"):
                explicit.append(str(c.get("name", "")))
                values.add(t)
        elif not pod_ok:
            implicit.append(str(c.get("name", "")))
    if explicit:
        setters.append(_who(explicit))
    if setters:
        return Violation("seccompProfile", f"{' and '.join(setters)} must not set securityContext.seccompProfile.type "
                                           f"to {join_quote(sorted(values))}")
    if restricted and implicit:
        return Violation("seccompProfile", f'pod or {_who(implicit)} must set securityContext.seccompProfile.type '
                                           f'to "RuntimeDefault" or "Localhost"')
    return None


def seccomp_baseline(meta: Obj, spec: Obj) -> Violation | None:
    return _seccomp(spec, restricted=False)


def sysctls(meta: Obj, spec: Obj) -> Violation | None:
    bad = [str(s.get("name")) for s in _d(spec.get("securityContext")).get("sysctls") or []
           if isinstance(s, dict) and s.get("name") not in SAFE_SYSCTLS]
    return Violation("forbidden sysctls", ", ".join(bad)) if bad else None


# ---- restricted ------------------------------------------------------------------------------------

def allow_privilege_escalation(meta: Obj, spec: Obj) -> Violation | None:
    bad = _names(spec, lambda c: _sc(c).get("allowPrivilegeEscalation") is not False)
    return Violation("allowPrivilegeEscalation != false",
                     f"{_who(bad)} must set securityContext.allowPrivilegeEscalation=false") if bad else None


def capabilities_restricted(meta: Obj, spec: Obj) -> Violation | None:
    missing_drop, adding, caps = [], [], set()
    for c in containers(spec):
        cap = _sc(c).get("capabilities")
        name = str(c.get("name", ""))
        if not isinstance(cap, dict):
            missing_drop.append(name)
            continue
        if "ALL" not in (cap.get("drop") or []):
            missing_drop.append(name)
        extra = [str(x) for x in cap.get("add") or [] if x != "NET_BIND_SERVICE"]
        if extra:
            adding.append(name)
            caps.update(extra)
    details = []
    if missing_drop:
        details.append(f'{_who(missing_drop)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(f"{_who(adding)} must not include {join_quote(sorted(caps))} in "
                       f"securityContext.capabilities.add")
    return Violation("unrestricted capabilities", "; ".join(details)) if details else None


def _volume_type(v: Obj) -> str:
    keys = [k for k in v if k != "name"]
    return keys[0] if keys else "unknown"


def restricted_volumes(meta: Obj, spec: Obj) -> Violation | None:
    bad, types = [], set()
    for v in spec.get("volumes") or []:
        if not isinstance(v, dict):
            continue
        t = _volume_type(v)
        if t not in RESTRICTED_OK_VOLUMES:
            bad.append(str(v.get("name", "")))
            types.add(t)
    if not bad:
        return None
    return Violation("restricted volume types",
                     f'{pluralize("volume", "volumes", len(bad))} {join_quote(bad)} '
                     f'{pluralize("uses", "use", len(bad))} '
                     f'{pluralize("restricted volume type", "restricted volume types", len(types))} '
                     f"{join_quote(sorted(types))}")


def run_as_non_root(meta: Obj, spec: Obj) -> Violation | None:
    setters = []
    pod = _d(spec.get("securityContext")).get("runAsNonRoot")
    if pod is False:
        setters.append("pod")
    explicit = _names(spec, lambda c: _sc(c).get("runAsNonRoot") is False)
    implicit = _names(spec, lambda c: _sc(c).get("runAsNonRoot") is None and pod is not True)
    if explicit:
        setters.append(_who(explicit))
    if setters:
        return Violation("runAsNonRoot != true",
                         f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false")
    if implicit:
        return Violation("runAsNonRoot != true", f"pod or {_who(implicit)} must set securityContext.runAsNonRoot=true")
    return None


def run_as_user(meta: Obj, spec: Obj) -> Violation | None:
    setters = ["pod"] if _d(spec.get("securityContext")).get("runAsUser") == 0 else []
    bad = _names(spec, lambda c: _sc(c).get("runAsUser") == 0 and not isinstance(_sc(c).get("runAsUser"), bool))
    if bad:
        setters.append(_who(bad))
    return Violation("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0") if setters else None


def seccomp_restricted(meta: Obj, spec: Obj) -> Violation | None:
    return _seccomp(spec, restricted=True)


Check = Callable[[Obj, Obj], "Violation | None"]
# (ID, check), each level's list in ID order as upstream's registry sorts them.
BASELINE: tuple[tuple[str, Check], ...] = (
    ("appArmorProfile", app_armor), ("capabilities_baseline", capabilities_baseline),
    ("hostNamespaces", host_namespaces), ("hostPathVolumes", host_path_volumes), ("hostPorts", host_ports),
    ("privileged", privileged), ("procMount", proc_mount), ("seLinuxOptions", se_linux_options),
    ("seccompProfile_baseline", seccomp_baseline), ("sysctls", sysctls))
RESTRICTED: tuple[tuple[str, Check], ...] = (
    ("allowPrivilegeEscalation", allow_privilege_escalation), ("capabilities_restricted", capabilities_restricted),
    ("restrictedVolumes", restricted_volumes), ("runAsNonRoot", run_as_non_root), ("runAsUser", run_as_user),
    ("seccompProfile_restricted", seccomp_restricted))
OVERRIDDEN_BY_RESTRICTED = frozenset({"hostPathVolumes", "seccompProfile_baseline"})


def evaluate(level: str, meta: Obj, spec: Obj) -> list[Violation]:
    if level == "privileged":
        return []
    checks = list(BASELINE)
    if level == "restricted":
        checks = [c for c in checks if c[0] not in OVERRIDDEN_BY_RESTRICTED] + list(RESTRICTED)
    out = []
    for _, check in checks:
        v = check(meta, spec)
        if v is not None:
            out.append(v)
    return out


def summary(violations: list[Violation]) -> str:
    return ", ".join(f"{v.reason} ({v.detail})" if v.detail else v.reason for v in violations)
