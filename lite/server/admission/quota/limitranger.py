"""LimitRange admission (upstream `plugin/pkg/admission/limitranger`): defaults, then min/max/ratio checks.

    pod CREATE ─ for each LimitRange of the namespace: fill in container (and init container) requests and
                 limits from the Container item's defaultRequest / default (recording what was set in the
                 `kubernetes.io/limit-ranger` annotation)
               └ then check every LimitRange: Container items per container (min, max, maxLimitRequestRatio),
                 Pod items against the pod's effective requests/limits
    PVC CREATE/UPDATE ─ PersistentVolumeClaim items: min and max of spec.resources.requests

A failed check is 403 Forbidden, `<resource> "<name>" is forbidden: <reason>` with upstream's reason texts,
several reasons joined as `[a, b]`. A LimitRange item is defaulted as upstream stores it
(`SetDefaults_LimitRangeItem`: default ← max, defaultRequest ← default, defaultRequest ← min) — `item_defaults`,
also used as the LimitRange strategy's defaulting so `kubectl describe limits` shows the values applied.

Invariants: the check functions are pure over JSON dicts; pod updates and subresources are not judged
(containers' resources cannot change on update).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, NamedTuple

from lite import errors
from lite.client import Client
from lite.kinds import Kind
from lite.quantity import NANO, canonical, format_nano, parse_nano
from lite.records import dataclass
from lite.server.admission.quota.usage import Effective, pod_effective_nano, pod_shape
from lite.server.api.strategies import Admission

Obj = dict[str, Any]
ANNOTATION = "kubernetes.io/limit-ranger"


def item_defaults(item: Obj) -> None:
    """SetDefaults_LimitRangeItem for a Container item, in place."""
    if item.get("type") != "Container":
        return
    default = item.setdefault("default", {})
    request = item.setdefault("defaultRequest", {})
    for k, v in (item.get("max") or {}).items():
        default.setdefault(k, v)
    for k, v in default.items():
        request.setdefault(k, v)
    for k, v in (item.get("min") or {}).items():
        request.setdefault(k, v)


def default_limit_range(obj: Obj) -> None:
    for item in (obj.get("spec") or {}).get("limits") or []:
        if isinstance(item, dict):
            item_defaults(item)


def _items(limit_range: Obj, kind: str) -> list[Obj]:
    out = []
    for item in (limit_range.get("spec") or {}).get("limits") or []:
        if isinstance(item, dict) and item.get("type") == kind:
            item = dict(item)
            item_defaults(item)
            out.append(item)
    return out


@dataclass(frozen=True)
class Rule:
    """One enforced value of a LimitRange item: the resource, its exact value (nano-units) and upstream's
    rendering."""

    name: str
    value: int
    shown: str


@dataclass(frozen=True)
class ItemRules:
    min: tuple[Rule, ...]
    max: tuple[Rule, ...]
    ratio: tuple[Rule, ...]


@dataclass(frozen=True)
class CompiledRange:
    """A LimitRange parsed once: Container defaults as canonical strings, min/max/ratio rules in nano-units.
    The admission hook keeps one per (name, resourceVersion), so pods pay no quantity parsing for them."""

    defaults: dict[str, dict[str, str]]  # "requests"/"limits" -> resource -> canonical quantity, by name
    container: tuple[ItemRules, ...]
    pod: tuple[ItemRules, ...]


def _rules(raw: Any) -> tuple[Rule, ...]:
    if not isinstance(raw, dict):
        return ()
    return tuple(Rule(str(k), _n(v), _show(v)) for k, v in sorted(raw.items()))


def compile_range(limit_range: Obj) -> CompiledRange:
    defaults: dict[str, dict[str, str]] = {"requests": {}, "limits": {}}
    container: list[ItemRules] = []
    pod: list[ItemRules] = []
    for item in (limit_range.get("spec") or {}).get("limits") or []:
        if not isinstance(item, dict):
            continue
        rules = ItemRules(_rules(item.get("min")), _rules(item.get("max")), _rules(item.get("maxLimitRequestRatio")))
        if item.get("type") == "Container":
            filled = dict(item)
            item_defaults(filled)
            defaults["requests"].update({k: canonical(str(v)) for k, v in (filled.get("defaultRequest") or {}).items()})
            defaults["limits"].update({k: canonical(str(v)) for k, v in (filled.get("default") or {}).items()})
            container.append(rules)
        elif item.get("type") == "Pod":
            pod.append(rules)
    # sorted by name, so the names a container lacks come out in the annotation's order without sorting
    defaults = {which: dict(sorted(values.items())) for which, values in defaults.items()}
    return CompiledRange(defaults, tuple(container), tuple(pod))


def apply_defaults(limit_range: Obj | CompiledRange, pod: Obj) -> None:
    """Fill in each container's missing requests/limits from the Container items; annotate what was set."""
    compiled = limit_range if isinstance(limit_range, CompiledRange) else compile_range(limit_range)
    defaults = compiled.defaults
    if not defaults["requests"] and not defaults["limits"]:
        return
    notes: list[str] = []
    spec = pod.setdefault("spec", {})
    for field in ("containers", "initContainers"):
        for c in spec.get(field) or []:
            if not isinstance(c, dict):
                continue
            res = c.setdefault("resources", {})
            for which, word in (("requests", "request"), ("limits", "limit")):
                have = res.get(which) if isinstance(res.get(which), dict) else None
                added = [k for k in defaults[which] if have is None or k not in have]
                if added:
                    res[which] = {**(have or {}), **{k: defaults[which][k] for k in added}}
                    notes.append(f"{', '.join(added)} {word} for {_container_word(field)} {c.get('name', '')}")
    if notes:
        meta = pod.setdefault("metadata", {})
        meta.setdefault("annotations", {})[ANNOTATION] = "LimitRanger plugin set: " + "; ".join(notes)


