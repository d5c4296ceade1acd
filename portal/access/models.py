"""ClusterAccess: a user's credential generation and when they last downloaded a kubeconfig.

No token is stored: tokens are minted on download and handed over once. The generation names
the user's ServiceAccounts (`tranche.naming.account_name`); raising it makes the
controller delete them, which invalidates every token issued before.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ClusterAccess(models.Model):
    """One row per user who downloaded or revoked credentials (absent: generation 1)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="cluster_access"
    )
    generation = models.PositiveIntegerField(default=1)
    issued_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "cluster access"

    def __str__(self) -> str:
        return f"cluster access of {self.user} (generation {self.generation})"
