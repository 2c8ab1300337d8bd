"""Container runtime primitives of the node agent: cgroups (v1/v2), the per-container shim and container init.

Modules: `cgroups` (pod/container cgroups, limits, stats, kill; helpers in `cgfs`), `spec` (plain data shared
with the shim), `container` (the asyncio `Runtime` and `ProcessRuntime` the pod hooks call), `shim` (the
per-container supervisor process, also `lite shim ...`), `init` (namespace/mount setup run in the container's
init before execve), `zygote` (the fork-server that starts shims), `linux` (ctypes syscalls Python 3.11 lacks),
`crilog` (CRI log files with rotation), `state` (state_dir files), `attach` (the shim's stdio socket).
Importing this package has no side effects and pulls in no submodule.
"""
