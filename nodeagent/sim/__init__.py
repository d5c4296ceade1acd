"""Simulation mode of the node agent, apart from production code: kubelet-lite (plays the
kubelet for pods on kwok nodes), the synthetic GPU workload, and simgpu wiring. The production
agent imports this package only when run with `--simulate`."""
