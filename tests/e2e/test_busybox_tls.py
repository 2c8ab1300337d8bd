"""TLS clients that are not Go's or OpenSSL's against the shared `lite server` (issue 18, item 13).

busybox wget, when no `openssl` program is on its PATH (as in a pod made of busybox alone), speaks TLS with its
own code, which in the busybox of Debian 12 (1.35) sends no signature_algorithms extension; the server closed
such a hello before any TLS byte (`got bad TLS record (len:0)`). kube-apiserver answers it.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from e2ekit import Cluster

BUSYBOX = shutil.which("busybox")


@pytest.mark.skipif(BUSYBOX is None, reason="busybox not installed")
def test_busybox_wget_with_its_own_tls_gets_the_version(cluster: Cluster) -> None:
    assert BUSYBOX is not None
    r = subprocess.run([BUSYBOX, "wget", "-q", "-O", "-", "--no-check-certificate", f"{cluster.server.url}/version"],
                       env={"PATH": "/nonexistent"}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and '"gitVersion"' in r.stdout, r.stdout + r.stderr
