"""The layer rules of docs/internals.md, checked on the import statements (ast) of every module under lite/.

- `lite/*.py` (leaf) imports only stdlib, the chosen third-party deps, and other leaf modules; `lite/cel/` is a
  leaf package too (its modules import stdlib, cel_expr_python, protobuf, leaf modules and each other).
- `lite/server/**` imports leaf and `lite.server` only; `lite/server/controllers/**` and
  `lite/server/scheduler/**` never import `lite.server.store`.
- `lite/agent/**` imports leaf, `lite.netns` and `lite.agent`; `lite/netns/**` imports leaf and `lite.netns`.
- server and agent never import each other; `lite/cli/**` may import everything.
- Inside `lite/server/`, every module is in one tier of `SERVER_TIERS` (its longest matching prefix) and imports
  nothing of a higher tier: no import runs back up (docs/internals.md, "Tiers inside lite.server").
Imports inside functions and `importlib.import_module("lite....")` calls with a literal name count too.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LITE = ROOT / "lite"
THIRD_PARTY = {"aiohttp", "aiosqlite", "msgpack", "pyroute2", "yaml", "cryptography", "orjson", "dnslib", "multidict",
               "yarl", "prometheus_client", "jwt", "cel_expr_python", "google", "grpc", "asyncpg"}
TOP_PACKAGES = ("lite.server", "lite.agent", "lite.netns", "lite.cli")

# The tiers inside lite.server, lowest first. A module's tier is that of its longest matching prefix; a module
# may import modules of its own tier or of lower tiers only.
SERVER_TIERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # foundations: the request's user, configuration, the store, metrics, certificates and the pure helpers
    # the tiers above share (x509 user names, a pod's references, Service IP/port allocators, bootstrap objects)
    ("base", ("lite.server.requestuser", "lite.server.config", "lite.server.store", "lite.server.metrics",
              "lite.server.certs", "lite.server.auth", "lite.server.authn.x509", "lite.server.join.relay",
              "lite.server.encryption", "lite.server.bootstrap", "lite.server.services")),
    # the API core: kinds' strategies, the registry (`Resources`), discovery, OpenAPI, handlers
    ("api", ("lite.server.api",)),
    # who may do what: authentication, authorization, the aggregation layer's proxy
    ("auth", ("lite.server.authn", "lite.server.authz", "lite.server.aggregator")),
    # every admission plugin and its ordered list
    ("admission", ("lite.server.admission",)),
    # the HTTP app over the API core, with authorization and aggregation in front
    ("app", ("lite.server.api.http",)),
    # the loops that use the API as clients: controllers, scheduler, the join hub of the agents
    ("loops", ("lite.server.controllers", "lite.server.scheduler", "lite.server.join", "lite.server.leaderelection")),
    # assembly: the control plane, the process, its listener, manifests and snapshots, authn's HTTP wiring
    ("assembly", ("lite.server", "lite.server.controlplane", "lite.server.main", "lite.server.listener",
                  "lite.server.certcheck", "lite.server.manifests", "lite.server.snapshots",
                  "lite.server.authn.wiring")),
)


def module_name(path: Path, root: Path = LITE) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_names(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`, relative imports resolved."""
    out: list[tuple[int, str]] = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target == "lite" or (node.level and not node.module):
                # `from lite import errors` / `from . import x` import submodules: check each name.
                out.extend((node.lineno, f"{target}.{a.name}") for a in node.names)
            else:
                out.append((node.lineno, target))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)
              and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and node.args[0].value.startswith("lite")):
            out.append((node.lineno, node.args[0].value))
    return out


def _within(name: str, pkg: str) -> bool:
    return name == pkg or name.startswith(pkg + ".")


def _is_leaf(name: str) -> bool:
    """`lite` itself or a module directly under it that is not one of the layer packages."""
    return name == "lite" or (name.startswith("lite.") and not any(_within(name, p) for p in TOP_PACKAGES))


def server_tier(module: str) -> tuple[int, str] | None:
    """(rank, name) of the tier of a module of lite.server (longest matching prefix), or None."""
    best: tuple[int, int, str] | None = None
    for rank, (name, prefixes) in enumerate(SERVER_TIERS):
        for prefix in prefixes:
            if _within(module, prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), rank, name)
    return None if best is None else (best[1], best[2])


def violation(importer: str, imported: str) -> str | None:
    """Why `importer` may not import `imported`, or None when the rules allow it."""
    if not _within(imported, "lite"):
        top = imported.split(".")[0]
        if top in sys.stdlib_module_names or top in THIRD_PARTY or top == "__future__":
            return None
        return f"third-party module {top!r} is not one of the chosen dependencies"
    if _within(importer, "lite.cli") or _is_leaf(imported):
        return None
    if _is_leaf(importer):
        return "leaf modules import only stdlib, chosen deps and other leaf modules"
    if _within(importer, "lite.server"):
        if not _within(imported, "lite.server"):
            return "lite.server imports only the leaf and lite.server"
        if any(_within(importer, p) for p in ("lite.server.controllers", "lite.server.scheduler")) and \
                _within(imported, "lite.server.store"):
            return "controllers and the scheduler use a lite.client.Client, never the store"
        low, high = server_tier(imported), server_tier(importer)
        assert low is not None and high is not None  # every module of lite.server is under "lite.server"
        if low[0] > high[0]:
            return f"tier {high[1]!r} may not import tier {low[1]!r}, which is above it"
        return None
    if _within(importer, "lite.agent"):
        ok = _within(imported, "lite.agent") or _within(imported, "lite.netns")
        return None if ok else "lite.agent imports only the leaf, lite.netns and lite.agent"
    if _within(importer, "lite.netns"):
        return None if _within(imported, "lite.netns") else "lite.netns imports only the leaf and lite.netns"
    return f"no rule covers {importer}"


