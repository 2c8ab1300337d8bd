"""Cluster DNS benchmark: lite's node DNS server against dnsmasq, with dnsperf, on loopback only.

Prints (issue 8, item 3; targets: lite >= 0.5 x dnsmasq queries/s, lite p99 <= 2 ms):
- queries/s, mean and p99 latency of lite's DnsServer answering `svc<i>.bench.svc.cluster.local A` for N
  Services (dnsperf, UDP, `--duration` seconds), next to dnsmasq answering the same names from a hosts file,
  measured in the same run with the same dnsperf settings;
- the same with 10 % of the queries for names outside the cluster (`ext<j>.example.test`), forwarded by lite to
  an upstream (a second dnsmasq on another loopback address, with those names in its hosts file) and cached;
  dnsmasq forwards them to the same upstream (and caches them too);
- each mix also at a fixed rate (`--rate`, default 10,000 q/s) for both, where p99 is the server's latency
  rather than queueing behind dnsperf's 100 outstanding queries;
- lite's CPU seconds per 1,000 answers, and the forwarder's cache hits and misses. A hit is a render of a
  cached upstream answer; the same query again within that second of the answer's age is served from the
  server's memo and not counted, so hits are far fewer than the forwarded queries answered from cache.
The lite server runs in a child process of its own (one asyncio loop, as in the agent), so the dnsperf
process and this script do not share its loop. Latencies come from `dnsperf -v` (one line per query).

Usage: python bench/dns.py [--services 1000] [--duration 10] [--clients 4] [--rate 10000] [--json FILE]
Needs the Debian packages dnsperf and dnsmasq ("not measured" with a message when missing). Binds 127.0.54.1-3
only. Figures are printed, never asserted. Exits 1, the error on the last line, when a query is lost or answered
with anything but NOERROR, by lite or by dnsmasq.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib
from benchlib import BenchFailed

LITE_HOST, DNSMASQ_HOST, UPSTREAM_HOST = "127.0.54.1", "127.0.54.2", "127.0.54.3"
EXTERNAL = 50  # distinct outside names in the 10 % mix

CHILD = """
import asyncio, resource, sys
sys.path.insert(0, sys.argv[1])
from lite.agent.dns.forward import Forwarder
from lite.agent.dns.server import DnsServer
from lite.agent.dns.zone import ClusterZone

