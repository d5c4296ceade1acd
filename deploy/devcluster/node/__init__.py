"""Real nodes of the dev cluster: kubelet, containerd and runc on this machine.

Layers: `build` (containerd from the Go module proxy, the pause image), `render` (pure
KubeletConfiguration, containerd config and CNI network for one node), `run` (start, stop and
clean one node's processes, mounts, cgroups and network namespaces). The launcher starts
`TRANCHE_REAL_NODES` of them (default 1) after the control plane.
"""
