"""`drop_docstrings`: a long-running process lets go of its modules' and classes' documentation strings.

Why: lite documents each module's role and invariants in its docstring (docs/internals.md points there), about
0.4 MB of text over the modules a `lite server` with its agent loads, and CPython keeps every one of them in
memory for the life of the process (a module's `__doc__`, a class's `__doc__`), though nothing in the process
reads them: lite never reads `__doc__`, and neither `--help` (argparse texts of their own) nor logs do.
Measured: `lite server` with its embedded agent, idle and with 2 pods, about 0.5 MiB less RSS (bench/pods.py).

Invariants:
- Only `__doc__` of the modules named `prefix` or `prefix.*` that are loaded at the call, and of the classes
  those modules define (`cls.__module__` is the module's name, found in its namespace), are set to None.
  Functions keep theirs (a function's docstring is a constant of its code object, not freed by dropping it).
  Modules imported later keep theirs.
- Called by the `lite server` and `lite agent` commands once their stack is imported, never by library code,
  tests or other commands; a class whose `__doc__` cannot be set is left as it is. No import-time side effect.
"""

from __future__ import annotations

import sys


def drop_docstrings(prefix: str = "lite") -> int:
    """Drop the docstrings described in the module docstring; returns how many characters were let go."""
    dropped = 0
    for name, module in list(sys.modules.items()):
        if module is None or not (name == prefix or name.startswith(prefix + ".")):
            continue
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        doc = namespace.get("__doc__")
        if isinstance(doc, str):
            dropped += len(doc)
            namespace["__doc__"] = None
        for value in list(namespace.values()):
            if not isinstance(value, type) or value.__module__ != name:
                continue
            doc = value.__dict__.get("__doc__")
            if isinstance(doc, str):
                try:
                    value.__doc__ = None
                except (AttributeError, TypeError):
                    continue
                dropped += len(doc)
    return dropped
