"""The node-local read-only Kubernetes API (`lite agent --local-api`): see `server` (HTTP, access, kubeconfig),
`view` (the node's objects and the read-only routing, pure) and `tunnel` (streams served in process)."""
