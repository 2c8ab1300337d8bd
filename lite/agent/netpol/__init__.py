"""NetworkPolicy enforcement in the agent: `compile` (pure decisions), `rules` (pure nftables rendering),
`enforcer` (state → one transaction per sync, refusal counters and events), `feed` (join messages)."""
