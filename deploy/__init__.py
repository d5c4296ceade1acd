"""What an operator installs (the chart and manifests) and the local control plane used by tests
and the demo (`deploy.devcluster`), plus the project-owned PostgreSQL/Redis for local runs
(`deploy.local`)."""
