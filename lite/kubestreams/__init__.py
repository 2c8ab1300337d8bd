"""The kubelet's stream protocols (logs, exec/attach, port-forward) over an `AgentStream`, for any HTTP front.

The API server serves them for every node through the node's join session (`lite.server.join.streams`); the
agent's node-local API (`lite.agent.localapi`) serves them for its own pods through an in-process pair with its
`StreamServer`. Both hand `pods.serve_pod_stream` the pod and a way to open agent streams, so the two speak
exactly the same protocols. Leaf package: imports only the leaf, stdlib and aiohttp; nothing here is imported
until the first stream (the package itself imports none of its modules).
"""
