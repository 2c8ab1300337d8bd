"""Table printers for CertificateSigningRequest, CSIStorageCapacity, RuntimeClass, APIService, FlowSchema and
PriorityLevelConfiguration, mirroring upstream's printers (`pkg/printers/internalversion` and
kube-aggregator's APIService table convertor). Cells are in column order. Null-safe.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from lite.kubetables.format import Obj, age, dct, get, human_duration, i, lst, s
from lite.kubetables.spec import Printer, age_col, col, name_col


def csr_condition(obj: Obj) -> str:
    """Upstream extractCSRStatus: Denied > Approved > Pending, then ,Failed and ,Issued."""
    types = {get(c, "type") for c in lst(obj, "status", "conditions")}
    out = "Denied" if "Denied" in types else "Approved" if "Approved" in types else "Pending"
    if "Failed" in types:
        out += ",Failed"
    if get(obj, "status", "certificate"):
        out += ",Issued"
    return out


def _csr(obj: Obj, now: dt.datetime) -> list[Any]:
    seconds = get(obj, "spec", "expirationSeconds")
    duration = human_duration(dt.timedelta(seconds=seconds)) if isinstance(seconds, int) else "<none>"
    return [s(obj, "metadata", "name"), age(obj, now), s(obj, "spec", "signerName"), s(obj, "spec", "username"),
            duration, csr_condition(obj)]


def _capacity(obj: Obj, now: dt.datetime) -> list[Any]:
    cap = get(obj, "capacity")
    return [s(obj, "metadata", "name"), s(obj, "storageClassName"), str(cap) if cap is not None else "",
            age(obj, now)]


def _runtimeclass(obj: Obj, now: dt.datetime) -> list[Any]:
    return [s(obj, "metadata", "name"), s(obj, "handler"), age(obj, now)]


def _apiservice(obj: Obj, now: dt.datetime) -> list[Any]:
    svc = get(obj, "spec", "service")
    service = f"{s(svc, 'namespace')}/{s(svc, 'name')}" if isinstance(svc, dict) else "Local"
    status = "Unknown"
    for c in lst(obj, "status", "conditions"):
        if get(c, "type") == "Available":
            status = s(c, "status")
            if s(c, "reason") and status != "True":
                status = f"{status} ({s(c, 'reason')})"
    return [s(obj, "metadata", "name"), service, status, age(obj, now)]


def _flowschema(obj: Obj, now: dt.datetime) -> list[Any]:
    method = get(obj, "spec", "distinguisherMethod", "type")
    missing = "?"
    for c in lst(obj, "status", "conditions"):
        if get(c, "type") == "Dangling":
            missing = s(c, "status")
    return [s(obj, "metadata", "name"), s(obj, "spec", "priorityLevelConfiguration", "name"),
            i(obj, "spec", "matchingPrecedence"), method if isinstance(method, str) else "<none>", age(obj, now),
            missing]


def _prioritylevel(obj: Obj, now: dt.datetime) -> list[Any]:
    spec = dct(obj, "spec")
    limited = dct(spec, "limited")
    queuing = dct(limited, "limitResponse", "queuing")
    shares: Any = "<none>"
    queues: Any = "<none>"
    hand: Any = "<none>"
    qlen: Any = "<none>"
    if s(spec, "type") == "Limited":
        shares = i(limited, "nominalConcurrencyShares")
        if queuing:
            queues, hand, qlen = i(queuing, "queues"), i(queuing, "handSize"), i(queuing, "queueLengthLimit")
    return [s(obj, "metadata", "name"), s(spec, "type"), str(shares), str(queues), str(hand), str(qlen),
            age(obj, now)]


def _webhooks(obj: Obj, now: dt.datetime) -> list[Any]:
    return [s(obj, "metadata", "name"), len(lst(obj, "webhooks")), age(obj, now)]


_WEBHOOK_COLUMNS = (name_col(), col("Webhooks", "integer", desc="Webhooks in the configuration."), age_col())


def _policy(obj: Obj, now: dt.datetime) -> list[Any]:
    pk = dct(obj, "spec", "paramKind")
    kind = f"{s(pk, 'apiVersion')}/{s(pk, 'kind')}" if pk else "<unset>"
    return [s(obj, "metadata", "name"), len(lst(obj, "spec", "validations")), kind, age(obj, now)]


def _policy_binding(obj: Obj, now: dt.datetime) -> list[Any]:
    ref = dct(obj, "spec", "paramRef")
    param = "<unset>"
    if ref.get("name"):
        param = f"{s(ref, 'namespace') or '*'}/{s(ref, 'name')}"
    elif isinstance(ref.get("selector"), dict):
        labels = dct(ref, "selector", "matchLabels")
        param = ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<selector>"
    return [s(obj, "metadata", "name"), s(obj, "spec", "policyName"), param, age(obj, now)]

PRINTERS: dict[str, Printer] = {
    "ValidatingWebhookConfiguration.admissionregistration.k8s.io": (_WEBHOOK_COLUMNS, _webhooks),
    "MutatingWebhookConfiguration.admissionregistration.k8s.io": (_WEBHOOK_COLUMNS, _webhooks),
    "ValidatingAdmissionPolicy.admissionregistration.k8s.io": (
        (name_col(), col("Validations", "integer", desc="Validations indicates the number of validation rules "
                                                        "defined in this configuration"),
         col("ParamKind", desc="ParamKind specifies the kind of resources used to parameterize this policy"),
         age_col()), _policy),
    "ValidatingAdmissionPolicyBinding.admissionregistration.k8s.io": (
        (name_col(), col("PolicyName", desc="PolicyName indicates the policy definition which the policy binding "
                                             "binded to"),
         col("ParamRef", desc="ParamRef indicates the param resource which sets the configration param"),
         age_col()), _policy_binding),
    "CertificateSigningRequest.certificates.k8s.io": (
        (name_col(), age_col(), col("SignerName", desc="Signer requested."),
         col("Requestor", desc="Name of the requesting user."),
         col("RequestedDuration", desc="Requested certificate lifetime."),
         col("Condition", desc="Approval, failure and issuance state.")), _csr),
    "CSIStorageCapacity.storage.k8s.io": (
        (name_col(), col("StorageClassName", desc="Storage class the capacity is for."),
         col("Capacity", desc="Available capacity."), age_col()), _capacity),
    "RuntimeClass.node.k8s.io": ((name_col(), col("Handler", desc="CRI handler of the class."), age_col()),
                                 _runtimeclass),
    "APIService.apiregistration.k8s.io": (
        (name_col(), col("Service", desc="The reference to the service that hosts this API endpoint."),
         col("Available", desc="Whether this service is available."), age_col()), _apiservice),
    "FlowSchema.flowcontrol.apiserver.k8s.io": (
        (name_col(), col("PriorityLevel", desc="Priority level of matching requests."),
         col("MatchingPrecedence", "integer", desc="Lower values match first."),
         col("DistinguisherMethod", desc="How flows are told apart."), age_col(),
         col("MissingPL", desc="Whether the priority level is missing.")), _flowschema),
    "PriorityLevelConfiguration.flowcontrol.apiserver.k8s.io": (
        (name_col(), col("Type", desc="Exempt or Limited."),
         col("NominalConcurrencyShares", desc="Share of the concurrency limit."),
         col("Queues", desc="Number of queues."), col("HandSize", desc="Shuffle-sharding hand size."),
         col("QueueLengthLimit", desc="Requests per queue."), age_col()), _prioritylevel),
}
