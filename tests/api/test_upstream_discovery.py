"""lite's discovery against the resources a Kubernetes 1.32 kube-apiserver serves by default
(tests/fixtures/discovery/upstream_1_32_resources.py, with its sources): every group-version and resource,
scope, kind, verbs, shortNames and categories, in the legacy documents and the aggregated ones.

A difference is allowed only where it is listed below with its reason, and the README says so too."""

from __future__ import annotations

from typing import Any

import pytest

from lite.kinds import KindRegistry
from lite.server.api.discovery import Discovery
from tests.fixtures.discovery.upstream_1_32_resources import PREFERRED, RESOURCES, SUBRESOURCES

Key = tuple[str, str]  # (groupVersion, resource)
Entry = tuple[str, bool, tuple[str, ...], tuple[str, ...], tuple[str, ...]]  # kind, namespaced, verbs, short, cats

RO = ("get", "list", "watch")
# Differences lite keeps on purpose: (why, what lite serves instead; None = not served).
KNOWN: dict[Key, tuple[str, Entry | None]] = {
    ("flowcontrol.apiserver.k8s.io/v1", "flowschemas"):
        ("lite has no API Priority and Fairness: upstream's mandatory FlowSchemas are served read-only",
         ("FlowSchema", False, RO, (), ())),
    ("flowcontrol.apiserver.k8s.io/v1", "prioritylevelconfigurations"):
        ("lite has no API Priority and Fairness: upstream's mandatory levels are served read-only",
         ("PriorityLevelConfiguration", False, RO, (), ())),
}
# Served by lite, not by a bare kube-apiserver: the resource metrics API (upstream: metrics-server).
EXTRA = {("metrics.k8s.io/v1beta1", "nodes"), ("metrics.k8s.io/v1beta1", "pods")}


def upstream() -> dict[Key, Entry]:
    return {(gv, res): (kind, ns, tuple(sorted(verbs)), short, cats)
            for gv, res, kind, ns, verbs, short, cats in RESOURCES}


def legacy(d: Discovery) -> dict[Key, Entry]:
    out: dict[Key, Entry] = {}
    gvs = ["v1"] + [v["groupVersion"] for g in d.group_names() for v in (d.group(g) or {})["versions"]]
    for gv in gvs:
        for r in (d.resource_list(gv) or {})["resources"]:
            if "/" not in r["name"]:
                out[(gv, r["name"])] = (r["kind"], r["namespaced"], tuple(sorted(r["verbs"])),
                                        tuple(r.get("shortNames", ())), tuple(r.get("categories", ())))
    return out


def aggregated(d: Discovery) -> dict[Key, Entry]:
    out: dict[Key, Entry] = {}
    groups: list[dict[str, Any]] = d.api_v2()["items"] + d.apis_v2()["items"]
    for g in groups:
        name = g["metadata"].get("name", "")
        for v in g["versions"]:
            gv = f"{name}/{v['version']}" if name else v["version"]
            for r in v["resources"]:
                out[(gv, r["resource"])] = (r["responseKind"]["kind"], r["scope"] == "Namespaced",
                                            tuple(sorted(r["verbs"])), tuple(r.get("shortNames", ())),
                                            tuple(r.get("categories", ())))
    return out


def differences(served: dict[Key, Entry]) -> list[str]:
    want = upstream()
    out = []
    for key in sorted(set(want) | set(served)):
        got, up = served.get(key), want.get(key)
        if got == up or (key in EXTRA and up is None):
            continue
        if key in KNOWN and got == KNOWN[key][1]:
            continue
        out.append(f"{key}: upstream {up}, lite {got}")
    return out


@pytest.mark.parametrize("view", [legacy, aggregated], ids=["legacy", "aggregated"])
def test_discovery_matches_upstream_1_32_defaults(view: Any) -> None:
    assert differences(view(Discovery(KindRegistry()))) == []


def test_group_versions_and_preferred_versions_match_upstream() -> None:
    d = Discovery(KindRegistry())
    want = {gv for gv, *_ in RESOURCES} | {"metrics.k8s.io/v1beta1"}
    served = {"v1"} | {v["groupVersion"] for g in d.group_names() for v in (d.group(g) or {})["versions"]}
    assert served == want
    for group, version in PREFERRED.items():
        assert (d.group(group) or {})["preferredVersion"]["version"] == version


def test_subresources_match_upstream() -> None:
    d = Discovery(KindRegistry())
    served: dict[Key, tuple[str, ...]] = {}
    gvs = ["v1"] + [v["groupVersion"] for g in d.group_names() for v in (d.group(g) or {})["versions"]]
    for gv in gvs:
        for r in (d.resource_list(gv) or {})["resources"]:
            parent, _, sub = r["name"].partition("/")
            if sub:
                served[(gv, parent)] = tuple(sorted((*served.get((gv, parent), ()), sub)))
    # known: read-only flowcontrol objects have no writable status; ValidatingAdmissionPolicy is item 5
    known = set(KNOWN)
    wrong = {k: (SUBRESOURCES.get(k), served.get(k)) for k in set(SUBRESOURCES) | set(served)
             if SUBRESOURCES.get(k) != served.get(k) and k not in known}
    assert wrong == {}


def test_local_apiservices_rank_versions_as_upstream() -> None:
    from lite.server.bootstrap import local_apiservice

    def priority(group: str, version: str) -> tuple[int, int]:
        spec = local_apiservice(group, version)["spec"]
        return spec["groupPriorityMinimum"], spec["versionPriority"]

    assert priority("autoscaling", "v2") == (17500, 30) and priority("autoscaling", "v1") == (17500, 15)
    assert priority("events.k8s.io", "v1") == (17750, 15)
