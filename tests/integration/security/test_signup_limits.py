"""Issue #28, finding 9 (sign-up): a cap per client address and one in all (Redis counters),
each answered 429 with what happened and what to do; usernames NFKC-normalised, case-folded and
refused when they look like an existing one; an NFKC collision is a form error, never a 500."""

from __future__ import annotations

import secrets

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from portal.core import throttle
from portal.tenants.views import SIGNUP_WINDOW_SECONDS

pytestmark = pytest.mark.django_db


def _form(username: str) -> dict:
    return {
        "username": username,
        "email": f"{secrets.token_hex(4)}@example.test",
        "password": "a-long-pass-42",
        "organization_name": f"org {secrets.token_hex(3)}",
        "project_name": "ml",
    }


def _sign_up(username: str, address: str = "198.51.100.1"):
    return Client(REMOTE_ADDR=address).post(reverse("signup"), _form(username))


@pytest.fixture
def fresh_counters():
    addresses = ("198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4")
    for a in addresses:
        throttle.reset("signup-address", a, SIGNUP_WINDOW_SECONDS)
    throttle.reset("signup-all", "", SIGNUP_WINDOW_SECONDS)
    yield
    for a in addresses:
        throttle.reset("signup-address", a, SIGNUP_WINDOW_SECONDS)
    throttle.reset("signup-all", "", SIGNUP_WINDOW_SECONDS)


def test_one_address_signs_up_at_most_its_cap_and_the_whole_portal_its_own(
    settings, fresh_counters
):
    settings.SIGNUP_PER_ADDRESS_PER_HOUR, settings.SIGNUP_PER_HOUR = 2, 3
    assert _sign_up("first").status_code == 302
    assert _sign_up("second").status_code == 302
    third = _sign_up("third")
    assert third.status_code == 429
    assert "from your network address" in third.content.decode()
    # when to retry: the header and the words name the end of the hour's window (#49)
    retry = int(third["Retry-After"])
    assert 1 <= retry <= SIGNUP_WINDOW_SECONDS
    assert abs(retry - throttle.seconds_left(SIGNUP_WINDOW_SECONDS)) <= 2
    minutes = -(-retry // 60)
    assert f"Try again in {minutes} minute" in third.content.decode()
    assert " UTC)" in third.content.decode()
    assert _sign_up("fourth", "198.51.100.2").status_code == 302  # another address: own cap
    everyone = _sign_up("fifth", "198.51.100.3")
    assert everyone.status_code == 429  # the global cap (3) was reached
    assert "Sign-up is busy" in everyone.content.decode()
    assert int(everyone["Retry-After"]) <= SIGNUP_WINDOW_SECONDS
    names = set(get_user_model().objects.values_list("username", flat=True))
    assert {"third", "fifth"}.isdisjoint(names)


@pytest.mark.parametrize(
    ("candidate", "why"),
    [
        ("PENALICE", "already taken"),  # case-folded
        (
            "\uff50\uff45\uff4e\uff41\uff4c\uff49\uff43\uff45",
            "already taken",
        ),  # fullwidth: NFKC makes it penalice (was a 500)
        ("p\u0435nalice", "other than Latin letters"),  # Cyrillic e
        ("pena1ice", "looks too much like"),
        ("PENAIICE", "looks too much like"),
        ("pen4lice", None),  # a different name
    ],
)
def test_look_alike_usernames_are_refused_at_sign_up(fresh_counters, candidate, why):
    get_user_model().objects.create_user("penalice", "p@example.test", "x")
    response = _sign_up(candidate, "198.51.100.4")
    if why is None:
        assert response.status_code == 302
        return
    assert response.status_code == 400, response.status_code
    assert why in response.content.decode()
    assert get_user_model().objects.count() == 1


@pytest.mark.parametrize(
    ("candidate", "why"),
    [
        ("PENALICE", "already taken"),
        ("\uff50\uff45\uff4e\uff41\uff4c\uff49\uff43\uff45", "already taken"),  # was a 500
        ("p\u0435nalice", "other than Latin letters"),  # Cyrillic e: was accepted
        ("pena1ice", "looks too much like"),
    ],
)
@pytest.mark.django_db
def test_an_invited_sign_up_follows_the_same_username_rules(candidate, why):
    from portal.tenants.errors import ServiceError
    from portal.tenants.models import Membership
    from portal.tenants.services import invite_member, sign_up_invited
    from tests.helpers.factories import make_tenant

    owner, org, _project = make_tenant("penalice", "Penalice org")
    membership = Membership.objects.get(user=owner, organization=org)
    invitation, _token = invite_member(
        membership=membership, email="new@example.test", role="member"
    )
    with pytest.raises(ServiceError, match=why):
        sign_up_invited(invitation=invitation, username=candidate, password="a long pass phrase 9")
    assert get_user_model().objects.count() == 1
