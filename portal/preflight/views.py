"""The pre-flight page of a project, its JSON API, and the account page's API tokens.

The API takes the manifest as the raw body (YAML) or JSON `{"manifest": "..."}`; it authenticates
by session (with CSRF) or `Authorization: Bearer <personal token>` (no CSRF: no cookie involved).
Another organization's project is a 404 either way. Oversized input is a verdict, never a 500.
"""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from portal.preflight import tokens
from portal.preflight.limits import BusyError
from portal.preflight.manifest import MAX_MANIFEST_BYTES
from portal.preflight.service import Report, run_preflight
from portal.preflight.verdicts import will_fail
from portal.tenants.context import nav_context
from portal.tenants.errors import ServiceError
from portal.tenants.selectors import get_project

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
    project, _ = get_project(request.user, project_id)
    text, report, busy = "", None, ""
    if request.method == "POST":
        text, report = _manifest_from_form(request)
        if report is None:
            try:
                report = run_preflight(request.user, project, text)
            except BusyError as exc:
                busy = str(exc)
    context = {
        "project": project,
        "manifest": text,
        "report": report,
        "busy": busy,
        "max_mib": MAX_MANIFEST_BYTES // 1024 // 1024,
        **nav_context(request, project),
    }
    return render(request, "preflight/preflight.html", context)


def _api_user(request: HttpRequest):
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return tokens.user_for_token(header[len("Bearer ") :].strip()), False
    return (request.user if request.user.is_authenticated else None), True


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
        except (ValueError, AttributeError):
            return "", _error(400, 'The JSON body must be an object: {"manifest": "<YAML>"}.')
    return text, None


@csrf_exempt
def preflight_api(request: HttpRequest, project_id: int) -> HttpResponse:
    """POST a manifest, get `{"overall": ..., "verdicts": [...]}`."""
    user, by_session = _api_user(request)
    if user is None:
        return _error(401, "Log in, or send Authorization: Bearer <personal API token>.")
    if by_session and (
        refused := CsrfViewMiddleware(lambda r: None).process_view(request, None, (), {})
    ):
        return refused
    if request.method != "POST":
        return _error(405, 'POST the manifest (YAML body, or JSON {"manifest": "..."}).')
    project, _ = get_project(user, project_id)
    text, refused = _api_manifest(request)
    if refused is not None:
        return refused
    try:
        return JsonResponse(run_preflight(user, project, text).as_json())
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
            _token, secret = tokens.create_token(request.user, request.POST.get("name", ""))
        except ServiceError as exc:
            error = str(exc)
    context = {
        "tokens": tokens.tokens_of(request.user),
        "secret": secret,
        "error": error,
        **nav_context(request),
    }
    return render(request, "preflight/tokens.html", context)


@login_required
@require_POST
def revoke_api_token(request: HttpRequest, token_id: int) -> HttpResponse:
    tokens.revoke_token(request.user, token_id)
    return redirect("api_tokens")
