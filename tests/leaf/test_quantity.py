"""Quantity parsing and formatting against values the Kubernetes apimachinery produces."""

from __future__ import annotations

from fractions import Fraction

import pytest

from lite.quantity import canonical, format_nano, format_quantity, parse_nano, parse_quantity, to_int, to_milli


@pytest.mark.parametrize(("text", "value"), [
    ("0", Fraction(0)),
    ("1", Fraction(1)),
    ("100m", Fraction(1, 10)),
    ("1.5", Fraction(3, 2)),
    ("2Gi", Fraction(2 * 2**30)),
    ("500Mi", Fraction(500 * 2**20)),
    ("1k", Fraction(1000)),
    ("1e3", Fraction(1000)),
    ("1E3", Fraction(1000)),
    ("1e-3", Fraction(1, 1000)),
    ("1.5Gi", Fraction(3 * 2**29)),
    ("0.5", Fraction(1, 2)),
    (".5", Fraction(1, 2)),
    ("5.", Fraction(5)),
    ("-100m", Fraction(-1, 10)),
    ("+3", Fraction(3)),
    ("10n", Fraction(10, 10**9)),
    ("7u", Fraction(7, 10**6)),
    ("1M", Fraction(10**6)),
    ("1G", Fraction(10**9)),
    ("1T", Fraction(10**12)),
    ("1P", Fraction(10**15)),
    ("1E", Fraction(10**18)),
    ("1Ki", Fraction(1024)),
    ("1Ti", Fraction(2**40)),
    ("1Ei", Fraction(2**60)),
    ("0.1n", Fraction(1, 10**9)),  # rounded up to nano
    ("1.0000000001", Fraction(1_000_000_001, 10**9)),
])
def test_parse(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value
    assert parse_nano(text) == value * 10**9  # the integer path agrees exactly


@pytest.mark.parametrize("text", [
    "", " 1", "1 ", "abc", "1K", "1kb", "1gi", "1.2.3", "--1", "1Gi1", "e3", "1e", "Mi", ".", "1..0", "1i",
])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)
    with pytest.raises(ValueError):
        parse_nano(text)


@pytest.mark.parametrize(("text", "milli", "whole"), [
    ("100m", 100, 1),
    ("1", 1000, 1),
    ("1.5", 1500, 2),
    ("0.0001", 1, 1),
    ("250m", 250, 1),
    ("2Gi", 2 * 2**30 * 1000, 2 * 2**30),
    ("1n", 1, 1),
    ("0", 0, 0),
])
def test_milli_and_int_round_up(text: str, milli: int, whole: int) -> None:
    assert to_milli(text) == milli
    assert to_int(text) == whole


@pytest.mark.parametrize(("text", "canon"), [
    ("1000", "1k"),
    ("1.5", "1500m"),
    ("0.1", "100m"),
    ("1000m", "1"),
    ("1024Mi", "1Gi"),
    ("1.5Gi", "1536Mi"),
    ("512Ki", "512Ki"),
    ("2048", "2048"),
    ("1500000", "1500k"),
    ("0", "0"),
    ("100m", "100m"),
    ("0.000001", "1u"),
    ("1e6", "1e6"),
    ("1e3", "1e3"),
    ("1500e0", "1500"),
    ("1.5e3", "1500"),
    ("100e-3", "100e-3"),
    ("0.1e0", "100e-3"),
    ("2E", "2E"),
    ("-1.5", "-1500m"),
    ("0.5Ki", "512"),
])
def test_canonical(text: str, canon: str) -> None:
    assert canonical(text) == canon


def test_format_round_trips() -> None:
    for v in (Fraction(1, 3), Fraction(12345, 7), Fraction(2**35), Fraction(-5, 2)):
        text = format_quantity(v)
        assert parse_quantity(text) == parse_quantity(format_quantity(parse_quantity(text)))
    assert format_quantity(Fraction(1, 3)) == "333333334n"
    assert format_quantity(3 * 2**30, binary=True) == "3Gi"
    assert format_quantity(100, binary=True) == "100"


@pytest.mark.parametrize("nano", [
    0, 1, 10, 999, 1000, 333_000_000, 5 * 10**8, 10**9, 1_500_000_000, 123_456_789_123, 1024 * 10**9,
    1023 * 10**9, 1536 * 2**20 * 10**9, 2**40 * 10**9, 100 * 2**40 * 10**9, 10**18, 7 * 10**21, 10**27, 10**30,
    123 * 10**27, 2**60 * 10**9, -1, -5 * 10**8, -2048 * 10**9,
])
@pytest.mark.parametrize("binary", [False, True])
def test_format_nano_is_format_quantity(nano: int, binary: bool) -> None:
    assert format_nano(nano, binary=binary) == format_quantity(Fraction(nano, 10**9), binary=binary)
