"""The portal's room for what the cluster says: pod states, slice usage, CPU/RAM used, pod
bindings and the claim ledger.

One way in for a namespace's observations, `services.record_namespace(view)`, and one for the
claims' lifetimes, `ledger.record_claim` / `ledger.resync_claims`; both take `tranche.observed`
facts the controller built (nothing here parses a Kubernetes object). The live and quota pages,
the agents' ingest (`bindings.pod_bindings`) and billing (`UsageRecord`) read from here. Below
orders, agents, status and billing; above catalog and tenants.
"""
