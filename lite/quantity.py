"""Kubernetes resource quantities (`100m`, `2Gi`, `1e3`) as exact `Fraction`s.

Role: parse the quantity strings found in resource requests/limits, capacities and LimitRanges, and format
values back in the canonical form the API server writes.

Invariants:
- Parsing never goes through floats: the result is an exact `Fraction`, rounded *up* to a multiple of 1n
  (10^-9), as the API server does for values with more precision than nano units.
- `format_quantity` writes the canonical form: the largest suffix whose mantissa is an integer (binary
  suffixes only when asked for and exactly representable, else decimal SI), so parse(format(x)) == x.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

_BINARY: dict[str, int] = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: dict[str, int] = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15,
                            "E": 18}
# Upstream grammar: sign, digits with at most one dot (at least one digit), then a suffix.
_RE = re.compile(r"^([+-]?)([0-9]+\.?[0-9]*|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_NANO = Fraction(1, 10**9)


def parse_quantity(s: str) -> Fraction:
    """Parse a quantity string exactly; raises ValueError on anything upstream would reject."""
    if not isinstance(s, str):
        raise ValueError(f"quantity must be a string, not {type(s).__name__}")
    return _parse_str(s)


# A pure function of an immutable string to an immutable Fraction, and the same few strings ("100m", "64Mi")
# are parsed about twelve times per pod create (type check, validation, QoS, LimitRanger, quota): a bounded
# memo makes the repeats a dict lookup. It holds no state anything could observe.
@functools.lru_cache(maxsize=1024)
def _parse_str(s: str) -> Fraction:
    fast = _parse_simple(s)
    if fast is not None:
        return fast
    m = _RE.match(s.strip()) if s == s.strip() else None
    if m is None:
        raise ValueError(f"quantities must match the regular expression "
                         f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {s!r}")
    sign, number, suffix = m.group(1), m.group(2), m.group(3) or ""
    value = Fraction(number)
    if suffix in _BINARY:
        value *= _BINARY[suffix]
    elif len(suffix) > 1:  # an exponent; a lone "E" is the exa suffix
        exp = int(suffix[1:])
        if abs(exp) > 1000:
            raise ValueError(f"quantity exponent out of range: {s!r}")
        value *= Fraction(10) ** exp
    else:
        value *= Fraction(10) ** _DECIMAL[suffix]
    value = math.ceil(value / _NANO) * _NANO
    return -value if sign == "-" else value


def _parse_simple(s: str) -> Fraction | None:
    """The common forms (`128Mi`, `500m`, `2`, `1G`) without the regex and Fraction(str): ~10x faster.

    Only unsigned integer mantissas; every result is a whole multiple of 1n, so no rounding is needed.
    Anything else returns None and takes the general path.
    """
    digits = s.rstrip("KMGTPEkmuni")  # the suffix letters, as a set
    suffix = s[len(digits):]
    if not digits.isdigit() or not digits.isascii():
        return None
    if suffix in _BINARY:
        return Fraction(int(digits) * _BINARY[suffix])
    exp = _DECIMAL.get(suffix)
    if exp is None:
        return None
    if exp >= 0:
        return Fraction(int(digits) * 10**exp)
    return Fraction(int(digits), 10**-exp)


NANO = 10**9


def parse_nano(s: str) -> int:
    """`parse_quantity(s)` in nano-units (an exact integer: parsing already rounds up to 1n); the common
    forms take an integer-only path. Raises ValueError as `parse_quantity` does."""
    digits = s.rstrip("KMGTPEkmuni") if isinstance(s, str) else ""
    if digits and digits.isdigit() and digits.isascii():
        suffix = s[len(digits):]
        if suffix in _BINARY:
            return int(digits) * _BINARY[suffix] * NANO
        exp = _DECIMAL.get(suffix)
        if exp is not None:
            return int(digits) * int(10 ** (exp + 9))
    value = parse_quantity(s)
    return value.numerator * (NANO // value.denominator)


def format_nano(n: int, *, binary: bool = False) -> str:
    """`format_quantity(Fraction(n, 10**9), binary=binary)` with integer arithmetic only."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    whole, frac = divmod(n, NANO)
    if binary and frac == 0 and whole >= 1024:
        for suffix, mult in reversed(_BINARY.items()):
            if whole % mult == 0:
                return f"{sign}{whole // mult}{suffix}"
    if binary and frac == 0:
        return f"{sign}{whole}"
    if n == 0:
        return "0"
    exp = -9  # the largest power of ten dividing n (in nano-units), capped at E
    while exp < 18 and n % 10 == 0:
        n //= 10
        exp += 1
    # suffixes step by 3 from n (-9) to E (18): move down to a multiple of 3
    shift = (exp + 9) % 3
    mantissa, exp = n * 10**shift, exp - shift
    suffix = next(k for k, v in _DECIMAL.items() if v == exp)
    return f"{sign}{mantissa}{suffix}"


def to_milli(q: str | Fraction | int) -> int:
    """The value in thousandths, rounded up (as `Quantity.MilliValue`)."""
    return math.ceil(_value(q) * 1000)


def to_int(q: str | Fraction | int) -> int:
    """The value as an integer, rounded up (as `Quantity.Value`, e.g. bytes)."""
    return math.ceil(_value(q))


def _value(q: str | Fraction | int) -> Fraction:
    return parse_quantity(q) if isinstance(q, str) else Fraction(q)


def format_quantity(q: Fraction | int, *, binary: bool = False, exponent: bool = False) -> str:
    """Canonical string of a value in one of the three upstream formats: decimal SI (default), binary SI
    (`binary`: Ki/Mi/... when the value is a whole multiple of 1024) or decimal exponent (`exponent`: `1e3`)."""
    value = Fraction(q)
    sign = "-" if value < 0 else ""
    value = abs(value)
    if binary and value.denominator == 1 and value >= 1024:
        for suffix, mult in reversed(_BINARY.items()):
            if value % mult == 0:
                return f"{sign}{value // mult}{suffix}"
    if binary and value.denominator == 1:
        return f"{sign}{value.numerator}"
    value = math.ceil(value / _NANO) * _NANO  # nano is the finest unit upstream keeps
    if value == 0:
        return "0"
    for suffix in ("E", "P", "T", "G", "M", "k", "", "m", "u", "n"):
        exp = _DECIMAL[suffix]
        scaled = value / Fraction(10) ** exp
        if scaled.denominator == 1:
            if exponent:
                return f"{sign}{scaled.numerator}" + (f"e{exp}" if exp else "")
            return f"{sign}{scaled.numerator}{suffix}"
    raise AssertionError("unreachable: every value rounded to nano has an integer nano mantissa")


def canonical(s: str) -> str:
    """Re-format a quantity string canonically in its own format (binary if it used Ki/Mi/..., decimal
    exponent if it used `e`), as the API server does when it stores a quantity."""
    return format_quantity(parse_quantity(s), binary=any(b in s for b in _BINARY),
                           exponent="e" in s.lower() and s[-1:] != "E")
