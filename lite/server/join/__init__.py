"""Join endpoint: node agents' sessions, desired-state relay, status intake, and the stream tunnel."""

from lite.server.join.hub import JoinHub
from lite.server.join.routes import add_join_routes

__all__ = ["JoinHub", "add_join_routes"]
