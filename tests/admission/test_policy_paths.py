"""ValidatingAdmissionPolicy: the plain path (one CEL conjunction for the plain policies) decides exactly as the exact
path (every policy alone), over a real store and registry; and `plain_elements` (pure) rewrites as documented."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lite.errors import ApiError
from lite.kinds import Kind, KindRegistry
from lite.server.admission import build_admission
from lite.server.admission.namespaces import NamespaceLabels
from lite.server.admission.policy.celenv import AuthzDecision, PolicyEnv
from lite.server.admission.policy.plain import bind_once, plain_elements
from lite.server.admission.policy.plugin import PolicyAdmission
from lite.server.api import admissionwarnings
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.api.strategies.base import Admission
from lite.server.store import Store

GROUP = "admissionregistration.k8s.io"
RULES = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]

POLICIES: list[dict[str, Any]] = [
    {"validations": [{"expression": "object.data.size() < 3"}]},
    {"validations": [{"expression": "!('bad' in object.data)", "messageExpression": "'bad in ' + object.metadata.name",
                      "reason": "Forbidden"}]},
    {"variables": [{"name": "n", "expression": "object.data.size()"},
                   {"name": "twice", "expression": "variables.n * 2"}],
     "validations": [{"expression": "variables.twice < 8", "message": "too many keys"}]},
    {"matchConditions": [{"name": "labelled", "expression": "has(object.metadata.labels) && "
                                                            "'strict' in object.metadata.labels"}],
     "validations": [{"expression": "object.data.all(k, k.size() < 4)"}]},
    # errors only on objects with data.ign (a string has no field): ignored
    {"failurePolicy": "Ignore", "validations": [{"expression": "!has(object.data.ign) || object.data.ign.x == 1"}]},
    {"validations": [{"expression": "!has(object.data.boom) || object.data.boom.nope == 1"}]},  # errors on boom
    # a condition that errors (labels without `mode`): Fail refuses, though the validation would pass
    {"matchConditions": [{"name": "mode", "expression": "has(object.metadata.labels) && "
                                                        "object.metadata.labels.mode == 'x'"},
                         {"name": "not-quiet", "expression": "!('quiet' in object.data)"}],
     "validations": [{"expression": "true"}]},
    # the plain path converts only what its list reads (lite.cel.projection): elements that `filter` lets
    # through are read whole, so `has(o.controller)` sees the field (without ownerReferences: an error, ignored)
    {"failurePolicy": "Ignore", "validations": [{
        "expression": "object.metadata.ownerReferences.filter(o, o.kind == 'Owner').all(o, !has(o.controller))"}]},
]

OBJECTS: list[dict[str, Any]] = [
    {"data": {"a": "1"}, "metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Other", "name": "o",
                                                           "uid": "u0", "controller": True}]}},
    {"data": {"a": "1", "b": "2", "c": "3"}},
    {"data": {"bad": "1"}},
    {"data": {"a": "1", "b": "2", "c": "3", "d": "4"}},
    {"data": {"long-key": "1"}, "metadata": {"labels": {"strict": "yes"}}},
    {"data": {"long-key": "1"}},
    {"data": {"boom": "1"}},
    {"data": {"a": "1"}, "metadata": {"labels": {"other": "1"}}},
    {"data": {"ign": "1"}},
    {"data": {"quiet": "1"}, "metadata": {"labels": {"other": "1"}}},  # one condition false, one error: skipped
    {"data": {"a": "1"}, "metadata": {"ownerReferences": [
        {"apiVersion": "v1", "kind": "Owner", "name": "o", "uid": "u1", "controller": True}]}},
]


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[Resources, KindRegistry, list[tuple[str, Any]]]]:
    store = await Store.open(str(tmp_path / "lite.db"))
    try:
        kinds = KindRegistry()
        strategies = default_strategies()
        resources = Resources(store, kinds, strategies)
        tasks = build_admission(resources, kinds, strategies, enable=frozenset({"ValidatingAdmissionPolicy"}))
        await resources.start()
        async with asyncio.TaskGroup() as tg:
            running = [tg.create_task(run()) for _, run in tasks.background]
            yield resources, kinds, tasks.background
            for t in running:
                t.cancel()
    finally:
        await store.close()


def kind(kinds: KindRegistry, group: str, plural: str) -> Kind:
    k = kinds.by_resource(group, "v1", plural)
    assert k is not None
    return k


async def outcome(plugin: PolicyAdmission, adm: Admission) -> tuple[str, list[str]]:
    warnings = admissionwarnings.begin()
    try:
        await plugin.validate(adm)
        return "", list(warnings)
    except ApiError as e:
        return f"{e.code} {e.reason} {e.message}", list(warnings)


async def test_plain_and_exact_paths_agree(stack: tuple[Resources, KindRegistry, Any]) -> None:
    r, kinds, _ = stack
    for i, spec in enumerate(POLICIES):
        await r.create(kind(kinds, GROUP, "validatingadmissionpolicies"), "", {
            "metadata": {"name": f"p{i}"}, "spec": {"matchConstraints": {"resourceRules": RULES}, **spec}})
        await r.create(kind(kinds, GROUP, "validatingadmissionpolicybindings"), "", {
            "metadata": {"name": f"b{i}"}, "spec": {"policyName": f"p{i}", "validationActions":
                                                    ["Warn"] if i == 0 else ["Deny"]}})
    namespaces = NamespaceLabels(r, r.core_kind("namespaces"))
    plain = PolicyAdmission(r, kinds, namespaces, None)
    exact = PolicyAdmission(r, kinds, namespaces, None, plain=False)
    async with asyncio.TaskGroup() as tg:
        running = [tg.create_task(p.run()) for p in (plain, exact)]
        for p in (plain, exact):
            await p.policies.wait_synced()
            await p.bindings.wait_synced()
        cm = kind(kinds, "", "configmaps")
        seen = set()
        for j, body in enumerate(OBJECTS):
            obj = {"apiVersion": "v1", "kind": "ConfigMap", **body,
                   "metadata": {"name": f"c{j}", "namespace": "default", **body.get("metadata", {})}}
            got = await outcome(plain, Admission("CREATE", cm, "default", f"c{j}", obj, None))
            want = await outcome(exact, Admission("CREATE", cm, "default", f"c{j}", obj, None))
            assert got == want, (j, got, want)
            seen.add(got[0].split(" ")[0] if got[0] else "allowed")
            if j == 0:  # a plain object passes every policy on the plain path alone
                plan = plain._plans[("CREATE", "", "v1", "configmaps", "", True)]
                assert plan.combined is not None
                act = plain.env.activation({"object": obj, "oldObject": None, "params": None})
                assert plan.combined.eval(act) is True
                assert plan.combined.source.count(") && (") >= len(POLICIES) - 1
        key = ("CREATE", "", "v1", "configmaps", "", True)
        # every policy (variables and matchConditions included) went into `plain`'s one program; none into `exact`'s
        assert plain._plans[key].combined is not None and not plain._plans[key].others
        assert exact._plans[key].combined is None and len(exact._plans[key].others) == len(POLICIES)
        for t in running:
            t.cancel()
    assert seen == {"allowed", "403", "422"}  # the table reaches admits and both kinds of refusal


def test_plain_elements() -> None:
    spec = {"matchConditions": [{"name": "c", "expression": "object.x"}],
            "variables": [{"name": "a", "expression": "object.y"}, {"name": "b", "expression": "variables.a + 1"}],
            "validations": [{"expression": "variables.b > 1"}, {"expression": "true"}]}
    assert plain_elements(spec) == [
        "cel.bind(litevar_a, (object.y), cel.bind(litevar_b, (litevar_a + 1), (((object.x)) ? (litevar_b > 1) : "
        "true)))",
        "cel.bind(litevar_a, (object.y), cel.bind(litevar_b, (litevar_a + 1), (((object.x)) ? (true) : true)))"]
    assert plain_elements({"validations": [{"expression": "x"}], "paramKind": {"kind": "K"}}) is None
    assert plain_elements({"validations": [{"expression": "x"}], "auditAnnotations": [{"key": "k"}]}) is None
    assert plain_elements({"validations": [{"expression": "object.a == 'variables.x'"}],
                           "variables": [{"name": "x", "expression": "1"}]}) is None
    assert plain_elements({"validations": [{"expression": "object.a == 1"}]}) == ["(object.a == 1)"]


def test_bind_once() -> None:
    """Each variable read once (the runtime converts plain data at each reference): an alpha-renaming that
    leaves field names, string literals and a single reference alone, and evaluates alike."""
    src = "object.a.all(object, object.x == 'object') && has(object.b) && oldObject == null && object.c.object == 1"
    got = bind_once(src, ("object", "oldObject"))
    assert got == ("cel.bind(__lite_object, object, __lite_object.a.all(__lite_object, __lite_object.x == 'object') "
                   "&& has(__lite_object.b) && oldObject == null && __lite_object.c.object == 1)")
    env = PolicyEnv(lambda _u, _a: AuthzDecision(False))
    data = {"object": {"a": [{"x": "object"}], "b": 1, "c": {"object": 1}}, "oldObject": None}
    assert env.compile(got).eval(data) is True and env.compile(src).eval(data) is True
    assert bind_once("object.a == 1", ("object",)) == "object.a == 1"
    assert bind_once("object.a == ", ("object",)) == "object.a == "


PATTERN = "object.data.all(k, object.data[k].matches('^[a-z]+(-[a-z]+)*([.][a-z]+(-[a-z]+)*)*$'))"
BUDGET_POLICIES: list[dict[str, Any]] = [
    # over the per-call limit on 1,000 values of 1,400 characters: an evaluation error, by failurePolicy
    {"matchConditions": [{"name": "c", "expression": "object.metadata.labels['case'] == 'fail'"}],
     "validations": [{"expression": PATTERN}]},
    {"failurePolicy": "Ignore", "matchConditions": [{"name": "c", "expression":
                                                     "object.metadata.labels['case'] == 'ignore'"}],
     "validations": [{"expression": PATTERN}]},
    # each validation under the per-call limit on 600 such values, 20 of them over the evaluation's budget
    {"matchConditions": [{"name": "c", "expression": "object.metadata.labels['case'] == 'budget'"}],
     "validations": [{"expression": PATTERN.replace("))", f") || k == '{i}')")} for i in range(20)]},
    # a messageExpression over the per-call limit: cancelled, the message is used
    {"matchConditions": [{"name": "c", "expression": "object.metadata.labels['case'] == 'message'"}],
     "validations": [{"expression": "!('x' in object.data)", "message": "no x",
                      "messageExpression": f"{PATTERN} ? 'x, all matching' : 'x, not all matching'"}]},
]


def _cm(case: str, keys: int, extra: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{case}-{keys}", "namespace": "default",
                                                                 "labels": {"case": case}},
            "data": {**{f"k{i}": "a" * 1400 for i in range(keys)}, **(extra or {})}}


async def test_runtime_cost_limits(stack: tuple[Resources, KindRegistry, Any]) -> None:
    """Upstream's per-call limit and per-evaluation budget, on both paths: an expression over a large map goes
    over them and the policy's failurePolicy decides (Fail refuses with upstream's message, Ignore admits);
    the same policies on small objects evaluate as usual."""
    r, kinds, _ = stack
    for i, spec in enumerate(BUDGET_POLICIES):
        await r.create(kind(kinds, GROUP, "validatingadmissionpolicies"), "", {
            "metadata": {"name": f"cost{i}"}, "spec": {"matchConstraints": {"resourceRules": RULES}, **spec}})
        await r.create(kind(kinds, GROUP, "validatingadmissionpolicybindings"), "", {
            "metadata": {"name": f"cost{i}"}, "spec": {"policyName": f"cost{i}", "validationActions": ["Deny"]}})
    namespaces = NamespaceLabels(r, r.core_kind("namespaces"))
    plain = PolicyAdmission(r, kinds, namespaces, None)
    exact = PolicyAdmission(r, kinds, namespaces, None, plain=False)
    async with asyncio.TaskGroup() as tg:
        running = [tg.create_task(p.run()) for p in (plain, exact)]
        for p in (plain, exact):
            await p.policies.wait_synced()
            await p.bindings.wait_synced()
        cm = kind(kinds, "", "configmaps")
        forbidden = "422 Invalid configmaps \"{}\" is forbidden: ValidatingAdmissionPolicy 'cost{}' with binding " \
                    "'cost{}' denied request: {}"
        cases = [
            (_cm("fail", 1000), forbidden.format(
                "fail-1000", 0, 0, f"expression '{PATTERN}' resulted in error: operation cancelled: actual cost "
                                   "limit exceeded")),
            (_cm("fail", 10, {"x": "1"}), forbidden.format("fail-10", 0, 0, f"failed expression: {PATTERN}")),
            (_cm("ignore", 1000, {"x": "1"}), ""),  # would be refused, but the error is ignored
            (_cm("ignore", 10, {"x": "1"}), forbidden.format("ignore-10", 1, 1, f"failed expression: {PATTERN}")),
            (_cm("budget", 600), forbidden.format(
                "budget-600", 2, 2, "validation failed due to running out of cost budget, no further validation "
                                    "rules will be run")),
            (_cm("budget", 100), ""),
            (_cm("message", 1000, {"x": "a"}), forbidden.format("message-1000", 3, 3, "no x")),
            (_cm("message", 10, {"x": "a"}), forbidden.format("message-10", 3, 3, "x, all matching")),
        ]
        for obj, want in cases:
            name = obj["metadata"]["name"]
            for p in (plain, exact):
                got, _ = await outcome(p, Admission("CREATE", cm, "default", name, obj, None))
                assert got == want, (name, p.plain, got)
        for t in running:
            t.cancel()
