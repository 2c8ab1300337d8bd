"""Strategy of core/v1 PodTemplate (upstream `pkg/registry/core/podtemplate` and `ValidatePodTemplate`).

A PodTemplate carries a pod template at the top level (`template`, no `spec`), validated as upstream's
`ValidatePodTemplateSpec`: labels and annotations of `template.metadata`, the pod spec at `template.spec` with
every restart policy allowed, and no ephemeral containers. `template` and its `spec` are value structs upstream,
so a missing one reads as empty (422 `template.spec.containers: Required value`, not `template: Required`).
Defaulting is the pod spec's. A PodTemplate has no status; its `metadata.generation` starts at 1 and moves when
`template` changes (upstream's PrepareForUpdate; `writing.spec_changed`).

Pure: no I/O; functions mutate only the new object.
"""

from __future__ import annotations

from lite.errors import Cause, field_forbidden
from lite.server.api.strategies.base import Obj, Strategy
from lite.server.api.strategies.pods import default_pod_spec, validate_pod_spec
from lite.validation import validate_annotations, validate_labels

RESTART_POLICIES = ["Always", "OnFailure", "Never"]


def default_podtemplate(obj: Obj) -> None:
    tpl = obj.get("template")
    if isinstance(tpl, dict) and isinstance(tpl.get("spec"), dict):
        default_pod_spec(tpl["spec"])


def validate_podtemplate(obj: Obj) -> list[Cause]:
    """The template's labels, annotations and pod spec (field paths under `template`)."""
    tpl = obj.get("template")
    tpl = tpl if isinstance(tpl, dict) else {}
    meta = tpl.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    spec = tpl.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    causes = validate_labels(meta.get("labels"), "template.metadata.labels")
    causes += validate_annotations(meta.get("annotations"), "template.metadata.annotations")
    causes += validate_pod_spec(spec, "template.spec", RESTART_POLICIES)
    if spec.get("ephemeralContainers"):
        causes.append(field_forbidden("template.spec.ephemeralContainers",
                                      "ephemeral containers not allowed in pod template"))
    return causes


PODTEMPLATE = Strategy(default=default_podtemplate, validate=validate_podtemplate)
