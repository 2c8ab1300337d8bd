"""Table printers of the RBAC kinds, as kubectl's upstream printers: Role and ClusterRole `Name, Created At`;
RoleBinding and ClusterRoleBinding `Name, Role (<Kind>/<name>), Age` and, wide, `Users, Groups,
ServiceAccounts` (`<namespace>/<name>`), comma-joined. Pure and null-safe."""

from __future__ import annotations

import datetime as dt
from typing import Any

from lite.kubetables.format import Obj, age, lst, s
from lite.kubetables.spec import Printer, age_col, col, name_col
from lite.server.api.tables.misc import _CREATED_AT


def _binding(obj: Obj, now: dt.datetime) -> list[Any]:
    kinds: dict[str, list[str]] = {"User": [], "Group": [], "ServiceAccount": []}
    for sub in lst(obj, "subjects"):
        kind = s(sub, "kind")
        if kind == "ServiceAccount":
            kinds[kind].append(f"{s(sub, 'namespace')}/{s(sub, 'name')}")
        elif kind in kinds:
            kinds[kind].append(s(sub, "name"))
    role = f"{s(obj, 'roleRef', 'kind')}/{s(obj, 'roleRef', 'name')}"
    return [s(obj, "metadata", "name"), role, age(obj, now), ", ".join(kinds["User"]), ", ".join(kinds["Group"]),
            ", ".join(kinds["ServiceAccount"])]


_BINDING: Printer = ((name_col(), col("Role", desc="Role of the binding."), age_col(),
                      col("Users", wide=True, desc="Users of the binding."),
                      col("Groups", wide=True, desc="Groups of the binding."),
                      col("ServiceAccounts", wide=True, desc="ServiceAccounts of the binding.")), _binding)

PRINTERS: dict[str, Printer] = {
    "Role.rbac.authorization.k8s.io": _CREATED_AT,
    "ClusterRole.rbac.authorization.k8s.io": _CREATED_AT,
    "RoleBinding.rbac.authorization.k8s.io": _BINDING,
    "ClusterRoleBinding.rbac.authorization.k8s.io": _BINDING,
}
