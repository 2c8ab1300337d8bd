"""lite: a lightweight, Kubernetes-compatible orchestrator."""

__version__ = "0.1.0"
KUBE_VERSION = "v1.32.0"

