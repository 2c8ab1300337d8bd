"""ValidatingAdmissionPolicy, pure parts: matching, decisions and messages, object validation, the authorizer
library, and the ordered plugin list."""

from __future__ import annotations

from typing import Any

import pytest

from lite.server.admission.matching import Attributes
from lite.server.admission.plugins import ORDER, Plugin, ordered_hooks
from lite.server.admission.policy import budget, decide, matching
from lite.server.admission.policy.celenv import AuthzDecision, PolicyEnv
from lite.server.admission.policy.validation import default_policy, validate_binding, validate_policy
from lite.server.api.strategies.base import Admission

CM = Attributes("CREATE", "", "v1", "configmaps", "", True, "team", "cfg")
DEPLOY = Attributes("UPDATE", "apps", "v1", "deployments", "", True, "team", "web")
NODE = Attributes("CREATE", "", "v1", "nodes", "", False, "", "n1")


def rule(**over: Any) -> dict[str, Any]:
    return {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"],
            **over}


@pytest.mark.parametrize(("m", "a", "labels", "required", "want"), [
    ({"resourceRules": [rule()]}, CM, None, True, True),
    ({"resourceRules": [rule(operations=["UPDATE"])]}, CM, None, True, False),
    ({"resourceRules": [rule(resourceNames=["other"])]}, CM, None, True, False),
    ({"resourceRules": [rule(resourceNames=["cfg"])]}, CM, None, True, True),
    ({"resourceRules": [rule()], "excludeResourceRules": [rule(resourceNames=["cfg"])]}, CM, None, True, False),
    ({"resourceRules": [rule(apiVersions=["v2"])], "matchPolicy": "Exact"}, CM, None, True, False),
    ({"resourceRules": [rule(apiVersions=["v2"])], "matchPolicy": "Equivalent"}, CM, None, True, True),
    ({"resourceRules": [rule(apiGroups=["apps"], resources=["*"], operations=["*"])]}, DEPLOY, None, True, True),
    ({"resourceRules": [rule(scope="Namespaced", resources=["nodes"])]}, NODE, None, True, False),
    ({"resourceRules": [rule()], "namespaceSelector": {"matchLabels": {"env": "prod"}}}, CM, {"env": "dev"}, True,
     False),
    ({"resourceRules": [rule()], "namespaceSelector": {"matchLabels": {"env": "prod"}}}, CM, {"env": "prod"}, True,
     True),
    ({"resourceRules": [rule(resources=["nodes"])], "namespaceSelector": {"matchLabels": {"env": "prod"}}}, NODE,
     None, True, True),  # cluster-scoped requests ignore the namespaceSelector
    ({"resourceRules": [rule()], "objectSelector": {"matchLabels": {"app": "x"}}}, CM, None, True, False),
    (None, CM, None, True, False),  # a policy without matchConstraints matches nothing
    (None, CM, None, False, True),  # a binding without matchResources does not narrow
    ({"namespaceSelector": {}}, CM, None, False, True),  # nor does one without resourceRules
    ({"excludeResourceRules": [rule()]}, CM, None, False, False),
])
def test_matches(m: Any, a: Attributes, labels: dict[str, str] | None, required: bool, want: bool) -> None:
    obj = {"metadata": {"name": a.name, "labels": {"app": "y"}}}
    assert matching.matches(m, a, labels, obj, None, rules_required=required) is want


F = decide.Failed("expression 'x' resulted in error: no such key: x")


