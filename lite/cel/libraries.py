"""The Kubernetes CEL libraries (k8s.io/apiserver/pkg/cel/library, 1.32) as `Function` overloads.

Pure functions on plain Python values; the opaque types (Quantity, IP, CIDR, URL, Format) are one-field
protobuf messages from `opaque.py` whose `v` is the canonical text. Errors are raised as ValueError with
upstream's wording and surface as the evaluation's error.

Present: lists (isSorted, sum, min, max, indexOf, lastIndexOf), regex (find, findAll), urls (url, isURL,
getScheme, getHost, getHostname, getPort, getEscapedPath, getQuery), IP (ip, isIP, ip.isCanonical, family,
isUnspecified, isLoopback, isLinkLocalMulticast, isLinkLocalUnicast, isGlobalUnicast), CIDR (cidr, isCIDR,
containsIP, containsCIDR, ip, masked, prefixLength), quantity (quantity, isQuantity, sign, isInteger,
asInteger, asApproximateFloat, add, sub, isLessThan, isGreaterThan, compareTo), format (format.named,
format.<name>(), validate), sets (sets.contains, sets.equivalent, sets.intersects), two-variable comprehensions
(via env.py's rewrite onto `__lite_pairs`). The strings and optional extensions come from cel-expr-python itself
(see env.py), as does `cel.bind` (lite needs it internally; upstream 1.32 does not offer it to rules).

`indexOf` / `lastIndexOf` serve lists and strings through lite's `__indexOf` / `__lastIndexOf` (the runtime's
strings extension owns those names and refuses list overloads beside its own, so env.py renames the calls).
`string(ip)` / `string(cidr)`: the runtime refuses new overloads of `string`, so env.py rewrites `string(x)`
to bind `x` as dyn and print IPs and CIDRs with lite's functions. Python functions cannot return CEL
optionals, so `format.named(n)` and `<Format>.validate(s)` are rewritten in the expression text before
compiling (env.py) onto functions that return a Format and a list, wrapped in `optional.of` /
`optional.ofNonZeroValue`: same results as upstream's.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
import uuid
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from cel_expr_python import cel

from lite import quantity as qty

if TYPE_CHECKING:
    from lite.cel.env import Function
    from lite.cel.opaque import OpaqueTypes

T = cel.Type
DYN_LIST = T.List(T.DYN)
STR_LIST = T.List(T.STRING)
Q, IPT, CIDRT, URLT, FMT = "kubernetes.Quantity", "net.IP", "net.CIDR", "kubernetes.URL", "kubernetes.NamedFormat"
EXTRA_TYPES: tuple[str, ...] = ()


# ---- lists -----------------------------------------------------------------------------------------------


def _comparable(items: list[Any]) -> None:
    kinds = {type(x) for x in items}
    if len(kinds - {int, float}) > 0 and len(kinds) > 1:
        raise ValueError("no such overload")


def is_sorted(items: list[Any]) -> bool:
    _comparable(items)
    return all(items[i] <= items[i + 1] for i in range(len(items) - 1))


def list_sum(items: list[Any]) -> Any:
    _comparable(items)
    return sum(items) if items else 0


def list_min(items: list[Any]) -> Any:
    if not items:
        raise ValueError("min called on empty list")
    _comparable(items)
    return min(items)


def list_max(items: list[Any]) -> Any:
    if not items:
        raise ValueError("max called on empty list")
    _comparable(items)
    return max(items)


def index_of(items: list[Any], x: Any) -> int:
    for i, v in enumerate(items):
        if _equal(v, x):
            return i
    return -1


def last_index_of(items: list[Any], x: Any) -> int:
    for i in range(len(items) - 1, -1, -1):
        if _equal(items[i], x):
            return i
    return -1


def str_index_of(s: str, sub: str, offset: int = 0) -> int:
    if offset < 0 or offset > len(s):
        raise ValueError(f"index out of range: {offset}")
    return s.find(sub, offset)


def str_last_index_of(s: str, sub: str, offset: int | None = None) -> int:
    if offset is None:
        return s.rfind(sub)
    if offset < 0 or offset >= max(len(s), 1):
        raise ValueError(f"index out of range: {offset}")
    return s.rfind(sub, 0, offset + len(sub))


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(a == b)


def to_map(pairs: list[list[Any]]) -> dict[Any, Any]:
    return {p[0]: p[1] for p in pairs}


def merge_maps(maps: list[dict[Any, Any]]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for m in maps:
        for k, v in m.items():
            if k in out:
                raise ValueError(f"insert failed: key {k} already exists")
            out[k] = v
    return out


# ---- regex -----------------------------------------------------------------------------------------------


def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"error parsing regexp: {exc}") from None


def find(s: str, pattern: str) -> str:
    m = _regex(pattern).search(s)
    return m.group(0) if m else ""


def find_all(s: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    found = [m.group(0) for m in _regex(pattern).finditer(s)]
    return found if limit < 0 else found[:limit]


# ---- sets ------------------------------------------------------------------------------------------------


def sets_contains(a: list[Any], b: list[Any]) -> bool:
    return all(index_of(a, x) >= 0 for x in b)


def sets_equivalent(a: list[Any], b: list[Any]) -> bool:
    return sets_contains(a, b) and sets_contains(b, a)


def sets_intersects(a: list[Any], b: list[Any]) -> bool:
    return any(index_of(a, x) >= 0 for x in b)


# ---- URLs (Go's url.ParseRequestURI semantics, as far as they matter) -------------------------------------


def parse_url(s: str) -> urllib.parse.SplitResult:
    """A URL as Go's ParseRequestURI accepts it: absolute (`scheme:...`) or an absolute path; no fragment."""
    err = f"URL parse error during conversion from string: parse {_go_quote(s)}: invalid URI for request"
    if not s or any(c in s for c in " \t\r\n") or "#" in s:
        raise ValueError(err)
    parts = urllib.parse.urlsplit(s)
    if not parts.scheme and not s.startswith("/"):
        raise ValueError(err)
    if parts.scheme and not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parts.scheme):
        raise ValueError(f"URL parse error during conversion from string: parse {_go_quote(s)}: "
                         "first path segment in URL cannot contain colon")
    try:
        parts.port  # noqa: B018  (validates the port)
    except ValueError:
        raise ValueError(f"URL parse error during conversion from string: parse {_go_quote(s)}: "
                         "invalid port") from None
    return parts


