"""The API aggregation layer (apiregistration.k8s.io): extension API servers behind APIServices."""

from lite.server.aggregator.aggregator import Aggregator, RemoteGroupVersion

__all__ = ["Aggregator", "RemoteGroupVersion"]
