"""Organization (tenant and billing account), Membership (role), Project (one namespace) and
Invitation (a link an owner hands to a colleague). Written only through `tenants.services`."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from tranche import quota
from tranche.names import ROLE_MEMBER, ROLE_OWNER, ROLE_VIEWER


class Organization(models.Model):
    """A tenant and its billing account. Suspended organizations cannot order."""

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        SUSPENDED = "suspended", "Suspended"

    name = models.CharField(max_length=80)
    slug = models.SlugField(max_length=40, unique=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    suspension_reason = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_suspended(self) -> bool:
        return self.status == self.Status.SUSPENDED


class Membership(models.Model):
    """A user's role in one organization."""

    class Role(models.TextChoices):
        OWNER = ROLE_OWNER, "Owner"
        MEMBER = ROLE_MEMBER, "Member"
        VIEWER = ROLE_VIEWER, "Viewer"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "organization"], name="one_membership_per_org")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.organization} ({self.role})"

    @property
    def can_order(self) -> bool:
        return self.role in (self.Role.OWNER, self.Role.MEMBER)


class LiveProjectManager(models.Manager):
    """Projects not deleted: what every page, the controller's resync and the ingest see."""

    def get_queryset(self) -> models.QuerySet:
        return super().get_queryset().filter(deleted_at__isnull=True)


class Project(models.Model):
    """A project of an organization; maps 1:1 to a Kubernetes namespace (immutable once set).

    A project that ever ordered is never removed from the database (its orders, usage and
    invoice lines are billing history): deleting it sets `deleted_at`, and `objects` no longer
    sees it; `all_objects` does (its names stay taken), and so do foreign keys."""

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT)
    name = models.CharField(max_length=80)
    slug = models.SlugField(max_length=40)
    namespace = models.CharField(max_length=63, unique=True, editable=False)
    cpu_quota_millicores = models.PositiveIntegerField(default=quota.CPU_MILLICORES)
    memory_quota_mib = models.PositiveIntegerField(default=quota.MEMORY_MIB)
    created_at = models.DateTimeField(auto_now_add=True)
    deleted_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="deleted by an owner; billing kept"
    )

    objects = LiveProjectManager()
    all_objects = models.Manager()  # noqa: DJ012 - the default manager must be declared first

    class Meta:
        base_manager_name = "all_objects"  # an invoice line's project is there once deleted
        ordering = ["organization__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "slug"], name="project_slug_per_org")
        ]

    def __str__(self) -> str:
        return f"{self.organization.slug}/{self.slug}"


class Invitation(models.Model):
    """An invitation link for one email address, accepted once, before `expires_at`, by a
    logged-in user whose account has that address. Only the token's SHA-256 is stored."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    email = models.EmailField(max_length=254)
    role = models.CharField(max_length=16, choices=Membership.Role.choices)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    expires_at = models.DateTimeField()
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    accepted_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"Invitation of {self.email} to {self.organization}"
