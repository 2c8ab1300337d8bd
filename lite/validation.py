"""Name, label, annotation and ObjectMeta validation with the Kubernetes messages and field paths.

Role: the building blocks the per-kind strategies use to produce 422 Invalid causes.

Invariants:
- The `is_*` functions return a list of upstream message strings (empty when valid); the `validate_*`
  functions return `list[lite.errors.Cause]` whose `field` is the JSON path (`metadata.labels`) and whose
  message reads `Invalid value: "x": <upstream detail>` like the API server's field errors.
- Pure: nothing here mutates its input.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from lite.errors import Cause, field_forbidden, field_invalid, field_required, field_too_long

_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT = _LABEL_FMT + r"(\." + _LABEL_FMT + ")*"
_DNS1035_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LVALUE_FMT = "(" + _QNAME_FMT + ")?"

_LABEL_RE = re.compile(_LABEL_FMT)
_SUBDOMAIN_RE = re.compile(_SUBDOMAIN_FMT)
_DNS1035_RE = re.compile(_DNS1035_FMT)
_QNAME_RE = re.compile(_QNAME_FMT)
_LVALUE_RE = re.compile(_LVALUE_FMT)

_QNAME_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
              "alphanumeric character")
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """Upstream `RegexError`: the message, examples and the regular expression used."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def max_len_error(n: int) -> str:
    return f"must be no more than {n} characters"


def _full(rx: re.Pattern[str], value: str) -> bool:
    return rx.fullmatch(value) is not None


