"""Registry of demo-data seeders. Each takes the demo password and returns lines to print."""

from __future__ import annotations

from collections.abc import Callable

SEEDERS: list[Callable[[str], list[str]]] = []


def seeder(func: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    """Register `func` as a demo seeder; it must be idempotent."""
    SEEDERS.append(func)
    return func
