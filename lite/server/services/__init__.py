"""Service plumbing that upstream keeps inside the apiserver: ClusterIP/NodePort allocation (an admission
hook) and the `default/kubernetes` Service."""
