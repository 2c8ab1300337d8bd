"""Table tests: NodeResourcesFit (filter, LeastAllocated/MostAllocated), BalancedAllocation, ImageLocality,
and the request arithmetic they share (init containers, sidecars, overhead, non-zero defaults)."""

from __future__ import annotations

import pytest
from plugkit import info, ni, node, pod, snap

from lite.client import Obj
from lite.server.scheduler.plugins import balancedallocation, imagelocality, noderesources
from lite.server.scheduler.podinfo import DEFAULT_MEMORY, DEFAULT_MILLI_CPU, Resources, pod_requests

GI = 1024**3
MI = 1024**2


def c(name: str, cpu: str = "", memory: str = "", **extra: object) -> Obj:
    req = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    out: Obj = {"name": name, "image": "x", **extra}
    if req:
        out["resources"] = {"requests": req}
    return out


@pytest.mark.parametrize(("spec", "want", "nz"), [
    ({"containers": [c("a")]}, Resources(), (DEFAULT_MILLI_CPU, DEFAULT_MEMORY)),
    ({"containers": [c("a", "1", "1Gi"), c("b", "500m")]}, Resources(1500, GI), (1500, GI + DEFAULT_MEMORY)),
    # init containers run one at a time before the app: the max of each init and the app sum
    ({"containers": [c("a", "1")], "initContainers": [c("i", "3"), c("j", "2", "2Gi")]},
     Resources(3000, 2 * GI), (3000, 2 * GI)),
    # a sidecar (restartable init container) keeps running: it adds to the app and to later inits
    ({"containers": [c("a", "1")], "initContainers": [c("s", "500m", restartPolicy="Always"), c("i", "1")]},
     Resources(1500), (1500, 2 * DEFAULT_MEMORY)),
    ({"containers": [c("a", "1")], "overhead": {"cpu": "250m", "memory": "64Mi"}},
     Resources(1250, 64 * MI), (1250, DEFAULT_MEMORY + 64 * MI)),
    ({"containers": [{"name": "a", "image": "x", "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}}}]},
     Resources(2000, 0, 0, (("nvidia.com/gpu", 1),)), (2000, DEFAULT_MEMORY)),
    # a zero extended resource counts for nothing, in one container as in several
    ({"containers": [{"name": "a", "image": "x", "resources": {"limits": {"cpu": "1", "example.com/x": "0"}}}]},
     Resources(1000), (1000, DEFAULT_MEMORY)),
    # requests win over limits per resource; equal containers (parsed once) still add up
    ({"containers": [{"name": n, "image": "x", "resources": {"limits": {"cpu": "2", "memory": "1Gi"},
                                                             "requests": {"cpu": "1"}}} for n in "ab"]},
     Resources(2000, 2 * GI), (2000, 2 * GI)),
])
def test_pod_requests(spec: Obj, want: Resources, nz: tuple[int, int]) -> None:
    req, nz_cpu, nz_mem = pod_requests(spec)
    assert req == want
    assert (nz_cpu, nz_mem) == nz


FIT = noderesources.NodeResourcesFit()


@pytest.mark.parametrize(("existing", "incoming", "node_kw", "want"), [
    ([], pod("p", cpu="1"), {}, []),
    ([pod("e", cpu="3500m")], pod("p", cpu="1"), {}, ["Insufficient cpu"]),
    ([pod("e", cpu="3", memory="7Gi")], pod("p", cpu="2", memory="2Gi"), {},
     ["Insufficient cpu", "Insufficient memory"]),
    ([pod("e")], pod("p"), {"pods": 1}, ["Too many pods"]),
    ([pod("e", cpu="4")], pod("p"), {}, []),     # requests nothing: fits a full node
    ([], pod("p", containers=[c("a", "1")], initContainers=[c("i", "5")]), {}, ["Insufficient cpu"]),
    ([], pod("p", containers=[{"name": "a", "image": "x", "resources": {"requests": {"example.com/foo": "1"}}}]),
     {}, ["Insufficient example.com/foo"]),
    ([], pod("p", containers=[{"name": "a", "image": "x",
                               "resources": {"requests": {"ephemeral-storage": "200Gi"}}}]),
     {}, ["Insufficient ephemeral-storage"]),
])
def test_fit_filter(existing: list[Obj], incoming: Obj, node_kw: dict[str, object], want: list[str]) -> None:
    n = ni(node("a", cpu="4", memory="8Gi", **node_kw), *existing)  # type: ignore[arg-type]
    got = FIT.filter(True, info(incoming), n)
    assert (list(got.reasons) if got else []) == want
    assert got is None or not got.unresolvable


@pytest.mark.parametrize(("strategy", "existing", "incoming", "want"), [
    # empty 4-cpu/8Gi node, default requests 100m/200Mi: (3900/4000, 7992/8192) → 97, 97
    ("LeastAllocated", [], pod("p"), 97),
    ("MostAllocated", [], pod("p"), 2),
    ("LeastAllocated", [pod("e", cpu="2", memory="4Gi")], pod("p", cpu="1", memory="2Gi"), 25),
    ("MostAllocated", [pod("e", cpu="2", memory="4Gi")], pod("p", cpu="1", memory="2Gi"), 75),
    ("LeastAllocated", [pod("e", cpu="4", memory="8Gi")], pod("p", cpu="1"), 0),   # over capacity: 0
    ("MostAllocated", [pod("e", cpu="4", memory="8Gi")], pod("p", cpu="1"), 100),  # capped at capacity
])
def test_fit_score(strategy: noderesources.Strategy, existing: list[Obj], incoming: Obj, want: int) -> None:
    plugin = noderesources.NodeResourcesFit(strategy)
    n, p = ni(node("a", cpu="4", memory="8Gi"), *existing), info(incoming)
    assert plugin.score(True, p, n) == want
    assert plugin.score_nodes(True, p, [n]) == [want]


@pytest.mark.parametrize(("existing", "incoming", "want"), [
    ([], pod("p", cpu="1", memory="1Gi"), 93),                       # 0.25 vs 0.125 → std 0.0625
    ([], pod("p", cpu="1", memory="2Gi"), 100),                      # equal fractions
    ([pod("e", cpu="3")], pod("p", cpu="1", memory="1Gi"), 56),      # 1.0 vs 0.125
    ([], pod("p", cpu="8", memory="1Gi"), 56),                       # fractions capped at 1
])
def test_balanced_allocation(existing: list[Obj], incoming: Obj, want: int) -> None:
    plugin = balancedallocation.BalancedAllocation()
    n, p = ni(node("a", cpu="4", memory="8Gi"), *existing), info(incoming)
    st = plugin.pre_score(p, snap(n), [n])
    assert st is not None
    assert st is not None
    assert plugin.score(st, p, n) == want
    assert plugin.score_nodes(st, p, [n]) == [want]


def test_balanced_allocation_skips_best_effort_pods() -> None:
    n = ni(node("a"))
    assert balancedallocation.BalancedAllocation().pre_score(info(pod("p")), snap(n), [n]) is None


@pytest.mark.parametrize(("total", "containers", "want"), [
    (0, 1, 0),
    (23 * MI, 1, 0),
    (1000 * MI, 1, 100),
    (2000 * MI, 1, 100),
    (int(511.5 * MI), 1, 50),
    (1000 * MI, 2, 49),
])
def test_image_locality_priority(total: int, containers: int, want: int) -> None:
    assert imagelocality.calculate_priority(total, containers) == want


def test_image_locality_prefers_nodes_holding_big_images_scaled_by_spread() -> None:
    big = [{"names": ["registry.example/app:1"], "sizeBytes": 800 * MI}]
    nodes = [ni(node("has", images=big)), ni(node("none"))]
    plugin = imagelocality.ImageLocality()
    p = info(pod("p", image="registry.example/app:1"))
    st = plugin.pre_score(p, snap(*nodes), nodes)
    assert st is not None
    # 800 MiB held by 1 of 2 nodes counts as 400 MiB: 100 * (400-23)/(1000-23) = 38
    assert [plugin.score(st, p, n) for n in nodes] == [38, 0]
    assert plugin.pre_score(info(pod("q", image="other")), snap(*nodes), nodes) is None


def test_image_names_without_tag_mean_latest() -> None:
    assert info(pod("p", image="busybox")).images == ("busybox:latest",)
    assert info(pod("p", image="host:5000/busybox")).images == ("host:5000/busybox:latest",)
    assert info(pod("p", image="busybox@sha256:ab")).images == ("busybox@sha256:ab",)
