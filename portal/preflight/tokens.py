"""Personal API tokens: create (the secret is shown once), revoke, authenticate by hash.

Tokens are 32 random bytes (urlsafe) with a `trp_` prefix; only their SHA-256 is stored, so a
database leak reveals no usable token. Revocation is a compare-and-swap on `revoked_at`.
"""

from __future__ import annotations

import hashlib
import secrets

from django.db import transaction
from django.utils import timezone

from portal.preflight.models import ApiToken
from portal.tenants.errors import ServiceError

TOKEN_PREFIX = "trp_"  # noqa: S105 (a prefix, not a secret)
MAX_TOKENS_PER_USER = 20


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def create_token(user, name: str) -> tuple[ApiToken, str]:
    """A new token for `user`; returns it and the secret (never stored, shown once)."""
    name = name.strip()[:80]
    if not name:
        raise ServiceError("Give the token a name, e.g. the machine or script that uses it.")
    live = ApiToken.objects.filter(user=user, revoked_at__isnull=True).count()
    if live >= MAX_TOKENS_PER_USER:
        raise ServiceError(f"You have {live} tokens; revoke one you no longer use first.")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, prefix=secret[:12], token_hash=_hash(secret)
    )
    return token, secret


def revoke_token(user, token_id: int) -> bool:
    """Revoke one of `user`'s tokens; False when it is not theirs or already revoked."""
    updated = ApiToken.objects.filter(pk=token_id, user=user, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    return updated == 1


def user_for_token(secret: str):
    """The active user a live token belongs to, else None (and touch its last use)."""
    if not secret.startswith(TOKEN_PREFIX) or len(secret) > 100:
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=_hash(secret), revoked_at__isnull=True)
        .first()
    )
    if token is None or not token.user.is_active:
        return None
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token.user


def tokens_of(user):
    return ApiToken.objects.filter(user=user)
