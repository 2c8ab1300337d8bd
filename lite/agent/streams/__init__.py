"""Agent side of log/exec/attach/port-forward streams opened by the server over the join session."""
