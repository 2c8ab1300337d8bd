"""Patching: RFC 6902 JSON patch, RFC 7386 merge patch, strategic merge patch, server-side apply.

Every function here is pure: it returns a new document and leaves its inputs untouched.
"""

from lite.patch.jsonpatch import json_equal, json_patch, merge_patch, parse_pointer
from lite.patch.schema import ATOMIC, ListRule, Schema, schema_for
from lite.patch.strategic import strategic_merge

__all__ = [
    "ATOMIC",
    "ListRule",
    "Schema",
    "json_equal",
    "json_patch",
    "merge_patch",
    "parse_pointer",
    "schema_for",
    "strategic_merge",
]
