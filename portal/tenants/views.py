"""Tenant account pages: landing, sign-up, organization, invitations, project switching."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from portal.core import throttle
from portal.core.client_address import client_address
from portal.tenants import selectors, services
from portal.tenants.context import current_project, nav_context
from portal.tenants.errors import ServiceError
from portal.tenants.forms import (
    InvitedSignUpForm,
    InviteForm,
    ProjectForm,
    SignUpForm,
    SwitchProjectForm,
)

SESSION_INVITATION = "tranche_invitation_id"


def home(request: HttpRequest) -> HttpResponse:
    """Landing page, or the current project's quota page once logged in."""
    if request.user.is_authenticated:
        project = current_project(request)
        if project is not None:
            return redirect("quota", project_id=project.pk)
        return render(request, "tenants/no_project.html", nav_context(request))
    return render(request, "tenants/landing.html")


SIGNUP_WINDOW_SECONDS = 3600


def _retry_words(seconds: int) -> str:
    """'in 23 minutes (at 14:00 UTC)': when the window that refused a caller ends."""
    at = datetime.now(tz=UTC) + timedelta(seconds=seconds)
    minutes = max(1, -(-seconds // 60))
    return f"in {minutes} minute{'s' * (minutes != 1)} (at {at:%H:%M} UTC)"


def _signup_refusal(request: HttpRequest) -> tuple[str, int] | None:
    """Each sign-up makes a user, an organization and a namespace, for anyone: at most
    SIGNUP_PER_ADDRESS_PER_HOUR from one address and SIGNUP_PER_HOUR in all (Redis counters,
    shared by every replica). None when this one may go ahead, else the page's message and the
    seconds until the counters start again (the answer's Retry-After)."""
    address = client_address(request)
    retry = throttle.seconds_left(SIGNUP_WINDOW_SECONDS)
    if not throttle.allow(
        "signup-address", address, settings.SIGNUP_PER_ADDRESS_PER_HOUR, SIGNUP_WINDOW_SECONDS
    ):
        return (
            "Too many accounts were created from your network address this hour, so sign-up is "
            f"paused for it. Try again {_retry_words(retry)}, or log in if you already have an "
            "account; nothing you entered was stored."
        ), retry
    if not throttle.allow("signup-all", "", settings.SIGNUP_PER_HOUR, SIGNUP_WINDOW_SECONDS):
        return (
            "Sign-up is busy: more new accounts than usual were created this hour, so new ones "
            f"are paused. Try again {_retry_words(retry)}; nothing you entered was stored."
        ), retry
    return None


def signup(request: HttpRequest) -> HttpResponse:
    """Create a user, an organization and its first project, then log in."""
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        if (refused := _signup_refusal(request)) is not None:
            refusal, retry = refused
            response = render(request, "tenants/signup.html",
                              {"form": form, "refusal": refusal}, status=429)  # fmt: skip
            response["Retry-After"] = str(retry)
            return response
        try:
            user, _org, project = services.sign_up(**form.cleaned_data)
        except ServiceError as error:
            form.add_error("username", str(error))
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            messages.success(request, f"Welcome! Your project namespace is {project.namespace}.")
            if request.session.get(SESSION_INVITATION):  # signed up to accept an invitation
                return redirect("accept_invitation")
            return redirect("quota", project_id=project.pk)
    status = 400 if form.errors else 200
    return render(request, "tenants/signup.html", {"form": form}, status=status)


@login_required
@never_cache  # it shows a new invitation's link, token included
def organization(request: HttpRequest, organization_id: int) -> HttpResponse:
    """Members, invitations and projects of one of the caller's organizations."""
    membership = selectors.get_membership(request.user, organization_id)
    invite_form, project_form, link = InviteForm(), ProjectForm(), None
    status = 200
    if request.method == "POST":
        try:
            action = request.POST.get("form")
            if action == "remove_member":
                return _owner_action(request, membership, action)
            if action == "invite":
                invite_form = InviteForm(request.POST)
                if invite_form.is_valid():
                    _invitation, token = services.invite_member(
                        membership=membership, **invite_form.cleaned_data
                    )
                    # The token rides in the fragment: browsers never send it to a server, so
                    # it stays out of access logs, proxies and Referer headers.
                    link = request.build_absolute_uri(reverse("accept_invitation")) + "#" + token
            else:
                project_form = ProjectForm(request.POST)
                if project_form.is_valid():
                    project = services.create_project(
                        membership=membership, name=project_form.cleaned_data["name"]
                    )
                    messages.success(request, f"Project {project.name} created.")
                    return redirect("quota", project_id=project.pk)
        except ServiceError as error:
            messages.error(request, str(error))
            status = error.status
        if invite_form.errors or project_form.errors:
            status = 400
    context = {
        "membership": membership,
        "org": membership.organization,
        "members": selectors.members_of(membership),
        "invitations": selectors.pending_invitations(membership),
        "projects": selectors.projects_of(request.user).filter(
            organization_id=membership.organization_id
        ),
        "invite_form": invite_form,
        "project_form": project_form,
        "invite_link": link,
        **nav_context(request),
    }
    return render(request, "tenants/organization.html", context, status=status)


def _owner_action(request: HttpRequest, membership, action: str) -> HttpResponse:
    """Remove a member (owners; the service checks), then back to the page."""
    target = request.POST.get("target", "")
    if not target.isdigit() or len(target) > 18:
        raise ServiceError("Choose a member from the page.")
    services.remove_member(membership=membership, member_id=int(target))
    messages.success(request, "Member removed; their cluster access ends within seconds.")
    return redirect("organization", organization_id=membership.organization_id)


@login_required
def delete_project(request: HttpRequest, organization_id: int, project_id: int) -> HttpResponse:
    """GET: what deleting the project does, or why it cannot be deleted yet. POST: delete it
    (owners; `services.delete_project` checks again under a lock)."""
    membership = selectors.get_membership(request.user, organization_id)
    project = (
        selectors.projects_of(request.user)
        .filter(pk=project_id, organization_id=membership.organization_id)
        .first()
    )
    if project is None:
        raise Http404("No such project.")
    status = 200
    if request.method == "POST":
        try:
            removed = services.delete_project(membership=membership, project_id=project.pk)
        except ServiceError as error:
            messages.error(request, str(error))
            status = error.status
        else:
            kept = "" if removed else " Its orders and invoices are kept on the billing page."
            messages.success(
                request,
                f"Project {project.name} deleted; its namespace {project.namespace} is being "
                f"removed from the cluster.{kept}",
            )
            return redirect("organization", organization_id=membership.organization_id)
    context = {
        "membership": membership,
        "project": project,
        "blockers": services.deletion_blockers(project),
        "has_orders": project.orders.exists(),
        **nav_context(request),
    }
    return render(request, "tenants/delete_project.html", context, status=status)


@never_cache  # its script reads the invitation's token from the link
def accept_invitation(request: HttpRequest) -> HttpResponse:
    """Open an invitation and join it.

    The link is `/invite/#<token>`; the page's script posts the fragment here (or the invitee
    pastes it). The opened invitation's id, never the token, is kept in the session so that
    logging in or signing up comes back to it. Joining is a POST by a logged-in user.
    """
    if request.method == "POST" and request.POST.get("token"):
        invitation = selectors.get_open_invitation(request.POST["token"].strip())
        request.session[SESSION_INVITATION] = invitation.pk
        return redirect("accept_invitation")
    invitation_id = request.session.get(SESSION_INVITATION)
    if not isinstance(invitation_id, int):
        return render(request, "tenants/invitation_open.html", nav_context(request))
    invitation = selectors.get_opened_invitation(invitation_id)
    status = 200
    form = InvitedSignUpForm(email=invitation.email)
    if request.method == "POST" and not request.user.is_authenticated:
        form = InvitedSignUpForm(request.POST, email=invitation.email)
        if form.is_valid():
            try:
                user = services.sign_up_invited(invitation=invitation, **form.cleaned_data)
            except ServiceError as error:
                form.add_error("username", str(error))
            else:
                login(request, user, backend="django.contrib.auth.backends.ModelBackend")
                request.session.pop(SESSION_INVITATION, None)
                messages.success(request, f"Welcome! You joined {invitation.organization.name}.")
                return redirect("organization", organization_id=invitation.organization_id)
        status = 400
    if request.method == "POST" and request.user.is_authenticated:
        try:
            membership = services.accept_invitation(user=request.user, invitation=invitation)
        except ServiceError as error:
            messages.error(request, str(error))
            status = error.status
        else:
            request.session.pop(SESSION_INVITATION, None)
            messages.success(request, f"You joined {membership.organization.name}.")
            return redirect("organization", organization_id=membership.organization_id)
    context = {"invitation": invitation, "form": form, **nav_context(request)}
    return render(request, "tenants/invitation.html", context, status=status)


@login_required
@require_POST
def switch_project(request: HttpRequest) -> HttpResponse:
    """Make another of the caller's projects current (404 for anything else)."""
    form = SwitchProjectForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose a project from the list to switch to it.")
        return redirect("home")
    project, _ = selectors.get_project(request.user, form.cleaned_data["project"])
    nav_context(request, project)
    return redirect("quota", project_id=project.pk)
