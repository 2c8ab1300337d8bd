"""`handlers.media_type`: the request's media type as aiohttp's `content_type` gives it, for every header value."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from lite.server.api.handlers import _BARE_MEDIA, media_type


@pytest.mark.parametrize("header", [
    *sorted(_BARE_MEDIA), None, "", "application/json; charset=utf-8", "Application/JSON", "application/json ",
    "application/vnd.kubernetes.protobuf", "text/yaml", "application/merge-patch+json;charset=utf-8", "garbage",
])
def test_media_type_is_aiohttps(header: str | None) -> None:
    request = make_mocked_request("POST", "/api/v1/namespaces/a/pods",
                                  headers={} if header is None else {"Content-Type": header})
    assert media_type(request) == request.content_type
