"""Query parameters and request options as upstream's apiserver reads and validates them.

Role: the exact decoding rules of kubernetes' ParameterCodec and of the `*Options` validators, as pure
functions the HTTP handlers call before doing any work:
- integers (`limit`, `timeoutSeconds`, `gracePeriodSeconds`) are `strconv.ParseInt(s, 10, 64)`: ASCII
  digits with an optional sign, nothing else (no `1_0`, no spaces, no `1e3`); failure is 400 BadRequest;
- booleans: an absent parameter, `0` and `false` (any case) are false, every other value (`maybe`, the
  empty string) is true;
- resourceVersions are `strconv.ParseUint(s, 10, 64)` ("invalid resource version", 400);
- Create/Update/Patch/DeleteOptions are validated as `ValidateCreateOptions` & co. do: 422 Invalid of kind
  `CreateOptions.meta.k8s.io` (etc.) naming the field (`dryRun`, `fieldManager`, `fieldValidation`,
  `force`, `propagationPolicy`);
- a DELETE body is decoded as a typed `DeleteOptions`: a field of the wrong JSON type is 400 BadRequest
  with the message Go's decoder gives ("json: cannot unmarshal string into Go struct field
  DeleteOptions.dryRun of type []string").

Invariants: no I/O, no state; every refusal is an `ApiError` with upstream's code and reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lite import errors
from lite.errors import ApiError, Cause

# The scalars live in the leaf (the agent's node-local API reads them too); re-exported for the API's modules.
from lite.queryparams import INT64_MAX as INT64_MAX
from lite.queryparams import INT64_MIN as INT64_MIN
from lite.queryparams import UINT64_MAX as UINT64_MAX
from lite.queryparams import go_quote as go_quote
from lite.queryparams import parse_int64 as parse_int64
from lite.queryparams import parse_uint64 as parse_uint64
from lite.queryparams import query_bool as query_bool
from lite.queryparams import query_int as query_int

FIELD_MANAGER_MAX = 128
FIELD_VALIDATION = ("", "Ignore", "Strict", "Warn")
PROPAGATION = ("Foreground", "Background", "Orphan")
_UNSIGNED = re.compile(r"[0-9]+", re.ASCII)

# DeleteOptions fields and the Go type of each (for the decoder's messages); preconditions is a struct.
_DELETE_FIELDS: dict[str, str] = {
    "kind": "string", "apiVersion": "string", "gracePeriodSeconds": "int64", "orphanDependents": "bool",
    "propagationPolicy": "v1.DeletionPropagation", "dryRun": "[]string", "preconditions": "v1.Preconditions",
    "ignoreStoreReadErrorWithClusterBreakingPotential": "bool",
}
_PRECONDITION_FIELDS = {"uid": "types.UID", "resourceVersion": "string"}


def parse_resource_version(rv: str) -> int:
    """A resourceVersion parameter: "" and "0" are 0, else `strconv.ParseUint`; 400 when it does not parse."""
    if rv in ("", "0"):
        return 0
    try:
        return parse_uint64(rv)
    except ValueError as e:
        raise errors.bad_request(f"invalid resource version: resourceVersion: Invalid value: {go_quote(rv)}: "
                                 f"{e}") from None


def stored_resource_version(value: Any) -> int:
    """What upstream's versioner reads from `metadata.resourceVersion` of an object: the number, or 0 when
    it is not an unsigned integer (such a value is then simply replaced by the store)."""
    if isinstance(value, str) and _UNSIGNED.fullmatch(value) and int(value) <= UINT64_MAX:
        return int(value)
    return 0


def check_list_query(query: Mapping[str, str]) -> None:
    """The ListOptions of a list or deletecollection: its numbers and resourceVersion must parse (400), and
    `sendInitialEvents` is for watches only (422, upstream ValidateListOptions)."""
    query_int(query, "limit")
    query_int(query, "timeoutSeconds")
    parse_resource_version(query.get("resourceVersion", ""))
    if "sendInitialEvents" in query:
        raise errors.invalid("ListOptions", "", [errors.field_forbidden(
            "sendInitialEvents", "sendInitialEvents is forbidden for list")], "meta.k8s.io")


# --- options validation (apimachinery meta/v1/validation) ----------------------------------------------

def _dry_run_causes(values: list[Any]) -> list[Cause]:
    if all(v == "All" for v in values):
        return []
    shown = "[]string{" + ", ".join(go_quote(str(v)) for v in values) + "}"
    return [Cause("FieldValueNotSupported", f'Unsupported value: {shown}: supported values: "All"', "dryRun")]


def _field_manager_causes(manager: str) -> list[Cause]:
    if len(manager.encode()) > FIELD_MANAGER_MAX:
        return [errors.field_too_long("fieldManager", manager, FIELD_MANAGER_MAX)]
    if any(not ch.isprintable() for ch in manager):
        return [Cause("FieldValueInvalid", f"Invalid value: {go_quote(manager)}: must only contain printable "
                                           "characters", "fieldManager")]
    return []


def _field_validation_causes(mode: str) -> list[Cause]:
    if mode in FIELD_VALIDATION:
        return []
    return [errors.field_not_supported("fieldValidation", mode, list(FIELD_VALIDATION))]


def manager_from_user_agent(user_agent: str) -> str:
    """The field manager of a write that names none, as upstream derives it: the User-Agent up to its first
    `/` (`kubectl/v1.32.4 (linux/amd64) ...` is `kubectl`), unprintable characters dropped, cut to the
    length a fieldManager may have."""
    head = user_agent.split("/", 1)[0]
    if head.isprintable() and (len(head) if head.isascii() else len(head.encode())) <= FIELD_MANAGER_MAX:
        return head  # the usual case, without the walk below
    out = ""
    for ch in head:
        if not ch.isprintable():
            continue
        if len((out + ch).encode()) > FIELD_MANAGER_MAX:
            break
        out += ch
    return out


def write_options(query: Any, verb: str, patch_type: str = "", user_agent: str = "") -> tuple[bool, str, str]:
    """(dryRun, fieldManager, fieldValidation) of a create/update/patch, validated as upstream's
    `Validate{Create,Update,Patch}Options`: 422 Invalid of kind `{Create,Update,Patch}Options.meta.k8s.io`.
    A write that names no fieldManager is managed by its `user_agent`'s (`manager_from_user_agent`)."""
    if not query and verb != "Patch":  # no parameter at all (what most writes send): nothing to refuse
        return False, manager_from_user_agent(user_agent), ""
    dry = list(query.getall("dryRun", ()))
    manager = query.get("fieldManager", "")
    mode = query.get("fieldValidation", "")
    causes: list[Cause] = []
    if verb == "Patch":
        if patch_type != "apply" and "force" in query:
            causes.append(errors.field_forbidden("force", "may not be specified for non-apply patch"))
        if patch_type == "apply" and not manager:
            causes.append(errors.field_required("fieldManager", "Required value: is required for apply patch"))
    causes += _field_manager_causes(manager) + _dry_run_causes(dry) + _field_validation_causes(mode)
    if causes:
        raise errors.invalid(f"{verb}Options", "", causes, "meta.k8s.io")
    return bool(dry), manager or manager_from_user_agent(user_agent), mode


