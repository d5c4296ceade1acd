"""Issue #14 item 1: walk every registered ModelAdmin and prove a Support user cannot obtain a
secret field (password, token, hash, secret) through filters, ordering, search or change pages.

Secret fields are recognised here by name on purpose, independently of the portal's own list:
a new secret-looking field that the admin guard does not know makes this test fail.
"""

from __future__ import annotations

from django.contrib import admin
from django.db import models
from django.urls import NoReverseMatch, reverse

from portal.agents.services import issue_node_token


def _is_secret(name: str) -> bool:
    name = name.lower()
    if name.endswith("_prefix"):  # a token's first 8 of 43 characters, shown to tell them apart
        return False
    return (
        "password" in name
        or "token" in name
        or "secret" in name
        or name.endswith("_hash")
        or name == "session_key"
    )


def _secret_paths(model: type[models.Model], depth: int = 2, prefix: str = "") -> list[str]:
    """ORM lookup paths from `model` that end in a secret field, following relations."""
    found = []
    for field in model._meta.get_fields():
        name = field.name
        path = f"{prefix}{name}"
        if field.is_relation and field.related_model is not None:
            if depth > 0:
                found += _secret_paths(field.related_model, depth - 1, f"{path}__")
        elif _is_secret(name):
            found.append(path)
    return found


def _changelist(model) -> str | None:
    try:
        return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    except NoReverseMatch:
        return None


def test_support_obtains_no_secret_through_any_model_admin(world, client_of, support, rf):
    issue_node_token("kwok-gpu-0")
    owner = client_of(world.owner)
    owner.post(
        reverse("organization", args=[world.org_a.pk]),
        {"form": "invite", "email": "x@example.test", "role": "member"},
    )
    staff = client_of(support)
    staff.raise_request_exception = False  # a refused lookup is a 400 page, not an error
    request = rf.get("/admin/")
    request.user = support
    checked = 0
    for model, model_admin in admin.site._registry.items():
        url = _changelist(model)
        if url is None:
            continue
        for name in model_admin.get_list_display(request):
            assert not (isinstance(name, str) and _is_secret(name)), (model, name)
        for name in model_admin.get_search_fields(request):
            assert not any(_is_secret(p) for p in name.lstrip("^=@").split("__")), (model, name)
        for item in model_admin.get_list_filter(request):
            name = item if isinstance(item, str) else getattr(item, "parameter_name", "")
            assert not _is_secret(str(name)), (model, item)
        for path in _secret_paths(model):
            for lookup in ("regex", "startswith", "gt"):
                response = staff.get(url, {f"{path}__{lookup}": "a"})
                assert response.status_code != 200, (model, path, lookup, response.status_code)
            checked += 1
        if staff.get(url).status_code == 200:
            for obj in model.objects.all()[:3]:
                page = staff.get(url + f"{obj.pk}/change/").content.decode()
                for field in model._meta.concrete_fields:
                    value = str(getattr(obj, field.attname) or "")
                    if _is_secret(field.name) and len(value) > 8:
                        assert value not in page, (model, field.name)
    assert checked >= 3  # at least invitations, node tokens and user passwords were walked
