"""Helpers shared by every test tier (waiting, factories, the portal served for real, skips).

Tiers import from here, never from another tier's conftest.py."""
