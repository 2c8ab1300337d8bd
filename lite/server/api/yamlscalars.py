"""How go-yaml v2 (under upstream's sigs.k8s.io/yaml) reads a plain YAML scalar: null, bool, int, float or text.

Role: PyYAML follows YAML 1.1 in its own way; upstream's reading differs in ways a manifest can hit:
`y`/`n` are booleans, `0o17` and `0x1F` are integers (Go's `strconv.ParseInt` with base 0, underscores
dropped), `1e3` is a float, `1:20` (sexagesimal) is text, integers beyond 64 bits become floats, and a float
that overflows stays text. `resolve(text)` names the tag go-yaml gives a plain scalar and `parse_int`,
`parse_float`, `parse_bool` construct the value (also for explicit `!!int` etc. tags).

Invariants: pure functions, no state.
"""

from __future__ import annotations

import math
import re

NULL = "tag:yaml.org,2002:null"
BOOL = "tag:yaml.org,2002:bool"
INT = "tag:yaml.org,2002:int"
FLOAT = "tag:yaml.org,2002:float"
STR = "tag:yaml.org,2002:str"

_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_TRUE = frozenset({"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"})
_FALSE = frozenset({"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"})
_INF = frozenset({".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"})
_NEG_INF = frozenset({"-.inf", "-.Inf", "-.INF"})
_NAN = frozenset({".nan", ".NaN", ".NAN"})
_GO_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?", re.ASCII)
_DIGITS = {16: "0123456789abcdef", 10: "0123456789", 8: "01234567", 2: "01"}
_MIN_INT64, _MAX_UINT64 = -(1 << 63), (1 << 64) - 1


def parse_int(text: str) -> int | None:
    """go-yaml's integer: `strconv.ParseInt(s, 0, 64)`, else `ParseUint`, after dropping underscores."""
    plain = text.replace("_", "")
    sign, body = ("-" if plain[:1] == "-" else ""), plain.lstrip("+-") if plain[:1] in "+-" else plain
    if plain[:1] in "+-" and body[:1] in "+-":
        return None
    low = body.lower()
    if low[:2] in ("0x", "0o", "0b"):
        base, digits = {"x": 16, "o": 8, "b": 2}[low[1]], low[2:]
    elif len(low) > 1 and low[0] == "0":
        base, digits = 8, low[1:]
    else:
        base, digits = 10, low
    if not digits or any(ch not in _DIGITS[base] for ch in digits):
        return None
    value = int(sign + digits, base)
    return value if _MIN_INT64 <= value <= _MAX_UINT64 else None


def parse_float(text: str) -> float | None:
    """go-yaml's float: the special spellings, or a YAML-style decimal that `ParseFloat` takes in range."""
    if text in _INF:
        return math.inf
    if text in _NEG_INF:
        return -math.inf
    if text in _NAN:
        return math.nan
    plain = text.replace("_", "")
    if not _GO_FLOAT.fullmatch(plain):
        return None
    value = float(plain)
    return None if math.isinf(value) else value


def parse_bool(text: str) -> bool | None:
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None


def resolve(text: str) -> str | None:
    """The tag go-yaml gives the plain scalar `text` (None: leave it to the YAML library, e.g. `<<`)."""
    if text in _NULLS:
        return NULL
    if text in _TRUE or text in _FALSE:
        return BOOL
    if text == "<<":
        return None
    if text[:1] in "+-.0123456789":
        if parse_int(text) is not None:
            return INT
        if parse_float(text) is not None:
            return FLOAT
    return STR
