"""lite.netns loads only the parts of pyroute2 it uses, and pyroute2 stays whole for everyone else (in a fresh
interpreter each, since the point is what gets imported)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r'''
import sys
import lite.netns.bridge, lite.netns.conntrack, lite.netns.dnsaddr, lite.netns.nsfs, lite.netns.pod
import lite.netns.routes, lite.netns.vxlan
print(sorted(m for m in ("pyroute2.ipdb", "pyroute2.ndb", "pyroute2.iwutil", "pyroute2.plan9") if m in sys.modules))
from pyroute2 import IPRoute, NetNS, __version__
from pyroute2.iproute.linux import AsyncIPRoute
print(IPRoute.__module__, NetNS.__name__, bool(__version__), AsyncIPRoute.__name__)
'''


def test_netns_modules_skip_pyroute2s_package_init_which_still_runs_when_asked() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]", "pyroute2.iproute.linux NetNS True AsyncIPRoute"]
