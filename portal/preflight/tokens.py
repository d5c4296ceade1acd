"""Personal API tokens: create (the secret is shown once), revoke, authenticate by hash.

Tokens are 32 random bytes (urlsafe) with a `trp_` prefix; only their SHA-256 is stored, so a
database leak reveals no usable token. Revocation is a compare-and-swap on `revoked_at`. Each
token is scoped to one organization the user belongs to and to pre-flight (the API's only
use), and expires: `TRANCHE_API_TOKEN_DAYS` (90) unless a shorter or longer life up to
`MAX_TOKEN_DAYS` is chosen. A token whose user left its organization stops working.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal.core.tokens import hash_token
from portal.preflight.models import ApiToken
from portal.tenants.errors import ServiceError
from portal.tenants.models import Membership

TOKEN_PREFIX = "trp_"  # noqa: S105 (a prefix, not a secret)
MAX_TOKENS_PER_USER = 20
MAX_TOKEN_DAYS = 365


@transaction.atomic
def create_token(user, name: str, organization_id: int | None = None, days: int | None = None):
    """A new token of `user` for one of their organizations (None: their only one), living
    `days` (default API_TOKEN_DAYS); returns it and the secret (never stored, shown once)."""
    name = name.strip()[:80]
    if not name:
        raise ServiceError("Give the token a name, e.g. the machine or script that uses it.")
    if organization_id is None:
        mine = list(Membership.objects.filter(user=user).values_list("organization_id", flat=True))
        organization_id = mine[0] if len(mine) == 1 else 0
    if not Membership.objects.filter(user=user, organization_id=organization_id).exists():
        raise ServiceError(
            "Choose one of your organizations: a token works for the projects of one only."
        )
    days = settings.API_TOKEN_DAYS if days is None else days
    if not 1 <= days <= MAX_TOKEN_DAYS:
        raise ServiceError(
            f"A token lives 1 to {MAX_TOKEN_DAYS} days; choose a number in that range."
        )
    live = ApiToken.objects.filter(user=user, revoked_at__isnull=True).count()
    if live >= MAX_TOKENS_PER_USER:
        raise ServiceError(f"You have {live} tokens; revoke one you no longer use first.")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name,
        prefix=secret[:12],
        token_hash=hash_token(secret),
        organization_id=organization_id,
        scope=ApiToken.Scope.PREFLIGHT,
        expires_at=timezone.now() + timedelta(days=days),
    )
    return token, secret


def revoke_token(user, token_id: int) -> bool:
    """Revoke one of `user`'s tokens; False when it is not theirs or already revoked."""
    updated = ApiToken.objects.filter(pk=token_id, user=user, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    return updated == 1


def token_for_secret(secret: str, scope: str = ApiToken.Scope.PREFLIGHT) -> ApiToken | None:
    """The live, unexpired token with `scope` whose user is active and still a member of its
    organization, else None (and touch its last use)."""
    if not secret.startswith(TOKEN_PREFIX) or len(secret) > 100:
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(
            token_hash=hash_token(secret),
            revoked_at__isnull=True,
            expires_at__gt=timezone.now(),
            organization__isnull=False,
            scope=scope,
        )
        .first()
    )
    if token is None or not token.user.is_active:
        return None
    if not Membership.objects.filter(user=token.user, organization=token.organization_id).exists():
        return None
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token


def tokens_of(user):
    return ApiToken.objects.filter(user=user).select_related("organization")
