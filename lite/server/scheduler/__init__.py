"""lite's scheduler (kube-scheduler's default profile, in process).

Modules: `podinfo` (pod facts parsed once), `snapshot` (NodeInfo, the event-fed Cache, per-cycle Snapshot),
`framework` (plugin contract), `plugins/*` (one plugin each), `registry` (plugins and weights per profile),
`cycle` (filter → score → select, FitError text), `preemption`, `queue` (active/backoff/unschedulable),
`scheduler` (informers, the loop, binding, status and events; `build_scheduler`).

Entry point: `lite.server.scheduler.scheduler.build_scheduler(client, informers)`, then `await s.run()`.
"""
