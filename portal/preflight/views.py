"""The pre-flight page of a project, its JSON API, and the account page's API tokens.

The API takes the manifest as the raw body (YAML) or JSON `{"manifest": "..."}`; it authenticates
by session (with CSRF) or `Authorization: Bearer <personal token>` (no CSRF: no cookie involved).
Another organization's project is a 404 either way. Oversized input is a verdict, never a 500.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from portal.core.arrival import arrived_at
from portal.preflight import dbphase, tokens
from portal.preflight.limits import BusyError
from portal.preflight.manifest import MAX_MANIFEST_BYTES
from portal.preflight.samples import sample_images
from portal.preflight.service import CallDeadline, Report, run_preflight
from portal.preflight.verdicts import will_fail
from portal.tenants.context import nav_context, request_project
from portal.tenants.errors import ServiceError
from portal.tenants.selectors import get_project, memberships_of

TOO_BIG = (
    f"The manifest is larger than {MAX_MANIFEST_BYTES // 1024 // 1024} MiB; pre-flight reads at "
    "most that. Check the objects of one workload at a time."
)


def _too_big() -> Report:
    return Report([will_fail("manifest", "manifest", TOO_BIG, "Send a smaller manifest.")])


def _manifest_from_form(request: HttpRequest) -> tuple[str, Report | None]:
    try:
        upload = request.FILES.get("upload")
        if upload is not None:
            if upload.size > MAX_MANIFEST_BYTES:
                return "", _too_big()
            return upload.read().decode("utf-8", "replace"), None
        return request.POST.get("manifest", ""), None
    except RequestDataTooBig:
        return "", _too_big()


@login_required
def preflight_page(request: HttpRequest, project_id: int) -> HttpResponse:
    """Paste or upload a manifest, see per check a verdict, the reason and the fix."""
    arrival = arrived_at(request)
    project, _ = request_project(request, project_id)
    text, report, busy = "", None, ""
    if request.method == "POST":
        text, report = _manifest_from_form(request)
        if report is None:
            try:
                report = run_preflight(request.user, project, text, arrival=arrival)
            except BusyError as exc:
                busy = str(exc)
    context = {
        "project": project,
        "manifest": text,
        "report": report,
        "busy": busy,
        "max_mib": MAX_MANIFEST_BYTES // 1024 // 1024,
        "samples": sample_images(),
        **nav_context(request, project),
    }
    return render(request, "preflight/preflight.html", context)


def _api_user(request: HttpRequest):
    """(user, by session, the token's organization id or None)."""
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        token = tokens.token_for_secret(header[len("Bearer ") :].strip())
        return (token.user, False, token.organization_id) if token else (None, False, None)
    return (request.user if request.user.is_authenticated else None), True, None


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _api_manifest(request: HttpRequest) -> tuple[str, JsonResponse | None]:
    """The manifest text of an API call, or the response refusing it."""
    try:
        body = request.body
    except RequestDataTooBig:
        return "", JsonResponse(_too_big().as_json(), status=413)
    if len(body) > MAX_MANIFEST_BYTES:
        return "", JsonResponse(_too_big().as_json(), status=413)
    text = body.decode("utf-8", "replace")
    if request.content_type == "application/json":
        try:
            return str(json.loads(text).get("manifest", "")), None
        except RecursionError:  # thousands of nested objects: the parser's stack, not a 500
            return "", _error(
                400, 'The JSON body is nested too deeply; send {"manifest": "<YAML>"}.'
            )
        except (ValueError, AttributeError):
            return "", _error(400, 'The JSON body must be an object: {"manifest": "<YAML>"}.')
    return text, None


DB_BUSY = (
    "Pre-flight is busy: too many checks are starting on this server at once. Nothing was "
    "checked; send it again in {retry} s."
)
DB_BUSY_RETRY_S = 5


@csrf_exempt
def preflight_api(request: HttpRequest, project_id: int) -> HttpResponse:
    """POST a manifest, get `{"overall": ..., "verdicts": [...]}`."""
    arrival = arrived_at(request)  # the ASGI server's stamp; else now, before any query
    # Queue for the database phase without a connection (dbphase), within the call's deadline.
    with dbphase.database_phase(CallDeadline.after(arrival).left()) as free:
        if not free:
            message = DB_BUSY.format(retry=DB_BUSY_RETRY_S)
            resp = JsonResponse({"error": message, "retry_after_s": DB_BUSY_RETRY_S}, status=503)
            resp["Retry-After"] = str(DB_BUSY_RETRY_S)
            return resp
        return _preflight_api(request, project_id, arrival)


def _preflight_api(request: HttpRequest, project_id: int, arrival) -> HttpResponse:
    user, by_session, token_organization = _api_user(request)
    if user is None:
        return _error(
            401,
            "Log in, or send Authorization: Bearer <personal API token>. A token that expired, "
            "was revoked or whose organization you left no longer works: make a new one on the "
            "API tokens page.",
        )
    if by_session and (
        refused := CsrfViewMiddleware(lambda r: None).process_view(request, None, (), {})
    ):
        return refused
    if request.method != "POST":
        return _error(405, 'POST the manifest (YAML body, or JSON {"manifest": "..."}).')
    project, _ = get_project(user, project_id)
    if token_organization is not None and project.organization_id != token_organization:
        raise Http404  # the token's scope: another organization's project is as if missing
    text, refused = _api_manifest(request)
    if refused is not None:
        return refused
    try:
        report = run_preflight(user, project, text, arrival=arrival)
        return JsonResponse(report.as_json())
    except BusyError as exc:
        resp = JsonResponse({"error": str(exc), "retry_after_s": exc.retry_after}, status=429)
        resp["Retry-After"] = str(exc.retry_after)
        return resp


@login_required
def api_tokens(request: HttpRequest) -> HttpResponse:
    """List, create and revoke personal API tokens; a new secret is shown once."""
    secret, error = "", ""
    if request.method == "POST":
        try:
            _token, secret = tokens.create_token(
                request.user,
                request.POST.get("name", ""),
                _int(request.POST.get("organization")) if "organization" in request.POST else None,
                _int(request.POST.get("days"), settings.API_TOKEN_DAYS),
            )
        except ServiceError as exc:
            error = str(exc)
    context = {
        "tokens": tokens.tokens_of(request.user),
        "secret": secret,
        "error": error,
        "memberships": memberships_of(request.user),
        "default_days": settings.API_TOKEN_DAYS,
        "max_days": tokens.MAX_TOKEN_DAYS,
        **nav_context(request),
    }
    response = render(request, "preflight/tokens.html", context)
    response["Cache-Control"] = "no-store"  # it may show a new secret: never keep a copy
    return response


def _int(raw: str | None, default: int = 0) -> int:
    try:
        return int(raw or default)
    except ValueError:
        return 0  # refused by the service with a message saying what to enter


@login_required
@require_POST
def revoke_api_token(request: HttpRequest, token_id: int) -> HttpResponse:
    tokens.revoke_token(request.user, token_id)
    return redirect("api_tokens")
