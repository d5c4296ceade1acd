"""Errors that services raise for the tenant to read. Each message says what happened, why, and
what to do; views show it as-is (`ServiceError` → 400/409 page or form error,
`NotAllowedError` → 403).
"""

from __future__ import annotations


class ServiceError(Exception):
    """A refused change. `str(error)` is the tenant-facing message."""

    status = 400


class NotAllowedError(ServiceError):
    """The caller's role does not permit this change (they can see the object, so no 404)."""

    status = 403


class ConflictError(ServiceError):
    """The object changed under the caller (lost compare-and-swap); reload and retry."""

    status = 409


class OrganizationSuspendedError(ServiceError):
    """Orders are refused while the organization is suspended."""

    status = 403