def _container_word(field: str) -> str:
    return "init container" if field == "initContainers" else "container"


class _Sum(int):
    """A Pod item's value: the pod's effective request or limit in nano-units (a sum, not a quantity
    string, so never a JSON number from a container: those are parsed as quantities)."""


def _n(v: Any) -> int:
    """A quantity (a string from a container, or a Pod item's `_Sum`) in nano-units; comparisons are
    between integers. Raises ValueError for a bad quantity, as parse_quantity does."""
    if type(v) is _Sum:
        return int(v)
    return parse_nano(str(v))


def _show(v: Any) -> str:
    if type(v) is _Sum:  # a Pod item's sum: binary when it is a whole number of KiB, as memory is
        return format_nano(v, binary=v % NANO == 0 and (v // NANO) % 1024 == 0)
    return canonical(str(v))


def _min(kind: str, r: Rule, req: Mapping[str, Any], lim: Mapping[str, Any]) -> str:
    name = r.name
    if name not in req:
        return f"minimum {name} usage per {kind} is {r.shown}.  No request is specified"
    if _n(req[name]) < r.value:
        return f"minimum {name} usage per {kind} is {r.shown}, but request is {_show(req[name])}"
    if name in lim and _n(lim[name]) < r.value:
        return f"minimum {name} usage per {kind} is {r.shown}, but limit is {_show(lim[name])}"
    return ""


def _max(kind: str, r: Rule, req: Mapping[str, Any], lim: Mapping[str, Any]) -> str:
    name = r.name
    if name not in lim:
        return f"maximum {name} usage per {kind} is {r.shown}.  No limit is specified"
    if _n(lim[name]) > r.value:
        return f"maximum {name} usage per {kind} is {r.shown}, but limit is {_show(lim[name])}"
    if name in req and _n(req[name]) > r.value:
        return f"maximum {name} usage per {kind} is {r.shown}, but request is {_show(req[name])}"
    return ""


def _max_request(kind: str, r: Rule, req: Mapping[str, Any]) -> str:
    if r.name not in req:
        return f"maximum {r.name} usage per {kind} is {r.shown}.  No request is specified"
    if _n(req[r.name]) > r.value:
        return f"maximum {r.name} usage per {kind} is {r.shown}, but request is {_show(req[r.name])}"
    return ""


def _ratio(kind: str, rule: Rule, req: Mapping[str, Any], lim: Mapping[str, Any]) -> str:
    name = rule.name
    head = f"{name} max limit to request ratio per {kind} is {rule.shown}"
    r = _n(req[name]) if name in req else 0
    lv = _n(lim[name]) if name in lim else 0
    if r == 0:
        return f"{head}, but no request is specified or request is 0"
    if lv == 0:
        return f"{head}, but no limit is specified or limit is 0"
    if lv * NANO > rule.value * r:  # lv / r > value, in integers
        return f"{head}, but provided ratio is {float(Fraction(lv, r)):f}"
    return ""


def _check(rules: ItemRules, kind: str, req: Mapping[str, Any], lim: Mapping[str, Any]) -> list[str]:
    out = [_min(kind, r, req, lim) for r in rules.min]
    out += [_max(kind, r, req, lim) for r in rules.max]
    out += [_ratio(kind, r, req, lim) for r in rules.ratio]
    return [m for m in out if m]


def pod_violations(limit_range: Obj | CompiledRange, pod: Obj, effective: Effective | None = None) -> list[str]:
    """Every min/max/ratio rule of `limit_range` the (defaulted) pod breaks, in upstream's order.
    `effective`: the pod's (requests, limits) from `pod_effective_nano`, when the caller has them."""
    compiled = limit_range if isinstance(limit_range, CompiledRange) else compile_range(limit_range)
    out: list[str] = []
    spec = pod.get("spec") or {}
    for rules in compiled.container:
        for field in ("containers", "initContainers"):
            for c in spec.get(field) or []:
                res = (c.get("resources") or {}) if isinstance(c, dict) else {}
                out += _check(rules, "Container", res.get("requests") or {}, res.get("limits") or {})
    if compiled.pod:
        if effective is None:
            effective = pod_effective_nano(pod, "requests"), pod_effective_nano(pod, "limits")
        req = {k: _Sum(v) for k, v in effective[0].items()}
        lim = {k: _Sum(v) for k, v in effective[1].items()}
        for rules in compiled.pod:
            out += _check(rules, "Pod", req, lim)
    return out


def pvc_violations(limit_range: Obj, pvc: Obj) -> list[str]:
    out: list[str] = []
    raw = ((pvc.get("spec") or {}).get("resources") or {}).get("requests")
    req = raw if isinstance(raw, dict) else {}
    for item in _items(limit_range, "PersistentVolumeClaim"):
        out += [_min("PersistentVolumeClaim", r, req, {}) for r in _rules(item.get("min"))]
        out += [_max_request("PersistentVolumeClaim", r, req) for r in _rules(item.get("max"))]
    return [m for m in out if m]


def aggregate(messages: list[str]) -> str:
    """utilerrors.NewAggregate's text: one message alone, several as `[a, b]`."""
    return messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"


Revisions = Callable[[Kind, str], list[tuple[str, int]]]  # `Resources.revisions`: (name, rev), nothing decoded
VERDICTS = 64  # pod shapes remembered per namespace (a namespace runs few pod templates)


class Checked(NamedTuple):
    """What `LimitRanger.check` worked out about a defaulted pod, for quota admission: its effective
    (requests, limits) when a Pod item summed them, and its `pod_shape`."""

    effective: Effective | None
    shape: bytes | None


class _Verdict(NamedTuple):
    """What the namespace's LimitRanges make of a pod shape: whether defaulting changes such a pod, the
    shape of the defaulted pod, the first range's violations (empty when none) and the effective (requests,
    limits) when a Pod item summed them."""

    defaults: bool
    shape: bytes
    problems: list[str]
    effective: Effective | None


@dataclass
class _Known:
    """A namespace's LimitRanges as last read — (name, rev) of each, the objects sorted by name, compiled —
    and their `_Verdict` per `pod_shape` of a pod as it came. Valid while the revisions are: defaulting reads
    and writes only what the shape covers (container names and resources), and the checks read only what
    the defaulted pod's shape covers, so equal shapes get equal verdicts."""

    revs: list[tuple[str, int]] | None
    ranges: list[Obj]
    compiled: list[CompiledRange]
    verdicts: dict[bytes, _Verdict] = dataclasses.field(default_factory=dict)


class LimitRanger:
    """The admission hook over the in-process client; `kind` is core/v1 LimitRange. With `revisions`, a
    namespace's LimitRanges are listed (decoded) only when one of them changed, not on every create."""

    def __init__(self, client: Client, kind: Kind, revisions: Revisions | None = None) -> None:
        self.client = client
        self.kind = kind
        self.revisions = revisions
        # namespace -> its LimitRanges as last read, with their verdicts per pod shape; bounded below
        self._ranges: dict[str, _Known] = {}
        # (namespace/name, resourceVersion) -> parsed LimitRange; a revision never changes, so no entry goes
        # stale; bounded by clearing (LimitRanges are few).
        self._compiled: dict[tuple[str, str], CompiledRange] = {}

    def compiled(self, lr: Obj) -> CompiledRange:
        meta = lr.get("metadata") or {}
        key = (f"{meta.get('namespace', '')}/{meta.get('name', '')}", str(meta.get("resourceVersion", "")))
        got = self._compiled.get(key)
        if got is None:
            if len(self._compiled) >= 1024:
                self._compiled.clear()
            got = self._compiled[key] = compile_range(lr)
        return got

    async def admit(self, review: Admission) -> None:
        await self.check(review)

    async def _of(self, ns: str) -> _Known:
        """The namespace's LimitRanges sorted by name, and compiled; read again only when one changed (with
        `revisions`; without, read every time and `revs` is None)."""
        revs = self.revisions(self.kind, ns) if self.revisions is not None else None
        if revs is not None:
            if not revs:
                return _Known(revs, [], [])
            known = self._ranges.get(ns)
            if known is not None and known.revs == revs:
                return known
        ranges = (await self.client.list(self.kind, ns))["items"]
        ranges.sort(key=lambda r: str(r["metadata"]["name"]))
        got = _Known(None, ranges, [self.compiled(lr) for lr in ranges])
        if revs is not None:
            if len(self._ranges) >= 1024:
                self._ranges.clear()
            got.revs = [(str(r["metadata"]["name"]), int(r["metadata"].get("resourceVersion") or 0)) for r in ranges]
            self._ranges[ns] = got
        return got

    async def check(self, review: Admission) -> Checked | None:
        """The hook's work; for a pod returns its effective (requests, limits) when a Pod item needed them and
        its `pod_shape`, so quota admission, which runs next and sees the same pod, need not compute them
        again. A pod whose shape was checked before against the same LimitRanges is only defaulted, and not
        even that when defaulting changed nothing in such a pod."""
        gk, obj = review.kind.gk, review.obj
        if review.subresource or obj is None or not review.namespace or gk not in ("Pod", "PersistentVolumeClaim"):
            return None
        if gk == "Pod" and review.operation != "CREATE":
            return None
        known = await self._of(review.namespace)
        if not known.ranges:
            return None
        if gk == "Pod":
            came = pod_shape(obj) if known.revs is not None else None
            verdict = known.verdicts.get(came) if came is not None else None
            if verdict is None:
                for c in known.compiled:
                    apply_defaults(c, obj)
                problems, effective = _pod_verdict(known.compiled, obj)
                shape = pod_shape(obj) if came is not None else None
                if came is not None and shape is not None:
                    if len(known.verdicts) >= VERDICTS:
                        known.verdicts.clear()
                    known.verdicts[came] = _Verdict(shape != came, shape, problems, effective)
            else:
                if verdict.defaults:
                    for c in known.compiled:
                        apply_defaults(c, obj)
                shape, problems, effective = verdict.shape, verdict.problems, verdict.effective
            if problems:
                raise _forbidden(review, problems)
            return Checked(effective, shape)
        for lr in known.ranges:
            problems = pvc_violations(lr, obj)
            if problems:
                raise _forbidden(review, problems)
        return None


def _pod_verdict(compiled: list[CompiledRange], pod: Obj) -> tuple[list[str], Effective | None]:
    """The violations of the first LimitRange the (defaulted) pod breaks, and its effective (requests, limits)
    when a Pod item needs them."""
    effective: Effective | None = None
    if any(c.pod for c in compiled):
        effective = pod_effective_nano(pod, "requests"), pod_effective_nano(pod, "limits")
    for c in compiled:
        problems = pod_violations(c, pod, effective)
        if problems:
            return problems, effective
    return [], effective


def _forbidden(review: Admission, problems: list[str]) -> errors.ApiError:
    plural = review.kind.plural
    who = f'{plural} "{review.name}"' if review.name else plural
    return errors.forbidden(f"{who} is forbidden: {aggregate(problems)}", plural, "", review.name)
