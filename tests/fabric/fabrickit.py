"""Shared bits of the pod network tests (not a test module): a TCP "echo my source address" server in the
client netns, and a busybox httpd Deployment that answers with its pod name."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from tests.helpers.netcluster import IMAGE, NetCluster

# Answers every HTTP request with the peer's address, so a test sees the source IP a pod's packets arrive with.
WHOAMI = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = self.client_address[0].encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer((sys.argv[1], int(sys.argv[2])), H).serve_forever()
"""


@contextlib.contextmanager
def whoami_server(cluster: NetCluster, ip: str, port: int = 8081) -> Iterator[str]:
    proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{cluster.client}", sys.executable, "-c", WHOAMI, ip,
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield f"http://{ip}:{port}/"
    finally:
        proc.kill()
        proc.wait(10)


# busybox httpd serving `text` at / and the client's address at /cgi-bin/ip (CGI's REMOTE_ADDR)
def httpd_command(text: str) -> list[str]:
    cgi = "printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\necho $REMOTE_ADDR\\n' > /www/cgi-bin/ip"
    return ["sh", "-c", f"mkdir -p /www/cgi-bin; echo {text} > /www/index.html; {cgi}; chmod +x /www/cgi-bin/ip; "
                        "exec httpd -f -p 8080 -h /www"]


def web_deployment(name: str, replicas: int) -> list[dict[str, Any]]:
    """A Deployment spread one per node (topology spread, hostname) and a ClusterIP + NodePort Service."""
    labels = {"app": name}
    serve = "hostname > /www/index.html; exec httpd -f -p 8080 -h /www"
    spread = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": labels}}]
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
              "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                       "template": {"metadata": {"labels": labels},
                                    "spec": {"topologySpreadConstraints": spread, "terminationGracePeriodSeconds": 0,
                                             "containers": [{"name": "httpd", "image": IMAGE,
                                                             "imagePullPolicy": "Never",
                                                             "command": ["sh", "-c", serve],
                                                             "readinessProbe": {"tcpSocket": {"port": 8080},
                                                                                "periodSeconds": 1}}]}}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
               "spec": {"type": "NodePort", "selector": labels,
                        "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}
    return [deploy, service]


def fetch(cluster: NetCluster, pod: str, url: str) -> str:
    """`wget -qO- url` in the pod: its body, or "" when it failed."""
    r = cluster.exec(pod, "wget", "-qO-", url)
    return r.stdout.strip() if r.returncode == 0 else ""
