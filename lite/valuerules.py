"""Value-level rules of the API server's validation (upstream `apimachinery/pkg/util/validation` and the helpers
of `pkg/apis/core/validation`) that `lite.validation` does not already hold.

Role: port names and numbers, environment variable names, ConfigMap/Secret keys, relative paths that must stay
below a volume, file modes, user/group ids, IP addresses, HTTP header names, and the shared typed accessors the
per-kind validators use to walk untrusted bodies without crashing.

Invariants:
- The `is_*` functions return a list of upstream message strings (empty when valid), as `lite.validation` does.
- `local_path_causes` and `file_mode_causes` are the API half of the pod-directory guarantee: a value they
  accept never leaves the directory it is joined to and never carries setuid/setgid/sticky bits.
- Pure: nothing here mutates its input or does I/O.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any, TypeGuard

from lite.errors import Cause, field_invalid, field_required
from lite.validation import max_len_error, regex_error

FILE_MODE_MSG = "must be a number between 0 and 0777 (octal), both inclusive"
NEGATIVE_MSG = "must be greater than or equal to 0"
NOT_POSITIVE_MSG = "must be greater than zero"
PORT_RANGE_MSG = "must be between 1 and 65535, inclusive"
ID_RANGE_MSG = "must be between 0 and 2147483647, inclusive"
ENV_NAME_MSG = "a valid environment variable name must consist only of printable ASCII characters other than '='"
_CONFIG_KEY_FMT = "[-._a-zA-Z0-9]+"
_CONFIG_KEY_RE = re.compile(_CONFIG_KEY_FMT)
_PORT_NAME_CHARS = re.compile("[-a-z0-9]+")
_HEADER_FMT = "[-A-Za-z0-9]+"
_HEADER_RE = re.compile(_HEADER_FMT)


def as_dict(v: Any) -> Mapping[str, Any]:
    """`v` when it is an object, else an empty one (wrong JSON types are the schema check's to report)."""
    return v if isinstance(v, dict) else {}  # decoded JSON: dict (a plain type check is ~4x cheaper than Mapping)


def as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def in_range(lo: int, hi: int) -> str:
    return f"must be between {lo} and {hi}, inclusive"


def is_valid_port_num(port: Any) -> list[str]:
    return [] if is_int(port) and 1 <= port <= 65535 else [PORT_RANGE_MSG]


def is_valid_port_name(name: str) -> list[str]:
    """Upstream `IsValidPortName` (an IANA_SVC_NAME)."""
    errs = []
    if len(name) > 15:
        errs.append(max_len_error(15))
    if not _PORT_NAME_CHARS.fullmatch(name):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not re.search("[a-z]", name):
        errs.append("must contain at least one letter (a-z)")
    if "--" in name:
        errs.append("must not contain consecutive hyphens")
    if name and (name[0] == "-" or name[-1] == "-"):
        errs.append("must not begin or end with a hyphen")
    return errs


def port_num_or_name_causes(port: Any, path: str) -> list[Cause]:
    """Upstream `ValidatePortNumOrName` (an IntOrString port of a probe, handler or Service targetPort)."""
    if is_int(port):
        return [field_invalid(path, port, m) for m in is_valid_port_num(port)]
    if isinstance(port, str):
        if not port:
            return [field_required(path)]
        return [field_invalid(path, port, m) for m in is_valid_port_name(port)]
    return [field_invalid(path, port, "must be an integer or a string")]


def is_env_var_name(name: str) -> list[str]:
    """Upstream `IsRelaxedEnvVarName` (RelaxedEnvironmentVariableValidation is on by default in 1.32)."""
    # printable ASCII is exactly 32..126: two C-speed tests instead of a Python loop over the characters
    if not name or not (name.isascii() and name.isprintable()) or "=" in name:
        return [ENV_NAME_MSG]
    return []


def is_config_map_key(key: str) -> list[str]:
    """Upstream `IsConfigMapKey`: keys become file names, so '.', '..' and a leading '..' are refused too."""
    errs = []
    if len(key) > 253:
        errs.append(max_len_error(253))
    if not _CONFIG_KEY_RE.fullmatch(key):
        errs.append(regex_error("a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
                                _CONFIG_KEY_FMT, "key.name", "KEY_NAME", "key-name"))
    if key == ".":
        errs.append("must not be '.'")
    elif key == "..":
        errs.append("must not be '..'")
    elif key.startswith(".."):
        errs.append("must not start with '..'")
    return errs


def is_http_header_name(name: str) -> list[str]:
    if not _HEADER_RE.fullmatch(name):
        return [regex_error("a valid HTTP header must consist of alphanumeric characters or '-'", _HEADER_FMT,
                            "X-Header-Name")]
    return []


def is_valid_ip(value: str) -> list[str]:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return ["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"]
    return []


def no_backsteps_causes(value: str, path: str) -> list[Cause]:
    """Upstream `validatePathNoBacksteps`: no '..' element."""
    if ".." in value.split("/"):
        return [field_invalid(path, value, "must not contain '..'")]
    return []


def local_descending_path_causes(value: str, path: str) -> list[Cause]:
    """Upstream `validateLocalDescendingPath`: relative and without '..' elements (subPath, item paths)."""
    causes = []
    if value.startswith("/"):
        causes.append(field_invalid(path, value, "must be a relative path"))
    return causes + no_backsteps_causes(value, path)


def local_path_causes(value: str, path: str) -> list[Cause]:
    """Upstream `validateLocalNonReservedPath`: also not starting with '..' (the AtomicWriter's own names)."""
    causes = local_descending_path_causes(value, path)
    if value.startswith("..") and not value.startswith("../"):
        causes.append(field_invalid(path, value, "must not start with '..'"))
    return causes


def file_mode_causes(mode: Any, path: str) -> list[Cause]:
    """defaultMode / item mode: 0..0777; setuid, setgid and sticky bits are never accepted."""
    if mode is None:
        return []
    if not is_int(mode) or not 0 <= mode <= 0o777:
        return [field_invalid(path, mode, FILE_MODE_MSG)]
    return []


def non_negative_causes(value: Any, path: str) -> list[Cause]:
    if value is None:
        return []
    if not is_int(value) or value < 0:
        return [field_invalid(path, value, NEGATIVE_MSG)]
    return []


def positive_causes(value: Any, path: str) -> list[Cause]:
    if value is None:
        return []
    if not is_int(value) or value <= 0:
        return [field_invalid(path, value, NOT_POSITIVE_MSG)]
    return []


def id_causes(value: Any, path: str) -> list[Cause]:
    """Upstream `IsValidUserID`/`IsValidGroupID` (runAsUser, runAsGroup, fsGroup, supplementalGroups)."""
    if value is None:
        return []
    if not is_int(value) or not 0 <= value <= 2147483647:
        return [field_invalid(path, value, ID_RANGE_MSG)]
    return []