@pytest.mark.parametrize(("validation", "result", "message", "fp", "want"), [
    ({"expression": "x"}, True, None, "Fail", decide.Decision(False)),
    ({"expression": " x > 1 "}, False, None, "Fail", decide.Decision(True, "failed expression: x > 1", "Invalid")),
    ({"expression": "x", "message": " no "}, False, None, "Fail", decide.Decision(True, "no", "Invalid")),
    ({"expression": "x", "message": "m", "reason": "Forbidden"}, False, " from expr ", "Fail",
     decide.Decision(True, "from expr", "Forbidden")),
    ({"expression": "x", "message": "m"}, False, "two\nlines", "Fail", decide.Decision(True, "m", "Invalid")),
    ({"expression": "x", "message": "m"}, False, 42, "Fail", decide.Decision(True, "m", "Invalid")),
    ({"expression": "x", "message": "m"}, False, "y" * 5121, "Fail", decide.Decision(True, "m", "Invalid")),
    ({"expression": "x"}, False, "  ", "Fail", decide.Decision(True, "failed expression: x", "Invalid")),
    ({"expression": "x"}, "not a bool", None, "Fail", decide.Decision(True, "failed expression: x", "Invalid")),
    ({"expression": "x"}, F, None, "Fail", decide.Decision(True, F.message, "", True)),
    ({"expression": "x"}, F, None, "Ignore", decide.Decision(False, F.message, "", True)),
])
def test_validation_decision(validation: dict[str, Any], result: Any, message: Any, fp: str,
                             want: decide.Decision) -> None:
    assert decide.validation_decision(validation, result, message, fp) == want


@pytest.mark.parametrize(("result", "fp", "value", "denies"), [
    (" v ", "Fail", "v", False), ("", "Fail", None, False), (None, "Fail", None, False),
    (3, "Fail", None, True), (3, "Ignore", None, False), (F, "Fail", None, True), (F, "Ignore", None, False),
])
def test_audit_value(result: Any, fp: str, value: str | None, denies: bool) -> None:
    got, denial = decide.audit_value("k", "expr", result, fp)
    assert got == value and (denial is not None) is denies
    if isinstance(result, int) and denies:
        assert denial is not None and denial.message == ("valueExpression 'expr' resulted in unsupported return "
                                                         "type: int. Return type must be either string or null.")


def test_actions_and_refusal() -> None:
    out = decide.Outcome()
    d = decide.Decision(True, "too big", "Forbidden")
    out.apply("p", "b", ["Warn", "Audit"], 2, d)
    assert out.warnings == ["Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': too big"]
    assert out.annotations[decide.FAILURE_KEY] == ('[{"message":"too big","policy":"p","binding":"b",'
                                                   '"expressionIndex":2,"validationActions":["Warn","Audit"]}]')
    assert not out.denied
    out.apply("p", "b", ["Audit"], 3, decide.Decision(True, "later", "Invalid"))
    assert '"expressionIndex":2' in out.annotations[decide.FAILURE_KEY]  # the first failure is kept
    out.apply("p", "b", ["Deny"], 0, d)
    assert decide.refusal(*out.denied[0]) == (
        "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: too big", "Forbidden", 403)
    out.config_error("q", "", "Ignore", "boom")
    assert len(out.denied) == 1
    out.config_error("q", "c", "Fail", "boom")
    assert decide.refusal(*out.denied[1]) == (
        "ValidatingAdmissionPolicy 'q' with binding 'c' denied request: failed to configure binding: boom",
        "Invalid", 422)
    assert decide.refusal("q", "", decide.Decision(True, "x", "Unauthorized"))[1:] == ("Unauthorized", 401)


def _env() -> PolicyEnv:
    def check(user: dict[str, Any], attrs: dict[str, str]) -> AuthzDecision:
        ok = user.get("username") == "alice" and attrs.get("resource") == "pods" and attrs.get("verb") == "get"
        return AuthzDecision(ok, "rbac says so" if ok else "")
    return PolicyEnv(check)


def test_authorizer_library() -> None:
    env = _env()
    act = {"authorizer": env.authorizer({"username": "alice"}),
           "authorizer.requestResource": env.request_resource({"username": "alice"}, {"resource": "pods"})}
    for expr, want in [
        ("authorizer.group('').resource('pods').namespace('ns').name('x').check('get').allowed()", True),
        ("authorizer.group('').resource('pods').check('delete').allowed()", False),
        ("authorizer.group('').resource('pods').check('get').reason()", "rbac says so"),
        ("authorizer.group('').resource('secrets').check('get').errored()", False),
        ("authorizer.requestResource.check('get').allowed()", True),
        ("authorizer.serviceAccount('ns', 'sa').group('').resource('pods').check('get').allowed()", False),
        ("authorizer.path('/healthz').check('get').allowed()", False),
    ]:
        assert env.compile(expr).eval(act) == want, expr


