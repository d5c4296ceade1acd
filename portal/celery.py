"""The Celery application shared by the portal and the controller's workers."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("tranche")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
