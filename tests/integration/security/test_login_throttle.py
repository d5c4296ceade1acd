"""Issue #14 item 2: wrong passwords on /login/ and /admin/login/ are throttled with a clear
message, even the right password is refused while locked, and staff can unlock in the admin."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from tests.helpers.factories import PASSWORD


def _try(client: Client, url: str, username: str, password: str):
    return client.post(url, {"username": username, "password": password})


@pytest.mark.parametrize("url", ["/login/", "/admin/login/"])
def test_login_is_locked_after_repeated_wrong_passwords(world, url):
    user = world.owner
    if url.startswith("/admin/"):
        get_user_model().objects.filter(pk=user.pk).update(is_staff=True)
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _try(client, url, user.username, "wrong-guess-123").status_code == 200
    locked = _try(client, url, user.username, "wrong-guess-123")
    assert locked.status_code == 429
    assert "logging in is paused for 15 minutes" in locked.content.decode()
    # Locked: even the right password is refused now.
    assert _try(client, url, user.username, PASSWORD).status_code == 429
    # Another account from the same address is not locked by it.
    assert _try(Client(), "/login/", world.member.username, PASSWORD).status_code == 302


def test_staff_unlock_in_the_admin(world):
    from axes.models import AccessAttempt

    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _try(client, "/login/", world.owner.username, "wrong-guess-123")
    assert _try(client, "/login/", world.owner.username, PASSWORD).status_code == 429
    admin_user = get_user_model().objects.create_superuser("root", "root@example.test", PASSWORD)
    staff = Client()
    staff.force_login(admin_user)
    attempt = AccessAttempt.objects.get(username=world.owner.username)
    page = staff.get(reverse("admin:axes_accessattempt_changelist"))
    assert world.owner.username in page.content.decode()
    response = staff.post(
        reverse("admin:axes_accessattempt_delete", args=[attempt.pk]), {"post": "yes"}
    )
    assert response.status_code == 302
    assert _try(client, "/login/", world.owner.username, PASSWORD).status_code == 302
