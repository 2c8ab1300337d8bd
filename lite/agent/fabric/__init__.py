"""The pod network across nodes (flannel-style VXLAN or host-gw backends, masquerade)."""
