"""ImageLocality score: prefer nodes that already hold the pod's images, each image's size scaled by the
share of nodes holding it (so one node with a popular image does not attract everything), clamped between
23 MB and 1000 MB per container and mapped to 0-100."""

from __future__ import annotations

from lite.server.scheduler.framework import MAX_SCORE, no_normalize
from lite.server.scheduler.podinfo import PodInfo
from lite.server.scheduler.snapshot import NodeInfo, Snapshot

NAME = "ImageLocality"
MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


def calculate_priority(sum_scores: int, num_containers: int) -> int:
    max_threshold = MAX_CONTAINER_THRESHOLD * num_containers
    s = min(max(sum_scores, MIN_THRESHOLD), max_threshold)
    return MAX_SCORE * (s - MIN_THRESHOLD) // (max_threshold - MIN_THRESHOLD)


class ImageLocality:
    name = NAME

    def pre_score(self, pod: PodInfo, snap: Snapshot, nodes: list[NodeInfo]) -> tuple[int, dict[str, int]] | None:
        spread = {img: snap.image_nodes[img] for img in pod.images if img in snap.image_nodes}
        if not spread:
            return None
        return len(snap.nodes), spread

    def score(self, state: tuple[int, dict[str, int]], pod: PodInfo, node: NodeInfo) -> int:
        total, spread = state
        s = 0
        for img, count in spread.items():
            size = node.node.images.get(img)
            if size is not None:
                s += int(size * (count / total))
        return calculate_priority(s, len(pod.images))

    normalize = staticmethod(no_normalize)
