"""Simulation mode of the node agent, apart from production code: simgpu wiring (the real
kubelet and containerd of the dev cluster run the pods), the kwok fleet publisher, and a
synthetic GPU workload for the integration tests. The production
agent imports this package only when run with `--simulate`."""
