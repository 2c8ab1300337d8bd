"""Label and field selectors: parsing, matching, canonical strings, and the selectable fields per kind.

Role: the `labelSelector` / `fieldSelector` query parameters, `LabelSelector` dicts in object specs
(Deployment, Service, PDB, ...), and the per-kind field sets the list/watch filter evaluates.

Invariants:
- Parsed selectors are immutable; requirements are kept sorted by key (as upstream), so `str()` is
  canonical and stable: `app=web,tier in (a,b)`, values of `in`/`notin` sorted.
- Parse and validation errors raise `lite.errors.bad_request` (HTTP 400) with the upstream wording.
- `LabelSelector.from_dict(None)` matches nothing; `from_dict({})` matches everything (Kubernetes
  `LabelSelectorAsSelector`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from lite import errors
from lite.kinds import Kind
from lite.records import dataclass
from lite.validation import is_qualified_name, is_valid_label_value

# Operators of the string form; `in`/`notin` print with spaces, Exists/DoesNotExist print no operator.
EQUALS, DOUBLE_EQUALS, NOT_EQUALS = "=", "==", "!="
IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT = "in", "notin", "exists", "!", "gt", "lt"
_API_OPS = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        if self.op in (EQUALS, DOUBLE_EQUALS, IN):
            return has and labels[self.key] in self.values
        if self.op in (NOT_EQUALS, NOT_IN):
            return not has or labels[self.key] not in self.values
        if self.op == EXISTS:
            return has
        if self.op == DOES_NOT_EXIST:
            return not has
        if not has:
            return False
        try:
            mine, bound = int(labels[self.key]), int(self.values[0])
        except ValueError:
            return False
        return mine > bound if self.op == GT else mine < bound

    def __str__(self) -> str:
        if self.op == EXISTS:
            return self.key
        if self.op == DOES_NOT_EXIST:
            return f"!{self.key}"
        if self.op in (IN, NOT_IN):
            return f"{self.key} {self.op} ({','.join(self.values)})"
        sym = {GT: ">", LT: "<"}.get(self.op, self.op)
        return f"{self.key}{sym}{self.values[0]}"


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; `nothing=True` is the selector that matches no object."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    @property
    def empty(self) -> bool:
        """True when it matches everything."""
        return not self.requirements and not self.nothing

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.nothing:
            return False
        lab = labels or {}
        return all(r.matches(lab) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)

    def __iter__(self) -> Iterator[Requirement]:
        return iter(self.requirements)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> LabelSelector:
        """Convert a metav1.LabelSelector dict; raises bad_request if it is invalid."""
        if d is None:
            return cls(nothing=True)
        reqs: list[Requirement] = []
        for k, v in (d.get("matchLabels") or {}).items():
            reqs.append(_requirement(str(k), EQUALS, [v if isinstance(v, str) else str(v)]))
        for expr in d.get("matchExpressions") or []:
            op = _API_OPS.get(expr.get("operator", ""))
            if op is None:
                raise errors.bad_request(f'"{expr.get("operator", "")}" is not a valid label selector operator')
            reqs.append(_requirement(str(expr.get("key", "")), op, list(expr.get("values") or [])))
        return cls(_sorted(reqs))

    def to_dict(self) -> dict[str, Any]:
        """The metav1.LabelSelector form (equality as matchLabels, the rest as matchExpressions)."""
        labels: dict[str, str] = {}
        exprs: list[dict[str, Any]] = []
        inv = {v: k for k, v in _API_OPS.items()}
        for r in self.requirements:
            if r.op in (EQUALS, DOUBLE_EQUALS):
                labels[r.key] = r.values[0]
            elif r.op == NOT_EQUALS:
                exprs.append({"key": r.key, "operator": "NotIn", "values": list(r.values)})
            elif r.op in inv:
                e: dict[str, Any] = {"key": r.key, "operator": inv[r.op]}
                if r.values:
                    e["values"] = list(r.values)
                exprs.append(e)
        out: dict[str, Any] = {}
        if labels:
            out["matchLabels"] = labels
        if exprs:
            out["matchExpressions"] = exprs
        return out


def _sorted(reqs: list[Requirement]) -> tuple[Requirement, ...]:
    return tuple(sorted(reqs, key=lambda r: r.key))


def _requirement(key: str, op: str, values: list[str]) -> Requirement:
    """Build a validated requirement (upstream `NewRequirement`)."""
    for msg in is_qualified_name(key):
        raise errors.bad_request(f'unable to parse requirement: invalid label key "{key}": {msg}')
    if op in (IN, NOT_IN) and not values:
        raise errors.bad_request("unable to parse requirement: for 'in', 'notin' operators, "
                                 "values set can't be empty")
    if op in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS) and len(values) != 1:
        raise errors.bad_request("unable to parse requirement: exact-match compatibility requires one "
                                 "single value")
    if op in (EXISTS, DOES_NOT_EXIST) and values:
        raise errors.bad_request("unable to parse requirement: values set must be empty for exists and "
                                 "does not exist")
    if op in (GT, LT) and (len(values) != 1 or not re.fullmatch(r"[+-]?[0-9]+", values[0])):
        raise errors.bad_request("unable to parse requirement: for 'Gt', 'Lt' operators, exactly one "
                                 "value is required")
    for v in values:
        for msg in is_valid_label_value(v):
            raise errors.bad_request(f'unable to parse requirement: invalid label value: "{v}": '
                                     f'at key: "{key}": {msg}')
    return Requirement(key, op, tuple(sorted(set(values))))


# Lexer: special tokens first (longest match), then identifiers (anything else up to a special char).
_TOKEN = re.compile(r"\s*(!=|==|=|!|\(|\)|,|>|<|[^\s!=(),<>]+)")


def _tokens(s: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if m is None:  # only trailing whitespace is left
            break
        out.append(m.group(1))
        pos = m.end()
    return out


_SPECIAL = {"!=", "==", "=", "!", "(", ")", ",", ">", "<"}


def _is_ident(tok: str) -> bool:
    return tok not in _SPECIAL


def parse_label_selector(s: str) -> LabelSelector:
    """Parse the string form (`labelSelector=` query); the empty string selects everything."""
    toks = _tokens(s)
    reqs: list[Requirement] = []
    i = 0
    while i < len(toks):
        if not (_is_ident(toks[i]) or toks[i] == "!"):
            raise _found(toks[i], "!, identifier, or 'end of string'", prefix=False)
        req, i = _parse_requirement(toks, i)
        reqs.append(req)
        if i < len(toks):
            if toks[i] != ",":
                raise _found(toks[i], "',' or 'end of string'", prefix=False)
            i += 1
            if i == len(toks) or not (_is_ident(toks[i]) or toks[i] == "!"):
                raise _found(toks[i] if i < len(toks) else "", "identifier after ','", prefix=False)
    return LabelSelector(_sorted(reqs))


def _found(tok: str, expected: str, *, prefix: bool = True) -> errors.ApiError:
    # Upstream prefixes errors from inside one requirement with "unable to parse requirement: ".
    lead = "unable to parse requirement: " if prefix else ""
    return errors.bad_request(f"{lead}found '{tok}', expected: {expected}")


_BINARY_OPS = {"=": EQUALS, "==": DOUBLE_EQUALS, "!=": NOT_EQUALS, ">": GT, "<": LT, "in": IN, "notin": NOT_IN}


def _parse_requirement(toks: list[str], i: int) -> tuple[Requirement, int]:
    negate = toks[i] == "!"
    if negate:
        i += 1
    if i >= len(toks) or not _is_ident(toks[i]):
        raise _found(toks[i] if i < len(toks) else "", "identifier")
    key = toks[i]
    i += 1
    if negate or i == len(toks) or toks[i] == ",":
        return _requirement(key, DOES_NOT_EXIST if negate else EXISTS, []), i
    op = _BINARY_OPS.get(toks[i])
    if op is None:
        raise _found(toks[i], "in, notin, =, ==, !=, gt, lt")
    i += 1
    if op in (IN, NOT_IN):
        return _parse_set(key, op, toks, i)
    if i < len(toks) and _is_ident(toks[i]):
        return _requirement(key, op, [toks[i]]), i + 1
    if i == len(toks) or toks[i] == ",":  # `k=` selects the empty value
        return _requirement(key, op, [""]), i
    raise _found(toks[i], "identifier")


def _parse_set(key: str, op: str, toks: list[str], i: int) -> tuple[Requirement, int]:
    if i >= len(toks) or toks[i] != "(":
        raise _found(toks[i] if i < len(toks) else "", "'('")
    i += 1
    values: list[str] = []
    expect_value = True
    while i < len(toks) and toks[i] != ")":
        tok = toks[i]
        if tok == ",":
            if expect_value:
                values.append("")  # `(a,,b)` and `(a,)` contain the empty value, as upstream
            expect_value = True
        elif _is_ident(tok) and expect_value:
            values.append(tok)
            expect_value = False
        else:
            raise _found(tok, "',', ')' or identifier")
        i += 1
    if i >= len(toks):
        raise _found("", "')'")
    if expect_value and values:
        values.append("")
    return _requirement(key, op, values), i + 1


# --- field selectors -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    op: str  # "=", "==" or "!="
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        equal = fields.get(self.field, "") == self.value
        return not equal if self.op == NOT_EQUALS else equal

    def __str__(self) -> str:
        return f"{self.field}{self.op}{_escape(self.value)}"


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all(r.matches(fields) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def _split_unescaped(s: str) -> list[str]:
    parts, cur, i = [], "", 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            cur += s[i:i + 2]
            i += 2
            continue
        if s[i] == ",":
            parts.append(cur)
            cur = ""
        else:
            cur += s[i]
        i += 1
    parts.append(cur)
    return parts


def _unescape(v: str, selector: str) -> str:
    out, i = "", 0
    while i < len(v):
        c = v[i]
        if c == "\\":
            if i + 1 >= len(v) or v[i + 1] not in "\\,=":
                raise errors.bad_request(f"invalid field selector: '{selector}': invalid escape sequence")
            out += v[i + 1]
            i += 2
            continue
        if c in ",=":
            raise errors.bad_request(f"invalid field selector: '{selector}': unescaped {c} in value")
        out += c
        i += 1
    return out


def parse_field_selector(s: str) -> FieldSelector:
    """Parse `fieldSelector=`: `f=v`, `f==v`, `f!=v` joined by commas; `\\,` `\\=` `\\\\` escape values."""
    reqs: list[FieldRequirement] = []
    for part in sorted(_split_unescaped(s)):
        if not part:
            continue
        m = re.match(r"^([^=!\\]*?)(!=|==|=)(.*)$", part, re.S)
        if m is None or not m.group(1):
            raise errors.bad_request(f"invalid selector: '{s}'; can't understand '{part}'")
        reqs.append(FieldRequirement(m.group(1).strip(), m.group(2), _unescape(m.group(3), s)))
    return FieldSelector(tuple(reqs))


_POD_FIELDS = ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
               "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName")
_INVOLVED = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
_EVENT_FIELDS = (*(f"involvedObject.{f}" for f in _INVOLVED), "reason", "reportingComponent", "source", "type")


def _kind_fields(kind: Kind, obj: Mapping[str, Any]) -> dict[str, str]:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    key = (kind.group, kind.kind)
    if key == ("", "Pod"):
        ips = status.get("podIPs") or []
        return {
            "spec.nodeName": str(spec.get("nodeName", "")),
            "spec.restartPolicy": str(spec.get("restartPolicy", "")),
            "spec.schedulerName": str(spec.get("schedulerName", "")),
            "spec.serviceAccountName": str(spec.get("serviceAccountName", "")),
            "spec.hostNetwork": "true" if spec.get("hostNetwork") else "false",
            "status.phase": str(status.get("phase", "")),
            "status.podIP": str(ips[0].get("ip", "")) if ips else str(status.get("podIP", "")),
            "status.nominatedNodeName": str(status.get("nominatedNodeName", "")),
        }
    if key == ("", "Event"):
        inv = obj.get("involvedObject") or {}
        fields = {f"involvedObject.{f}": str(inv.get(f, "")) for f in _INVOLVED}
        source = (obj.get("source") or {}).get("component") or obj.get("reportingComponent", "")
        fields.update(reason=str(obj.get("reason", "")), reportingComponent=str(obj.get("reportingComponent", "")),
                      source=str(source), type=str(obj.get("type", "")))
        return fields
    if key == ("", "Secret"):
        return {"type": str(obj.get("type", ""))}
    if key == ("", "Node"):
        return {"spec.unschedulable": "true" if spec.get("unschedulable") else "false"}
    if key == ("", "Namespace"):
        return {"status.phase": str(status.get("phase", ""))}
    if key in (("", "ReplicationController"), ("apps", "ReplicaSet")):
        return {"status.replicas": str(int(status.get("replicas") or 0))}
    if key == ("batch", "Job"):
        return {"status.successful": str(int(status.get("succeeded") or 0))}
    if key == ("certificates.k8s.io", "CertificateSigningRequest"):
        return {"spec.signerName": str(spec.get("signerName", ""))}
    return {}


def field_set(kind: Kind, obj: Mapping[str, Any]) -> dict[str, str]:
    """The selectable fields of `obj` (upstream `GetAttrs`/`ToSelectableFields`) as strings."""
    meta = obj.get("metadata") or {}
    out = {"metadata.name": str(meta.get("name", "")), "metadata.namespace": str(meta.get("namespace", ""))}
    out.update(_kind_fields(kind, obj))
    return out


# Selectable fields read straight from one key of the object, "" when the key is missing (a null or any other
# value present reads otherwise): (group, kind) -> field label -> that key.
_KEYED_FIELDS: dict[tuple[str, str], dict[str, str]] = {
    ("", "Pod"): {"spec.nodeName": "nodeName", "spec.restartPolicy": "restartPolicy",
                  "spec.schedulerName": "schedulerName", "spec.serviceAccountName": "serviceAccountName",
                  "status.phase": "phase", "status.nominatedNodeName": "nominatedNodeName"},
    ("", "Secret"): {"type": "type"},
}


def required_keys(kind: Kind, sel: FieldSelector) -> tuple[bytes, ...]:
    """Fragments (`"key":`, as orjson writes a key) that the JSON encoding of every object matching `sel` holds:
    one per requirement that a missing field cannot meet (`field!=` with an empty value, `field=value` with a
    non-empty one) on a field read from one key (`_KEYED_FIELDS`). An encoding without one of them cannot match,
    whatever else it holds; one with all of them still has to be decoded and matched."""
    keyed = _KEYED_FIELDS.get((kind.group, kind.kind), {})
    out: list[bytes] = []
    for r in check_field_selector(kind, sel).requirements:
        key = keyed.get(r.field)
        if key is not None and (r.value == "") == (r.op == NOT_EQUALS):
            out.append(b'"' + key.encode() + b'":')
    return tuple(out)


def supported_fields(kind: Kind) -> tuple[str, ...]:
    """Field labels the server accepts in a field selector for this kind (upstream conversion funcs)."""
    extra: dict[tuple[str, str], tuple[str, ...]] = {
        ("", "Pod"): _POD_FIELDS, ("", "Event"): _EVENT_FIELDS, ("", "Secret"): ("type",),
        ("", "ReplicationController"): ("status.replicas",), ("apps", "ReplicaSet"): ("status.replicas",),
        ("batch", "Job"): ("status.successful",),
        ("certificates.k8s.io", "CertificateSigningRequest"): ("spec.signerName",),
    }
    # Nodes and Namespaces register their own conversion, which omits metadata.namespace.
    if (kind.group, kind.kind) == ("", "Node"):
        return ("metadata.name", "spec.unschedulable")
    if (kind.group, kind.kind) == ("", "Namespace"):
        return ("metadata.name", "status.phase")
    return ("metadata.name", "metadata.namespace", *extra.get((kind.group, kind.kind), ()))


# Old field labels the API server still converts (pods: `spec.host` from pre-1.0 clients).
_ALIASES = {("", "Pod", "spec.host"): "spec.nodeName"}


def check_field_selector(kind: Kind, sel: FieldSelector) -> FieldSelector:
    """The selector with legacy labels converted; raises bad_request for a label the kind does not support."""
    allowed = supported_fields(kind)
    out: list[FieldRequirement] = []
    for r in sel.requirements:
        name = _ALIASES.get((kind.group, kind.kind, r.field), r.field)
        if name not in allowed:
            raise errors.bad_request(f"field label not supported: {r.field}")
        out.append(FieldRequirement(name, r.op, r.value))
    return FieldSelector(tuple(out))
