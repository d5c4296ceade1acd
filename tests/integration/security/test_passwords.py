"""Issue #14 item 8: a password equal (or close) to the username or email is refused at sign-up."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse


@pytest.mark.parametrize("password", ["carol-on-call", "carol@oncall.example"])
def test_sign_up_refuses_a_password_like_the_username_or_email(db, client, password):
    response = client.post(
        reverse("signup"),
        {
            "username": "carol-on-call",
            "email": "carol@oncall.example",
            "password": password,
            "organization_name": "Carol & Co",
            "project_name": "LLM serving",
        },
    )
    assert response.status_code == 400
    assert "The password is too similar to the" in response.content.decode()
    assert not get_user_model().objects.exists()
