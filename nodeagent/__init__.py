"""Tranche node agent: one per GPU node.

Discovers GPUs with NVML, publishes them to Kubernetes as DRA ResourceSlices of driver
`gpu.tranche.dev`, serves the kubelet DRA plugin that prepares claims (slice config + CDI spec),
ships the native interception core (`nodeagent/native`, C, LD_PRELOAD) that enforces each slice,
and streams slice status back to the portal over a websocket. It never imports the portal.
"""
