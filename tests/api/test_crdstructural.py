"""CRD schemas' logical junctors as structural schemas allow them (upstream validateNestedValueValidation),
and the upstream CRDs checked in as fixtures, which upstream accepts, pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lite.server.api.strategies.crd import validate_crd
from lite.server.api.strategies.crdstructural import junctor_causes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
P = "spec.versions[0].schema.openAPIV3Schema"
RULE = [{"rule": "self.size() > 0"}]


def _obj(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props}


@pytest.mark.parametrize(("schema", "want"), [
    (_obj({"a": {"type": "string", "anyOf": [{"pattern": "^x"}, {"maxLength": 3}]}}), []),
    (_obj({"a": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}}), []),
    (_obj({"a": {"x-kubernetes-int-or-string": True,
                 "allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"pattern": "^[0-9]+%?$"}]}}), []),
    (_obj({"a": {"type": "string", "allOf": [{"x-kubernetes-validations": RULE}]}}),
     [(f"{P}.properties[a].allOf[0].x-kubernetes-validations", "Forbidden: must be empty to be structural")]),
    (_obj({"a": {"type": "object", "oneOf": [{"properties": {"b": {"x-kubernetes-validations": RULE}}}]}}),
     [(f"{P}.properties[a].oneOf[0].properties[b].x-kubernetes-validations",
       "Forbidden: must be empty to be structural")]),
    (_obj({"a": {"type": "string", "not": {"type": "string", "nullable": True}}}),
     [(f"{P}.properties[a].not.type", "Forbidden: must be empty to be structural"),
      (f"{P}.properties[a].not.nullable", "Forbidden: must be false to be structural")]),
    (_obj({"a": {"type": "object", "anyOf": [{"additionalProperties": {"type": "string"}, "default": 0,
                                              "description": "d"}]}}),
     [(f"{P}.properties[a].anyOf[0].additionalProperties", "Forbidden: must be undefined to be structural"),
      (f"{P}.properties[a].anyOf[0].default", "Forbidden: must be undefined to be structural"),
      (f"{P}.properties[a].anyOf[0].description", "Forbidden: must be empty to be structural")]),
    ({"type": "object", "anyOf": [{"properties": {"metadata": {"required": ["name"]}}}]},
     [(f"{P}.anyOf[0].properties[metadata]", "Forbidden: must not be specified in a nested context")]),
    (_obj({"l": {"type": "array", "items": {"type": "object", "allOf": [{"x-kubernetes-list-type": "set"}]}}}),
     [(f"{P}.properties[l].items.allOf[0].x-kubernetes-list-type", "Forbidden: must be undefined to be structural")]),
])
def test_junctors(schema: dict[str, Any], want: list[tuple[str, str]]) -> None:
    assert [(c.field, c.message) for c in junctor_causes(schema, P)] == want


def _crds(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "CustomResourceDefinition"]


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*/*/*.yaml")), ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_upstream_crds_have_structural_junctors(path: Path) -> None:
    for crd in _crds(path):
        for i, v in enumerate(crd["spec"]["versions"]):
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
            assert junctor_causes(schema, f"spec.versions[{i}]") == [], crd["metadata"]["name"]


def test_a_crd_with_rules_in_a_junctor_is_refused() -> None:
    """Before, lite stored such a CRD and never evaluated the rule (a rule silently ignored)."""
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "things.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"plural": "things", "singular": "thing", "kind": "Thing", "listKind": "ThingList"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": _obj(
                        {"spec": {"type": "object", "properties": {"n": {"type": "string"}},
                                  "anyOf": [{"x-kubernetes-validations": RULE}]}})}}]}}
    causes = validate_crd(crd)
    assert [(c.field, c.message) for c in causes] == [
        (f"{P}.properties[spec].anyOf[0].x-kubernetes-validations", "Forbidden: must be empty to be structural")]
