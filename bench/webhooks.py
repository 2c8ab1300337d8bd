"""Admission plugin and secrets-encryption overhead, each against its baseline measured in the same run.

In process (real SQLite store, `Resources` with the admission plugins, no HTTP), `--n` writes per case:
- ConfigMap creates/s: no webhook configurations (baseline); 10 validating configurations that match
  nothing (namespaceSelector excludes the namespace: the cost of matching); one matching validating webhook
  served over HTTPS on 127.0.0.1 (allowed; the cost of a call);
- Pod creates/s: a namespace without Pod Security labels (baseline) against `enforce=restricted` +
  `warn=restricted` with compliant pods (every check runs);
- Secret creates/s: a store without a codec (baseline) against AES-GCM sealing.

Usage: python bench/webhooks.py [--n 2000] [--rounds 3] [--dir DIR]   (cases interleaved, medians)
Prints figures and ratios; asserts nothing. Traffic goes only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from lite.kinds import Kind, KindRegistry  # noqa: E402
from lite.server.admission import build_admission  # noqa: E402
from lite.server.api.resources import Resources  # noqa: E402
from lite.server.api.strategies import default_strategies  # noqa: E402
from lite.server.encryption.control import SecretsEncryption  # noqa: E402
from lite.server.store import Store  # noqa: E402
from tests.helpers.webhookserver import WebhookServer  # noqa: E402

# the plugins these runs exercise (the rest, e.g. ServiceAccount, would want objects they do not make)
WEBHOOKS_AND_PSA = frozenset({"MutatingAdmissionWebhook", "PodSecurity", "ValidatingAdmissionWebhook"})

GROUP = "admissionregistration.k8s.io"
SC = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
      "seccompProfile": {"type": "RuntimeDefault"}}


@asynccontextmanager
async def stack(path: Path, codec: Any = None) -> AsyncIterator[tuple[Resources, KindRegistry]]:
    store = await Store.open(str(path), codec=codec)
    kinds = KindRegistry()
    strategies = default_strategies()
    resources = Resources(store, kinds, strategies)
    tasks = build_admission(resources, kinds, strategies, enable=WEBHOOKS_AND_PSA).background
    await resources.start()
    running = [asyncio.create_task(run()) for _, run in tasks]
    try:
        yield resources, kinds
    finally:
        for t in running:
            t.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await store.close()


def kind(kinds: KindRegistry, group: str, plural: str) -> Kind:
    k = kinds.by_resource(group, "v1", plural)
    assert k is not None
    return k


async def rate(n: int, make: Callable[[int], Awaitable[Any]], concurrency: int = 16) -> float:
    start = time.perf_counter()
    for i in range(0, n, concurrency):
        await asyncio.gather(*(make(j) for j in range(i, min(n, i + concurrency))))
    return n / (time.perf_counter() - start)


async def namespace(r: Resources, kinds: KindRegistry, name: str, labels: dict[str, str] | None = None) -> None:
    await r.create(kind(kinds, "", "namespaces"), "", {"apiVersion": "v1", "kind": "Namespace",
                                                        "metadata": {"name": name, "labels": labels or {}}})


def webhook(name: str, client_config: dict[str, Any], selector: dict[str, Any]) -> dict[str, Any]:
    rule = {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}
    return {"name": f"{name}.bench.lite", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": client_config, "namespaceSelector": selector, "rules": [rule]}


Case = Callable[[Path, int], Awaitable[float]]


async def compare(title: str, cases: list[tuple[str, Case]], work: Path, n: int, rounds: int) -> None:
    """Each case `rounds` times, interleaved (the machine's load drifts); medians and ratios to the first."""
    got: dict[str, list[float]] = {label: [] for label, _ in cases}
    for r in range(rounds):
        for i, (label, case) in enumerate(cases):
            got[label].append(await case(work / f"{title}-{r}-{i}.db", n))
    base = statistics.median(got[cases[0][0]])
    for label, _ in cases:
        med = statistics.median(got[label])
        print(f"{title} creates/s, {label:<42} median {med:>7.0f}   ratio {med / base:.2f}   "
              f"rounds {' '.join(f'{v:.0f}' for v in got[label])}")


def configmap_case(hooks: list[dict[str, Any]]) -> Case:
    async def case(db: Path, n: int) -> float:
        async with stack(db) as (r, kinds):
            cm = kind(kinds, "", "configmaps")
            for j, h in enumerate(hooks):
                await r.create(kind(kinds, GROUP, "validatingwebhookconfigurations"), "", {
                    "apiVersion": f"{GROUP}/v1", "kind": "ValidatingWebhookConfiguration",
                    "metadata": {"name": f"cfg{j}"}, "webhooks": [h]})
            await asyncio.sleep(0.2)  # the informers list them
            return await rate(n, lambda k: r.create(cm, "default", {
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{k}"}, "data": {"k": "v"}}))
    return case


def pod_case(labels: dict[str, str]) -> Case:
    async def case(db: Path, n: int) -> float:
        async with stack(db) as (r, kinds):
            await namespace(r, kinds, "bench", labels)
            pod = kind(kinds, "", "pods")
            return await rate(n, lambda k: r.create(pod, "bench", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{k}"},
                "spec": {"containers": [{"name": "c", "image": "busybox", "securityContext": SC}]}}))
    return case


def secret_case(enable: bool) -> Case:
    async def case(db: Path, n: int) -> float:
        enc = SecretsEncryption.prepare(db.with_suffix(".cred"), enable) if enable else None
        async with stack(db, enc.codec if enc else None) as (r, kinds):
            secret = kind(kinds, "", "secrets")
            return await rate(n, lambda k: r.create(secret, "default", {
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"s{k}"},
                "data": {"password": "aHVudGVyMg==", "pad": "eHh4" * 256}}))
    return case


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="webhooks-bench-") as d:
        work = Path(d)
        hook = WebhookServer(work).start()
        try:
            ca = {"url": hook.url("/validate"), "caBundle": hook.ca_bundle}
            elsewhere = {"matchLabels": {"kubernetes.io/metadata.name": "elsewhere"}}
            await compare("configmap", [
                ("no webhook configurations (baseline)", configmap_case([])),
                ("10 non-matching configurations", configmap_case([webhook(f"w{i}", ca, elsewhere)
                                                                   for i in range(10)])),
                ("1 matching validating webhook (HTTPS)", configmap_case([webhook("call", ca, {})])),
            ], work, args.n, args.rounds)
        finally:
            hook.stop()
        await compare("pod", [
            ("namespace without labels (baseline)", pod_case({})),
            ("enforce+warn restricted, compliant pods", pod_case({
                "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/warn": "restricted"})),
        ], work, args.n, args.rounds)
        await compare("secret", [("plain (baseline)", secret_case(False)), ("AES-GCM sealed", secret_case(True))],
                      work, args.n, args.rounds)

if __name__ == "__main__":
    import benchlib  # bench/ is on sys.path: the script's own directory

    benchlib.run(benchlib.Results("webhooks"), lambda: asyncio.run(main()))