def test_policy_validation() -> None:
    env = _env()
    good: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {
        "matchConstraints": {"resourceRules": [rule()]}, "validations": [{"expression": "object.x == 1"}]}}
    default_policy(good)
    assert good["spec"]["failurePolicy"] == "Fail"
    assert good["spec"]["matchConstraints"]["matchPolicy"] == "Equivalent"
    assert good["spec"]["matchConstraints"]["resourceRules"][0]["scope"] == "*"
    assert validate_policy(good, env.compile_error) == []
    bad = {"metadata": {"name": "p"}, "spec": {
        "failurePolicy": "Maybe", "paramKind": {"apiVersion": "v1"},
        "validations": [{"expression": "object.x ==", "reason": "Teapot", "message": "a\nb"}],
        "auditAnnotations": [{"key": "k", "valueExpression": "'v'"}, {"key": "k", "valueExpression": "'v'"}],
        "matchConditions": [{"name": "bad name!", "expression": "true"}],
        "variables": [{"name": "1x", "expression": "1"}]}}
    fields = {c.field for c in validate_policy(bad, env.compile_error)}
    assert fields == {"spec.failurePolicy", "spec.paramKind.kind", "spec.matchConstraints",
                      "spec.validations[0].expression", "spec.validations[0].reason", "spec.validations[0].message",
                      "spec.auditAnnotations[1].key", "spec.matchConditions[0].name", "spec.variables[0].name"}
    empty: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {"matchConstraints": {"resourceRules": [rule()]}}}
    default_policy(empty)
    assert [(c.field, c.message) for c in validate_policy(empty, env.compile_error)] == [
        (f"spec.{k}", "Required value: validations or auditAnnotations must contain at least one item")
        for k in ("validations", "auditAnnotations")]


@pytest.mark.parametrize(("spec", "fields"), [
    ({"policyName": "p", "validationActions": ["Deny"]}, set()),
    ({"validationActions": []}, {"spec.policyName", "spec.validationActions"}),
    ({"policyName": "p", "validationActions": ["Deny"], "matchResources": {"matchPolicy": "Fuzzy"}},
     {"spec.matchResources.matchPolicy", "spec.matchResources.namespaceSelector",
      "spec.matchResources.objectSelector"}),
    ({"policyName": "p", "validationActions": ["Deny", "Warn"]}, {"spec.validationActions"}),
    ({"policyName": "p", "validationActions": ["Deny", "Deny"]}, {"spec.validationActions[1]"}),
    ({"policyName": "p", "validationActions": ["Block"]}, {"spec.validationActions[0]"}),
    ({"policyName": "p", "validationActions": ["Audit"], "paramRef": {"name": "x"}},
     {"spec.paramRef.parameterNotFoundAction"}),
    ({"policyName": "p", "validationActions": ["Audit"],
      "paramRef": {"name": "x", "selector": {}, "parameterNotFoundAction": "Allow"}},
     {"spec.paramRef.name", "spec.paramRef.selector"}),
    ({"policyName": "Not_A_Name", "validationActions": ["Audit"], "paramRef": {"name": "a/b",
                                                                               "parameterNotFoundAction": "Allow"}},
     {"spec.policyName", "spec.paramRef.name"}),
    ({"policyName": "p", "validationActions": ["Audit"], "paramRef": {"parameterNotFoundAction": "Deny"}},
     {"spec.paramRef"}),
])
def test_binding_validation(spec: dict[str, Any], fields: set[str]) -> None:
    assert {c.field for c in validate_binding({"metadata": {"name": "b"}, "spec": spec})} == fields


