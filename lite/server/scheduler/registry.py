"""The plugin registry: which plugins a profile runs, in upstream's default order, with upstream's default
score weights (TaintToleration 3; NodeAffinity, PodTopologySpread, InterPodAffinity 2; the rest 1).

Filter order decides which reason a node reports: the first failing filter wins, as upstream.
"""

from __future__ import annotations

from lite.records import dataclass
from lite.server.scheduler.framework import FilterPlugin, ScorePlugin
from lite.server.scheduler.plugins.balancedallocation import BalancedAllocation
from lite.server.scheduler.plugins.imagelocality import ImageLocality
from lite.server.scheduler.plugins.interpodaffinity import InterPodAffinity
from lite.server.scheduler.plugins.nodeaffinity import NodeAffinity
from lite.server.scheduler.plugins.nodename import NodeName
from lite.server.scheduler.plugins.nodeports import NodePorts
from lite.server.scheduler.plugins.noderesources import NodeResourcesFit, Strategy
from lite.server.scheduler.plugins.nodeunschedulable import NodeUnschedulable
from lite.server.scheduler.plugins.podtopologyspread import PodTopologySpread
from lite.server.scheduler.plugins.tainttoleration import TaintToleration
from lite.server.scheduler.plugins.volumebinding import VolumeBinding

DEFAULT_SCHEDULER = "default-scheduler"


@dataclass(frozen=True)
class Profile:
    """KubeSchedulerProfile subset. `percentage_of_nodes_to_score` 0 means upstream's adaptive default."""

    scheduler_name: str = DEFAULT_SCHEDULER
    scoring_strategy: Strategy = "LeastAllocated"
    percentage_of_nodes_to_score: int = 0


@dataclass(frozen=True)
class Plugins:
    filters: tuple[FilterPlugin, ...]
    scores: tuple[tuple[ScorePlugin, int], ...]


def plugins_for(profile: Profile) -> Plugins:
    fit = NodeResourcesFit(profile.scoring_strategy)
    taints, affinity = TaintToleration(), NodeAffinity()
    spread, interpod = PodTopologySpread(), InterPodAffinity()
    filters: tuple[FilterPlugin, ...] = (
        NodeUnschedulable(), NodeName(), taints, affinity, NodePorts(), fit, VolumeBinding(), spread, interpod)
    scores: tuple[tuple[ScorePlugin, int], ...] = (
        (taints, 3), (affinity, 2), (fit, 1), (spread, 2), (interpod, 2), (BalancedAllocation(), 1),
        (ImageLocality(), 1))
    return Plugins(filters, scores)
