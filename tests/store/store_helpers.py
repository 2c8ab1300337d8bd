"""Helpers shared by the store tests (imported by basename: tests/store is on sys.path under pytest)."""

from __future__ import annotations

from typing import Any


def pod(name: str, ns: str = "default", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, **extra}
