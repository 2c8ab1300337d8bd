"""The desired contents of one nftables table as plain data, and the one-transaction diff between two of them.

Role: the pure half of the service proxy's syncer. `Table` holds chains (rules as nft text), verdict maps and
sets with their elements; `transaction(old, new)` renders the nft command buffer that turns `old` into `new`;
`from_json` rebuilds a `Table` from what the kernel holds (`nft -j list table`), so a restarted agent reconciles
instead of flushing. No OS calls here.

Invariants:
- The buffer touches only what differs: chains whose rules changed are flushed and refilled, unchanged chains
  are not mentioned; map and set elements are added, deleted or replaced one by one. Applied as ONE transaction
  (see `nftables.Nft.run`), so a packet sees either the old or the new table, never a mix: a service present in
  both keeps answering.
- Order inside the buffer makes every reference valid at each step: declare new chains, flush changed and
  doomed chains, delete elements, (re)create sets and maps, add elements, add rules, delete doomed chains and
  sets last, once nothing refers to them.
- A chain read back from the kernel has `rules=None` (unknown): the next transaction flushes and refills it if
  it is still wanted (atomic, so no window), and deletes it otherwise. Elements read back are exact.
- Sets with a timeout are dynamic (filled by the packet path, e.g. ClientIP affinity): their elements are never
  managed here, and they are kept across syncs unless their type or timeout changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from lite.records import dataclass

Elements = Mapping[str, str]  # key → value; for plain sets the value is ""


@dataclass(frozen=True)
class Chain:
    """A chain: `hook` is the base-chain spec (`type nat hook output priority -100 ; policy accept ;`) or ""."""

    rules: tuple[str, ...] | None
    hook: str = ""


@dataclass(frozen=True)
class Set:
    """A set (`data == ""`) or verdict map (`data == "verdict"`); `timeout` > 0 makes it dynamic (see module)."""

    type: str
    data: str = ""
    timeout: int = 0
    elements: Elements = field(default_factory=dict)

    def signature(self) -> tuple[str, str, int]:
        return (self.type, self.data, self.timeout)

    def declaration(self) -> str:
        spec = f"type {self.type}" + (f" : {self.data}" if self.data else "") + " ;"
        if self.timeout:
            spec += f" flags dynamic,timeout ; timeout {self.timeout}s ;"
        return "{ " + spec + " }"


@dataclass(frozen=True)
class Table:
    family: str
    name: str
    chains: Mapping[str, Chain] = field(default_factory=dict)
    sets: Mapping[str, Set] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        return f"{self.family} {self.name}"


def transaction(old: Table | None, new: Table) -> str:
    """The nft buffer turning `old` (None: no such table) into `new`; "" when nothing differs."""
    old = old or Table(new.family, new.name)
    t = new.ref
    out: list[str] = []
    # `is` first: a syncer that keeps unchanged chains and sets as the same objects (the policy renderer does)
    # gets the diff of a large table in time proportional to what changed.
    changed = [n for n, c in new.chains.items()
               if (o := old.chains.get(n)) is None or c.rules is None or (o is not c and o != c)]
    doomed = [n for n in old.chains if n not in new.chains]
    set_gone = [n for n, s in old.sets.items()
                if (ns := new.sets.get(n)) is None or (ns is not s and s.signature() != ns.signature())]
    gone = set(set_gone)
    set_new = [n for n in new.sets if n not in old.sets or n in gone]
    for name in changed:
        chain = new.chains[name]
        if name not in old.chains or chain.hook != old.chains[name].hook:
            out.append(f"add chain {t} {name}" + (" { " + chain.hook + " }" if chain.hook else ""))
    out += [f"flush chain {t} {n}" for n in changed + doomed if n in old.chains]
    for name, s in new.sets.items():
        if name in old.sets and name not in set_gone and not s.timeout and old.sets[name] is not s:
            stale = [k for k, v in old.sets[name].elements.items() if s.elements.get(k, None) != v]
            out += _elements("delete", t, name, stale, old.sets[name].elements)
    out += [f"delete set {t} {n}" if not old.sets[n].data else f"delete map {t} {n}" for n in set_gone]
    for name in set_new:
        s = new.sets[name]
        out.append(f"add {'map' if s.data else 'set'} {t} {name} {s.declaration()}")
    for name, s in new.sets.items():
        if s.timeout:
            continue
        if name not in set_new and old.sets[name] is s:
            continue
        before = {} if name in set_new else old.sets[name].elements
        fresh = [k for k, v in s.elements.items() if before.get(k, None) != v]
        out += _elements("add", t, name, fresh, s.elements)
    for name in changed:
        out += [f"add rule {t} {name} {rule}" for rule in new.chains[name].rules or ()]
    out += [f"delete chain {t} {n}" for n in doomed]
    if not out:
        return ""
    return "\n".join([f"add table {t}", *out]) + "\n"


def _elements(verb: str, table: str, name: str, keys: list[str], values: Elements) -> list[str]:
    if not keys:
        return []
    items = [f"{k} : {values[k]}" if values[k] else k for k in sorted(keys)]
    # One command per 1,000 elements keeps each line of the buffer reasonable for the nft parser.
    return [f"{verb} element {table} {name} {{ {', '.join(items[i : i + 1000])} }}" for i in range(0, len(items), 1000)]


def from_json(items: list[dict[str, Any]], family: str, name: str) -> Table | None:
    """The table `family name` as held by the kernel (from `Nft.json("list table ...")`); None if absent."""
    chains: dict[str, Chain] = {}
    sets: dict[str, Set] = {}
    found = False
    for item in items:
        if "table" in item:
            found = found or (item["table"]["family"], item["table"]["name"]) == (family, name)
        elif "chain" in item:
            c = item["chain"]
            hook = ""
            if "hook" in c:
                hook = f"type {c['type']} hook {c['hook']} priority {c['prio']} ; policy {c.get('policy', 'accept')} ;"
            chains[c["name"]] = Chain(None, hook)
        elif "set" in item or "map" in item:
            s = item.get("set") or item["map"]
            sets[s["name"]] = _set_from_json(s)
    return Table(family, name, chains, sets) if found else None


def _set_from_json(s: dict[str, Any]) -> Set:
    typ = s["type"]
    type_text = " . ".join(typ) if isinstance(typ, list) else str(typ)
    timeout = int(s.get("timeout", 0))
    elements: dict[str, str] = {}
    if not timeout:
        for elem in s.get("elem", []):
            if isinstance(elem, list):
                elements[_value_text(elem[0])] = _verdict_text(elem[1])
            else:
                elements[_value_text(elem)] = ""
    return Set(type_text, str(s.get("map", "")), timeout, elements)


def _value_text(value: Any) -> str:
    if isinstance(value, dict) and "concat" in value:
        return " . ".join(_value_text(v) for v in value["concat"])
    if isinstance(value, dict) and "prefix" in value:
        return f"{value['prefix']['addr']}/{value['prefix']['len']}"
    return str(value)


def _verdict_text(value: Any) -> str:
    if isinstance(value, dict):
        ((verdict, arg),) = value.items()
        if isinstance(arg, dict) and "target" in arg:
            return f"{verdict} {arg['target']}"
        return str(verdict)
    return str(value)
