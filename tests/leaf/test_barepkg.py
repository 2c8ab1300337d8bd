"""`lite.barepkg`: a package registered bare loads only the submodules asked for, and its own `__init__` (with
every name it exports) as soon as a name that is not a submodule is asked of the package. Each case runs in a
fresh interpreter (what is imported is process-wide)."""

from __future__ import annotations

import subprocess
import sys

CASE = r'''
import sys
from lite.barepkg import bare_package
bare_package("prometheus_client")
bare_package("prometheus_client")  # a second registration changes nothing
from prometheus_client.registry import CollectorRegistry
from prometheus_client.metrics import Counter
reg = CollectorRegistry()
Counter("things", "Things.", registry=reg).inc()
loaded = sorted(m for m in sys.modules if m.startswith("prometheus_client"))
print("exposition" in " ".join(loaded), "prometheus_client.gc_collector" in loaded)
import prometheus_client
print(prometheus_client.generate_latest(reg).decode().count("things_total 1.0"))
print("prometheus_client.gc_collector" in sys.modules)
bare_package("not_a_package_anywhere")
print("not_a_package_anywhere" in sys.modules)
'''


def test_a_bare_package_loads_what_is_asked_and_its_init_on_a_package_name() -> None:
    out = subprocess.run([sys.executable, "-c", CASE], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:4] == ["False False", "1", "True", "False"]
