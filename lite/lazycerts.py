"""Import aiohttp cheaply: the system's CA bundle loads at first use, and no mime.types database or libstdc++.

`aiohttp.connector` builds two client SSL contexts when it is imported (its defaults for `ssl=True` and for
`ssl=False`), and each one loads every certificate of the system bundle (`set_default_verify_paths`: about 140
parsed X.509 certificates, ~2 MB resident for the two). A `lite server` or `lite agent` only uses them when it
fetches from a public HTTPS registry or webhook with no CA of its own; its own connections (the agent's session,
node credentials, webhooks with a caBundle) build their own contexts.

`import_aiohttp()` imports aiohttp while `SSLContext.set_default_verify_paths` is deferred: a context that asks
for the default paths during that import gets, instead of them, per-instance wrappers of the methods that use
the trust store (`wrap_bio`, `wrap_socket`, `get_ca_certs`, `cert_store_stats`, `load_default_certs`); the first
call of any of them loads the default paths, removes the wrappers and goes on. So every handshake with such a
context verifies against exactly what it would have loaded at import (the bundle as it is at first use).

`import_aiohttp()` then imports `aiohttp.web` without building the process-wide `mimetypes` database: the
module-level `MimeTypes()` of `aiohttp.web_fileresponse` would first initialise it from the system's files
(/etc/mime.types and others: about 1,500 types, 0.35 MB of dicts) although its own table copies only Python's
built-in defaults. `mimetypes.inited` is set during that import and reset after it, so aiohttp's table is the
same and the process-wide database still loads, from the same files, at the first use of `mimetypes`.

aiohttp's `frozenlist` dependency is imported in its pure-Python form (`FROZENLIST_NO_EXTENSIONS`, which the
package reads once, at import): its C extension is C++ and brings libstdc++ into the process, about 1.2 MB
resident for a list type aiohttp uses for its signals and trace configurations (a few items, read per
request at most). The variable is set for the import only.

Invariants: the class attribute, `mimetypes.inited` and the environment are restored before `import_aiohttp`
returns (also on error), so contexts made later are untouched; it acts only if aiohttp is not imported yet
(otherwise it does nothing and returns False); called once by the `lite server` and `lite agent` commands at
start, before anything imports aiohttp, while the process has one thread. No import-time side effect.
"""

from __future__ import annotations

import importlib
import os
import ssl
import sys
from collections.abc import Callable
from typing import Any

_PURE_FROZENLIST = "FROZENLIST_NO_EXTENSIONS"
_USES_STORE = ("wrap_bio", "wrap_socket", "get_ca_certs", "cert_store_stats", "load_default_certs")


def _deferring(load_default_paths: Callable[[ssl.SSLContext], None]) -> Callable[[ssl.SSLContext], None]:
    """What stands in for `SSLContext.set_default_verify_paths` during the import (see the module docstring);
    `load_default_paths` is the real method."""

    def defer(ctx: ssl.SSLContext) -> None:
        def load() -> None:
            for name in _USES_STORE:
                ctx.__dict__.pop(name, None)
            load_default_paths(ctx)

        def loading_first(name: str) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                load()
                return getattr(ctx, name)(*args, **kwargs)

            return call

        for name in _USES_STORE:
            ctx.__dict__[name] = loading_first(name)

    return defer


def import_aiohttp() -> bool:
    """Import aiohttp (client and server) with the default contexts it builds at import deferred and without the
    process-wide mimetypes database; False when aiohttp was imported already."""
    if "aiohttp" in sys.modules:
        return False
    cls: Any = ssl.SSLContext
    own = cls.__dict__.get("set_default_verify_paths")  # None: inherited from the C type
    cls.set_default_verify_paths = _deferring(cls.set_default_verify_paths)
    pure = os.environ.get(_PURE_FROZENLIST)
    os.environ[_PURE_FROZENLIST] = "1"
    try:
        importlib.import_module("aiohttp")
    finally:
        if own is None:
            del cls.set_default_verify_paths
        else:
            cls.set_default_verify_paths = own
        if pure is None:
            del os.environ[_PURE_FROZENLIST]
        else:
            os.environ[_PURE_FROZENLIST] = pure
    _import_web()
    return True


def _import_web() -> None:
    """`aiohttp.web` with `mimetypes` left uninitialised (see the module docstring)."""
    import mimetypes

    if mimetypes.inited:
        importlib.import_module("aiohttp.web")
        return
    mimetypes.inited = True  # MimeTypes() skips init(); guess_type & co still call it (they check `_db`)
    try:
        importlib.import_module("aiohttp.web")
    finally:
        mimetypes.inited = False
