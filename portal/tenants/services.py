"""Writes of tenants: sign-up, projects, invitations, suspension. One transaction each.

Suspension and resumption are compare-and-swap on `status` (idempotent: suspending a suspended
organization changes nothing and writes no audit row) and are audited.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.audit.services import record_audit
from portal.core.queue import enqueue_reconcile, enqueue_retire_namespace
from portal.core.tokens import hash_token, new_token
from portal.tenants import usernames
from portal.tenants.errors import NotAllowedError, OrganizationSuspendedError, ServiceError
from portal.tenants.models import Invitation, Membership, Organization, Project
from tranche.naming import derive_namespace, dns_slug
from tranche.orders import OPEN_ORDER_STATES


def _unique_slug(base: str, taken) -> str:
    slug = dns_slug(base, max_len=32, fallback="x")
    candidate, n = slug, 1
    while taken(candidate):
        n += 1
        candidate = f"{slug}-{n}"
    return candidate


def _new_project(organization: Organization, name: str) -> Project:
    slug = _unique_slug(  # deleted projects keep their names: their namespace's history is theirs
        name, lambda s: Project.all_objects.filter(organization=organization, slug=s).exists()
    )
    return Project.objects.create(
        organization=organization,
        name=name,
        slug=slug,
        namespace=derive_namespace(organization.slug, slug),
    )


@transaction.atomic
def sign_up(
    *, username: str, email: str, password: str, organization_name: str, project_name: str
) -> tuple[AbstractBaseUser, Organization, Project]:
    """Create a user, their organization (they own it) and its first project. The username is
    normalised and must not look like an existing one (`portal.tenants.usernames`)."""
    username = usernames.normalize(username)
    usernames.check_new_username(username)
    try:
        with transaction.atomic():  # a savepoint: a concurrent sign-up of the same name
            user = get_user_model().objects.create_user(
                username=username, email=email, password=password
            )
    except IntegrityError as exc:
        raise ServiceError(
            f"The username {username!r} is already taken. Choose another, or log in if it is yours."
        ) from exc
    slug = _unique_slug(organization_name, lambda s: Organization.objects.filter(slug=s).exists())
    organization = Organization.objects.create(name=organization_name, slug=slug)
    Membership.objects.create(user=user, organization=organization, role=Membership.Role.OWNER)
    project = _new_project(organization, project_name)
    return user, organization, project


@transaction.atomic
def create_project(*, membership: Membership, name: str) -> Project:
    """Add a project (and its namespace name) to the caller's organization; owners and members.
    Refused while the organization is suspended (the row is locked, so the status is fresh)."""
    if not membership.can_order:
        raise NotAllowedError(
            "Viewers cannot create projects. Ask an owner of the organization for the member role."
        )
    organization = Organization.objects.select_for_update().get(pk=membership.organization_id)
    if organization.is_suspended:
        reason = organization.suspension_reason or "no reason was recorded"
        raise OrganizationSuspendedError(
            f"Your organization {organization.name} is suspended ({reason}), so no new projects "
            "can be created. Contact billing support to resume the account, then try again."
        )
    return _new_project(organization, name)


def _require_owner(membership: Membership, action: str) -> None:
    if membership.role != Membership.Role.OWNER:
        raise NotAllowedError(f"Only owners can {action}. Ask an owner of the organization.")


def _locked_in_organization(model, pk: int, membership: Membership):
    """Row `pk` of `model` if it belongs to the caller's organization, locked; else None."""
    return (
        model.objects.select_for_update()
        .filter(pk=pk, organization_id=membership.organization_id)
        .first()
    )


@transaction.atomic
def invite_member(*, membership: Membership, email: str, role: str) -> tuple[Invitation, str]:
    """Create an invitation for `email` with `role`; owners only. Returns the row and the
    plaintext token, which exists only in this return value (the row keeps its hash)."""
    _require_owner(membership, "invite people")
    if role not in Membership.Role.values:
        raise ServiceError(f"Unknown role {role!r}. Choose owner, member or viewer.")
    token = new_token()
    invitation = Invitation.objects.create(
        organization=membership.organization,
        email=email,
        role=role,
        token_hash=hash_token(token),
        expires_at=timezone.now() + timedelta(days=settings.TRANCHE_INVITATION_DAYS),
        invited_by=membership.user,
    )
    return invitation, token


@transaction.atomic
def accept_invitation(*, user, invitation: Invitation) -> Membership:
    """Join the invitation's organization. Only an account with the invited email address can,
    only before it expires, and only once (compare-and-swap on the row)."""
    if (user.email or "").strip().lower() != invitation.email.strip().lower():
        raise NotAllowedError(
            f"This invitation is for {invitation.email}, but you are logged in as "
            f"{user.get_username()} ({user.email or 'no email address'}). Log in with the "
            "invited account, or ask the owner to invite your address."
        )
    claimed = Invitation.objects.filter(
        pk=invitation.pk, accepted_at__isnull=True, expires_at__gt=timezone.now()
    ).update(accepted_at=timezone.now(), accepted_by=user)
    if not claimed:
        raise ServiceError(
            "This invitation was already used or has expired. Ask the owner for a new link."
        )
    membership, _ = Membership.objects.get_or_create(
        user=user, organization_id=invitation.organization_id, defaults={"role": invitation.role}
    )
    _reconcile_projects_of(invitation.organization_id)  # the new member's cluster accounts
    return membership


