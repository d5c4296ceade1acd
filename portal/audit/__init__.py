"""Audit log: who changed money or entitlement, on which object, from what to what."""
