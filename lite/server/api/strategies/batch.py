"""batch/v1 strategies: Job (generated selector, immutable selector and template) and CronJob.

Invariants: the Job's generated selector uses the object's uid, so `prepare_create` runs after the uid is
assigned; with `spec.manualSelector: true` the user's selector is kept and required.
"""

from __future__ import annotations

import orjson

from lite.errors import Cause, field_invalid, field_not_supported, field_required
from lite.server.api.strategies import specrules
from lite.server.api.strategies.base import Obj, Strategy
from lite.server.api.strategies.pods import default_pod_spec, validate_pod_spec
from lite.server.api.strategies.workloads import immutable_selector, reset_status, validate_selected_template

JOB_RESTART = ["OnFailure", "Never"]
_UID_LABEL = "batch.kubernetes.io/controller-uid"
_NAME_LABEL = "batch.kubernetes.io/job-name"


MAX_INT32 = 2**31 - 1


def default_job_spec(spec: Obj) -> None:
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", MAX_INT32 if spec.get("backoffLimitPerIndex") is not None else 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    policy = spec.get("podFailurePolicy")
    if isinstance(policy, dict):
        for rule in policy.get("rules") or []:
            for pattern in (rule.get("onPodConditions") or []) if isinstance(rule, dict) else []:
                if isinstance(pattern, dict) and not pattern.get("status"):
                    pattern["status"] = "True"
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed" if policy is None else "Failed")
    tpl = spec.get("template")
    if isinstance(tpl, dict) and isinstance(tpl.get("spec"), dict):
        default_pod_spec(tpl["spec"])


def default_job(obj: Obj) -> None:
    """Upstream SetDefaults_Job (batch/v1), before the selector is generated."""
    spec = obj.get("spec")
    if isinstance(spec, dict):
        default_job_spec(spec)
        tpl = spec.get("template")
        labels = (tpl.get("metadata") or {}).get("labels") if isinstance(tpl, dict) else None
        meta = obj.setdefault("metadata", {})
        if isinstance(labels, dict) and labels and isinstance(meta, dict) and not meta.get("labels"):
            meta["labels"] = dict(labels)


def prepare_create_job(obj: Obj) -> None:
    reset_status(obj)
    spec = obj.get("spec")
    if not isinstance(spec, dict) or spec.get("manualSelector"):
        return
    meta = obj.get("metadata") or {}
    uid, name = str(meta.get("uid", "")), str(meta.get("name", ""))
    tpl = spec.setdefault("template", {})
    if not isinstance(tpl, dict):
        return
    labels = tpl.setdefault("metadata", {}).setdefault("labels", {})
    # Upstream generateSelector: labels the user set are kept (a wrong uid then fails validation).
    for key, value in ((_NAME_LABEL, name), ("job-name", name), (_UID_LABEL, uid), ("controller-uid", uid)):
        labels.setdefault(key, value)
    selector = spec.setdefault("selector", {})
    if isinstance(selector, dict):
        selector.setdefault("matchLabels", {}).setdefault(_UID_LABEL, uid)


def validate_job(obj: Obj) -> list[Cause]:
    causes = validate_selected_template(obj, restart_policies=JOB_RESTART) + specrules.job_causes(obj)
    spec = obj.get("spec") or {}
    if causes or spec.get("manualSelector"):
        return causes
    uid = str((obj.get("metadata") or {}).get("uid", ""))
    selector = spec.get("selector") or {}
    if (selector.get("matchLabels") or {}).get(_UID_LABEL) != uid:
        causes.append(Cause("FieldValueInvalid", "Invalid value: ...: `selector` not auto-generated",
                            "spec.selector"))
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if labels.get(_UID_LABEL) != uid:
        causes.append(field_invalid(f"spec.template.metadata.labels[{_UID_LABEL}]", labels.get(_UID_LABEL, ""),
                                    f"must be '{uid}'"))
    return causes


def _canon(v: object) -> bytes:
    return orjson.dumps(v, option=orjson.OPT_SORT_KEYS)


def validate_job_update(new: Obj, old: Obj) -> list[Cause]:
    causes = immutable_selector(new, old)
    nspec, ospec = new.get("spec") or {}, old.get("spec") or {}
    if _canon(nspec.get("template")) != _canon(ospec.get("template")):
        causes.append(Cause("FieldValueInvalid", "Invalid value: core.PodTemplateSpec{...}: field is immutable",
                            "spec.template"))
    if nspec.get("completions") != ospec.get("completions") and nspec.get("completionMode") != "Indexed":
        causes.append(Cause("FieldValueInvalid", f"Invalid value: {nspec.get('completions')}: field is immutable",
                            "spec.completions"))
    return causes


def default_cronjob(obj: Obj) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    jt = spec.get("jobTemplate")
    if isinstance(jt, dict) and isinstance(jt.get("spec"), dict):
        tpl = jt["spec"].get("template")
        if isinstance(tpl, dict) and isinstance(tpl.get("spec"), dict):
            default_pod_spec(tpl["spec"])


def validate_cronjob(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [field_required("spec")]
    causes: list[Cause] = []
    if not spec.get("schedule"):
        causes.append(field_required("spec.schedule"))
    policy = spec.get("concurrencyPolicy")
    if policy not in (None, "Allow", "Forbid", "Replace"):
        causes.append(field_not_supported("spec.concurrencyPolicy", policy, ["Allow", "Forbid", "Replace"]))
    jt = spec.get("jobTemplate")
    tpl = ((jt or {}).get("spec") or {}).get("template") if isinstance(jt, dict) else None
    if not isinstance(tpl, dict):
        causes.append(field_required("spec.jobTemplate.spec.template"))
    else:
        causes += validate_pod_spec(tpl.get("spec"), "spec.jobTemplate.spec.template.spec", JOB_RESTART)
    return causes + specrules.cronjob_causes(obj)


# batch/v1 Jobs orphan their pods by default (upstream keeps this for backwards compatibility).
JOB = Strategy(default=default_job, prepare_create=prepare_create_job, validate=validate_job,
               validate_update=validate_job_update, gc_policy="orphan")
CRONJOB = Strategy(default=default_cronjob, prepare_create=reset_status, validate=validate_cronjob,
                   gc_policy="background")