def is_dns1123_label(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append(max_len_error(63))
    if not _full(_LABEL_RE, value):
        if _full(_SUBDOMAIN_RE, value):
            errs.append("must not contain dots")
        else:
            errs.append(regex_error("a lowercase RFC 1123 label must consist of lower case alphanumeric "
                                    "characters or '-', and must start and end with an alphanumeric character",
                                    _LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append(max_len_error(253))
    if not _full(_SUBDOMAIN_RE, value):
        errs.append(regex_error("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                                "characters, '-' or '.', and must start and end with an alphanumeric character",
                                _SUBDOMAIN_FMT, "example.com"))
    return errs


def is_dns1035_label(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append(max_len_error(63))
    if not _full(_DNS1035_RE, value):
        errs.append(regex_error("a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                                "start with an alphabetic character, and end with an alphanumeric character",
                                _DNS1035_FMT, "my-name", "abc-123"))
    return errs


def is_qualified_name(value: str) -> list[str]:
    """Label keys, annotation keys, finalizers: `[prefix/]name`, prefix a DNS subdomain."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in is_dns1123_subdomain(prefix))
    else:
        return ["a qualified name " + regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + max_len_error(63))
    if not _full(_QNAME_RE, name):
        errs.append("name part " + regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def plain_qualified_name(value: str) -> bool:
    """True exactly when `is_qualified_name(value)` finds nothing: the usual case, answered without building
    any message (every label and annotation key of every write asks)."""
    if len(value) <= 63 and value.isalnum() and value.isascii():  # a plain word (`app`): matches, in C
        return True
    prefix, slash, name = value.rpartition("/")
    if len(name) > 63 or _QNAME_RE.fullmatch(name) is None:
        return False
    return not slash or (0 < len(prefix) <= 253 and _SUBDOMAIN_RE.fullmatch(prefix) is not None)


def is_valid_label_value(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append(max_len_error(63))
    if not _full(_LVALUE_RE, value):
        errs.append(regex_error("a valid label must be an empty string or consist of alphanumeric characters, "
                                "'-', '_' or '.', and must start and end with an alphanumeric character",
                                _LVALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def validate_labels(labels: Any, path: str = "metadata.labels") -> list[Cause]:
    if labels is None:
        return []
    if type(labels) is not dict and not isinstance(labels, Mapping):  # the ABC check is slow; dicts are usual
        return [field_invalid(path, labels, "must be a map of strings")]
    causes: list[Cause] = []
    for k, v in labels.items():
        if type(k) is str and type(v) is str and len(v) <= 63 and \
                ((v.isalnum() and v.isascii()) or _LVALUE_RE.fullmatch(v) is not None) and plain_qualified_name(k):
            continue  # valid: the messages below are built only for what is not
        causes += [field_invalid(path, k, m) for m in is_qualified_name(str(k))]
        if not isinstance(v, str):
            causes.append(field_invalid(path, v, "must be a string"))
        else:
            causes += [field_invalid(path, v, m) for m in is_valid_label_value(v)]
    return causes


def validate_annotations(annotations: Any, path: str = "metadata.annotations") -> list[Cause]:
    if annotations is None:
        return []
    if type(annotations) is not dict and not isinstance(annotations, Mapping):  # the ABC check is slow; dicts are usual
        return [field_invalid(path, annotations, "must be a map of strings")]
    causes: list[Cause] = []
    total = 0
    for k, v in annotations.items():
        # Upstream lower-cases the key before checking it (annotation keys are case-insensitive here).
        key = str(k).lower()
        if not plain_qualified_name(key):
            causes += [field_invalid(path, k, m) for m in is_qualified_name(key)]
        # Sizes are in bytes, as Go's len() counts them.
        key_text = str(k)
        total += (len(key_text) if key_text.isascii() else len(key_text.encode())) + \
            ((len(v) if v.isascii() else len(v.encode())) if isinstance(v, str) else len(orjson.dumps(v)))
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        causes.append(field_too_long(path, "", TOTAL_ANNOTATION_SIZE_LIMIT))
    return causes


def validate_label_selector(d: Any, path: str = "spec.selector") -> list[Cause]:
    """A metav1.LabelSelector dict (matchLabels + matchExpressions)."""
    if d is None:
        return []
    if type(d) is not dict and not isinstance(d, Mapping):  # the ABC check is slow; dicts are usual
        return [field_invalid(path, d, "must be a label selector object")]
    causes = validate_labels(d.get("matchLabels"), f"{path}.matchLabels")
    for i, e in enumerate(d.get("matchExpressions") or []):
        p = f"{path}.matchExpressions[{i}]"
        op, values = e.get("operator"), e.get("values") or []
        if op in ("In", "NotIn"):
            if not values:
                causes.append(field_required(f"{p}.values", "Required value: must be specified when `operator` "
                                             "is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                causes.append(field_forbidden(f"{p}.values", "may not be specified when `operator` is 'Exists' "
                                              "or 'DoesNotExist'"))
        else:
            causes.append(field_invalid(f"{p}.operator", op, "not a valid selector operator"))
        causes += [field_invalid(f"{p}.key", e.get("key", ""), m) for m in is_qualified_name(str(e.get("key", "")))]
        for j, v in enumerate(values):
            causes += [field_invalid(f"{p}.values[{j}]", v, m) for m in is_valid_label_value(str(v))]
    return causes


NameFn = Callable[[str, bool], list[str]]


def name_is_dns_subdomain(name: str, prefix: bool) -> list[str]:
    """Upstream `NameIsDNSSubdomain`: with prefix=True, `name` is a generateName (a trailing '-' is ok)."""
    return is_dns1123_subdomain(_mask_prefix(name) if prefix else name)


def name_is_dns_label(name: str, prefix: bool) -> list[str]:
    return is_dns1123_label(_mask_prefix(name) if prefix else name)


def name_is_dns1035_label(name: str, prefix: bool) -> list[str]:
    return is_dns1035_label(_mask_prefix(name) if prefix else name)


def _mask_prefix(name: str) -> str:
    # generateName gets random characters appended, so a trailing '-' is valid: test it as if it were "a".
    return name[:-1] + "a" if len(name) > 1 and name.endswith("-") else name


def validate_object_meta(meta: Any, *, namespaced: bool, name_fn: NameFn = name_is_dns_subdomain,
                         path: str = "metadata") -> list[Cause]:
    """ObjectMeta checks common to all kinds (upstream `ValidateObjectMeta`)."""
    if type(meta) is not dict and not isinstance(meta, Mapping):  # the ABC check is slow; dicts are usual
        return [field_required(path)]
    # (messages are built only for what fails: every write of every object runs this)
    causes: list[Cause] = []
    name, gen = meta.get("name") or "", meta.get("generateName") or ""
    if gen and (errs := name_fn(gen, True)):
        causes += [field_invalid(f"{path}.generateName", gen, m) for m in errs]
    if not name:
        if not gen:
            causes.append(field_required(f"{path}.name", "Required value: name or generateName is required"))
    elif errs := name_fn(name, False):
        causes += [field_invalid(f"{path}.name", name, m) for m in errs]
    ns = meta.get("namespace") or ""
    if namespaced:
        if not ns:
            causes.append(field_required(f"{path}.namespace"))
        elif errs := is_dns1123_label(ns):
            causes += [field_invalid(f"{path}.namespace", ns, m) for m in errs]
    elif ns:
        causes.append(field_forbidden(f"{path}.namespace", "not allowed on this type"))
    labels, annotations = meta.get("labels"), meta.get("annotations")
    if labels is not None:
        causes += validate_labels(labels, path + ".labels")
    if annotations is not None:
        causes += validate_annotations(annotations, path + ".annotations")
    if finalizers := meta.get("finalizers"):
        causes += _validate_finalizers(finalizers, path + ".finalizers")
    if refs := meta.get("ownerReferences"):
        causes += _validate_owner_refs(refs, path + ".ownerReferences")
    return causes


def _validate_finalizers(finalizers: Any, path: str) -> list[Cause]:
    # Upstream reports finalizer errors on the list path itself, not per index.
    causes: list[Cause] = []
    for f in finalizers or []:
        causes += [field_invalid(path, f, m) for m in is_qualified_name(str(f))]
    if "orphan" in (finalizers or []) and "foregroundDeletion" in (finalizers or []):
        causes.append(field_invalid(path, finalizers, "finalizer orphan and foregroundDeletion cannot be both set"))
    return causes


def _validate_owner_refs(refs: Any, path: str) -> list[Cause]:
    # Upstream reports owner reference errors on `metadata.ownerReferences.<field>`, not per index.
    causes: list[Cause] = []
    controllers = []
    for r in refs or []:
        version = str(r.get("apiVersion") or "").rpartition("/")[2]
        if not version:
            causes.append(field_invalid(f"{path}.apiVersion", r.get("apiVersion", ""), "version must not be empty"))
        for f in ("kind", "name", "uid"):
            if not r.get(f):
                causes.append(field_invalid(f"{path}.{f}", r.get(f, ""), f"{f} must not be empty"))
        if r.get("controller"):
            controllers.append(f"{r.get('kind', '')}/{r.get('name', '')}")
    if len(controllers) > 1:
        causes.append(field_invalid(path, refs, "Only one reference can have Controller set to true. Found "
                                    f'"true" in references for {" and ".join(controllers)}'))
    return causes


_IMMUTABLE_META = ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                   "deletionGracePeriodSeconds")


def validate_object_meta_update(new: Any, old: Any, *, path: str = "metadata",
                                require_resource_version: bool = False) -> list[Cause]:
    """ObjectMeta checks for an update (upstream `ValidateObjectMetaAccessorUpdate`): identity fields are
    immutable, generation never goes down, no finalizer is added while deleting, labels/annotations/
    ownerReferences stay valid."""
    new, old = new or {}, old or {}
    causes: list[Cause] = []
    if old.get("deletionTimestamp"):
        added = sorted(set(new.get("finalizers") or []) - set(old.get("finalizers") or []))
        if added:
            shown = "[]string{" + ", ".join(f'"{f}"' for f in added) + "}"
            causes.append(field_forbidden(f"{path}.finalizers", "no new finalizers can be added if the object is "
                                          f"being deleted, found new finalizers {shown}"))
    if require_resource_version and not new.get("resourceVersion"):
        causes.append(field_invalid(f"{path}.resourceVersion", "", "must be specified for an update"))
    if int(new.get("generation") or 0) < int(old.get("generation") or 0):
        causes.append(field_invalid(f"{path}.generation", int(new.get("generation") or 0), "must not be decremented"))
    for f in _IMMUTABLE_META:
        if new.get(f) != old.get(f):
            causes.append(field_invalid(f"{path}.{f}", new.get(f) if new.get(f) is not None else "",
                                        "field is immutable"))
    causes += validate_labels(new.get("labels"), f"{path}.labels")
    causes += validate_annotations(new.get("annotations"), f"{path}.annotations")
    causes += _validate_owner_refs(new.get("ownerReferences"), f"{path}.ownerReferences")
    return causes
