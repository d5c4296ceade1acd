"""Fixtures of the security tests: staff users in the groups the migrations create."""

from __future__ import annotations

import pytest

from tests.helpers.factories import make_staff


@pytest.fixture
def support(db):
    return make_staff("sam-support", "Support")


@pytest.fixture
def billing(db):
    return make_staff("bill-billing", "Billing")
