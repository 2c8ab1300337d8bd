"""Shared bits of the cluster DNS tests (not a test module): an upstream resolver (dnsmasq) in the client netns
that the node agents forward to, and a precise DNS query (rcode, answer and authority sections) sent with
dnspython from inside a node's netns."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.helpers.netcluster import CLIENT_IP, NetCluster

EXTERNAL_NAME = "ext.netdone.test"
EXTERNAL_ADDRESS = "198.51.100.7"  # TEST-NET-2: only ever returned in answers, never contacted


@contextlib.contextmanager
def upstream_resolver(cluster: NetCluster, log: Path) -> Iterator[Path]:
    """dnsmasq on CLIENT_IP:53 (the nodes' `--resolv-conf` names it) answering EXTERNAL_NAME; yields its log
    (every query it receives is logged there)."""
    dnsmasq = shutil.which("dnsmasq")
    if dnsmasq is None:
        raise RuntimeError("dnsmasq is not installed")
    cmd = ["nsenter", f"--net=/run/netns/{cluster.client}", dnsmasq, "--keep-in-foreground", "--conf-file=/dev/null",
           "--no-resolv", "--no-hosts", "--bind-interfaces", f"--listen-address={CLIENT_IP}", "--except-interface=lo",
           "--pid-file", "--user=root", "--log-queries", f"--log-facility={log}",
           f"--host-record={EXTERNAL_NAME},{EXTERNAL_ADDRESS}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield log
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


QUERY = """
import json, sys
import dns.message, dns.query, dns.rcode, dns.rdatatype
q = dns.message.make_query(sys.argv[1], sys.argv[2])
r = dns.query.udp(q, sys.argv[3], timeout=3)
print(json.dumps({"rcode": dns.rcode.to_text(r.rcode()),
                  "answer": [[rr.name.to_text(), dns.rdatatype.to_text(rr.rdtype), rd.to_text(), rr.ttl]
                             for rr in r.answer for rd in rr],
                  "authority": [dns.rdatatype.to_text(rr.rdtype) for rr in r.authority]}))
"""


def query(cluster: NetCluster, netns: str, name: str, qtype: str, server: str) -> dict[str, Any]:
    """One UDP query from inside `netns` (through that node's service proxy when `server` is a ClusterIP)."""
    r = cluster.run_in(netns, sys.executable, "-c", QUERY, name, qtype, server, timeout=20)
    if r.returncode != 0:
        raise AssertionError(f"query {name} {qtype} @{server} failed: {r.stderr[-500:]}")
    out: dict[str, Any] = json.loads(r.stdout)
    return out
