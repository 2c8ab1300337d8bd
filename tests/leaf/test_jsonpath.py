"""`lite.jsonpath`: kubectl's JSONPath dialect, as tables of template -> output, and the same templates
cross-checked against the real kubectl's own JSONPath printer (`kubectl label --local -o jsonpath=...`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lite.jsonpath import JSONPathError, go_float, parse

OBJ: dict[str, Any] = {
    "apiVersion": "v1", "kind": "ConfigMap",
    "metadata": {"name": "x", "labels": {"app.kubernetes.io/name": "web", "tier": "front"}},
    "spec": {"list": [1, 2, 3, 4, 5], "ratio": 1.5, "big": 1e21, "whole": 100.0, "on": True,
             "nested": {"a": {"b": "deep"}, "s": "<&>"}},
    "status": {"conditions": [{"type": "Issuing", "status": "False", "n": 1},
                              {"type": "Ready", "status": "True", "n": 3, "reason": "Ok"}]},
}

CASES = [
    ("{.metadata.name}", "x"),
    ('{.status.conditions[?(@.type=="Ready")].status}', "True"),
    ("{.status.conditions[?(@.type!='Ready')].type}", "Issuing"),
    ("{.status.conditions[?(@.n>1)].type}", "Ready"),
    ("{.status.conditions[?(@.n<3)].type}", "Issuing"),
    ("{.status.conditions[?(@.n>=1)].type}", "Issuing Ready"),
    ("{.status.conditions[?(@.n<=1)].type}", "Issuing"),
    ("{.status.conditions[?(@.reason)].type}", "Ready"),
    ("{.spec.list[0]}", "1"),
    ("{.spec.list[-1]}", "5"),
    ("{.spec.list[1:3]}", "2 3"),
    ("{.spec.list[:2]}", "1 2"),
    ("{.spec.list[3:]}", "4 5"),
    ("{.spec.list[::2]}", "1 3 5"),
    ("{.spec.list[-2:]}", "4 5"),
    ("{.spec.list[*]}", "1 2 3 4 5"),
    ("{.spec.list[0,2,4]}", "1 3 5"),
    ("{.status.conditions[*].type}", "Issuing Ready"),
    ("{..b}", "deep"),
    ("{.spec.nested..b}", "deep"),
    ("{.metadata.labels.app\\.kubernetes\\.io/name}", "web"),
    ("{.metadata['name','labels.tier']}", "x front"),
    ("{.spec.nested.a}", '{"b":"deep"}'),
    ("{.spec.nested.s}", "<&>"),
    ("{.spec.nested}", '{"a":{"b":"deep"},"s":"\\u003c\\u0026\\u003e"}'),
    ("{.spec.ratio} {.spec.big} {.spec.whole} {.spec.on}", "1.5 1e+21 100 true"),
    ("{.spec.nested.*}", '{"b":"deep"} <&>'),
    ('{range .status.conditions[*]}{.type}={.status}{"\\n"}{end}', "Issuing=False\nReady=True\n"),
    ("name: {.metadata.name}!", "name: x!"),
]


@pytest.mark.parametrize(("template", "out"), CASES)
def test_render(template: str, out: str) -> None:
    assert parse(template).render(OBJ, allow_missing=True) == out


@pytest.mark.parametrize(("template", "found"), [
    ('{.status.conditions[?(@.type=="Ready")].status}', [["True"]]),
    ("{.status.missing}", [[]]),
    ("{.spec.list[9]}", [[]]),                  # out of range with missing keys allowed: nothing
    ("{.metadata.name[0]}", [[]]),              # not a list: nothing
    ("{.spec.list[1:2]}", [[2]]),
    ("{.spec.ratio}", [[1.5]]),
])
def test_find_as_the_table_convertor(template: str, found: list[list[Any]]) -> None:
    assert parse(template).find(OBJ, allow_missing=True) == found


@pytest.mark.parametrize("template", [
    "{.a", "{.a[1}", "{range .a}", "{end}", "{.a[?(@.x==)]}", "{.a[1:2:0]}", "{.a[x]}", "{#}", "{.a['b}",
])
def test_parse_errors(template: str) -> None:
    with pytest.raises(JSONPathError):
        parse(template)


def test_evaluation_errors() -> None:
    with pytest.raises(JSONPathError, match="incompatible types"):  # an integer against a float, as Go's eq
        parse("{.status.conditions[?(@.n==1.5)].type}").find(OBJ)
    with pytest.raises(JSONPathError, match="is not found"):
        parse("{.nope}").find(OBJ, allow_missing=False)


@pytest.mark.parametrize(("value", "out"), [(1.5, "1.5"), (100.0, "100"), (1e21, "1e+21"),
                                            (1e20, "100000000000000000000"), (0.0001, "0.0001"), (0.00001, "1e-05"),
                                            (-2.5e-7, "-2.5e-07")])
def test_go_float(value: float, out: str) -> None:
    assert go_float(value) == out


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
@pytest.mark.parametrize(("template", "out"), [c for c in CASES if "range" not in c[0]])
def test_same_output_as_kubectl(template: str, out: str, tmp_path: Path) -> None:
    """The real kubectl prints the same for every case (its label --local adds only a label we do not read)."""
    src = tmp_path / "obj.json"
    src.write_text(json.dumps(OBJ))
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["HOME"] = str(tmp_path)
    got = subprocess.run(["kubectl", "--kubeconfig", "/dev/null", "label", "--local", "-f", str(src), "zz=1",
                          "-o", f"jsonpath={template}"], capture_output=True, text=True, timeout=60, env=env)
    assert got.returncode == 0, got.stderr
    if template.endswith(".nested.*}"):  # Go walks a map's values in random order (reflect MapKeys)
        assert sorted(got.stdout.split(" ")) == sorted(out.split(" "))
    else:
        assert got.stdout == out
