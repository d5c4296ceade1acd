"""Hints the watcher sends when the cluster moves on before the next resync would notice."""

from __future__ import annotations


def cancel_waits_for_release(project_id: int) -> None:
    """Reconcile now (not at the next resync) a project whose cancel waits for its claims."""
    from portal.core.queue import send_reconcile
    from portal.orders.models import Order

    if Order.objects.filter(project_id=project_id, state=Order.State.CANCELLING).exists():
        send_reconcile(project_id)
