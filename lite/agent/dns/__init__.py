"""Cluster DNS served by every node's agent: records (pure), zone (incremental table), server (asyncio)."""
