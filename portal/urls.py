"""HTTP routes of the portal."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from portal.core import views as core_views

urlpatterns = [
    path("healthz", core_views.healthz, name="healthz"),
    path("readyz", core_views.readyz, name="readyz"),
    path("admin/", admin.site.urls),
]
