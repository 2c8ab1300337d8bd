"""Pod hooks: the ordered steps that prepare and release what a pod's containers need.

`build_hooks(deps)` is the one place that lists them, in prerun order (stop runs them in reverse):
    runtime class (a handler this agent has) → cgroup (QoS class, pod cgroup)
    → pid namespace (shareProcessNamespace: a pause holding it) → network (IP, netns, veth, /etc files) → volumes
Images are pulled per container by the supervisor (`supervisor.py`), right before each start, as kubelet does, so
one bad image does not hold up the other containers. See `base.py` for the hook contract.
"""

from __future__ import annotations

from lite.agent.hooks.base import Deps, Hook
from lite.agent.hooks.cgroup import CgroupHook
from lite.agent.hooks.network import NetworkHook
from lite.agent.hooks.pidns import PidNamespaceHook
from lite.agent.hooks.runtimeclass import RuntimeClassHook
from lite.agent.hooks.volumes import VolumesHook


def build_hooks(deps: Deps) -> list[Hook]:
    return [RuntimeClassHook(deps), CgroupHook(deps), PidNamespaceHook(deps), NetworkHook(deps), VolumesHook(deps)]
