"""lite.netns: network namespaces, links, addresses and routes over netlink (pyroute2).

pyroute2's package `__init__` imports every part of the library (IPDB, NDB, wireless, devlink, IPVS, plan9,
...: 220 modules, about 12 MB resident); lite uses its route and conntrack sockets only (about 6 MB). Importing
this package registers `pyroute2` as a bare package whose submodules load as usual; its `__init__` runs only
if something asks the package itself for a name (`from pyroute2 import IPRoute`), through the module
`__getattr__` below, so every use of pyroute2 keeps working. Modules here import pyroute2's submodules
directly (`pyroute2.iproute.linux`, `pyroute2.netlink...`), never names from the package.

Invariant: the registration happens once per process and only while `pyroute2` is not loaded yet.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any


def _bare_pyroute2() -> None:
    if "pyroute2" in sys.modules:
        return
    spec = importlib.util.find_spec("pyroute2")
    if spec is None or spec.loader is None:
        return  # not installed: importing a netns module fails as it would have
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def full_package(name: str) -> Any:
        """A submodule (`from pyroute2 import config`, as pyroute2's own modules write) is imported as such;
        any other name runs pyroute2's own `__init__` first, once."""
        if name.startswith("__"):
            raise AttributeError(name)
        if importlib.util.find_spec(f"pyroute2.{name}") is not None:
            return importlib.import_module(f"pyroute2.{name}")
        del module.__dict__["__getattr__"]
        loader.exec_module(module)
        return getattr(module, name)

    module.__dict__["__getattr__"] = full_package
    sys.modules["pyroute2"] = module


_bare_pyroute2()
