"""The node-local desired-state cache (issue 21): what the server last told this node, on disk, so an agent
without its server runs from it (`Agent` replays it into its own `handle`).

`state` (pure: what is kept, what a replay is), `files` (atomic, encrypted section files), `cache`
(`DesiredCache`: recording on the loop, debounced bounded writes in a thread). See `docs/internals.md`, Agent.
"""

from lite.agent.cache.cache import DesiredCache

__all__ = ["DesiredCache"]