@transaction.atomic
def sign_up_invited(*, invitation: Invitation, username: str, password: str):
    """Create an account with the invitation's email address and join its organization with
    its role, in one transaction: no organization or project of their own is made. Refused
    (nothing created) if the name is taken, looks like a taken one (the same rules as `sign_up`),
    or the invitation was used or expired meanwhile."""
    username = usernames.normalize(username)
    usernames.check_new_username(username)
    try:
        with transaction.atomic():  # a savepoint: a concurrent sign-up of the same name
            user = get_user_model().objects.create_user(
                username=username, email=invitation.email, password=password
            )
    except IntegrityError as exc:
        raise ServiceError(
            f"The username {username!r} is already taken. Choose another, or log in if it is yours."
        ) from exc
    accept_invitation(user=user, invitation=invitation)
    return user


def _reconcile_projects_of(organization_id: int) -> None:
    """On commit, reconcile every project of the organization (members' cluster access)."""
    for pid in Project.objects.filter(organization_id=organization_id).values_list("pk", flat=True):
        enqueue_reconcile(pid)


@transaction.atomic
def remove_member(*, membership: Membership, member_id: int) -> None:
    """Remove a member from the caller's organization; owners only, never the last owner.

    Their cluster accounts leave the projects' desired state: the reconciles sent on commit
    delete them, so their downloaded kubeconfigs stop working within seconds."""
    _require_owner(membership, "remove members")
    target = _locked_in_organization(Membership, member_id, membership)
    if target is None:
        raise ServiceError("That person is not a member of this organization (any more).")
    owners = Membership.objects.filter(
        organization_id=membership.organization_id, role=Membership.Role.OWNER
    )
    if target.role == Membership.Role.OWNER and owners.count() <= 1:
        raise ServiceError(
            "This is the organization's last owner. Make someone else an owner first."
        )
    record_audit(
        actor=membership.user,
        action="membership.remove",
        obj=target,
        organization_id=membership.organization_id,
        before={"user": target.user.get_username(), "role": target.role},
    )
    target.delete()
    _reconcile_projects_of(membership.organization_id)


def deletion_blockers(project: Project) -> list[str]:
    """Why `project` cannot be deleted now, each with what to do; empty when it can.

    A project can go once nothing of it is still running or billed: no order in progress, no
    slice held by a subscription, no GPU claim still open in the usage ledger."""
    blockers = []
    open_orders = project.orders.filter(state__in=OPEN_ORDER_STATES).count()
    if open_orders:
        blockers.append(
            f"{open_orders} order{'s are' if open_orders > 1 else ' is'} still in progress. "
            "Wait until the quota page shows it done (usually seconds), then delete."
        )
    held = project.subscriptions.filter(quantity__gt=0).select_related("product")
    for sub in held:
        blockers.append(
            f"The project holds {sub.quantity} x {sub.product.name}. Cancel it on the quota "
            "page first (the cancel ends its billing); then delete."
        )
    if project.usage_records.filter(released_at__isnull=True).exists():
        blockers.append(
            "A pod of the project still holds a GPU slice. Delete its workloads (or wait for "
            "the cancel's grace period to end), then delete the project."
        )
    return blockers


@transaction.atomic
def delete_project(*, membership: Membership, project_id: int) -> bool:
    """Delete a project; owners only. Returns True if it was removed from the database.

    A project that never ordered is removed; one whose orders are all ended (nothing in
    progress, no slice held, no claim open) is marked deleted and kept for its billing history
    (orders, usage, invoices). Either way it leaves every page at once and, on commit, the
    controller removes its namespace; cluster access to it ends first (its RoleBindings and
    accounts are deleted before the namespace). Refused, changing nothing, while
    `deletion_blockers` names a reason."""
    _require_owner(membership, "delete projects")
    project = _locked_in_organization(Project, project_id, membership)
    if project is None:
        raise ServiceError("That project does not exist (any more).")
    blockers = deletion_blockers(project)
    if blockers:
        raise ServiceError(f"Project {project.name} cannot be deleted yet: " + " ".join(blockers))
    record_audit(
        actor=membership.user,
        action="project.delete",
        obj=project,
        organization_id=membership.organization_id,
        before={"namespace": project.namespace},
    )
    namespace = project.namespace
    kept = project.orders.exists()
    if kept:  # the row is locked: a save (with its signal to the live pages) is safe
        project.deleted_at = timezone.now()
        project.save(update_fields=["deleted_at"])
    else:
        project.delete()
    enqueue_retire_namespace(namespace)
    return not kept


def _set_status(
    *, actor, organization_id: int, old: str, new: str, reason: str, action: str
) -> bool:
    with transaction.atomic():
        changed = Organization.objects.filter(pk=organization_id, status=old).update(
            status=new, suspension_reason=reason[:200]
        )
        if changed:
            org = Organization.objects.get(pk=organization_id)
            record_audit(
                actor=actor,
                action=action,
                obj=org,
                organization_id=org.pk,
                before={"status": old},
                after={"status": new, "reason": reason[:200]},
                system="admin",
            )
            # quotas and members' cluster rights follow the status within seconds
            _reconcile_projects_of(organization_id)
        return bool(changed)


def suspend_organization(*, actor, organization_id: int, reason: str = "") -> bool:
    """Suspend an active organization (no new orders). Returns False if it was not active."""
    return _set_status(
        actor=actor,
        organization_id=organization_id,
        old=Organization.Status.ACTIVE,
        new=Organization.Status.SUSPENDED,
        reason=reason or "Suspended by billing staff.",
        action="organization.suspend",
    )


def resume_organization(*, actor, organization_id: int) -> bool:
    """Resume a suspended organization. Returns False if it was not suspended."""
    return _set_status(
        actor=actor,
        organization_id=organization_id,
        old=Organization.Status.SUSPENDED,
        new=Organization.Status.ACTIVE,
        reason="",
        action="organization.resume",
    )
