"""Tranche controller: Celery workers that reconcile what tenants bought into Kubernetes objects.

`render/` holds pure functions (no Django, no kubernetes client) that return object dicts;
`apply.py` is the only module that talks to the API server (server-side apply, one field manager);
`reconcile.py` holds the idempotent `reconcile_project(id)`; `tasks.py` the thin Celery wrappers and
periodic resync; `watch.py` turns cluster events into portal state.
"""
