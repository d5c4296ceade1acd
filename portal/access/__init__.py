"""Cluster access: kubeconfigs for tenants, short-lived and revocable (docs/cluster-access.md)."""
