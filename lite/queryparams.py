"""Query-parameter scalars as upstream's ParameterCodec decodes them (pure; shared by the API server and the
node-local API of the agent).

- integers are `strconv.ParseInt(s, 10, 64)`: ASCII digits with an optional sign, nothing else; failure is
  400 BadRequest with Go's message;
- booleans: an absent parameter, `0` and `false` (any case) are false, every other value (`maybe`, the empty
  string) is true.

Invariants: no I/O, no state; every refusal is an `ApiError` with upstream's code and reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from lite import errors

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1
_SIGNED = re.compile(r"[+-]?[0-9]+", re.ASCII)
_UNSIGNED = re.compile(r"[0-9]+", re.ASCII)


def go_quote(s: str) -> str:
    """Go's `%q` of a string, close enough for messages: double quotes, escapes for quotes and controls."""
    out = []
    for ch in s:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def parse_int64(value: str, func: str = "ParseInt") -> int:
    """`strconv.ParseInt(value, 10, 64)`; raises ValueError with Go's message."""
    if not _SIGNED.fullmatch(value):
        raise ValueError(f"strconv.{func}: parsing {go_quote(value)}: invalid syntax")
    n = int(value)
    if not INT64_MIN <= n <= INT64_MAX:
        raise ValueError(f"strconv.{func}: parsing {go_quote(value)}: value out of range")
    return n


def parse_uint64(value: str) -> int:
    """`strconv.ParseUint(value, 10, 64)`; raises ValueError with Go's message."""
    if not _UNSIGNED.fullmatch(value):
        raise ValueError(f"strconv.ParseUint: parsing {go_quote(value)}: invalid syntax")
    n = int(value)
    if n > UINT64_MAX:
        raise ValueError(f"strconv.ParseUint: parsing {go_quote(value)}: value out of range")
    return n


def query_int(query: Mapping[str, str], name: str) -> int | None:
    """An int64 query parameter (None when absent); 400 BadRequest when it does not parse."""
    value = query.get(name)
    if value is None:
        return None
    try:
        return parse_int64(value)
    except ValueError as e:
        raise errors.bad_request(str(e)) from None


def query_bool(query: Mapping[str, str], name: str) -> bool:
    """Upstream Convert_Slice_string_To_bool: only absent, "0" and "false" (any case) are false."""
    value = query.get(name)
    if value is None:
        return False
    return not (value == "0" or value.lower() == "false")
