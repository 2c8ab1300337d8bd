"""securityContext validation of pods and containers as upstream's `validatePodSpecSecurityContext` and
`ValidateSecurityContext`: user/group ids in range, enums, seccomp profiles (a Localhost profile path may not
leave the profile directory), sysctl names, and the privileged/allowPrivilegeEscalation contradictions.

Invariants: pure; field paths under the prefix given.
"""

from __future__ import annotations

import re
from typing import Any

from lite.errors import Cause, field_duplicate, field_invalid, field_not_supported, field_required
from lite.valuerules import as_dict, as_list, id_causes, local_descending_path_causes

SECCOMP_TYPES = ["Localhost", "RuntimeDefault", "Unconfined"]
FS_GROUP_POLICIES = ["Always", "OnRootMismatch"]
_SYSCTL_SEGMENT = "[a-z0-9]([-_a-z0-9]*[a-z0-9])?"
_SYSCTL_FMT = "(" + _SYSCTL_SEGMENT + "[\\./])*" + _SYSCTL_SEGMENT
_SYSCTL_RE = re.compile(_SYSCTL_FMT)


def container_security_causes(sc: Any, path: str) -> list[Cause]:
    if sc is None:
        return []
    sc = as_dict(sc)
    causes = id_causes(sc.get("runAsUser"), f"{path}.runAsUser") + id_causes(sc.get("runAsGroup"),
                                                                              f"{path}.runAsGroup")
    if sc.get("privileged") is True and sc.get("allowPrivilegeEscalation") is False:
        causes.append(field_invalid(path, "", "cannot set `allowPrivilegeEscalation` to false and `privileged` "
                                    "to true"))
    adds = as_list(as_dict(sc.get("capabilities")).get("add"))
    if sc.get("allowPrivilegeEscalation") is False and "CAP_SYS_ADMIN" in adds:
        causes.append(field_invalid(path, "", "cannot set `allowPrivilegeEscalation` to false and "
                                    "`capabilities.Add` CAP_SYS_ADMIN"))
    pm = sc.get("procMount")
    if pm is not None and pm not in ("Default", "Unmasked"):
        causes.append(field_not_supported(f"{path}.procMount", pm, ["Default", "Unmasked"]))
    return causes + seccomp_causes(sc.get("seccompProfile"), f"{path}.seccompProfile")


def proc_mount_causes(spec: Any, path: str) -> list[Cause]:
    """An Unmasked /proc only inside a user namespace: every container of a pod that keeps host users."""
    spec = as_dict(spec)
    if spec.get("hostUsers") is False:
        return []
    causes: list[Cause] = []
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(as_list(spec.get(key))):
            if as_dict(as_dict(c).get("securityContext")).get("procMount") == "Unmasked":
                causes.append(field_invalid(f"{path}.{key}[{i}].securityContext.procMount", "Unmasked",
                                            "`hostUsers` must be false to use `Unmasked`"))
    return causes


def seccomp_causes(profile: Any, path: str) -> list[Cause]:
    if profile is None:
        return []
    profile = as_dict(profile)
    ptype = profile.get("type")
    causes: list[Cause] = []
    if not ptype:
        causes.append(field_required(f"{path}.type", "Required value: type is required when seccompProfile is set"))
    elif ptype not in SECCOMP_TYPES:
        causes.append(field_not_supported(f"{path}.type", ptype, SECCOMP_TYPES))
    local = profile.get("localhostProfile")
    if ptype == "Localhost":
        if local is None:
            causes.append(field_required(f"{path}.localhostProfile", "Required value: must be set when seccomp "
                                         "type is Localhost"))
        else:
            causes += local_descending_path_causes(str(local), f"{path}.localhostProfile")
    elif local is not None:
        causes.append(field_invalid(f"{path}.localhostProfile", local, "can only be set when seccomp type is "
                                    "Localhost"))
    return causes


def pod_security_causes(sc: Any, path: str) -> list[Cause]:
    sc = as_dict(sc)
    causes: list[Cause] = []
    for f in ("runAsUser", "runAsGroup", "fsGroup"):
        causes += id_causes(sc.get(f), f"{path}.{f}")
    for i, g in enumerate(as_list(sc.get("supplementalGroups"))):
        causes += id_causes(g, f"{path}.supplementalGroups[{i}]")
    pol = sc.get("fsGroupChangePolicy")
    if pol is not None and pol not in FS_GROUP_POLICIES:
        causes.append(field_not_supported(f"{path}.fsGroupChangePolicy", pol, FS_GROUP_POLICIES))
    seen: set[str] = set()
    for i, s in enumerate(as_list(sc.get("sysctls"))):
        name = str(as_dict(s).get("name") or "")
        if not name:
            causes.append(field_required(f"{path}.sysctls[{i}].name"))
        elif len(name) > 253 or not _SYSCTL_RE.fullmatch(name):
            causes.append(field_invalid(f"{path}.sysctls[{i}].name", name, "must have at most 253 characters and "
                                        f"match regex ^{_SYSCTL_FMT}$"))
        elif name in seen:
            causes.append(field_duplicate(f"{path}.sysctls[{i}].name", name))
        seen.add(name)
    return causes + seccomp_causes(sc.get("seccompProfile"), f"{path}.seccompProfile")
