"""Which nodes a DaemonSet's pod belongs on, and how its pods are pinned there (upstream
`pkg/controller/daemon/util` and `NodeShouldRunDaemonPod`).

Pure functions over dicts:
- `with_daemon_tolerations(spec)`: the pod spec plus the tolerations every daemon pod gets (not-ready and
  unreachable NoExecute without a time limit; disk/memory/pid-pressure and unschedulable NoSchedule;
  network-unavailable NoSchedule for hostNetwork pods).
- `pin_to_node(spec, node)`: required node affinity replaced by one term `matchFields metadata.name In
  [node]` (upstream `ReplaceDaemonSetPodNodeNameNodeAffinity`), so the scheduler binds the pod there.
- `should_run(ds, node) -> (should_run, should_continue_running)`: template nodeName, nodeSelector and
  required node affinity must match; an untolerated NoSchedule/NoExecute taint stops new pods, an
  untolerated NoExecute one also evicts running pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lite.objects import deep_copy, labels_of, name_of

Obj = dict[str, Any]
_NO_EXEC = [("node.kubernetes.io/not-ready", "NoExecute"), ("node.kubernetes.io/unreachable", "NoExecute")]
_NO_SCHED = [("node.kubernetes.io/disk-pressure", "NoSchedule"), ("node.kubernetes.io/memory-pressure", "NoSchedule"),
             ("node.kubernetes.io/pid-pressure", "NoSchedule"), ("node.kubernetes.io/unschedulable", "NoSchedule")]
_NET = ("node.kubernetes.io/network-unavailable", "NoSchedule")


def _same(a: Obj, b: Obj) -> bool:
    """Upstream Toleration.MatchToleration: key, operator, value and effect are equal."""
    return all((a.get(k) or ("Equal" if k == "operator" else "")) == (b.get(k) or ("Equal" if k == "operator" else ""))
               for k in ("key", "operator", "value", "effect"))


def with_daemon_tolerations(spec: Obj) -> Obj:
    out = deep_copy(spec)
    tols: list[Obj] = out.setdefault("tolerations", [])
    wanted = _NO_EXEC + _NO_SCHED + ([_NET] if out.get("hostNetwork") else [])
    for key, effect in wanted:
        tol = {"key": key, "operator": "Exists", "effect": effect}
        tols[:] = [t for t in tols if not _same(t, tol)] + [tol]
    return out


def pin_to_node(spec: Obj, node: str) -> None:
    """Mutates `spec`: the required node affinity becomes exactly "metadata.name is `node`"."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    na = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    na["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [term]}


def daemon_pod_node(pod: Obj) -> str:
    """The node a daemon pod is on (bound) or pinned to (affinity), "" if neither."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    req = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in req.get("nodeSelectorTerms") or []:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("operator") == "In" and len(f.get("values") or []) == 1:
                return str(f["values"][0])
    return ""


def _requirement(req: Obj, values: Mapping[str, str]) -> bool:
    key, op, want = str(req.get("key", "")), req.get("operator"), [str(v) for v in req.get("values") or []]
    have = values.get(key)
    if op == "In":
        return have is not None and have in want
    if op == "NotIn":
        return have is None or have not in want
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt") and have is not None and len(want) == 1:
        try:
            a, b = int(have), int(want[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def _term(term: Obj, node: Obj) -> bool:
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no node
    labels = labels_of(node)
    return all(_requirement(r, labels) for r in exprs) and \
        all(_requirement(r, {"metadata.name": name_of(node)}) for r in fields)


def node_matches(pod_spec: Obj, node: Obj) -> bool:
    """nodeSelector and required node affinity (terms are ORed, requirements ANDed)."""
    labels = labels_of(node)
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    req = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if req is None:
        return True
    return any(_term(t, node) for t in req.get("nodeSelectorTerms") or [])


def tolerates(tol: Obj, taint: Obj) -> bool:
    if tol.get("effect") and tol.get("effect") != taint.get("effect"):
        return False
    if tol.get("key") and tol.get("key") != taint.get("key"):
        return False
    if tol.get("operator") == "Exists":
        return True
    if not tol.get("key"):
        return False  # an empty key needs operator Exists
    return (tol.get("value") or "") == (taint.get("value") or "")


def should_run(ds: Obj, node: Obj) -> tuple[bool, bool]:
    tpl_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    if tpl_spec.get("nodeName") and tpl_spec["nodeName"] != name_of(node):
        return False, False
    spec = with_daemon_tolerations(tpl_spec)
    if not node_matches(spec, node):
        return False, False
    run = keep = True
    for taint in (node.get("spec") or {}).get("taints") or []:
        effect = taint.get("effect")
        if effect not in ("NoSchedule", "NoExecute"):
            continue
        if any(tolerates(t, taint) for t in spec.get("tolerations") or []):
            continue
        run = False
        if effect == "NoExecute":
            keep = False
    return run, keep
