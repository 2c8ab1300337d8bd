"""Register a third-party package without running its `__init__`, so only the submodules lite uses load.

Some libraries' package `__init__` imports every part of the library (pyroute2: 220 modules, about 12 MB
resident; prometheus_client: its HTTP, WSGI and ASGI exposition servers and process collectors, about 1 MB).
`bare_package(name)` registers `name` as a bare package whose submodules import as usual (`import
name.sub`); the real `__init__` runs only if something asks the package itself for a name that is not a
submodule (`from name import Thing`), through the module `__getattr__` installed here, so every other use of
the library keeps working.

Invariant: the registration happens at most once per package and process, and only while `name` is not loaded
yet (a package already imported is left as it is).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any


def bare_package(name: str) -> None:
    """See the module docstring; nothing happens when `name` is loaded already or not installed."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return  # not installed: importing its submodules fails as it would have
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def full_package(attr: str) -> Any:
        """A submodule (`from name import sub`, as libraries' own modules write) is imported as such; any
        other name runs the package's own `__init__` first, once."""
        if attr.startswith("__"):
            raise AttributeError(attr)
        if importlib.util.find_spec(f"{name}.{attr}") is not None:
            return importlib.import_module(f"{name}.{attr}")
        del module.__dict__["__getattr__"]
        loader.exec_module(module)
        return getattr(module, attr)

    module.__dict__["__getattr__"] = full_package
    sys.modules[name] = module
