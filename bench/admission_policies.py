"""ValidatingAdmissionPolicy overhead: Pod creates/s with 10 policies bound against the same creates without
them, measured in the same run (issue 18: target, the policy create costs at most 1.3x the plain one).

In process (real SQLite store, `Resources` with the ValidatingAdmissionPolicy plugin, no HTTP), `--n` pod
creates per case, 16 at a time. The 10 policies each match pod CREATE in every namespace, each with a
binding (Deny) and one validation over the pod (containers, names, labels, security context), all of which
pass; a third case gives each policy a variable and a second validation with a messageExpression.

Measured in creates per CPU-second of the process (time.process_time: the machine is shared, and wall-clock
rates swing with other load).
Usage: python bench/admission_policies.py [--n 2000] [--rounds 3] [--dir DIR]   (cases interleaved, medians)
Prints the figures and the cost per create relative to the baseline (baseline rate / case rate); exits 1
when any create fails (or a policy refused one).
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from lite.kinds import Kind, KindRegistry  # noqa: E402
from lite.server.admission import build_admission  # noqa: E402
from lite.server.api.resources import Resources  # noqa: E402
from lite.server.api.strategies import default_strategies  # noqa: E402
from lite.server.store import Store  # noqa: E402

GROUP = "admissionregistration.k8s.io"
VALIDATIONS = [
    "object.spec.containers.all(c, has(c.image) && c.image != 'forbidden-X')",
    "object.metadata.name.size() <= 63 && !object.metadata.name.startsWith('forbidden-X')",
    "!has(object.metadata.labels) || !('tier' in object.metadata.labels) || object.metadata.labels.tier != 'X'",
    "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) || "
    "!c.securityContext.privileged || c.name == 'X')",
    "object.spec.containers.size() > 0 && object.spec.containers.size() < 100 + X",
]


@asynccontextmanager
async def stack(path: Path) -> AsyncIterator[tuple[Resources, KindRegistry]]:
    store = await Store.open(str(path))
    kinds = KindRegistry()
    strategies = default_strategies()
    resources = Resources(store, kinds, strategies)
    tasks = build_admission(resources, kinds, strategies, enable=frozenset({"ValidatingAdmissionPolicy"})).background
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


async def bind_policies(r: Resources, kinds: KindRegistry, count: int, heavy: bool) -> None:
    """`count` policies, each with one validation; `heavy`: each also has a variable and a second validation
    with a messageExpression."""
    for i in range(count):
        name = f"bench-{i}"
        # ten different expressions: five shapes, each with its own constant
        validations: list[dict[str, str]] = [{"expression": VALIDATIONS[i % len(VALIDATIONS)].replace("X", str(i))}]
        spec: dict[str, object] = {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": ["pods"]}]},
            "validations": validations}
        if heavy:
            spec["variables"] = [{"name": "count", "expression": "object.spec.containers.size()"}]
            validations.append({"expression": "variables.count <= 10",
                                "messageExpression": "'refused ' + object.metadata.name"})
        await r.create(kind(kinds, GROUP, "validatingadmissionpolicies"), "", {
            "apiVersion": f"{GROUP}/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
            "spec": spec})
        await r.create(kind(kinds, GROUP, "validatingadmissionpolicybindings"), "", {
            "apiVersion": f"{GROUP}/v1", "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]}})


Case = Callable[[Path, int], Awaitable[tuple[float, int]]]


def pod_case(policies: int, heavy: bool = False) -> Case:
    async def case(db: Path, n: int) -> tuple[float, int]:
        async with stack(db) as (r, kinds):
            await bind_policies(r, kinds, policies, heavy)
            await asyncio.sleep(0.3)  # the informers list them
            pod = kind(kinds, "", "pods")
            failed = 0

            async def make(k: int) -> None:
                nonlocal failed
                try:
                    await r.create(pod, "default", {
                        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{k}", "labels": {"app": "b"}},
                        "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
                except Exception as e:  # counted: the bench fails when any create fails
                    failed += 1
                    if failed == 1:
                        print(f"create failed: {e}", file=sys.stderr)

            start = time.process_time()  # CPU seconds of this process (all threads): less swayed by other load
            for i in range(0, n, 16):
                await asyncio.gather(*(make(j) for j in range(i, min(n, i + 16))))
            return n / (time.process_time() - start), failed
    return case


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cases = [("no policies (baseline)", pod_case(0)), ("10 policies bound, 1 validation each", pod_case(10)),
             ("10 policies, 2 validations + a variable each", pod_case(10, True))]
    got: dict[str, list[float]] = {label: [] for label, _ in cases}
    failures = 0
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="vap-bench-") as d:
        for rnd in range(args.rounds):
            for i, (label, case) in enumerate(cases):
                rate, failed = await case(Path(d) / f"{rnd}-{i}.db", args.n)
                got[label].append(rate)
                failures += failed
    base = statistics.median(got[cases[0][0]])
    for label, _ in cases:
        med = statistics.median(got[label])
        print(f"pod creates per CPU-second, {label:<44} median {med:>6.0f}   cost per create {base / med:.2f}x   "
              f"rounds {' '.join(f'{v:.0f}' for v in got[label])}")
    if failures:
        print(f"{failures} creates failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
