"""The base layout's fixed links (home, catalogue, cluster access, log in/out, sign up, switch),
reversed once per process and script prefix instead of by a `{% url %}` tag per request."""

from __future__ import annotations

import functools

from django.http import HttpRequest
from django.urls import get_script_prefix, reverse

LINKS = ("home", "cluster_access", "catalogue", "login", "signup", "logout", "switch_project")


@functools.lru_cache(maxsize=16)
def _links(prefix: str) -> dict[str, str]:
    return {name: reverse(name) for name in LINKS}


def links(request: HttpRequest) -> dict[str, dict[str, str]]:
    """Template context processor: `links.<url name>` for the names in LINKS."""
    return {"links": _links(get_script_prefix())}