async def main() -> None:
    n, host, port, upstream_port = int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    zone = ClusterZone()
    for i in range(n):
        zone.set_service({"metadata": {"namespace": "bench", "name": f"svc{i}"},
                          "spec": {"clusterIP": f"10.43.{i // 250}.{i % 250 + 1}",
                                   "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
    server = DnsServer(zone, Forwarder([(sys.argv[6], upstream_port)]))
    await server.start(host, port)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"cpu {usage.ru_utime + usage.ru_stime:.3f} hits {server.forwarder.hits} misses {server.forwarder.misses}",
          flush=True)
    await server.close()

asyncio.run(main())
"""


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
    return port


def service_ip(i: int) -> str:
    return f"10.43.{i // 250}.{i % 250 + 1}"


def write_inputs(d: Path, services: int) -> dict[str, Path]:
    names = [f"svc{i}.bench.svc.cluster.local" for i in range(services)]
    (d / "hosts").write_text("".join(f"{service_ip(i)} {n}\n" for i, n in enumerate(names)))
    (d / "upstream-hosts").write_text("".join(f"192.0.2.{j % 250 + 1} ext{j}.example.test\n" for j in range(EXTERNAL)))
    (d / "services.txt").write_text("".join(f"{n} A\n" for n in names))
    mixed = []
    for i, n in enumerate(names):
        mixed.append(f"{n} A\n")
        if i % 9 == 8:  # one outside name per nine service names: 10 %
            mixed.append(f"ext{(i // 9) % EXTERNAL}.example.test A\n")
    (d / "mixed.txt").write_text("".join(mixed))
    return {"services": d / "services.txt", "mixed": d / "mixed.txt"}


def start_dnsmasq(host: str, port: int, hosts: Path, upstream: str | None) -> subprocess.Popen[bytes]:
    cmd = ["dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-hosts", "--no-resolv",
           f"--addn-hosts={hosts}", f"--listen-address={host}", "--bind-interfaces", f"--port={port}",
           "--cache-size=10000", "--local-ttl=5", "--user=root", "--pid-file=", "--log-facility=/dev/null"]
    if upstream:
        cmd.append(f"--server={upstream}")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_udp(host, port)
    return proc


def wait_udp(host: str, port: int) -> None:
    query = bytes.fromhex("abcd01000001000000000000") + b"\x04ping\x00\x00\x01\x00\x01"
    deadline = time.monotonic() + 10
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.2)
        while time.monotonic() < deadline:
            s.sendto(query, (host, port))
            try:
                s.recv(512)
                return
            except OSError:
                continue
    raise BenchFailed(f"no DNS server answered on {host}:{port}")


def dnsperf(host: str, port: int, data: Path, duration: float, clients: int, rate: int = 0) -> dict[str, float]:
    """One dnsperf run; BenchFailed when dnsperf fails, a query is lost (no answer within 2 s) or answered
    with anything but NOERROR (every name asked exists)."""
    cmd = ["dnsperf", "-s", host, "-p", str(port), "-d", str(data), "-l", str(duration), "-c", str(clients),
           "-q", "100", "-t", "2", "-v", *(["-Q", str(rate)] if rate else [])]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    out = run.stdout
    if run.returncode != 0 or "Queries per second:" not in out:
        raise BenchFailed(f"dnsperf against {host}:{port} exited {run.returncode}: {(run.stderr or out)[-500:]}")
    codes = re.search(r"Response codes:\s*(.*)$", out, re.M)
    bad = [c for c in (codes.group(1).split(", ") if codes else []) if c and not c.startswith("NOERROR")]
    if bad:
        raise BenchFailed(f"dnsperf against {host}:{port}: answers other than NOERROR: {', '.join(bad)}")
    latencies = sorted(float(m.group(1)) for m in re.finditer(r"^> \w+ \S+ \S+ ([0-9.]+)$", out, re.M))
    qps = float(re.search(r"Queries per second:\s+([0-9.]+)", out).group(1))  # type: ignore[union-attr]
    lost = float(re.search(r"Queries lost:\s+(\d+)", out).group(1))  # type: ignore[union-attr]
    completed = float(re.search(r"Queries completed:\s+(\d+)", out).group(1))  # type: ignore[union-attr]
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else float("nan")
    mean = sum(latencies) / len(latencies) if latencies else float("nan")
    if lost:
        raise BenchFailed(f"dnsperf against {host}:{port}: {lost:.0f} of {lost + completed:.0f} queries lost")
    return {"qps": qps, "mean_ms": mean * 1000, "p99_ms": p99 * 1000, "lost": lost, "completed": completed}


def show(label: str, r: dict[str, float]) -> None:
    print(f"  {label:<34} {r['qps']:>10,.0f} q/s   mean {r['mean_ms']:6.3f} ms   p99 {r['p99_ms']:6.3f} ms"
          f"   lost {r['lost']:.0f}/{r['completed'] + r['lost']:.0f}")


def main(args: argparse.Namespace, res: benchlib.Results) -> None:
    repo = str(Path(__file__).resolve().parent.parent)
    with tempfile.TemporaryDirectory(prefix="lite-bench-dns-") as tmp:
        inputs = write_inputs(Path(tmp), args.services)
        procs: list[subprocess.Popen[bytes]] = []
        lite: subprocess.Popen[str] | None = None
        try:
            upstream_port = free_port(UPSTREAM_HOST)
            procs.append(start_dnsmasq(UPSTREAM_HOST, upstream_port, Path(tmp) / "upstream-hosts", None))
            dnsmasq_port = free_port(DNSMASQ_HOST)
            procs.append(start_dnsmasq(DNSMASQ_HOST, dnsmasq_port, Path(tmp) / "hosts",
                                       f"{UPSTREAM_HOST}#{upstream_port}"))
            lite_port = free_port(LITE_HOST)
            lite = subprocess.Popen([sys.executable, "-c", CHILD, repo, str(args.services), LITE_HOST, str(lite_port),
                                     str(upstream_port), UPSTREAM_HOST], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
            assert lite.stdout is not None and lite.stdin is not None
            if lite.stdout.readline().strip() != "ready":
                raise BenchFailed("the lite DNS server did not start")
            print(f"cluster DNS, {args.services} services, dnsperf UDP {args.duration:.0f} s x {args.clients} "
                  f"clients, 100 outstanding ({os.cpu_count()} cores, shared)")
            results: dict[str, dict[str, float]] = {}
            servers = (("lite", LITE_HOST, lite_port), ("dnsmasq (baseline)", DNSMASQ_HOST, dnsmasq_port))
            for mix in ("services", "mixed"):
                title = "service names" if mix == "services" else "service names + 10 % forwarded upstream (cached)"
                print(f"{title}, as fast as they answer (p99 here is mostly queueing behind 100 outstanding):")
                for label, host, port in servers:
                    r = dnsperf(host, port, inputs[mix], args.duration, args.clients)
                    results[f"{mix}/{label}"] = r
                    show(label, r)
                ratio = results[f"{mix}/lite"]["qps"] / max(1.0, results[f"{mix}/dnsmasq (baseline)"]["qps"])
                print(f"  ratio lite/dnsmasq {ratio:.2f}")
                res.set(f"{mix}_lite_qps", results[f"{mix}/lite"]["qps"])
                res.set(f"{mix}_dnsmasq_qps", results[f"{mix}/dnsmasq (baseline)"]["qps"])
                res.set(f"{mix}_lite_vs_dnsmasq", ratio)
                print(f"{title}, at a fixed {args.rate:,} q/s:")
                for label, host, port in servers:
                    r = dnsperf(host, port, inputs[mix], args.duration, args.clients, args.rate)
                    results[f"{mix}/{label}/rate"] = r
                    show(label, r)
                print(f"  lite p99 {results[f'{mix}/lite/rate']['p99_ms']:.3f} ms")
                res.set(f"{mix}_rate", args.rate)
                res.set(f"{mix}_rate_lite_p99_ms", results[f"{mix}/lite/rate"]["p99_ms"])
                res.set(f"{mix}_rate_dnsmasq_p99_ms", results[f"{mix}/dnsmasq (baseline)/rate"]["p99_ms"])
                res.set(f"{mix}_rate_lite_qps", results[f"{mix}/lite/rate"]["qps"])
            lite.stdin.write("\n")
            lite.stdin.flush()
            stats = lite.stdout.readline().split()
            answered = sum(r["completed"] for key, r in results.items() if key.split("/")[1] == "lite")
            cpu = float(stats[1])
            print(f"lite: {cpu:.2f} CPU s in all ({cpu / max(1.0, answered) * 1e6:.1f} ms per 1,000 answers, "
                  f"startup included); forwarder cache hits {stats[3]} (renders; repeats within a second are memo "
                  f"hits), misses {stats[5]}")
        finally:
            if lite is not None:
                lite.kill()
                lite.wait()
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
                proc.wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rate", type=int, default=10000, help="fixed query rate of the latency runs (q/s)")
    benchlib.add_args(ap)
    cli = ap.parse_args()
    results = benchlib.Results.from_args("dns", cli)
    missing = [tool for tool in ("dnsperf", "dnsmasq") if shutil.which(tool) is None]
    if missing:
        results.skip(f"{' and '.join(missing)} not installed (apt-get install dnsperf dnsmasq-base)")
    benchlib.run(results, lambda: main(cli, results))
