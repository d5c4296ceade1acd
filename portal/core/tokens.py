"""Bearer secrets the portal hands out (invitation links): made here, stored only as a hash.

A token is 256 random bits, so a plain SHA-256 is enough to store it: there is nothing to
brute-force, and a database or admin reader learns nothing usable from the hash.
`SECRET_FIELD_NAMES` names every model field that holds a secret or its hash; the admin refuses
filters, ordering and search through them (`portal.core.admin.GuardedAdmin`).
"""

from __future__ import annotations

import hashlib
import secrets

TOKEN_BYTES = 32
SECRET_FIELD_NAMES = frozenset({"password", "token", "token_hash", "secret", "session_key"})


def new_token() -> str:
    """A fresh URL-safe bearer token (43 characters)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def hash_token(token: str) -> str:
    """The stored form of a token: hex SHA-256."""
    return hashlib.sha256(token.encode()).hexdigest()


def is_secret_lookup(lookup: str) -> bool:
    """True when any step of an ORM lookup path (`a__b__regex`) names a secret field."""
    return any(part in SECRET_FIELD_NAMES for part in lookup.split("__"))
