"""Per-workload disconnect policy: the `lite.dev/lost-after` and `lite.dev/replace-when-lost` annotations.

A node is *lost* while it carries the NoExecute taint `node.kubernetes.io/unreachable` or
`node.kubernetes.io/not-ready` (node lifecycle sets them when the node stops reporting or reports NotReady).
On a pod, else on its node (the pod's value wins):
- `lite.dev/lost-after`: how long the server waits before evicting the pod from a lost node: a Go duration
  ("20s", "5m", "1h30m") or plain seconds ("300", "2.5"), never negative. It replaces the tolerationSeconds
  of the node-lost taints (the 300 s admission adds, or the pod's own); a pod that tolerates them without
  tolerationSeconds (forever, as DaemonSet pods do) stays forever.
- `lite.dev/replace-when-lost`: "false" = never evict the pod for the node-lost taints (so no controller
  replaces it elsewhere); "true" (the default) = evict as above.

`annotation_causes(annotations, path)` is what admission refuses (one Cause per bad value, the field named
`metadata.annotations[<key>]`); `policy(pod_annotations, node_annotations)` is what the taint controller uses,
ignoring bad values (they fall back to the default; `bad_values` names them). Pure, stdlib and leaf only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from lite.errors import Cause, field_invalid, field_not_supported
from lite.goduration import go_duration
from lite.records import dataclass

LOST_AFTER = "lite.dev/lost-after"
REPLACE_WHEN_LOST = "lite.dev/replace-when-lost"
ANNOTATIONS = (LOST_AFTER, REPLACE_WHEN_LOST)
BOOLS = ["true", "false"]


def parse_lost_after(text: str) -> float:
    """Seconds of a `lost-after` value; ValueError (with the reason) for anything else."""
    value = text.strip()
    if not value:
        raise ValueError("must be a duration such as 20s or 5m, or a number of seconds")
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = go_duration(value).total_seconds()
        except ValueError:
            raise ValueError("must be a duration such as 20s or 5m, or a number of seconds") from None
    if not math.isfinite(seconds):
        raise ValueError("must be a duration such as 20s or 5m, or a number of seconds")
    if seconds < 0:
        raise ValueError("must not be negative")
    return seconds


def annotation_causes(annotations: Mapping[str, object] | None, path: str = "metadata.annotations") -> list[Cause]:
    """A Cause for each of the two annotations whose value is not valid."""
    causes: list[Cause] = []
    ann = annotations or {}
    if LOST_AFTER in ann:
        try:
            parse_lost_after(str(ann[LOST_AFTER]))
        except ValueError as e:
            causes.append(field_invalid(f"{path}[{LOST_AFTER}]", ann[LOST_AFTER], str(e)))
    if REPLACE_WHEN_LOST in ann and ann[REPLACE_WHEN_LOST] not in BOOLS:
        causes.append(field_not_supported(f"{path}[{REPLACE_WHEN_LOST}]", ann[REPLACE_WHEN_LOST], BOOLS))
    return causes


@dataclass(frozen=True)
class LostPolicy:
    """The effective policy of one pod on one node. `lost_after` None: the tolerations decide (default)."""

    lost_after: float | None = None
    replace: bool = True


def _lost_after(ann: Mapping[str, object]) -> float | None:
    if LOST_AFTER not in ann:
        return None
    try:
        return parse_lost_after(str(ann[LOST_AFTER]))
    except ValueError:
        return None


def _replace(ann: Mapping[str, object]) -> bool | None:
    value = ann.get(REPLACE_WHEN_LOST)
    return None if value not in BOOLS else value == "true"


def policy(pod_annotations: Mapping[str, object] | None, node_annotations: Mapping[str, object] | None) -> LostPolicy:
    """The pod's valid values, else the node's, else the defaults."""
    pod, node = pod_annotations or {}, node_annotations or {}
    after = _lost_after(pod)
    if after is None:
        after = _lost_after(node)
    replace = _replace(pod)
    if replace is None:
        replace = _replace(node)
    return LostPolicy(after, True if replace is None else replace)


def bad_values(annotations: Mapping[str, object] | None) -> list[str]:
    """`key=value` of each of the two annotations present with a value `policy` ignores."""
    ann = annotations or {}
    bad = [LOST_AFTER] if LOST_AFTER in ann and _lost_after(ann) is None else []
    bad += [REPLACE_WHEN_LOST] if REPLACE_WHEN_LOST in ann and _replace(ann) is None else []
    return [f"{key}={ann[key]}" for key in bad]
