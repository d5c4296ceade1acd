"""AuditLog rows, written only by `portal.audit.services.record_audit` inside the caller's
transaction, so a change and its audit row commit or roll back together."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditLog(models.Model):
    """One service call that changed money or entitlement."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_label = models.CharField(max_length=200, help_text="Username, or 'system:<component>'.")
    action = models.CharField(max_length=64, db_index=True)
    organization_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_label} {self.action} {self.object_repr}"
