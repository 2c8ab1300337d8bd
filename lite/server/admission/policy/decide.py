"""From expression results to upstream's policy decisions and messages (upstream `validating/validator.go` and
`dispatcher.go`). Pure: no CEL, no I/O; the evaluator hands in what each expression gave.

- A validation whose expression gave `True` admits; anything else (False, a non-bool) denies with `reason`
  (default Invalid) and the message: the messageExpression's string (trimmed; ignored when it failed, is not a
  string, is empty, longer than 5120 bytes or spans lines), else `message`, else `failed expression: <expr>`.
- An expression that failed to evaluate gives a decision by the policy's failurePolicy: Fail denies (the
  error's text is the message, no reason: Invalid), Ignore admits.
- A binding's actions apply to each denying decision: Deny refuses, Warn adds
  `Validation failed for ValidatingAdmissionPolicy '<p>' with binding '<b>': <msg>`, Audit records
  `validation.policy.admission.k8s.io/validation_failure`.
- The refusal is the first denied decision: `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '<p>'
  with binding '<b>' denied request: <msg>`, status reason the decision's, code 401/403/422/413 by reason.
"""

from __future__ import annotations

import json
from dataclasses import field
from typing import Any

from lite.records import dataclass

MAX_MESSAGE_BYTES = 5 * 1024
MAX_AUDIT_VALUE = 10 * 1024
REASON_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}
FAILURE_KEY = "validation.policy.admission.k8s.io/validation_failure"


@dataclass(frozen=True)
class Failed:
    """An expression that could not be evaluated; `message` is upstream's text for it."""

    message: str


@dataclass(frozen=True)
class Decision:
    deny: bool
    message: str = ""
    reason: str = ""
    error: bool = False  # came from an evaluation error (or a configuration error)


def validation_decision(validation: dict[str, Any], result: Any, message_result: Any, failure_policy: str) -> Decision:
    if isinstance(result, Failed):
        return Decision(failure_policy != "Ignore", result.message, "", True)
    if result is True:
        return Decision(False)
    message = ""
    if isinstance(message_result, str):
        m = message_result.strip()
        if len(m.encode()) <= MAX_MESSAGE_BYTES and "\n" not in m:
            message = m
    if not message and validation.get("message"):
        message = str(validation["message"]).strip()
    if not message:
        message = f"failed expression: {str(validation.get('expression') or '').strip()}"
    return Decision(True, message, str(validation.get("reason") or "Invalid"))


def audit_value(key: str, expression: str, result: Any, failure_policy: str) -> tuple[str | None, Decision | None]:
    """(annotation value or None, denying decision or None) of one auditAnnotation's valueExpression."""
    if isinstance(result, Failed):
        return None, (Decision(True, result.message, "", True) if failure_policy != "Ignore" else None)
    if result is None:
        return None, None
    if isinstance(result, str):
        v = result.strip()
        return (v[:MAX_AUDIT_VALUE] or None), None
    msg = (f"valueExpression '{expression}' resulted in unsupported return type: {_cel_type(result)}. "
           "Return type must be either string or null.")
    return None, (Decision(True, msg, "", True) if failure_policy != "Ignore" else None)


def _cel_type(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "double"
    if isinstance(v, list):
        return "list"
    if isinstance(v, dict):
        return "map"
    return type(v).__name__


@dataclass
class Outcome:
    """Everything a request's policies decided: refusals (in order), warnings, audit annotations."""

    denied: list[tuple[str, str, Decision]] = field(default_factory=list)  # (policy, binding or "", decision)
    warnings: list[str] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)

    def apply(self, policy: str, binding: str, actions: list[str], index: int, d: Decision) -> None:
        """Apply a binding's validationActions to one denying decision (expression `index`)."""
        for action in actions:
            if action == "Deny":
                self.denied.append((policy, binding, d))
            elif action == "Warn":
                self.warnings.append(f"Validation failed for ValidatingAdmissionPolicy '{policy}' with binding "
                                     f"'{binding}': {d.message}")
            elif action == "Audit" and FAILURE_KEY not in self.annotations:  # the first one (AddAnnotation)
                self.annotations[FAILURE_KEY] = json.dumps([{
                    "message": d.message, "policy": policy, "binding": binding, "expressionIndex": index,
                    "validationActions": actions}], separators=(",", ":"))

    def config_error(self, policy: str, binding: str, failure_policy: str, err: str) -> None:
        """A policy or binding that cannot be applied (upstream's addConfigError)."""
        if failure_policy == "Ignore":
            return
        what = "binding" if binding else "policy"
        self.denied.append((policy, binding, Decision(True, f"failed to configure {what}: {err}", "", True)))


def refusal(policy: str, binding: str, d: Decision) -> tuple[str, str, int]:
    """(message after `is forbidden: `, status reason, code) of the first denied decision."""
    if binding:
        msg = f"ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {d.message}"
    else:
        msg = f"ValidatingAdmissionPolicy '{policy}' denied request: {d.message}"
    reason = d.reason or "Invalid"
    return msg, reason, REASON_CODES.get(reason, 500)
