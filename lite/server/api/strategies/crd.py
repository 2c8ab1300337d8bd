"""CustomResourceDefinition strategy and the Kinds a CRD serves; the strategy for custom objects.

Invariants:
- A CRD's `metadata.name` is `<spec.names.plural>.<spec.group>`; exactly one version is the storage version.
- On create the status says the names are accepted and the CRD is established (there is no separate naming
  controller in lite), and `status.storedVersions` holds the storage version.
- Every served version becomes one `Kind` with `crd=True`; all versions share the store keys
  `<group>/<plural>/...`; an object stays in the version it was written in (strategy None: a read relabels
  apiVersion; Webhook: `conversion.Converter` converts it on reads).
"""

from __future__ import annotations

from typing import Any

from lite.errors import Cause, field_forbidden, field_invalid, field_not_supported, field_required
from lite.kinds import STD_VERBS, Kind
from lite.objects import rfc3339
from lite.server.api.strategies import crschema
from lite.server.api.strategies.base import Obj, Strategy
from lite.server.api.strategies.crdstructural import junctor_causes
from lite.validation import is_dns1035_label, is_dns1123_label, is_dns1123_subdomain

SCOPES = ["Cluster", "Namespaced"]
APPROVAL = "api-approved.kubernetes.io"


def default_crd(obj: Obj) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    names = spec.get("names")
    if isinstance(names, dict) and names.get("kind"):
        names.setdefault("singular", str(names["kind"]).lower())
        names.setdefault("listKind", f"{names['kind']}List")
    spec.setdefault("conversion", {"strategy": "None"})
    for v in spec.get("versions") or []:
        if isinstance(v, dict):
            v.setdefault("served", True)
            v.setdefault("storage", False)


def _names_status(spec: Obj) -> Obj:
    names = dict(spec.get("names") or {})
    return names


def _condition(ctype: str, reason: str, message: str) -> Obj:
    return {"type": ctype, "status": "True", "lastTransitionTime": rfc3339(), "reason": reason,
            "message": message}


