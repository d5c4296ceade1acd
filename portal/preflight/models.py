"""Personal API tokens (stored hashed) and the cache of image scans by digest."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    """A user's personal token for the JSON API. Only its SHA-256 is stored; shown once.

    Scoped to one organization (projects of others are 404 with it, whatever the user's other
    memberships) and one `scope`, and it expires (`expires_at`, default 90 days)."""

    class Scope(models.TextChoices):
        PREFLIGHT = "preflight", "Pre-flight only (dry runs: reads, never writes)"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    organization = models.ForeignKey(
        "tenants.Organization", on_delete=models.CASCADE, related_name="+", null=True
    )
    scope = models.CharField(max_length=20, choices=Scope.choices, default=Scope.PREFLIGHT)
    expires_at = models.DateTimeField(null=True)
    name = models.CharField(max_length=80)
    prefix = models.CharField(max_length=12, help_text="First characters, to tell tokens apart")
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class ImageScan(models.Model):
    """What an image digest's files carry; a digest never changes, so neither does its scan."""

    digest = models.CharField(max_length=80, unique=True)
    sass = models.JSONField(default=list)
    ptx = models.JSONField(default=list)
    gpu_files = models.JSONField(default=list)
    bytes_read = models.BigIntegerField(default=0)
    bound_reached = models.BooleanField(default=False)
    scanned_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.digest
