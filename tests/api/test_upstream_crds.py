"""Every CustomResourceDefinition checked in under tests/fixtures/ (upstream releases, see each SOURCE.md) passes
lite's CRD validation as it passes upstream's: names, versions, structural junctors, and every CEL rule compiles
within upstream's estimated cost limits. Pure and cheap, so a false refusal (a CEL function, a cost estimate, a
schema construct lite gets wrong) shows here before any server starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lite.server.api.strategies import crcel
from lite.server.api.strategies.crd import default_crd, validate_crd

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _rules(schema: Any) -> int:
    if isinstance(schema, dict):
        own = schema.get("x-kubernetes-validations")
        return (len(own) if isinstance(own, list) else 0) + sum(
            _rules(v) for k, v in schema.items() if k != "x-kubernetes-validations")
    if isinstance(schema, list):
        return sum(_rules(v) for v in schema)
    return 0


def _crds(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)
            and d.get("kind") == "CustomResourceDefinition"]


FILES = sorted(p for p in FIXTURES.rglob("*.yaml") if "CustomResourceDefinition" in p.read_text())


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(FIXTURES)) for p in FILES])
def test_upstream_crds_are_accepted_and_their_rules_compile(path: Path) -> None:
    crds = _crds(path)
    assert crds
    for crd in crds:
        default_crd(crd)
        causes = validate_crd(crd)
        assert causes == [], (crd["metadata"]["name"], [f"{c.field}: {c.message}" for c in causes][:5])
        for version in crd["spec"]["versions"]:
            schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
            node = crcel.build(schema)
            assert (node is None) == (_rules(schema) == 0)


@pytest.mark.parametrize(("project", "crds", "rules"), [
    ("istio/1.30.3", 15, 362), ("flux/v2.9.4", 11, 21), ("gateway-api/v1.6.1", 10, 295),
])
def test_the_sweep_covers_the_rules_it_claims(project: str, crds: int, rules: int) -> None:
    found = [c for p in sorted((FIXTURES / project).rglob("*.yaml")) for c in _crds(p)]
    assert (len(found), sum(_rules(c["spec"]) for c in found)) == (crds, rules)
