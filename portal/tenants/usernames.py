"""Usernames at sign-up: one normal form, and no look-alike of an existing name.

A username is NFKC-normalised first (Django's `create_user` does the same, so the check and
the stored name agree; comparing the raw name let the fullwidth `penalice` pass the check and
then collide with `penalice` in the database: a 500). New usernames are then limited to Latin
letters, digits and `@ . + - _`: `penalice` with a Cyrillic `e`, and every other cross-script
look-alike, is refused outright, which needs no confusables table. Within that alphabet, names
equal to an existing one ignoring case (`PENALICE`) or differing only in look-alike characters
(`0`/`o`, `1`/`l`/`i`) are refused too. Existing accounts keep their names; log-in stays exact.
"""

from __future__ import annotations

import re
import unicodedata

from django.contrib.auth import get_user_model

from portal.tenants.errors import ServiceError

ALPHABET = re.compile(r"^[A-Za-z0-9@.+_-]+$")
# characters that read alike in most fonts, each with the class a database regex matches it by
_LOOKALIKE_GROUPS = ("0o", "1li")
_CLASS = {c: f"[{group}]" for group in _LOOKALIKE_GROUPS for c in group}


def normalize(raw: str) -> str:
    """The form a username is checked and stored in (NFKC, as Django's `normalize_username`)."""
    return unicodedata.normalize("NFKC", raw).strip()


def lookalike_pattern(name: str) -> str:
    """A PostgreSQL regular expression (matched case-insensitively) for `name`'s look-alikes."""
    return "^" + "".join(_CLASS.get(c.lower(), re.escape(c)) for c in name) + "$"


def check_new_username(name: str) -> None:
    """Raise ServiceError (what, why, what to do) unless `name` (normalised) may be signed up."""
    if not ALPHABET.match(name):
        raise ServiceError(
            f"The username {name!r} has characters other than Latin letters, digits and "
            "@ . + - _. Names in other scripts can look exactly like someone else's, so they are "
            "not accepted. Choose a username with only those characters."
        )
    users = get_user_model().objects
    if users.filter(username__iexact=name).exists():
        raise ServiceError(
            f"The username {name!r} is already taken. Choose another, or log in if it is yours."
        )
    if users.filter(username__iregex=lookalike_pattern(name)).exists():
        raise ServiceError(
            f"The username {name!r} looks too much like an existing one (0 and o, or 1, l "
            "and i, read alike), so others could mistake you for each other. Choose another."
        )
