"""Tranche portal: the Django + Channels (ASGI) project.

Tenants buy GPU slice plans and see their quota; billing staff run plans, invoices and suspensions
from the Django admin; support watches live pod status over websockets. Every write goes through
an app's `services.py`, every read through `selectors.py` scoped to the caller's tenant. The Celery
app is imported here so `@shared_task` binds to it in every process.
"""

from portal.celery import app as celery_app

__all__ = ["celery_app"]
