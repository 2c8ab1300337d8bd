"""Warnings that admission adds to the response of the current API request (webhook `response.warnings`,
Pod Security `warn` mode), as upstream's `warning.AddWarning(ctx, ...)` does.

Role: the HTTP layer calls `begin()` once per request before running the handler and `collected()` when it
writes the response (success or error), turning each text into a `Warning: 299 - "..."` header; admission
hooks call `add_warning(text)`.

Invariants:
- `ADMISSION_WARNINGS` is a `ContextVar`: each aiohttp request runs in its own task and sees only its own
  list; in-process callers (controllers) have none, and `add_warning` then drops the text.
- It is the only module-level object here and holds no state of its own.
"""

from __future__ import annotations

from contextvars import ContextVar

ADMISSION_WARNINGS: ContextVar[list[str] | None] = ContextVar("lite_admission_warnings", default=None)


def begin() -> list[str]:
    """A fresh list for the current request's warnings."""
    texts: list[str] = []
    ADMISSION_WARNINGS.set(texts)
    return texts


def add_warning(text: str) -> None:
    texts = ADMISSION_WARNINGS.get()
    if texts is not None and text:
        texts.append(text)


def collected() -> list[str]:
    return list(ADMISSION_WARNINGS.get() or [])
