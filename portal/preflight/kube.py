"""The pre-flight's reads of the cluster and its dry runs as the tenant, through one client.

The client is the portal's cluster identity (`portal.access.cluster.session`, one home for it).
`tenant_identity()` is the one place that decides who a dry run acts as: the user's own
ServiceAccount in the project (per-user credentials), impersonated by the portal.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from portal.access.services import generation_of
from tranche.naming import account_name

TIMEOUT = (3, 15)
# RFC 7234 warning values, `299 - "text"` with \" escapes; several are joined by ", ".
_WARNING = re.compile(r'\d{3} \S+ "((?:[^"\\]|\\.)*)"')
_UNESCAPE = re.compile(r"\\(.)")


class ClusterUnavailableError(Exception):
    """The API server could not be reached; checks that need it say 'not checked'."""


@dataclass(frozen=True)
class Identity:
    """Who a request is made as: a user name, and groups only when they are not implied."""

    user: str
    group: str = ""


def tenant_identity(user: Any, namespace: str) -> Identity:
    """The user's own ServiceAccount in the project (`tranche.naming.account_name`), so a dry
    run gets exactly that person's rights: a viewer's create is refused as on their kubectl.
    Impersonating a ServiceAccount name, the API server adds its service-account groups."""
    name = account_name(user.username, user.pk, generation_of(user))
    return Identity(user=f"system:serviceaccount:{namespace}:{name}")


@dataclass(frozen=True)
class Response:
    status: int
    body: dict[str, Any]
    warnings: tuple[str, ...]


def request(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: list[tuple[str, str]] | None = None,
    body: Any = None,
    identity: Identity | None = None,
    content_type: str = "application/json",
) -> Response:
    """One call; any status comes back (refusals are answers here), transport errors raise."""
    headers = {"Accept": "application/json", "Content-Type": content_type}
    if identity is not None:
        headers["Impersonate-User"] = identity.user
        if identity.group:
            headers["Impersonate-Group"] = identity.group
    try:
        method, url, hdrs, body, _ = api.param_serialize(
            method, path, query_params=query or [], header_params=headers, body=body,
            auth_settings=["BearerToken"],
        )  # fmt: skip
        resp = api.call_api(method, url, header_params=hdrs, body=body, _request_timeout=TIMEOUT)
        raw = resp.read()
    except Exception as exc:  # urllib3 raises many kinds; all mean "not reachable"
        raise ClusterUnavailableError(
            f"the API server did not answer ({type(exc).__name__})"
        ) from exc
    try:
        parsed = json.loads(raw or b"{}")
    except ValueError:
        parsed = {"message": raw[:500].decode(errors="replace")}
    warnings = tuple(
        _UNESCAPE.sub(r"\1", text)
        for text in _WARNING.findall((resp.getheaders() or {}).get("Warning", ""))
    )
    return Response(resp.status, parsed if isinstance(parsed, dict) else {}, warnings)
