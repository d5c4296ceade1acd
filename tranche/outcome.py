"""What one reconcile step decided for a project: the controller computes it (purely, in
`controller.conditions`), the portal stores it in one transaction
(`portal.orders.lifecycle.store_outcome`). Plain frozen data, so both sides share one shape."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Condition:
    """One condition as the controller wants it to read (lastTransitionTime is the store's)."""

    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class OrderOutcome:
    """Where one order goes: its conditions, and its next state if it moves (with the message
    of that transition; failure_reason only for a move to failed)."""

    order_id: int
    conditions: tuple[Condition, ...] = ()
    state: str | None = None
    message: str = ""
    failure_reason: str = ""


@dataclass(frozen=True)
class SubscriptionOutcome:
    """The conditions one subscription should carry, observed at its `version`."""

    subscription_id: int
    observed_generation: int
    conditions: tuple[Condition, ...] = ()


@dataclass(frozen=True)
class ProjectOutcome:
    """Everything one reconcile step writes for a project."""

    orders: tuple[OrderOutcome, ...] = field(default=())
    subscriptions: tuple[SubscriptionOutcome, ...] = field(default=())

    def __bool__(self) -> bool:
        return bool(self.orders or self.subscriptions)