def prepare_create_crd(obj: Obj) -> None:
    spec = obj.get("spec") or {}
    storage = [v.get("name") for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("storage")]
    obj["status"] = {
        "acceptedNames": _names_status(spec),
        "conditions": [
            _condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            _condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": storage[:1],
    }


def prepare_update_crd(new: Obj, old: Obj) -> None:
    # Keep storedVersions growing with the storage version, as upstream's status strategy does.
    status = new.setdefault("status", {})
    stored = list(status.get("storedVersions") or [])
    for v in (new.get("spec") or {}).get("versions") or []:
        if isinstance(v, dict) and v.get("storage") and v.get("name") not in stored:
            stored.append(v["name"])
    status["storedVersions"] = stored
    status["acceptedNames"] = _names_status(new.get("spec") or {})


def _validate_names(names: Any) -> list[Cause]:
    if not isinstance(names, dict):
        return [field_required("spec.names")]
    causes: list[Cause] = []
    for key in ("plural", "singular"):
        value = names.get(key)
        if key == "plural" and not value:
            causes.append(field_required("spec.names.plural"))
        elif value:
            causes += [field_invalid(f"spec.names.{key}", value, m) for m in is_dns1035_label(str(value))]
    if not names.get("kind"):
        causes.append(field_required("spec.names.kind"))
    if names.get("kind") and names.get("listKind") == names.get("kind"):
        causes.append(field_invalid("spec.names.listKind", names["listKind"], "kind and listKind may not be the same"))
    for i, short in enumerate(names.get("shortNames") or []):
        causes += [field_invalid(f"spec.names.shortNames[{i}]", short, m) for m in is_dns1035_label(str(short))]
    return causes


def validate_crd(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [field_required("spec")]
    causes: list[Cause] = []
    group = str(spec.get("group") or "")
    if not group:
        causes.append(field_required("spec.group"))
    elif "." not in group:
        causes.append(field_invalid("spec.group", group, "should be a domain with at least one dot"))
    else:
        causes += [field_invalid("spec.group", group, m) for m in is_dns1123_subdomain(group)]
    if group.endswith((".k8s.io", ".kubernetes.io")) or group in ("k8s.io", "kubernetes.io"):
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if not annotations.get(APPROVAL):
            causes.append(field_required(f"metadata.annotations[{APPROVAL}]", f'Required value: protected groups '
                                         f'must have approval annotation "{APPROVAL}", see '
                                         "https://github.com/kubernetes/enhancements/pull/1111"))
    names = spec.get("names")
    causes += _validate_names(names)
    plural = names.get("plural") if isinstance(names, dict) else ""
    name = str((obj.get("metadata") or {}).get("name") or "")
    if plural and group and name != f"{plural}.{group}":
        causes.append(field_invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    scope = spec.get("scope")
    if not scope:
        causes.append(field_required("spec.scope"))
    elif scope not in SCOPES:
        causes.append(field_not_supported("spec.scope", scope, SCOPES))
    causes += _validate_versions(spec.get("versions"))
    for i, v in enumerate(spec.get("versions") or ()):
        schema = (v.get("schema") or {}) if isinstance(v, dict) else {}
        if isinstance(schema, dict):
            causes += junctor_causes(schema.get("openAPIV3Schema"), f"spec.versions[{i}].schema.openAPIV3Schema")
    causes += _validate_conversion(spec.get("conversion"))
    if any(crschema.has_rules((v.get("schema") or {}).get("openAPIV3Schema"))
           for v in spec.get("versions") or [] if isinstance(v, dict)):
        from lite.server.api.strategies import crcel  # the CEL runtime, loaded once the first CRD has rules

        causes += crcel.check_crd(spec)
    return causes


def _validate_conversion(conv: Any) -> list[Cause]:
    """upstream ValidateCustomResourceConversion, for the parts lite serves (ConversionReview v1)."""
    if not isinstance(conv, dict):
        return []
    strategy = conv.get("strategy")
    if strategy not in ("None", "Webhook"):
        return [field_not_supported("spec.conversion.strategy", strategy, ["None", "Webhook"])]
    hook = conv.get("webhook")
    if strategy == "None":
        return [field_forbidden("spec.conversion.webhook", "should not be set when strategy is not set to Webhook")] \
            if hook else []
    if not isinstance(hook, dict) or not isinstance(hook.get("clientConfig"), dict):
        return [field_required("spec.conversion.webhook.clientConfig",
                               "Required value: required when strategy is set to Webhook")]
    causes: list[Cause] = []
    versions = hook.get("conversionReviewVersions") or []
    if not versions:
        causes.append(field_required("spec.conversion.webhook.conversionReviewVersions"))
    elif "v1" not in versions:
        causes.append(field_invalid("spec.conversion.webhook.conversionReviewVersions", versions,
                                    "must include at least one of v1 (lite sends ConversionReview v1)"))
    config = hook["clientConfig"]
    url, service = config.get("url"), config.get("service")
    if bool(url) == bool(service):
        causes.append(field_required("spec.conversion.webhook.clientConfig",
                                     "Required value: exactly one of url or service is required"))
    elif url and not str(url).startswith("https://"):
        causes.append(field_invalid("spec.conversion.webhook.clientConfig.url", url,
                                    "'https' is the only allowed URL scheme"))
    elif isinstance(service, dict):
        for key in ("namespace", "name"):
            if not service.get(key):
                causes.append(field_required(f"spec.conversion.webhook.clientConfig.service.{key}"))
    return causes


def _validate_versions(versions: Any) -> list[Cause]:
    if not versions or not isinstance(versions, list):
        return [field_invalid("spec.versions", versions or [],
                              "must have exactly one version marked as storage version")]
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, v in enumerate(versions):
        vname = str((v or {}).get("name") or "")
        if not vname:
            causes.append(field_required(f"spec.versions[{i}].name"))
        else:
            causes += [field_invalid(f"spec.versions[{i}].name", vname, m) for m in is_dns1123_label(vname)]
            if vname in seen:
                causes.append(Cause("FieldValueDuplicate", f'Duplicate value: "{vname}"', f"spec.versions[{i}].name"))
            seen.add(vname)
    for i, v in enumerate(versions):
        if isinstance(v, dict):
            causes += validate_printer_columns(v.get("additionalPrinterColumns"),
                                               f"spec.versions[{i}].additionalPrinterColumns")
    if sum(1 for v in versions if isinstance(v, dict) and v.get("storage")) != 1:
        causes.append(field_invalid("spec.versions", [v.get("name") for v in versions if isinstance(v, dict)],
                                    "must have exactly one version marked as storage version"))
    if not any(isinstance(v, dict) and v.get("served", True) for v in versions):
        causes.append(field_invalid("spec.versions", "", "must have at least one served version"))
    return causes


COLUMN_TYPES = ("boolean", "date", "integer", "number", "string")
COLUMN_FORMATS = ("byte", "date", "date-time", "double", "float", "int32", "int64", "password")


def validate_printer_columns(columns: Any, path: str) -> list[Cause]:
    """upstream ValidateCustomResourceColumnDefinition (same messages and field paths, `JSONPath` included),
    plus: the path must parse as kubectl's JSONPath (upstream would silently fall back to Name/Age; lite refuses
    what it cannot print)."""
    if columns is None:
        return []
    if not isinstance(columns, list):
        return [field_invalid(path, columns, "must be a list")]
    causes: list[Cause] = []
    for i, c in enumerate(columns):
        at = f"{path}[{i}]"
        if not isinstance(c, dict):
            causes.append(field_invalid(at, c, "must be an object"))
            continue
        if not c.get("name"):
            causes.append(field_required(f"{at}.name"))
        ctype = c.get("type")
        if not ctype:
            causes.append(field_required(f"{at}.type", f"Required value: must be one of {','.join(COLUMN_TYPES)}"))
        elif ctype not in COLUMN_TYPES:
            causes.append(field_invalid(f"{at}.type", ctype, f"must be one of {','.join(COLUMN_TYPES)}"))
        fmt = c.get("format")
        if fmt and fmt not in COLUMN_FORMATS:
            causes.append(field_invalid(f"{at}.format", fmt, f"must be one of {','.join(COLUMN_FORMATS)}"))
        json_path = c.get("jsonPath")
        if not json_path:
            causes.append(field_required(f"{at}.JSONPath"))
        elif not isinstance(json_path, str) or not json_path.startswith("."):
            causes.append(field_invalid(f"{at}.JSONPath", json_path, "must be a simple json path starting with ."))
        else:
            from lite import jsonpath  # here: only CRDs with printer columns need it (~0.2 MB in every server)

            try:
                jsonpath.parse("{" + json_path + "}")
            except jsonpath.JSONPathError as e:
                causes.append(field_invalid(f"{at}.JSONPath", json_path, f"must be a valid JSONPath: {e}"))
    return causes


def validate_crd_update(new: Obj, old: Obj) -> list[Cause]:
    causes: list[Cause] = []
    nspec, ospec = new.get("spec") or {}, old.get("spec") or {}
    if nspec.get("group") != ospec.get("group"):
        causes.append(field_invalid("spec.group", nspec.get("group"), "field is immutable"))
    if (nspec.get("names") or {}).get("plural") != (ospec.get("names") or {}).get("plural"):
        plural = (nspec.get("names") or {}).get("plural")
        causes.append(field_invalid("spec.names.plural", plural, "field is immutable"))
    return causes


def _subresources(version: Obj) -> tuple[str, ...]:
    sub = version.get("subresources") or {}
    return tuple(s for s in ("status", "scale") if s in sub)


def kinds_of(crd: Obj) -> list[Kind]:
    """One Kind per served version, storage version first (so it is the preferred one)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    versions = [v for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("served", True)]
    versions.sort(key=lambda v: not v.get("storage"))
    out = []
    for v in versions:
        schema = (v.get("schema") or {}).get("openAPIV3Schema") or {}
        out.append(Kind(str(spec.get("group", "")), str(v.get("name")), str(names.get("kind")),
                        str(names.get("plural")), spec.get("scope") == "Namespaced",
                        tuple(names.get("shortNames") or ()), tuple(names.get("categories") or ()),
                        _subresources(v), STD_VERBS, True, False, True, dict(schema),
                        dict(spec.get("conversion") or {}),
                        printer_columns=tuple(dict(c) for c in v.get("additionalPrinterColumns") or ()
                                              if isinstance(c, dict))))
    return out


def scale_paths(crd: Obj, version: str) -> Obj | None:
    """The version's `subresources.scale` (specReplicasPath, statusReplicasPath, labelSelectorPath)."""
    for v in (crd.get("spec") or {}).get("versions") or []:
        if isinstance(v, dict) and v.get("name") == version:
            scale = (v.get("subresources") or {}).get("scale")
            return dict(scale) if isinstance(scale, dict) else None
    return None


CRD = Strategy(default=default_crd, prepare_create=prepare_create_crd, prepare_update=prepare_update_crd,
               validate=validate_crd, validate_update=validate_crd_update, status_metadata=("finalizers",))
# Custom objects: any object may own dependents, so the default GC policy applies (background).
# Their status writes take nothing but the status (upstream's custom resource status strategy).
CUSTOM = Strategy(gc_policy="background", return_deleted_object=True, status_metadata=())
