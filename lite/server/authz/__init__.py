"""Authorization: request attributes, the authorizer chain, RBAC over an in-memory policy index, escalation
checks, access reviews, impersonation and the bootstrap policy (issue 9 items 1 and 5).

Layering: pure decision modules (`attrs`, `rules`, `rbac`, `escalation`, `policy`) never do I/O; `index`
holds the policy in memory and is fed by a watch through the in-process `Client`; `chain` is what the HTTP
layer calls; `bootstrap` and `aggregation` write through the `Client` like any controller.
"""
