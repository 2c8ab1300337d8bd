"""ValidatingAdmissionPolicy overhead: Pod creates/s with 10 policies bound against the same creates without
them, measured in the same run (issue 18: target, the policy create costs at most 1.3x the plain one).

In process (real SQLite store, `Resources` with the ValidatingAdmissionPolicy plugin, no HTTP), `--n` pod
creates per case, 16 at a time. The 10 policies each match pod CREATE in every namespace, each with a
binding (Deny) and one validation over the pod (containers, names, labels, security context), all of which
pass; a third case gives each policy a variable and a second validation with a messageExpression. The three
cases' stacks are open at once (each waits for its policies' status to be written: the status writer's first
run compiles the built-in schemas, then 200 creates not counted); the timed creates go in batches of 160, the
cases taking turns batch by batch (order rotating), `--rounds` rounds, so that every case sees the same load
of the shared machine.

Measured in creates per CPU-second of the process (time.process_time: the machine is shared, and wall-clock
rates swing with other load); per case the median of the rounds, and the range of the per-round ratios.

End to end (what a user sees; skipped with `--http-n 0`): one real `lite server` (API only) over HTTPS, pod
creates with `--concurrency` clients, rounds alternating between no bindings (baseline) and the same 10
policies bound (1 validation each): before each burst the bindings are created or deleted and a probe create
(a pod named `forbidden-1-...`, refused by policy bench-1 only while it is bound) shows the state is in force.
Figures: median creates/s of each side, the median of the per-round ratios (the two bursts of a round run
back to back, order alternating), and the server process's CPU time per create (/proc, same bursts: on a
shared machine wall-clock rates swing with other load much more than CPU time does).

Usage: python bench/admission_policies.py [--n 4800] [--rounds 5] [--dir DIR] [--http-n 600]
       [--http-rounds 4] [--concurrency 16] [--json FILE]   (cases interleaved, medians)
Prints the figures and the cost per create relative to the baseline (baseline rate / case rate) against the
1.3x target; exits 1, the error on the last line, when any create fails (or a policy refused one). Traffic
goes only to 127.0.0.1; the server is a child process stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import aiohttp  # noqa: E402
import benchlib  # noqa: E402
import orjson  # noqa: E402
from api import Target, ensure_namespace, start_lite  # noqa: E402
from cel import cpu_seconds  # noqa: E402

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


def policy(i: int, heavy: bool) -> dict[str, object]:
    """Policy bench-<i>: one validation; `heavy`: also a variable and a second validation with a
    messageExpression."""
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
    return {"apiVersion": f"{GROUP}/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
            "spec": spec}


def binding(i: int) -> dict[str, object]:
    name = f"bench-{i}"
    return {"apiVersion": f"{GROUP}/v1", "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]}}


async def bind_policies(r: Resources, kinds: KindRegistry, count: int, heavy: bool) -> None:
    """`count` policies (see `policy`), each with its binding."""
    for i in range(count):
        await r.create(kind(kinds, GROUP, "validatingadmissionpolicies"), "", policy(i, heavy))
        await r.create(kind(kinds, GROUP, "validatingadmissionpolicybindings"), "", binding(i))


WARM = 200


async def settled(r: Resources, kinds: KindRegistry, policies: int) -> None:
    """Until the plugin's status writer has written every policy's status (observedGeneration: its first
    run compiles the built-in schemas, a fraction of a second of CPU that must not fall in the timed window),
    then a moment for the informers to see the writes."""
    vap = kind(kinds, GROUP, "validatingadmissionpolicies")
    for _ in range(2000):
        items = (await r.list(vap)).get("items") or []
        if len(items) == policies and all((o.get("status") or {}).get("observedGeneration") for o in items):
            break
        await asyncio.sleep(0.01)
    else:
        raise Failed("the policies' status was never written")
    await asyncio.sleep(0.3)


CASES = [("no policies (baseline)", 0, False), ("10 policies bound, 1 validation each", 10, False),
         ("10 policies, 2 validations + a variable each", 10, True)]


async def in_process(d: Path, n: int, rounds: int) -> tuple[dict[str, list[float]], int]:
    """Every case's stack open at once in this process; creates in batches of 160 (16 at a time), the cases
    taking turns batch by batch (order rotating), so that each sees the same load of the shared machine. Per
    case and round: creates per CPU-second of the batches of that round. Also the number of failed creates."""
    failed = 0
    async with contextlib.AsyncExitStack() as stacks:
        made = []
        for i, (_label, policies, heavy) in enumerate(CASES):
            r, kinds = await stacks.enter_async_context(stack(d / f"{i}.db"))
            await bind_policies(r, kinds, policies, heavy)
            made.append((r, kinds))
        for (r, kinds), (_label, policies, _heavy) in zip(made, CASES, strict=True):
            await settled(r, kinds, policies)

        async def make(r: Resources, kinds: KindRegistry, k: int) -> None:
            nonlocal failed
            try:
                await r.create(kind(kinds, "", "pods"), "default", {
                    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{k}", "labels": {"app": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
            except Exception as e:  # counted: the bench fails when any create fails
                failed += 1
                if failed == 1:
                    print(f"create failed: {e}", file=sys.stderr)

        async def batch(i: int, first: int, count: int) -> float:
            r, kinds = made[i]
            start = time.process_time()  # CPU seconds of this process: less swayed by other load than wall time
            for j in range(first, first + count, 16):
                await asyncio.gather(*(make(r, kinds, x) for x in range(j, min(first + count, j + 16))))
            return time.process_time() - start

        for i in range(len(CASES)):  # warm-up, not counted (first evaluations, caches)
            await batch(i, 10**7, WARM)
        got: dict[str, list[float]] = {label: [] for label, _, _ in CASES}
        per_round = max(160, n // rounds)
        k = 0
        for rnd in range(rounds):
            cpu = [0.0] * len(CASES)
            for b in range(0, per_round, 160):
                order = list(range(len(CASES)))
                shift = (rnd + b // 160) % len(CASES)
                for i in order[shift:] + order[:shift]:
                    cpu[i] += await batch(i, k, 160)
                k += 160
            for i, (label, _, _) in enumerate(CASES):
                got[label].append(per_round / cpu[i])
    return got, failed


Failed = benchlib.BenchFailed


def pod_body(name: str) -> bytes:
    return orjson.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "b"}},
                         "spec": {"containers": [{"name": "c", "image": "busybox"}]}})


PODS = "/api/v1/namespaces/bench/pods"


async def pod_burst(t: Target, n: int, concurrency: int, prefix: str) -> float:
    """n pod creates with `concurrency` clients; creates/s; raises Failed on any answer but 201."""
    bodies = [pod_body(f"{prefix}-{i}") for i in range(n)]
    failures: list[str] = []
    next_i = 0

    async def worker(s: aiohttp.ClientSession) -> None:
        nonlocal next_i
        while next_i < n:
            i = next_i
            next_i += 1
            async with s.post(t.url + PODS, data=bodies[i], headers=t.headers) as r:
                text = await r.read()
                if r.status != 201:
                    failures.append(f"{r.status} {text[:300]!r}")

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency, ssl=t.ctx)) as s:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(s) for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
    if failures:
        raise Failed(f"{len(failures)} of {n} pod creates failed, first: {failures[0]}")
    return n / elapsed


async def set_bound(t: Target, s: aiohttp.ClientSession, bound: bool, probe: str) -> None:
    """Create (or delete) the 10 bindings, then probe until the policies are (or are no longer) enforced."""
    base = f"{t.url}/apis/{GROUP}/v1/validatingadmissionpolicybindings"
    for i in range(10):
        if bound:
            async with s.post(base, data=orjson.dumps(binding(i)), headers=t.headers) as r:
                if r.status != 201:
                    raise Failed(f"binding bench-{i}: {r.status} {await r.text()}")
        else:
            async with s.delete(f"{base}/bench-{i}", headers=t.headers) as r:
                if r.status != 200:
                    raise Failed(f"delete binding bench-{i}: {r.status} {await r.text()}")
    for k in range(400):  # policy bench-1 refuses names starting with forbidden-1
        async with s.post(t.url + PODS, data=pod_body(f"forbidden-1-{probe}-{k}"), headers=t.headers) as r:
            await r.read()
            if r.status == 201:
                async with s.delete(f"{t.url}{PODS}/forbidden-1-{probe}-{k}", headers=t.headers) as d:
                    await d.read()
            if (r.status != 201) == bound:
                if r.status not in (201, 403, 422):
                    raise Failed(f"probe: {r.status}")
                return
        await asyncio.sleep(0.025)
    raise Failed(f"the policies were never {'enforced' if bound else 'lifted'}")


async def end_to_end(n: int, rounds: int, conc: int) -> tuple[float, float, float, float, float]:
    """(baseline creates/s, bound creates/s, median of the rounds' baseline/bound rate ratios, baseline server
    CPU ms per create, bound ms per create)."""
    with tempfile.TemporaryDirectory(prefix="lite-bench-vap-") as tmp:
        t, _ = await start_lite(Path(tmp) / "data", "--disable-scheduler", "--disable-controller-manager")
        try:
            await ensure_namespace(t, "bench")
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=t.ctx)) as s:
                for i in range(10):
                    async with s.post(f"{t.url}/apis/{GROUP}/v1/validatingadmissionpolicies",
                                      data=orjson.dumps(policy(i, False)), headers=t.headers) as r:
                        if r.status != 201:
                            raise Failed(f"policy bench-{i}: {r.status} {await r.text()}")
                rates: dict[bool, list[float]] = {False: [], True: []}
                cpu = {False: 0.0, True: 0.0}
                state = False
                for rnd in range(rounds + 1):  # round 0 warms both sides up and is not counted
                    order = (False, True) if rnd % 2 == 0 else (True, False)
                    for bound in order:
                        if bound != state:
                            await set_bound(t, s, bound, f"{rnd}{int(bound)}")
                            state = bound
                        c0 = cpu_seconds(t.proc.pid)
                        rate = await pod_burst(t, n if rnd else 100, conc, f"r{rnd}-{int(bound)}")
                        if rnd:
                            cpu[bound] += cpu_seconds(t.proc.pid) - c0
                            rates[bound].append(rate)
                            print(f"  http round {rnd} {'10 policies bound' if bound else 'no bindings':<18} "
                                  f"{rate:7.0f} pod creates/s")
        finally:
            t.stop()
    done = n * rounds
    pairs = statistics.median(a / b for a, b in zip(rates[False], rates[True], strict=True))
    return (statistics.median(rates[False]), statistics.median(rates[True]), pairs, cpu[False] / done * 1000,
            cpu[True] / done * 1000)


async def main(args: argparse.Namespace, res: benchlib.Results) -> None:
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="vap-bench-") as d:
        got, failures = await in_process(Path(d), args.n, args.rounds)
    base = statistics.median(got[CASES[0][0]])
    for label, _, _ in CASES:
        med = statistics.median(got[label])
        ratios = sorted(b / v for b, v in zip(got[CASES[0][0]], got[label], strict=True))
        print(f"pod creates per CPU-second, {label:<44} median {med:>6.0f}   cost per create {base / med:.2f}x   "
              f"(rounds {ratios[0]:.2f}x-{ratios[-1]:.2f}x: {' '.join(f'{v:.0f}' for v in got[label])})")
    in_proc = base / statistics.median(got[CASES[1][0]])
    res.set("in_process_cost", in_proc)
    res.set("in_process_heavy_cost", base / statistics.median(got[CASES[2][0]]))
    if failures:
        res.error("an in-process create failed (see above)", failures)
        return
    if args.http_n <= 0:
        print(f"in process: 10 policies cost {in_proc:.2f}x the create without them (target <= 1.3x)")
        return
    plain, policed, pairs, cpu_plain, cpu_policed = await end_to_end(args.http_n, args.http_rounds, args.concurrency)
    print(f"end to end over HTTPS (lite server, {args.concurrency} clients, medians of {args.http_rounds} rounds): "
          f"no bindings (baseline) {plain:.0f} pod creates/s, 10 policies bound {policed:.0f}; server CPU per create "
          f"{cpu_plain:.3f} ms vs {cpu_policed:.3f} ms")
    print(f"figures against the 1.3x target: in process (CPU) {in_proc:.2f}x; end to end {plain / policed:.2f}x "
          f"(median creates/s; median of per-round ratios {pairs:.2f}x), {cpu_policed / cpu_plain:.2f}x (server "
          "CPU per create)")
    res.set("http_plain_creates_per_s", plain)
    res.set("http_policed_creates_per_s", policed)
    res.set("http_cost", plain / policed)
    res.set("http_pair_cost", pairs)
    res.set("plain_cpu_ms_per_create", cpu_plain)
    res.set("policed_cpu_ms_per_create", cpu_policed)
    res.set("cpu_cost", cpu_policed / cpu_plain)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4800)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--http-n", type=int, default=600)
    ap.add_argument("--http-rounds", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=16)
    benchlib.add_args(ap)
    cli = ap.parse_args()
    results = benchlib.Results.from_args("admission_policies", cli)
    benchlib.run(results, lambda: asyncio.run(main(cli, results)))
