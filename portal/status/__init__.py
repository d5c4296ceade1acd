"""What support and tenants watch: the live status page per project (one table, updated over a
websocket), the quota page, the history charts and the support console (fleet, nodes, GPUs).
Reads only: observed state lives in `portal.cluster`, the agents' reports in `portal.agents`."""
