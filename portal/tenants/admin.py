"""Staff admin of tenants: organizations with suspend/resume actions that call the services."""

from __future__ import annotations

from django.contrib import admin, messages

from portal.audit.audited_admin import AuditedAdmin
from portal.core.admin import ReadOnlyAdmin
from portal.tenants import services
from portal.tenants.models import Invitation, Membership, Organization, Project


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    can_delete = False
    readonly_fields = ("user", "role", "created_at")

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Organization)
class OrganizationAdmin(AuditedAdmin):
    list_display = ("name", "slug", "status", "suspension_reason", "created_at")
    list_filter = ("status",)
    search_fields = ("name", "slug")
    readonly_fields = ("slug", "status", "suspension_reason", "created_at")
    fields = ("name", "slug", "status", "suspension_reason", "created_at")
    inlines = [MembershipInline]
    actions = ["suspend", "resume"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.action(
        description="Suspend selected organizations (refuse new orders)", permissions=["change"]
    )
    def suspend(self, request, queryset) -> None:
        done = sum(
            services.suspend_organization(
                actor=request.user, organization_id=org.pk, reason="Suspended by billing staff."
            )
            for org in queryset
        )
        self.message_user(request, f"Suspended {done} organization(s).", messages.SUCCESS)

    @admin.action(description="Resume selected organizations", permissions=["change"])
    def resume(self, request, queryset) -> None:
        done = sum(
            services.resume_organization(actor=request.user, organization_id=org.pk)
            for org in queryset
        )
        self.message_user(request, f"Resumed {done} organization(s).", messages.SUCCESS)


@admin.register(Project)
class ProjectAdmin(ReadOnlyAdmin):
    list_display = ("name", "organization", "namespace", "created_at", "deleted_at")
    list_filter = (("deleted_at", admin.EmptyFieldListFilter),)
    search_fields = ("name", "namespace", "organization__name")

    def get_queryset(self, request):
        # staff see deleted projects too: their orders and invoices are still billing history
        return Project.all_objects.select_related("organization")


@admin.register(Membership)
class MembershipAdmin(ReadOnlyAdmin):
    list_display = ("user", "organization", "role")
    list_filter = ("role",)
    search_fields = ("user__username", "organization__name")


@admin.register(Invitation)
class InvitationAdmin(ReadOnlyAdmin):
    exclude = ("token_hash",)
    list_display = ("email", "organization", "role", "created_at", "expires_at", "accepted_at")