def _go_type_of(value: Any) -> str:
    """The JSON type name Go's decoder names in "cannot unmarshal X into ..."."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return f"number {value!r}" if isinstance(value, float) else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _unmarshal_error(value: Any, path: str, go_type: str) -> ApiError:
    return errors.bad_request(f"json: cannot unmarshal {_go_type_of(value)} into Go struct field "
                              f"{path} of type {go_type}")


def _check_delete_field(name: str, value: Any, where: str) -> None:
    go_type = _DELETE_FIELDS[name]
    if value is None:
        return  # null leaves a Go pointer or slice nil
    if go_type in ("string", "v1.DeletionPropagation"):
        ok = isinstance(value, str)
    elif go_type == "bool":
        ok = isinstance(value, bool)
    elif go_type == "int64":
        ok = isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value <= INT64_MAX
    elif go_type == "[]string":
        if isinstance(value, list):
            for item in value:
                if not isinstance(item, str):
                    raise _unmarshal_error(item, f"{where}.{name}", "string")
            return
        ok = False
    else:  # preconditions
        if isinstance(value, dict):
            for key, want in _PRECONDITION_FIELDS.items():
                v = value.get(key)
                if v is not None and not isinstance(v, str):
                    raise _unmarshal_error(v, f"{where}.{name}.{key}", want)
            return
        ok = False
    if not ok:
        raise _unmarshal_error(value, f"{where}.{name}", go_type)


def check_delete_body(body: Any, where: str = "DeleteOptions") -> dict[str, Any]:
    """A decoded DELETE body (or the `deleteOptions` of an Eviction: `where` is then its Go path) as
    upstream's typed decoding accepts it (null means no options); 400 otherwise. Unknown fields are
    ignored, as the non-strict decoder does."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        if where != "DeleteOptions":
            raise _unmarshal_error(body, where, "v1.DeleteOptions")
        raise errors.bad_request(f"json: cannot unmarshal {_go_type_of(body)} into Go value of type "
                                 "v1.DeleteOptions")
    for name in _DELETE_FIELDS:
        if name in body:
            _check_delete_field(name, body[name], where)
    kind = body.get("kind")
    if kind and kind != "DeleteOptions":
        raise errors.bad_request(f'no kind "{kind}" is registered for version "{body.get("apiVersion") or ""}": '
                                 "the body of a DELETE must be a DeleteOptions")
    return {k: v for k, v in body.items() if k in _DELETE_FIELDS and v is not None}


def validate_delete_options(opts: Mapping[str, Any]) -> None:
    """Upstream ValidateDeleteOptions: 422 Invalid of kind DeleteOptions.meta.k8s.io."""
    causes: list[Cause] = []
    policy = opts.get("propagationPolicy")
    if opts.get("orphanDependents") is not None and policy is not None:
        causes.append(errors.field_invalid("propagationPolicy", policy,
                                           "orphanDependents and deletionPropagation cannot be both set"))
    if policy is not None and policy not in PROPAGATION:
        causes.append(errors.field_not_supported("propagationPolicy", policy, [*PROPAGATION, "nil"]))
    causes += _dry_run_causes(list(opts.get("dryRun") or []))
    if causes:
        raise errors.invalid("DeleteOptions", "", causes, "meta.k8s.io")
