"""What a simulated node looks like: node groups (count, name prefix, capacity, labels, taints) and parsing.

Role: turn the `lite agent --simulate` flags (and repeatable `--node-group` specs) into frozen `NodeGroup`
records, and parse the small value syntaxes they use (`k=v,...` labels, `k=v:Effect` taints, Go durations
such as `2s` or `1m30s`).

`--node-group` syntax: fields separated by `;`, each `key=value`; keys `count` (required), `prefix`, `cpu`,
`memory`, `pods`, `ephemeral-storage`, `labels` (`k=v,k2=v2`), `taints` (`k=v:Effect,k2:Effect`). Example:
`count=2;prefix=gpu;cpu=16;memory=64Gi;labels=gpu=true;taints=gpu=true:NoSchedule`.

Invariants: pure; every malformed value raises ValueError with a message fit for the command line.
"""

from __future__ import annotations

import re
from dataclasses import field

from lite.quantity import parse_quantity
from lite.records import dataclass

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class NodeGroup:
    """`count` identical nodes named `<prefix>-<i>`."""

    count: int
    prefix: str = "sim"
    cpu: str = "4"
    memory: str = "8Gi"
    pods: str = "110"
    ephemeral_storage: str = "100Gi"
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[tuple[str, str, str], ...] = field(default=())  # (key, value, effect)

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError(f"node count must not be negative: {self.count}")
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", self.prefix):
            raise ValueError(f"node prefix must be a DNS-1123 subdomain: {self.prefix!r}")
        for name, value in (("cpu", self.cpu), ("memory", self.memory), ("pods", self.pods),
                            ("ephemeral-storage", self.ephemeral_storage)):
            try:
                if parse_quantity(value) < 0:
                    raise ValueError
            except ValueError:
                raise ValueError(f"invalid {name} quantity: {value!r}") from None

    def names(self) -> list[str]:
        return [f"{self.prefix}-{i}" for i in range(self.count)]

    def resources(self) -> dict[str, str]:
        return {"cpu": self.cpu, "memory": self.memory, "pods": self.pods,
                "ephemeral-storage": self.ephemeral_storage}


def parse_labels(text: str) -> tuple[tuple[str, str], ...]:
    """`k=v,k2=v2` (a bare `k` means an empty value)."""
    out: list[tuple[str, str]] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        if not key:
            raise ValueError(f"invalid label {part!r}: expected key=value")
        out.append((key, value))
    return tuple(out)


def parse_taints(text: str) -> tuple[tuple[str, str, str], ...]:
    """`k=v:Effect,k2:Effect` as kubectl taint writes them."""
    out: list[tuple[str, str, str]] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        kv, sep, effect = part.rpartition(":")
        if not sep or effect not in TAINT_EFFECTS:
            raise ValueError(f"invalid taint {part!r}: expected key[=value]:{'|'.join(TAINT_EFFECTS)}")
        key, _, value = kv.partition("=")
        if not key:
            raise ValueError(f"invalid taint {part!r}: empty key")
        out.append((key, value, effect))
    return tuple(out)


_GROUP_KEYS = {"count", "prefix", "cpu", "memory", "pods", "ephemeral-storage", "labels", "taints"}


def parse_node_group(text: str) -> NodeGroup:
    """One `--node-group` spec (see the module docstring)."""
    fields: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        key, sep, value = part.partition("=")
        if not sep or key not in _GROUP_KEYS:
            raise ValueError(f"invalid node group field {part!r}: keys are {', '.join(sorted(_GROUP_KEYS))}")
        fields[key] = value
    if "count" not in fields:
        raise ValueError(f"node group {text!r} needs count=N")
    try:
        count = int(fields.pop("count"))
    except ValueError:
        raise ValueError(f"node group {text!r}: count must be an integer") from None
    labels = parse_labels(fields.pop("labels", ""))
    taints = parse_taints(fields.pop("taints", ""))
    kw = {k.replace("-", "_"): v for k, v in fields.items()}
    return NodeGroup(count, labels=labels, taints=taints, **kw)


def check_unique(groups: list[NodeGroup]) -> None:
    """Node names must not repeat across groups."""
    seen: set[str] = set()
    for g in groups:
        for name in g.names():
            if name in seen:
                raise ValueError(f"node name {name} appears in two node groups; give them different prefixes")
            seen.add(name)


def parse_duration(text: str) -> float:
    """A Go duration (`2s`, `1m30s`, `500ms`; a bare number is seconds) in seconds."""
    s = text.strip()
    try:
        return max(0.0, float(s))
    except ValueError:
        pass
    pos, total = 0, 0.0
    for m in _DURATION.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(f"invalid duration {text!r}")
    return total
