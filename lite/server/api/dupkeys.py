"""Duplicate keys in JSON and YAML request bodies (for `fieldValidation=Strict|Warn`).

Role: orjson (the fast decoder) silently keeps the last of duplicate keys, as Go's decoder does; upstream's
strict decoding reports them (`duplicate field "metadata.name"`). `duplicates(raw, obj)` answers that
without slowing the common case: a C-speed count of the key-like `":` sequences in the raw bytes is
compared with the number of keys in the decoded object, and only when the text holds more (a duplicate, or
a string value that contains `":`) is the body parsed again by the stdlib decoder, which sees every key.

Invariants:
- Pure functions; a body that is not valid JSON (YAML) goes through a PyYAML loader that records repeated
  mapping keys with their line numbers, worded as upstream's YAML errors (`line 4: key "name" already set in
  map`).
- The count never misses a key (a key's closing quote is either unescaped or follows an escaped backslash,
  and both are counted), so "no more key-like sequences than keys" proves there is no duplicate.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

from lite.server.api.typecheck import count_keys

_SPACED_KEY = re.compile(rb'"[ \t\r\n]+:')


class _Pairs(dict[str, Any]):
    """A decoded JSON object that remembers which of its keys appeared more than once."""

    dups: list[str]


def _pairs(items: list[tuple[str, Any]]) -> _Pairs:
    out = _Pairs()
    dups: list[str] = []
    for k, v in items:
        if k in out and k not in dups:
            dups.append(k)
        out[k] = v
    out.dups = dups
    return out


def _keyish(raw: bytes) -> int:
    """An upper bound of the keys in a JSON text: `":` sequences, less those whose quote is escaped (`\\":`
    inside a string), plus those where the escape was itself an escaped backslash (`\\\\":`, a key ending in
    a backslash); with whitespace before a colon, those too (over-counting is safe, under-counting is not)."""
    n = raw.count(b'":')
    # Single-byte searches (memchr) first: a two-byte search scans at a few ns per byte, ~3 us for a 2 KB pod,
    # and a compact body (what clients send) has no backslash and no whitespace outside its strings.
    if b"\\" in raw:
        n += raw.count(b'\\\\":') - raw.count(b'\\":')
    if (b" " in raw and b'" ' in raw) or (b"\n" in raw and b'"\n' in raw) or (b"\t" in raw and b'"\t' in raw) \
            or (b"\r" in raw and b'"\r' in raw):
        n += len(_SPACED_KEY.findall(raw))
    return n


def _paths(value: Any, out: list[str]) -> None:
    """Paths of the recorded duplicates, in document order (an explicit stack: nesting may be deep)."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        v, path = stack.pop()
        if isinstance(v, dict):
            out.extend(f"{path}.{k}" if path else k for k in getattr(v, "dups", ()))
            stack.extend((x, f"{path}.{k}" if path else k) for k, x in reversed(v.items())
                         if isinstance(x, (dict, list)))
        elif isinstance(v, list):
            stack.extend((x, f"{path}[{i}]") for i, x in reversed(list(enumerate(v))) if isinstance(x, (dict, list)))


def json_duplicates(raw: bytes, decoded: Any, keys: int = -1) -> list[str]:
    """Paths of duplicate keys in a JSON body (`decoded` is what orjson made of it), in document order.
    `keys` is the number of keys in `decoded` when the caller counted them already (never more than there
    are: fewer only costs the slow check)."""
    if not isinstance(decoded, (dict, list)):
        return []
    if _keyish(raw) <= (keys if keys >= 0 else count_keys(decoded)):
        return []
    try:
        full = json.loads(raw, object_pairs_hook=_pairs)
    except (ValueError, RecursionError):  # too deep for the stdlib decoder: the check is skipped
        return []
    out: list[str] = []
    _paths(full, out)
    return out


@cache
def _dup_loader() -> Any:
    """The loader class, made at the first YAML body (PyYAML is never loaded by a server that gets none)."""
    import yaml

    class _DupLoader(yaml.SafeLoader):
        """SafeLoader that records repeated mapping keys instead of keeping the last silently."""

        found: list[tuple[int, str]]

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    key = key_node.value
                    if key in seen and key != "<<":
                        line = key_node.start_mark.line + 1
                        self.found.append((line, f'line {line}: key "{key}" already set in map'))
                    seen.add(key)
            return super().construct_mapping(node, deep)

    return _DupLoader


def yaml_duplicates(raw: bytes) -> list[str]:
    """Upstream-worded problems for repeated keys in a YAML body (empty when it cannot be parsed)."""
    import yaml

    loader = _dup_loader()(raw)
    loader.found = []
    try:
        loader.get_single_data()
    except (yaml.YAMLError, RecursionError):
        return []
    finally:
        loader.dispose()
    return [text for _, text in sorted(loader.found)]  # outer mappings are built first: report by line
