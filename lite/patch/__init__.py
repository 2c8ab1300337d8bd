"""Patching: RFC 6902 JSON patch, RFC 7386 merge patch, strategic merge patch, server-side apply.

Every function here is pure: it returns a new document and leaves its inputs untouched.
"""

from lite.patch.fieldset import from_fields_v1, object_fields, to_fields_v1
from lite.patch.jsonpatch import json_equal, json_patch, merge_patch, parse_pointer
from lite.patch.schema import ATOMIC, ListRule, Schema, schema_for
from lite.patch.ssa import apply, record_update
from lite.patch.strategic import strategic_merge

__all__ = [
    "ATOMIC",
    "ListRule",
    "Schema",
    "apply",
    "from_fields_v1",
    "json_equal",
    "json_patch",
    "merge_patch",
    "object_fields",
    "parse_pointer",
    "record_update",
    "schema_for",
    "strategic_merge",
    "to_fields_v1",
]
