"""Tranche controller: Celery workers that reconcile what tenants bought into Kubernetes objects,
and the watcher that reports what the cluster says.

`render/` holds pure functions (no Django, no kubernetes client) that return object dicts;
`apply.py` is the only module that talks to the API server (server-side apply, one field
manager); `observe.py` the one reader of cluster objects (claims, pods, quota) into
`tranche.observed` facts; `desired.py` the one reader and `store.py` the one writer of portal
state; `reconcile.py` holds the idempotent `reconcile_project(id)` and the periodic resync;
`tasks.py` the thin Celery wrappers; `watch/` streams cluster events into observed facts;
`hints.py` sends the controller's own follow-ups.
"""
