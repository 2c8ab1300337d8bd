"""The object of an admission request in the version a webhook or policy sees it in, and back.

`equivalent.present`/`take_back` (pure: lite's view conversions, a CRD's None conversion), plus the CRD's
conversion webhook, through the API server's `Converter`, for the versions of a custom kind converted by one
(as upstream converts a custom object to a hook's version with the CRD's converter).

Invariants: `converter` None (a hook set up without one) refuses such a conversion with a 500 naming it,
never presents the object unconverted; a conversion webhook's failure is the request's failure (its 500).
"""

from __future__ import annotations

from typing import Any

from lite import errors
from lite.kinds import Kind
from lite.server.admission import equivalent
from lite.server.api.conversion import Converter

Obj = dict[str, Any]


def by_webhook(stored: Kind, seen: Kind) -> bool:
    """Whether showing an object of `stored` in `seen`'s version needs the CRD's conversion webhook."""
    return seen.converts_by_webhook and equivalent.key(seen) != equivalent.key(stored)


async def _convert(converter: Converter | None, to: Kind, obj: Obj) -> Obj:
    if converter is None:
        raise errors.internal(f"cannot convert to {to.api_version} {to.kind} for admission: no converter")
    return (await converter.convert(to, [obj]))[0]


async def present(converter: Converter | None, stored: Kind, seen: Kind, obj: Obj | None) -> Obj | None:
    if obj is None or not by_webhook(stored, seen):
        return equivalent.present(stored, seen, obj)
    return await _convert(converter, seen, obj)


async def take_back(converter: Converter | None, stored: Kind, seen: Kind, obj: Obj) -> Obj:
    if not by_webhook(stored, seen):
        return equivalent.take_back(stored, seen, obj)
    return await _convert(converter, stored, obj)