def _go_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def is_url(s: str) -> bool:
    try:
        parse_url(s)
    except ValueError:
        return False
    return True


def url_host(s: str) -> str:
    return parse_url(s).netloc.rpartition("@")[2]


def url_hostname(s: str) -> str:
    host = url_host(s)
    if host.startswith("["):
        return host[1:host.index("]")] if "]" in host else host[1:]
    return host.rpartition(":")[0] if ":" in host else host


def url_port(s: str) -> str:
    host = url_host(s)
    if host.startswith("["):
        rest = host[host.index("]") + 1:] if "]" in host else ""
        return rest[1:] if rest.startswith(":") else ""
    return host.rpartition(":")[2] if ":" in host else ""


def url_escaped_path(s: str) -> str:
    return urllib.parse.quote(urllib.parse.unquote(parse_url(s).path), safe="/:@!$&'()*+,;=-._~")


def url_query(s: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for k, v in urllib.parse.parse_qsl(parse_url(s).query, keep_blank_values=True):
        out.setdefault(k, []).append(v)
    return out


# ---- IP / CIDR -------------------------------------------------------------------------------------------


def parse_ip(s: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An IP as upstream's library accepts it: no zone, no IPv4-mapped IPv6, no leading zeros in IPv4."""
    if "%" in s:
        raise ValueError(f"IP address with zone value is not allowed: {s}")
    try:
        addr = ipaddress.ip_address(s)
    except ValueError:
        raise ValueError(f"IP Address {_go_quote(s)} parse error during conversion from string: "
                         f"ParseAddr({_go_quote(s)}): unable to parse IP") from None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        raise ValueError(f"IPv4-mapped IPv6 address is not allowed: {s}")
    return addr


def parse_cidr(s: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    if "/" not in s:
        raise ValueError(f"network address parse error during conversion from string: "
                         f"netip.ParsePrefix({_go_quote(s)}): no '/'")
    addr, _, bits = s.partition("/")
    parse_ip(addr)
    if not bits.isdigit() or (len(bits) > 1 and bits[0] == "0"):
        raise ValueError(f"network address parse error during conversion from string: "
                         f"netip.ParsePrefix({_go_quote(s)}): bad bits after slash: {_go_quote(bits)}")
    try:
        return ipaddress.ip_interface(s)
    except ValueError:
        raise ValueError(f"network address parse error during conversion from string: "
                         f"netip.ParsePrefix({_go_quote(s)}): prefix length out of range") from None


def _ok(fn: Callable[[str], Any], s: str) -> bool:
    try:
        fn(s)
    except ValueError:
        return False
    return True


def ip_is_canonical(s: str) -> bool:
    return str(parse_ip(s)) == s


def ip_family(s: str) -> int:
    return parse_ip(s).version


def ip_is_global_unicast(s: str) -> bool:
    a = parse_ip(s)
    if a.version == 4 and a == ipaddress.IPv4Address("255.255.255.255"):
        return False
    return not (a.is_unspecified or a.is_loopback or a.is_multicast or a.is_link_local)


def ip_is_link_local_multicast(s: str) -> bool:
    a = parse_ip(s)
    if a.version == 4:
        return a in ipaddress.IPv4Network("224.0.0.0/24")
    return a.is_multicast and (int(a) >> 112) & 0xF == 2


def cidr_contains_ip(c: str, ip: str) -> bool:
    addr = parse_ip(ip)
    net = parse_cidr(c).network
    return addr.version == net.version and addr in net


def cidr_contains_cidr(c: str, other: str) -> bool:
    a, b = parse_cidr(c).network, parse_cidr(other).network
    return a.version == b.version and b.subnet_of(a)  # type: ignore[arg-type]


# ---- quantity --------------------------------------------------------------------------------------------


def _frac_text(f: Fraction) -> str:
    return f"{f.numerator}/{f.denominator}"


def _frac(v: str) -> Fraction:
    return Fraction(v)


def parse_q(s: str) -> Fraction:
    try:
        return qty.parse_quantity(s)
    except ValueError:
        raise ValueError("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'") from None


def q_as_integer(f: Fraction) -> int:
    if f.denominator != 1 or not -(2**63) <= f.numerator < 2**63:
        raise ValueError("cannot convert value to integer")
    return f.numerator


def q_compare(a: Fraction, b: Fraction) -> int:
    return (a > b) - (a < b)


# ---- format ----------------------------------------------------------------------------------------------

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def _dns_label(s: str) -> list[str]:
    errs = []
    if len(s) > 63:
        errs.append("must be no more than 63 characters")
    if not _DNS1123_LABEL.fullmatch(s):
        errs.append("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
                    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
                    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
    return errs


def _dns_subdomain(s: str) -> list[str]:
    errs = []
    if len(s) > 253:
        errs.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.fullmatch(s):
        errs.append("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
                    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
    return errs


def _dns1035(s: str) -> list[str]:
    errs = []
    if len(s) > 63:
        errs.append("must be no more than 63 characters")
    if not _DNS1035_LABEL.fullmatch(s):
        errs.append("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
                    "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")
    return errs


def _prefix(check: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    def run(s: str) -> list[str]:  # a generateName prefix: validated as if a suffix were appended
        return check(s + "a" if s.endswith("-") or s.endswith(".") else s)
    return run


def _qualified(s: str) -> list[str]:
    prefix, _, name = s.rpartition("/")
    errs = []
    if s.count("/") > 1:
        return ["a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix "
                "and '/' (e.g. 'example.com/MyName')"]
    if "/" in s:
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + e for e in _dns_subdomain(prefix)]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if name and not _QUALIFIED.fullmatch(name):
        errs.append("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
    return errs


def _label_value(s: str) -> list[str]:
    errs = []
    if len(s) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_VALUE.fullmatch(s):
        errs.append("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
                    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',"
                    "  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
    return errs


def _uri(s: str) -> list[str]:
    try:
        parse_url(s)
    except ValueError as exc:
        return [str(exc).removeprefix("URL parse error during conversion from string: ")]
    return []


def _uuid(s: str) -> list[str]:
    ok = re.fullmatch(r"(?i)[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", s)
    if ok:
        uuid.UUID(s)
    return [] if ok else ["does not match the UUID format"]


def _byte(s: str) -> list[str]:
    ok = re.fullmatch(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?", s)
    return [] if ok else ["invalid base64"]


def _date(s: str) -> list[str]:
    import datetime
    try:
        datetime.date.fromisoformat(s)
        ok = len(s) == 10
    except ValueError:
        ok = False
    return [] if ok else ["invalid date"]


def _datetime(s: str) -> list[str]:
    ok = re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", s)
    return [] if ok else ["invalid datetime"]


FORMATS: dict[str, Callable[[str], list[str]]] = {
    "dns1123Label": _dns_label, "dns1123Subdomain": _dns_subdomain, "dns1035Label": _dns1035,
    "qualifiedName": _qualified, "dns1123LabelPrefix": _prefix(_dns_label),
    "dns1123SubdomainPrefix": _prefix(_dns_subdomain), "dns1035LabelPrefix": _prefix(_dns1035),
    "labelValue": _label_value, "uri": _uri, "uuid": _uuid, "byte": _byte, "date": _date, "datetime": _datetime,
}


# ---- declarations ----------------------------------------------------------------------------------------


def all_functions(o: OpaqueTypes) -> list[Function]:
    """Every overload of the Kubernetes libraries, bound to the opaque types of `o`."""
    from lite.cel.env import Function as F

    def mk(name: str) -> Callable[[str], Any]:
        return lambda v: o.make(name, v)

    q = mk(Q)
    ipm, cidrm, urlm = mk(IPT), mk(CIDRT), mk(URLT)

    def q_new(f: Fraction) -> Any:
        return q(_frac_text(f))

    def cidr_new(s: str) -> Any:
        return cidrm(str(parse_cidr(s)))

    def named(name: str) -> Any:
        if name not in FORMATS:
            raise ValueError(f"no such format: {name}")
        return o.make(FMT, name)

    fns: list[F] = [
        F("isSorted", "list_dyn_is_sorted_bool", [DYN_LIST], T.BOOL, is_sorted, True),
        F("sum", "list_dyn_sum", [DYN_LIST], T.DYN, list_sum, True),
        F("min", "list_dyn_min", [DYN_LIST], T.DYN, list_min, True),
        F("max", "list_dyn_max", [DYN_LIST], T.DYN, list_max, True),
        # indexOf / lastIndexOf of lists and strings (env.py renames the calls; see the module docstring)
        F("__indexOf", "string_index_of_string", [T.STRING, T.STRING], T.INT, str_index_of, True),
        F("__indexOf", "string_index_of_string_int", [T.STRING, T.STRING, T.INT], T.INT, str_index_of, True),
        F("__lastIndexOf", "string_last_index_of_string", [T.STRING, T.STRING], T.INT, str_last_index_of, True),
        F("__lastIndexOf", "string_last_index_of_string_int", [T.STRING, T.STRING, T.INT], T.INT,
          str_last_index_of, True),
        # regex
        F("find", "string_find_string", [T.STRING, T.STRING], T.STRING, find, True),
        F("findAll", "string_find_all_string", [T.STRING, T.STRING], STR_LIST, find_all, True),
        F("findAll", "string_find_all_string_int", [T.STRING, T.STRING, T.INT], STR_LIST, find_all, True),
        # sets
        F("sets.contains", "list_sets_contains_list", [DYN_LIST, DYN_LIST], T.BOOL, sets_contains),
        F("sets.equivalent", "list_sets_equivalent_list", [DYN_LIST, DYN_LIST], T.BOOL, sets_equivalent),
        F("sets.intersects", "list_sets_intersects_list", [DYN_LIST, DYN_LIST], T.BOOL, sets_intersects),
        # URLs
        F("url", "string_to_url", [T.STRING], URLT, lambda s: (parse_url(s), urlm(s))[1]),
        F("isURL", "is_url_string", [T.STRING], T.BOOL, is_url),
        F("getScheme", "url_get_scheme", [URLT], T.STRING, lambda u: parse_url(u.v).scheme, True),
        F("getHost", "url_get_host", [URLT], T.STRING, lambda u: url_host(u.v), True),
        F("getHostname", "url_get_hostname", [URLT], T.STRING, lambda u: url_hostname(u.v), True),
        F("getPort", "url_get_port", [URLT], T.STRING, lambda u: url_port(u.v), True),
        F("getEscapedPath", "url_get_escaped_path", [URLT], T.STRING, lambda u: url_escaped_path(u.v), True),
        F("getQuery", "url_get_query", [URLT], T.Map(T.STRING, STR_LIST), lambda u: url_query(u.v), True),
        # IP
        F("ip", "string_to_ip", [T.STRING], IPT, lambda s: ipm(str(parse_ip(s)))),
        F("isIP", "is_ip", [T.STRING], T.BOOL, lambda s: _ok(parse_ip, s)),
        F("ip.isCanonical", "ip_is_canonical", [T.STRING], T.BOOL, ip_is_canonical),
        F("family", "ip_family", [IPT], T.INT, lambda a: ip_family(a.v), True),
        F("isUnspecified", "ip_is_unspecified", [IPT], T.BOOL, lambda a: parse_ip(a.v).is_unspecified, True),
        F("isLoopback", "ip_is_loopback", [IPT], T.BOOL, lambda a: parse_ip(a.v).is_loopback, True),
        F("isLinkLocalMulticast", "ip_is_link_local_multicast", [IPT], T.BOOL,
          lambda a: ip_is_link_local_multicast(a.v), True),
        F("isLinkLocalUnicast", "ip_is_link_local_unicast", [IPT], T.BOOL,
          lambda a: parse_ip(a.v).is_link_local and not parse_ip(a.v).is_multicast, True),
        F("isGlobalUnicast", "ip_is_global_unicast", [IPT], T.BOOL, lambda a: ip_is_global_unicast(a.v), True),
        # CIDR
        F("cidr", "string_to_cidr", [T.STRING], CIDRT, cidr_new),
        F("isCIDR", "is_cidr", [T.STRING], T.BOOL, lambda s: _ok(parse_cidr, s)),
        F("containsIP", "cidr_contains_ip_string", [CIDRT, T.STRING], T.BOOL,
          lambda c, s: cidr_contains_ip(c.v, s), True),
        F("containsIP", "cidr_contains_ip_ip", [CIDRT, IPT], T.BOOL, lambda c, a: cidr_contains_ip(c.v, a.v), True),
        F("containsCIDR", "cidr_contains_cidr_string", [CIDRT, T.STRING], T.BOOL,
          lambda c, s: cidr_contains_cidr(c.v, s), True),
        F("containsCIDR", "cidr_contains_cidr", [CIDRT, CIDRT], T.BOOL,
          lambda c, d: cidr_contains_cidr(c.v, d.v), True),
        F("ip", "cidr_ip", [CIDRT], IPT, lambda c: ipm(str(parse_cidr(c.v).ip)), True),
        F("masked", "cidr_masked", [CIDRT], CIDRT, lambda c: cidrm(str(parse_cidr(c.v).network)), True),
        F("__lite_ip_text", "ip_to_string", [IPT], T.STRING, lambda a: a.v),
        F("__lite_cidr_text", "cidr_to_string", [CIDRT], T.STRING, lambda c: c.v),
        F("prefixLength", "cidr_prefix_length", [CIDRT], T.INT, lambda c: parse_cidr(c.v).network.prefixlen, True),
        # quantity
        F("quantity", "string_to_quantity", [T.STRING], Q, lambda s: q_new(parse_q(s))),
        F("isQuantity", "is_quantity_string", [T.STRING], T.BOOL, lambda s: _ok(parse_q, s)),
        F("sign", "quantity_sign", [Q], T.INT, lambda a: q_compare(_frac(a.v), Fraction(0)), True),
        F("isInteger", "quantity_is_integer", [Q], T.BOOL, lambda a: _ok(lambda v: q_as_integer(_frac(v)), a.v),
          True),
        F("asInteger", "quantity_get_integer", [Q], T.INT, lambda a: q_as_integer(_frac(a.v)), True),
        F("asApproximateFloat", "quantity_get_float", [Q], T.DOUBLE, lambda a: float(_frac(a.v)), True),
        F("add", "quantity_add", [Q, Q], Q, lambda a, b: q_new(_frac(a.v) + _frac(b.v)), True),
        F("add", "quantity_add_int", [Q, T.INT], Q, lambda a, b: q_new(_frac(a.v) + b), True),
        F("sub", "quantity_sub", [Q, Q], Q, lambda a, b: q_new(_frac(a.v) - _frac(b.v)), True),
        F("sub", "quantity_sub_int", [Q, T.INT], Q, lambda a, b: q_new(_frac(a.v) - b), True),
        F("isLessThan", "quantity_less", [Q, Q], T.BOOL, lambda a, b: _frac(a.v) < _frac(b.v), True),
        F("isGreaterThan", "quantity_greater", [Q, Q], T.BOOL, lambda a, b: _frac(a.v) > _frac(b.v), True),
        F("compareTo", "quantity_compare", [Q, Q], T.INT, lambda a, b: q_compare(_frac(a.v), _frac(b.v)), True),
        # format
        # `validate` and `format.named` return optionals upstream: env.py rewrites calls onto these
        F("__formatValidate", "format-validate", [FMT, T.STRING], STR_LIST, lambda f, s: FORMATS[f.v](s), True),
        F("format.__known", "format-known", [T.STRING], T.BOOL, lambda n: n in FORMATS),
        F("format.__named", "format-named", [T.STRING], FMT, named),
    ]
    elem_types = (("int", T.INT), ("uint", T.UINT), ("double", T.DOUBLE), ("string", T.STRING), ("bool", T.BOOL),
                  ("bytes", T.BYTES), ("list", DYN_LIST), ("map", T.Map(T.DYN, T.DYN)), ("null", T.NULL),
                  ("timestamp", T.TIMESTAMP), ("duration", T.DURATION))
    for suffix, ty in elem_types:  # the runtime dispatches Python functions on concrete argument kinds
        fns.append(F("__indexOf", f"list_index_of_{suffix}", [DYN_LIST, ty], T.INT, index_of, True))
        fns.append(F("__lastIndexOf", f"list_last_index_of_{suffix}", [DYN_LIST, ty], T.INT, last_index_of, True))
    fns += [  # two-variable comprehensions (env.py rewrites them over these)
        F("__lite_pairs", "lite_pairs_list", [DYN_LIST], T.List(DYN_LIST), lambda xs: [[i, x] for i, x in
                                                                                      enumerate(xs)]),
        F("__lite_pairs", "lite_pairs_map", [T.Map(T.DYN, T.DYN)], T.List(DYN_LIST),
          lambda m: [[k, x] for k, x in m.items()]),
        F("__lite_to_map", "lite_to_map", [T.List(DYN_LIST)], T.Map(T.DYN, T.DYN), to_map),
        F("__lite_merge_maps", "lite_merge_maps", [T.List(T.Map(T.DYN, T.DYN))], T.Map(T.DYN, T.DYN), merge_maps),
    ]
    for name in FORMATS:
        fns.append(F(f"format.{name}", f"format.{name}", [], FMT, (lambda n: lambda: o.make(FMT, n))(name)))
    return fns