async def _hook(_: Admission) -> None:
    return None


def test_ordered_hooks_mutating_first_then_validating_in_list_order() -> None:
    calls: list[str] = []

    def hook(name: str) -> Any:
        async def h(_: Admission) -> None:
            calls.append(name)
        h.__name__ = name
        return h

    plugins = [Plugin("ResourceQuota", validate=hook("quota")), Plugin("ValidatingAdmissionWebhook",
                                                                       validate=hook("vwh")),
               Plugin("MutatingAdmissionWebhook", hook("mwh")), Plugin("ValidatingAdmissionPolicy",
                                                                       validate=hook("vap")),
               Plugin("ServiceAccount", hook("sa")), Plugin("PodSecurity", validate=hook("psa"))]
    assert [h.__name__ for h in ordered_hooks(plugins)] == ["sa", "mwh", "psa", "vap", "vwh", "quota"]
    with pytest.raises(ValueError, match="not in the ordered list"):
        ordered_hooks([Plugin("AlwaysAdmit", _hook)])
    with pytest.raises(ValueError, match="given twice"):
        ordered_hooks([Plugin("Priority", _hook), Plugin("Priority", _hook)])
    assert ORDER.index("MutatingAdmissionWebhook") < ORDER.index("ValidatingAdmissionPolicy") \
        < ORDER.index("ValidatingAdmissionWebhook") < ORDER.index("ResourceQuota")


def test_type_checking_warnings() -> None:
    from lite.kinds import KindRegistry
    from lite.server.admission.policy import typecheck
    from lite.server.api.builtin_schemas import BuiltinSchemas

    schemas, kinds = BuiltinSchemas(), KindRegistry()
    deploy, pod = kinds.by_resource("apps", "v1", "deployments"), kinds.by_resource("", "v1", "pods")
    assert deploy is not None and pod is not None
    both = [("apps/v1, Kind=Deployment", schemas.node(deploy)), ("/v1, Kind=Pod", schemas.node(pod))]
    spec = {"matchConstraints": {"resourceRules": [
        {"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments", "deployments/scale"]},
        {"apiGroups": [""], "apiVersions": ["*"], "resources": ["pods"]}]},
        "validations": [
            {"expression": "object.spec.replicas > 1 && object.metadata.name.startsWith('a')",
             "messageExpression": "'x' + object.spec.selector.matchLabels.anything"},
            {"expression": "has(object.spec.template) &&\n  oldObject.spec.nope == 'object.spec.nope'"}],
        "variables": [{"name": "v", "expression": "object.spec.containers.size()"}]}
    assert typecheck.matched_kinds(spec) == [("apps", "v1", "deployments")]  # no subresources, no wildcards
    assert typecheck.expression_warnings(spec, [both[0]]) == [
        {"fieldRef": "spec.validations[1].expression",
         "warning": "apps/v1, Kind=Deployment: ERROR: <input>:2:17: undefined field 'nope'\n"
                    " |   oldObject.spec.nope == 'object.spec.nope'\n | ................^"},
        {"fieldRef": "spec.variables[0].expression",
         "warning": "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'containers'\n"
                    " | object.spec.containers.size()\n | ...........^"}]
    # the same expressions against both kinds: each kind's errors, in order
    warned = typecheck.check_expression("object.spec.containers.size() > 0 && object.spec.replicas > 0", both)
    assert warned.startswith("apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'containers'")
    assert "\n/v1, Kind=Pod: ERROR: <input>:1:49: undefined field 'replicas'" in warned


