"""Create-only review resources (TokenReview, SelfSubjectReview, ...): objects computed, never stored.

Role: a review kind is a `virtual` Kind whose only verb is `create`. `handle` dispatches a POST to it to the
`Reviewer` registered for its `Kind.resource` in `request.app[REVIEWS]` (registered by whoever implements
it, e.g. `lite.server.authn.reviews`), and answers 201 with the filled-in object, as upstream.

Invariants:
- Nothing is written to the store; dryRun changes nothing (there is nothing to skip).
- The HTTP layer decodes and type-checks the body as for any create (`fieldValidation` included) before
  `handle` sees it; metadata is echoed back as sent.
- A review kind nobody registered answers 404 (the resource is listed, its implementation is not wired).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from lite.errors import bad_request, method_not_allowed, path_not_found
from lite.kinds import Kind
from lite.objects import Obj

# reviewer(request, kind, body) -> the body with its status filled in
Reviewer = Callable[[web.Request, Kind, Obj], Awaitable[Obj]]
REVIEWS: web.AppKey[dict[str, Reviewer]] = web.AppKey("lite_reviews", dict)


def is_review(kind: Kind) -> bool:
    return kind.virtual and kind.verbs == ("create",)


def register(app: web.Application, resource: str, reviewer: Reviewer) -> None:
    """Serve `resource` (e.g. `tokenreviews.authentication.k8s.io`) with `reviewer`."""
    app.setdefault(REVIEWS, {})[resource] = reviewer


def check_request(request: web.Request, kind: Kind, name: str) -> None:
    """Only POST to the collection is served: an item path is 404 (upstream registers none), any other
    method 405."""
    if name:
        raise path_not_found()
    if request.method != "POST":
        raise method_not_allowed(f"the server does not allow this method on the requested resource "
                                 f"({request.method} {kind.resource})")


async def handle(request: web.Request, kind: Kind, obj: Obj) -> Obj:
    """Review the decoded, type-checked body (apiVersion/kind already checked against the URL)."""
    reviewer = request.app.get(REVIEWS, {}).get(kind.resource)
    if reviewer is None:
        raise path_not_found()
    if not isinstance(obj.get("metadata", {}), dict):
        raise bad_request("metadata must be an object")
    obj.setdefault("metadata", {})
    return await reviewer(request, kind, obj)
