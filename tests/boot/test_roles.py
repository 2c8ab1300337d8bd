"""What `--disable-controller-manager` and `--disable-scheduler` leave out of the control plane: the disabled
parts are not built, so their informers neither cache objects nor run handlers on every event (an API server
alone keeps no ReplicaSet cache, and its pod informer serves the join hub only: bound pods)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lite.server.authn.wiring import build_authenticator
from lite.server.certs import ensure_credentials
from lite.server.config import ServerConfig
from lite.server.controlplane import build_control_plane
from lite.server.store import Store


async def plane_parts(data_dir: Path, **roles: bool) -> tuple[set[str], set[str], str]:
    """(resources with an informer, background task names, the join hub's pod field selector) of a built
    control plane."""
    config = ServerConfig.create(data_dir, bind_address="127.0.0.1", port=6443, **roles)
    creds = ensure_credentials(config)
    config.paths.db.parent.mkdir(parents=True, exist_ok=True)
    store = await Store.open(str(config.paths.db))
    try:
        plane = await build_control_plane(config, store, creds, build_authenticator(config, creds))
        informed = {inf.kind.resource for inf in plane.hub.informers}
        return informed, {name for name, _ in plane.background}, plane.hub.pods.field_selector
    finally:
        await store.close()


def test_an_api_server_alone_builds_no_controllers_or_scheduler(tmp_path: Path) -> None:
    informed, tasks, hub_pods = asyncio.run(plane_parts(
        tmp_path / "alone", disable_controller_manager=True, disable_scheduler=True))
    assert "replicasets.apps" not in informed and "deployments.apps" not in informed
    assert "pods" in informed  # the join hub's (nodes' pods; the node authorizer reads it)
    assert "controller-manager" not in tasks and "scheduler" not in tasks and "informers" in tasks
    assert hub_pods == "spec.nodeName!="  # nobody else reads pods: the hub caches bound ones only
    full_informed, full_tasks, full_hub_pods = asyncio.run(plane_parts(tmp_path / "full"))
    assert {"replicasets.apps", "deployments.apps", "pods"} <= full_informed
    assert {"controller-manager", "scheduler"} <= full_tasks
    assert full_hub_pods == ""  # one pod cache for the scheduler, the controllers and the hub