def all_violations(root: Path = LITE) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        mod = module_name(path, root)
        for line, imported in imported_names(path.read_text(), mod, path.name == "__init__.py"):
            why = violation(mod, imported)
            if why:
                found.append(f"{path.relative_to(root.parent)}:{line}: {mod} imports {imported}: {why}")
    return found


def test_lite_respects_layers() -> None:
    modules = list(LITE.rglob("*.py"))
    assert len(modules) > 10, "the checker must actually see the package"
    violations = all_violations()
    assert not violations, "layer violations:\n" + "\n".join(violations)


@pytest.mark.parametrize(("importer", "imported"), [
    ("lite.errors", "lite.server.store"),
    ("lite.errors", "requests"),
    ("lite.server.api.http", "lite.agent.runner"),
    ("lite.server.controllers.replicaset", "lite.server.store.store"),
    ("lite.server.scheduler.queue", "lite.server.store"),
    ("lite.agent.hooks.network", "lite.server.join"),
    ("lite.netns.bridge", "lite.agent"),
    ("lite.server.main", "lite.cli.main"),
    ("lite.server.api.writing", "lite.server.admission.priority"),
    ("lite.server.api.resources", "lite.server.authz.chain"),
    ("lite.server.authz.rbac", "lite.server.admission.escalation"),
    ("lite.server.admission.webhooks", "lite.server.api.http"),
    ("lite.server.admission.quota.wiring", "lite.server.controllers.runtime"),
    ("lite.server.store", "lite.server.api"),
    ("lite.server.services.allocator", "lite.server.admission.serviceips"),
    ("lite.server.controllers.gc", "lite.server.controlplane"),
    ("lite.cel.env", "lite.server.api.strategies.crschema"),
    ("lite.cel.libraries", "lite.agent"),
    ("lite.kubestreams.pods", "lite.server.join.hub"),
    ("lite.kubetables.core", "lite.server.api.tables"),
    ("lite.agent.localapi.server", "lite.server.join.streams"),
    ("lite.atomicfile", "lite.agent.cache.files"),
])
def test_checker_flags_violations(importer: str, imported: str) -> None:
    assert violation(importer, imported) is not None


@pytest.mark.parametrize(("importer", "imported"), [
    ("lite.errors", "lite.objects"),
    ("lite.netns.ipam", "lite.atomicfile"),
    ("lite.agent.trust", "lite.atomicfile"),
    ("lite.server.certs", "lite.atomicfile"),
    ("lite.errors", "dataclasses"),
    ("lite.httpclient", "aiohttp"),
    ("lite.server.api.resources", "lite.server.store"),
    ("lite.server.controllers.replicaset", "lite.client"),
    ("lite.agent.hooks.network", "lite.netns.bridge"),
    ("lite.cli.main", "lite.server.main"),
    ("lite.cli.main", "lite.agent"),
    ("lite.server.admission.escalation", "lite.server.authz.chain"),
    ("lite.server.authz.rbac", "lite.server.requestuser"),
    ("lite.server.controllers.resourcequota", "lite.server.admission.quota.usage"),
    ("lite.server.api.http", "lite.server.authz.chain"),
    ("lite.server.controlplane", "lite.server.admission"),
    ("lite.cel.env", "cel_expr_python.cel"),
    ("lite.cel.opaque", "google.protobuf.descriptor_pool"),
    ("lite.cel.libraries", "lite.quantity"),
    ("lite.cel.env", "lite.cel.cost"),
    ("lite.server.api.strategies.crschema", "lite.cel"),
    ("lite.agent.localapi.server", "lite.kubestreams.pods"),
    ("lite.server.join.streams", "lite.kubestreams.pods"),
    ("lite.agent.localapi.server", "lite.kubetables.core"),
])
def test_checker_allows(importer: str, imported: str) -> None:
    assert violation(importer, imported) is None


def test_relative_and_dynamic_imports_are_resolved(tmp_path: Path) -> None:
    pkg = tmp_path / "lite" / "server" / "controllers"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "lite", tmp_path / "lite" / "server", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "bad.py").write_text(
        "from ..store import Store\n"
        "def f():\n"
        "    import importlib\n"
        "    return importlib.import_module('lite.agent.runner')\n")
    (pkg / "good.py").write_text("from . import bad\nfrom ... import client\n")
    found = all_violations(tmp_path / "lite")
    assert len(found) == 2, found
    assert "imports lite.server.store" in found[0]
    assert "imports lite.agent.runner" in found[1]

