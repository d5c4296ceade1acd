"""Count the write transactions Django opens on the default connection (for the reconcile's
"one outcome, one transaction" checks and the figures in commit messages).

A write transaction is an outermost `transaction.atomic()` block (entered at the depth the
counter started at) that ran at least one INSERT/UPDATE/DELETE, or one such statement run in
autocommit mode (its own implicit transaction). Reads and advisory locks are not counted.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db import connection, transaction

WRITES = ("INSERT", "UPDATE", "DELETE")


@dataclass
class TransactionCount:
    blocks: int = 0  # outermost atomic blocks entered
    written: set[tuple[str, int]] = field(default_factory=set)

    @property
    def writes(self) -> int:
        """Write transactions seen."""
        return len(self.written)


@contextmanager
def counting_write_transactions() -> Iterator[TransactionCount]:
    count = TransactionCount()
    base = len(connection.atomic_blocks)
    autocommit = itertools.count()
    real_enter = transaction.Atomic.__enter__

    def enter(self):
        if len(transaction.get_connection(self.using).atomic_blocks) == base:
            count.blocks += 1
        return real_enter(self)

    def observe(execute, sql, params, many, context):
        if sql.lstrip().split(None, 1)[0].upper() in WRITES:
            depth = len(context["connection"].atomic_blocks)
            key = ("atomic", count.blocks) if depth > base else ("auto", next(autocommit))
            count.written.add(key)
        return execute(sql, params, many, context)

    transaction.Atomic.__enter__ = enter
    try:
        with connection.execute_wrapper(observe):
            yield count
    finally:
        transaction.Atomic.__enter__ = real_enter
