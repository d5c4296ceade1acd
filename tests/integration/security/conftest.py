"""Fixtures of the security tests: staff users in the groups the migrations create."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from tests.helpers.factories import PASSWORD


def make_staff(username: str, group: str):
    """A staff user in the "Support" or "Billing" group."""
    user = get_user_model().objects.create_user(
        username=username, email=f"{username}@example.test", password=PASSWORD, is_staff=True
    )
    user.groups.add(Group.objects.get(name=group))
    return user


@pytest.fixture
def support(db):
    return make_staff("sam-support", "Support")


@pytest.fixture
def billing(db):
    return make_staff("bill-billing", "Billing")
