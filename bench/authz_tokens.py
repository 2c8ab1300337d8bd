"""Token validations per second: ServiceAccount JWTs with the signature cache, without it, and the static admin
token as the baseline, all in the same run, over a real store.

Builds a Store (SQLite in a temp dir) and Resources with a ServiceAccount and a pod, issues a pod-bound token
through the TokenRequest path, then times `ClusterAuthenticator.token_user` (what every request with a bearer
token costs in authentication) for: the admin token (constant-time compare of static tokens), the
ServiceAccount token with its verification cached (claims checks plus the live ServiceAccount and pod looked
up every time), and the same with the cache off (RS256 signature verification and JWT parsing every time).

Usage: python bench/authz_tokens.py [--seconds 2]
No network traffic.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lite.kinds import KindRegistry
from lite.server.api.resources import Resources
from lite.server.api.strategies import default_strategies
from lite.server.auth import TokenAuthenticator
from lite.server.authn.authenticator import ClusterAuthenticator
from lite.server.authn.claims import DEFAULT_ISSUER
from lite.server.authn.serviceaccounts import ServiceAccountTokens
from lite.server.authn.signer import TokenSigner, ensure_signing_key
from lite.server.authn.wiring import resources_lookup
from lite.server.store import Store

ADMIN, JOIN = "a" * 64, "j" * 64


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls per second of `fn` over about `seconds`."""
    n, start = 0, time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(200):
            fn()
        n += 200
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - start)


async def main(seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="authn-bench-") as tmp:
        store = await Store.open(str(Path(tmp) / "lite.db"))
        try:
            kinds = KindRegistry()
            resources = Resources(store, kinds, default_strategies())
            await resources.start()
            sa_kind, pod_kind = resources.core_kind("serviceaccounts"), resources.core_kind("pods")
            await resources.create(sa_kind, "default", {"metadata": {"name": "bench"}})
            await resources.create(pod_kind, "default", {"metadata": {"name": "p"}, "spec": {
                "serviceAccountName": "bench", "containers": [{"name": "c", "image": "busybox"}]}})
            signer = TokenSigner(ensure_signing_key(Path(tmp) / "service.key"))
            lookup = resources_lookup(resources)
            cached = ServiceAccountTokens(signer, DEFAULT_ISSUER, (DEFAULT_ISSUER,), lookup=lookup)
            uncached = ServiceAccountTokens(signer, DEFAULT_ISSUER, (DEFAULT_ISSUER,), lookup=lookup, cache=False)
            resources.token_issuer = cached.issue
            req = await resources.create(sa_kind, "default", {"spec": {"expirationSeconds": 3600, "boundObjectRef": {
                "kind": "Pod", "apiVersion": "v1", "name": "p"}}}, name="bench", subresource="token")
            token = str(req["status"]["token"])
            static = TokenAuthenticator(ADMIN, JOIN)
            with_cache = ClusterAuthenticator(static, cached)
            without = ClusterAuthenticator(static, uncached)
            assert with_cache.token_user(ADMIN) == "admin"
            assert with_cache.token_user(token) is not None and without.token_user(token) is not None
            base = rate(lambda: with_cache.token_user(ADMIN), seconds)
            hot = rate(lambda: with_cache.token_user(token), seconds)
            cold = rate(lambda: without.token_user(token), seconds)
        finally:
            await store.close()
    print(f"baseline: static admin token          {base:10.0f} validations/s")
    print(f"ServiceAccount JWT, cached signature  {hot:10.0f} validations/s  ({hot / base:.2f}x baseline)")
    print(f"ServiceAccount JWT, uncached          {cold:10.0f} validations/s  ({cold / base:.2f}x baseline, "
          f"cache speed-up {hot / cold:.1f}x)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("authz_tokens"), lambda: asyncio.run(main(ap.parse_args().seconds)))