def test_authorizer_signatures_as_upstream() -> None:
    """`path()` gives a PathCheck (check only, as upstream's library/authz.go); what upstream's type checker
    refuses is refused at policy write, in cel-go's words for receiver-style calls."""
    env = _env()
    refused = {
        "authorizer.path('/healthz').namespace('ns').check('get').allowed()":
            "found no matching overload for 'namespace' applied to 'kubernetes.authorization.PathCheck.(string)'",
        "authorizer.path('/healthz').resource('pods').check('get').allowed()":
            "found no matching overload for 'resource' applied to 'kubernetes.authorization.PathCheck.(string)'",
        "authorizer.path('/healthz').check(1).allowed()":
            "found no matching overload for 'check' applied to 'kubernetes.authorization.PathCheck.(int)'",
        "authorizer.group('').check('get').allowed()":
            "found no matching overload for 'check' applied to 'kubernetes.authorization.GroupCheck.(string)'",
        "authorizer.group('').resource('pods').check('get')":  # a Decision: not a bool validation
            None,
        "authorizer.path('/healthz').check('get').name('x')":
            "found no matching overload for 'name' applied to 'kubernetes.authorization.Decision.(string)'",
        # the wrong number of arguments: cel-go names the types, the runtime would say "undeclared reference"
        "authorizer.serviceAccount('ns').group('').resource('pods').check('get').allowed()":
            "found no matching overload for 'serviceAccount' applied to 'kubernetes.authorization.Authorizer.(string)'",
        "authorizer.path('/x', 1).check('get').allowed()":
            "found no matching overload for 'path' applied to 'kubernetes.authorization.Authorizer.(string, int)'",
        "authorizer.group('').resource('pods').check().allowed()":
            "found no matching overload for 'check' applied to 'kubernetes.authorization.ResourceCheck.()'",
    }
    for expr, want in refused.items():
        err = env.compile_error(expr)
        if want is None:
            assert err is None, expr
            continue
        assert err is not None and err.startswith("ERROR: <input>:1:") and want in err, (expr, err)
        policy: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {
            "matchConstraints": {"resourceRules": [rule()]}, "validations": [{"expression": expr}]}}
        default_policy(policy)
        causes = validate_policy(policy, env.compile_error)
        assert [(c.field, c.message.split("\n")[0]) for c in causes] == [
            ("spec.validations[0].expression", f"Invalid value: \"{expr}\": compilation failed: {err.splitlines()[0]}")]
    for ok in ("authorizer.path('/healthz').check('get').allowed()",
               "authorizer.path('/healthz').check('get').reason() == ''",
               "authorizer.path('/healthz').check('get').errored() || authorizer.path('/x').check('get').error() == ''",
               "authorizer.serviceAccount('ns', 'sa').path('/metrics').check('get').allowed()",
               "object.metadata.name.matches('^[a-z]+(-[a-z]+)*$')"):
        assert env.compile_error(ok) is None, ok
    assert "invalid matches argument" in str(env.compile_error("object.metadata.name.matches('[')"))
    assert env.compile("authorizer.serviceAccount('ns', 'sa').path('/metrics').check('get').allowed()").eval(
        {"authorizer": env.authorizer({"username": "alice"})}) is False


def test_cost_safe_size_and_meter() -> None:
    """A policy's `safe_size`: unbounded without comprehensions or string functions over its variables; finite
    with them, and values no larger are not metered while larger ones are (budget.py)."""
    env = _env()
    cheap = [env.compile("object.metadata.name == 'x'"), env.compile("has(object.spec)")]
    assert budget.safe_size([], [], cheap, [], []) == budget.UNBOUNDED
    loops = [env.compile("object.data.all(k, object.data.all(j, j != k || true))")]
    safe = budget.safe_size([], [], loops, [], [])
    assert 150 < safe < 1000  # about sqrt(PER_CALL_LIMIT / the body's cost; `!=` costs by the size of its operands)
    assert budget.meter(safe, {"object": {"data": {"k": "v"}}}) is None
    big = {"object": {"data": {f"k{i}": "v" for i in range(200)}}}
    m = budget.meter(safe, big)
    assert m is not None and m.cost(loops[0]) > 200 * 200
    # the per-evaluation budget: many validations each under the per-call limit
    assert budget.safe_size([], [], loops * 20, [], []) < safe
    assert budget.safe_size(loops * 20, [], [], [], []) < budget.safe_size([], [], loops * 20, [], [])  # 2.5M
