"""Strategy of core/v1 PodTemplate (upstream `pkg/registry/core/podtemplate` and `ValidatePodTemplate`).

A PodTemplate carries a pod template at the top level (`template`, no `spec`): its labels are validated as
labels and its spec as a pod spec under `template.spec`, with every restart policy allowed (upstream's
`ValidatePodTemplateSpec` with no restart-policy restriction). Defaulting is the pod spec's. A PodTemplate has
no status and no generation.

Pure: no I/O; functions mutate only the new object.
"""

from __future__ import annotations

from lite.errors import Cause, field_required
from lite.server.api.strategies.base import Obj, Strategy
from lite.server.api.strategies.pods import default_pod_spec, validate_pod_spec
from lite.validation import validate_labels

RESTART_POLICIES = ["Always", "OnFailure", "Never"]


def default_podtemplate(obj: Obj) -> None:
    tpl = obj.get("template")
    if isinstance(tpl, dict) and isinstance(tpl.get("spec"), dict):
        default_pod_spec(tpl["spec"])


def validate_podtemplate(obj: Obj) -> list[Cause]:
    """`template` required; its labels valid and its spec a valid pod spec (field paths under `template`)."""
    tpl = obj.get("template")
    if not isinstance(tpl, dict):
        return [field_required("template")]
    meta = tpl.get("metadata")
    causes = validate_labels(meta.get("labels") if isinstance(meta, dict) else None, "template.metadata.labels")
    causes += validate_pod_spec(tpl.get("spec"), "template.spec", RESTART_POLICIES)
    return causes


PODTEMPLATE = Strategy(default=default_podtemplate, validate=validate_podtemplate)
