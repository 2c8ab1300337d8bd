"""Patch metadata for built-in kinds: how each list (and a few maps) merges, keyed by path pattern.

Role: the Go struct tags (`patchStrategy`, `patchMergeKey`, `listType`, `listMapKey`, `structType`) that
strategic merge patch and server-side apply need, for the core/apps/batch/policy types kubectl touches.

Invariants:
- A path is the tuple of map keys from the object root; list elements add no segment.
- A pattern `("*", "containers")` matches any path ending in `containers`; a pattern without a leading
  `"*"` matches only the full path. The longest matching pattern wins, so context decides (container
  `ports` vs Service `spec.ports`). Anything unlisted is atomic: replaced whole.
- Schemas are immutable values; `schema_for` builds a fresh one per call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from lite.records import dataclass

Path = tuple[str, ...]


@dataclass(frozen=True)
class ListRule:
    """How one list merges. `strategy` is "merge" (keyed by `merge_key`), "set" (primitives) or "atomic"."""

    strategy: str
    merge_key: str = ""
    # Server-side apply list-map keys (may differ from the SMP merge key) and their defaults.
    keys: tuple[str, ...] = ()
    defaults: tuple[tuple[str, Any], ...] = ()

    def key_of(self, item: Mapping[str, Any]) -> dict[str, Any]:
        """The SSA key of a list item, defaults filled in (e.g. protocol TCP for ports)."""
        dflt = dict(self.defaults)
        return {k: item.get(k, dflt.get(k)) for k in (self.keys or (self.merge_key,))
                if k in item or k in dflt}


ATOMIC = ListRule("atomic")


def keyed(key: str, *more: str, **defaults: Any) -> ListRule:
    """A list merged by `key` (SMP `patchMergeKey`); `more` adds SSA list-map keys, `defaults` their defaults."""
    return ListRule("merge", key, (key, *more), tuple(sorted(defaults.items())))


_PORTS = keyed("containerPort", "protocol", protocol="TCP")
_CONTAINER = ("containers", "initContainers", "ephemeralContainers")

_FIXED: dict[Path, ListRule] = {
    ("metadata", "ownerReferences"): keyed("uid"),
    ("*", "metadata", "ownerReferences"): keyed("uid"),
    ("metadata", "finalizers"): ListRule("set"),
    ("*", "metadata", "finalizers"): ListRule("set"),
    ("status", "conditions"): keyed("type"),
    ("*", "imagePullSecrets"): keyed("name"),
    ("*", "volumes"): keyed("name"),
    ("*", "hostAliases"): keyed("ip"),
    ("*", "topologySpreadConstraints"): keyed("topologyKey", "whenUnsatisfiable"),
    ("*", "resourceClaims"): keyed("name"),
    ("*", "schedulingGates"): keyed("name"),
    ("status", "podIPs"): keyed("ip"),
    ("status", "hostIPs"): keyed("ip"),
}


def _common_rules() -> dict[Path, ListRule]:
    rules = dict(_FIXED)
    for c in _CONTAINER:
        rules.update({
            ("*", c): keyed("name"),
            ("*", c, "ports"): _PORTS,
            ("*", c, "env"): keyed("name"),
            ("*", c, "volumeMounts"): keyed("mountPath"),
            ("*", c, "volumeDevices"): keyed("devicePath"),
        })
    return rules


_PER_KIND: dict[str, dict[Path, ListRule]] = {
    "Service": {("spec", "ports"): keyed("port", "protocol", protocol="TCP")},
    "Node": {("status", "addresses"): keyed("type"), ("spec", "taints"): ATOMIC,
             ("spec", "podCIDRs"): ListRule("set")},
    # admissionregistration.k8s.io/v1: `webhooks` is patchStrategy merge, patchMergeKey name (listType map)
    "ValidatingWebhookConfiguration": {("webhooks",): keyed("name")},
    "MutatingWebhookConfiguration": {("webhooks",): keyed("name")},
}

# Maps that are atomic for server-side apply (`+structType=atomic`): owned and replaced whole.
_ATOMIC_MAPS: dict[str, tuple[Path, ...]] = {
    kind: (("spec", "selector"),) for kind in
    ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "PodDisruptionBudget")
}


@dataclass(frozen=True)
class Schema:
    """Patch metadata of one kind. `Schema()` (no rules) treats every list as atomic."""

    rules: Mapping[Path, ListRule] = field(default_factory=dict)
    atomic_maps: tuple[Path, ...] = ()

    def list_rule(self, path: Path) -> ListRule:
        best: tuple[int, ListRule] = (-1, ATOMIC)
        for pattern, rule in self.rules.items():
            if pattern[0] == "*":
                tail = pattern[1:]
                ok = len(path) >= len(tail) and path[len(path) - len(tail):] == tail
                score = len(tail)
            else:
                ok, score = path == pattern, len(pattern) + 1000
            if ok and score > best[0]:
                best = (score, rule)
        return best[1]

    def is_atomic_map(self, path: Path) -> bool:
        return path in self.atomic_maps


def schema_for(kind: str, group: str = "") -> Schema:
    """The built-in schema for a kind name (e.g. "Deployment"); unknown kinds get the common rules."""
    del group  # kind names of the built-in types lite serves are unique across groups
    rules = _common_rules()
    rules.update(_PER_KIND.get(kind, {}))
    return Schema(rules, _ATOMIC_MAPS.get(kind, ()))
