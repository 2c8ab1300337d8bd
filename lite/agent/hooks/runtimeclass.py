"""The RuntimeClass hook: a pod may run only under a runtime handler this agent has (kubelet's sandbox
creation through the CRI runtime handler).

lite's agent runs containers one way, so it supports the handlers `runc` (containerd's default name, which
charts use) and `lite`. A pod whose RuntimeClass names another handler, or whose RuntimeClass the agent was
not given (it was deleted after admission), never starts: like kubelet, the agent reports a Warning
`FailedCreatePodSandBox` event with the runtime's message and keeps the pod Pending (containers waiting in
ContainerCreating), retrying with backoff, so the pod starts if the RuntimeClass is fixed.
"""

from __future__ import annotations

from lite.agent.hooks.base import Hook, HookError, PodState

SUPPORTED_HANDLERS = ("runc", "lite")
REASON = "FailedCreatePodSandBox"


def handler_problem(name: str, runtime_class: dict[str, object] | None) -> str | None:
    """Why a pod naming RuntimeClass `name` (given as `runtime_class`, None if unknown) cannot start."""
    if runtime_class is None:
        return f'Failed to create pod sandbox: RuntimeClass "{name}" not found'
    handler = runtime_class.get("handler")
    if handler not in SUPPORTED_HANDLERS:
        return ("Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: "
                f'no runtime for "{handler}" is configured')
    return None


class RuntimeClassHook(Hook):
    name = "runtimeclass"

    async def prerun(self, st: PodState) -> None:
        name = (st.pod.get("spec") or {}).get("runtimeClassName")
        if not name:
            return
        problem = handler_problem(str(name), self.deps.runtime_class(str(name)))
        if problem:
            raise HookError(REASON, problem)
