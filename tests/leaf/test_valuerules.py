"""Table tests of the value rules shared by the per-kind validators (upstream util/validation semantics)."""

from __future__ import annotations

from typing import Any

import pytest

from lite import valuerules as v


@pytest.mark.parametrize(("name", "errors"), [
    ("http", []), ("a-b-c", []), ("web8080", []), ("x" * 15, []),
    ("x" * 16, ["must be no more than 15 characters"]),
    ("HTTP", ["must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
              "must contain at least one letter (a-z)"]),
    ("8080", ["must contain at least one letter (a-z)"]),
    ("a--b", ["must not contain consecutive hyphens"]),
    ("-ab", ["must not begin or end with a hyphen"]),
    ("ab_c", ["must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"]),
])
def test_port_names(name: str, errors: list[str]) -> None:
    assert v.is_valid_port_name(name) == errors


@pytest.mark.parametrize(("port", "ok"), [(1, True), (65535, True), (0, False), (65536, False), (-1, False),
                                          (True, False), ("80", False), (None, False)])
def test_port_numbers(port: Any, ok: bool) -> None:
    assert (v.is_valid_port_num(port) == []) is ok


@pytest.mark.parametrize(("name", "ok"), [
    ("PATH", True), ("my.var-1", True), ("a b", True), ("1abc", True), ("~", True),
    ("", False), ("A=B", False), ("A\nB", False), ("é", False), ("\x7f", False),
])
def test_env_var_names(name: str, ok: bool) -> None:
    assert (v.is_env_var_name(name) == []) is ok


@pytest.mark.parametrize(("key", "errors"), [
    ("a.conf", []), ("KEY_1", []), (".hidden", []), ("a..b", []),
    (".", ["must not be '.'"]), ("..", ["must not be '..'"]), ("..data", ["must not start with '..'"]),
    ("a/b", ["a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  "
             "or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"]),
    ("k" * 254, ["must be no more than 253 characters"]),
])
def test_config_map_keys(key: str, errors: list[str]) -> None:
    assert v.is_config_map_key(key) == errors


@pytest.mark.parametrize(("value", "messages"), [
    ("a/b", []), ("a..b", []), (".x", []),
    ("/abs", ["must be a relative path"]),
    ("../x", ["must not contain '..'"]),
    ("a/../../x", ["must not contain '..'"]),
    ("..", ["must not contain '..'", "must not start with '..'"]),  # upstream reports both
    ("..data", ["must not start with '..'"]),
    ("/../x", ["must be a relative path", "must not contain '..'"]),
])
def test_local_paths(value: str, messages: list[str]) -> None:
    got = [c.message.split(": ", 2)[-1] for c in v.local_path_causes(value, "p")]
    assert got == messages
    assert all(c.field == "p" and c.reason == "FieldValueInvalid" for c in v.local_path_causes(value, "p"))


@pytest.mark.parametrize(("mode", "ok"), [(None, True), (0, True), (0o644, True), (0o777, True), (0o1000, False),
                                          (0o4755, False), (-1, False), ("0644", False), (True, False)])
def test_file_modes(mode: Any, ok: bool) -> None:
    causes = v.file_mode_causes(mode, "spec.volumes[0].configMap.defaultMode")
    assert (causes == []) is ok
    if not ok:
        assert causes[0].message.endswith("must be a number between 0 and 0777 (octal), both inclusive")


@pytest.mark.parametrize(("value", "ok"), [(None, True), (0, True), (2147483647, True), (-1, False),
                                           (2147483648, False), ("0", False)])
def test_ids(value: Any, ok: bool) -> None:
    assert (v.id_causes(value, "runAsUser") == []) is ok


@pytest.mark.parametrize(("port", "field_ok"), [(80, True), ("http", True), (0, False), ("", False),
                                                ("HTTP_PORT", False), (1.5, False)])
def test_port_num_or_name(port: Any, field_ok: bool) -> None:
    assert (v.port_num_or_name_causes(port, "port") == []) is field_ok


@pytest.mark.parametrize(("ip", "ok"), [("10.0.0.1", True), ("::1", True), ("999.0.0.1", False), ("host", False)])
def test_ips(ip: str, ok: bool) -> None:
    assert (v.is_valid_ip(ip) == []) is ok
